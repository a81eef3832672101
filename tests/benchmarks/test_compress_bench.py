"""Compression benchmark at full size (Qwen2.5-0.5B-shaped rank-64 adapter). Prints figures; asserts
only what is not a time: byte budgets hold and spar beats PowerSGD at equal bytes.

    .venv/bin/python -m pytest -m benchmark -s tests/benchmarks/test_compress_bench.py
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.run import launch
from trainers.compress import bench

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.benchmark
def test_compressors_on_a_qwen05b_shaped_adapter():
    rows = bench.run(repeats=5, threads=1, progress=lambda r: print(
        f"{r.gradients:9s} {r.compressor:22s} {r.budget:6s} {r.payload_bytes:>12,d} B "
        f"{100 * r.fraction_of_full:7.3f} %  err {r.rel_error:.4f}  enc {r.encode_s:.3f} s  dec {r.decode_s:.3f} s  "
        f"total {r.total_s:.3f} s", flush=True))
    for kind in ("synthetic", "real"):
        cells = {(r.compressor, r.budget): r for r in rows if r.gradients == kind}
        for budget in ("0.78%", "1.60%", "6.25%"):
            assert cells[("spar", budget)].fraction_of_full <= float(budget[:-1]) / 100
            assert cells[("spar @powersgd-bytes", budget)].rel_error < cells[("powersgd (rank R)", budget)].rel_error
            spar_t, psgd_t = cells[("spar @powersgd-bytes", budget)].total_s, cells[("powersgd (rank R)", budget)].total_s
            print(f"{kind} {budget}: spar/powersgd time at equal bytes = {spar_t / psgd_t:.2f}x")


@pytest.mark.benchmark
@pytest.mark.timeout(1800)
def test_codecs_against_the_memory_floor():
    """The codecs' figures in one run per allocator: each codec's steady-state encode and decode CPU time
    at 1.6 % (identity: whole) and the wire path (frame + checksum + unframe; a loopback Connection)
    as ratios to a memcpy of the fp32 adapter (141 MB), measured side by side, at 1 thread. Run once
    with glibc's default allocator and once as the services run (launch.MALLOC_TUNABLES: large blocks
    in huge pages); the allocator is read at process start, hence a process each.
    Goals: spar <= 8x and <= 0.6x PowerSGD, topk and int8 <= 15x, identity and the wire <= 3x."""
    for tunables in (None, launch.MALLOC_TUNABLES):
        env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
        if tunables:
            env["GLIBC_TUNABLES"] = tunables
        done = subprocess.run([sys.executable, "-m", "trainers.compress.bench"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=900)
        print("\n" + done.stdout, end="")
        assert done.returncode == 0, done.stderr[-2000:]
