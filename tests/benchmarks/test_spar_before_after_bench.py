"""spar before and after a change, side by side in one process: another tree's spar (its
trainers/compress/{kernels,base,spar}.py loaded under other module names) beside this tree's, on the
Qwen2.5-0.5B rank-64 shapes at 1 thread. Prints, per budget (1.6 % and the bytes of torch's
powerSGD_hook at the 1.6 % rank): whether payloads, decodes and residuals agree over three updates with
error feedback, then steady-state encode and decode CPU time as multiples of a memcpy of the fp32
adapter (median of interleaved rounds, the order alternating), and at the hook's bytes the CPU and
error ratios to the hook (its steps run between those rounds, so its CPU is measured side by side).
Asserts nothing about time.

    SPAR_BENCH_BEFORE=/path/to/other/tree .venv/bin/python -m pytest -m benchmark -s \\
        tests/benchmarks/test_spar_before_after_bench.py
"""
import os
import statistics
import sys
import time
from pathlib import Path

import pytest
import torch

from trainers.compress import bench, compressor_class, torch_hook

_MODULES = ("kernels", "base", "spar")


def _load_before(root: Path):
    """The other tree's SparCompressor, its kernels, base and spar modules loaded as `_before_*` (the
    container, dtypes and spec are shared: the wire format is the same)."""
    for name in _MODULES:
        path = root / "trainers" / "compress" / f"{name}.py"
        src = path.read_text()
        for other in _MODULES:
            src = src.replace(f"trainers.compress.{other} ", f"_before_{other} ")
        module = type(sys)(f"_before_{name}")
        module.__file__ = str(path)
        sys.modules[module.__name__] = module
        exec(compile(src, str(path), "exec"), module.__dict__)
    cls = sys.modules["_before_spar"].SparCompressor
    cls.name = compressor_class("spar").name        # set by the registry for the in-tree class
    return cls


def _load1() -> str:
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


@pytest.mark.benchmark
@pytest.mark.timeout(1800)
def test_spar_before_and_after_side_by_side(rounds: int = 9):
    root = os.environ.get("SPAR_BENCH_BEFORE")
    if not root:
        pytest.skip("set SPAR_BENCH_BEFORE to the root of the tree to compare with")
    before, after = _load_before(Path(root)), compressor_class("spar")
    torch.set_num_threads(1)
    grads = bench.synthetic_gradients(bench.model_shapes())
    memcpy = bench.memcpy_timer(grads)
    rank = bench.powersgd_rank_for(grads, 0.016)
    hook = bench.torch_hook_row("synthetic", grads, "1.60%", rank, 5, memcpy)
    print(f"\nload1 {_load1()} at start; torch powerSGD_hook rank {rank}: {hook.payload_bytes:,d} B, "
          f"{hook.total_x:.2f}x memcpy, error {hook.rel_error:.4f}")
    classes = {"before": before, "after": after}
    for label, opts in (("1.6%", {"budget": "1.6%"}), ("hook bytes", {"budget_bytes": hook.payload_bytes})):
        pairs = {k: (c(**opts), c(**opts)) for k, c in classes.items()}
        for step in range(3):
            g = {n: t * (1 + 0.3 * step) for n, t in grads.items()}
            pb, pa = pairs["before"][0].encode(g), pairs["after"][0].encode(g)
            db, da = before(**opts).decode(pb), after(**opts).decode(pa)
            rel = max(float((db[n] - da[n]).norm() / max(float(db[n].norm()), 1e-30)) for n in db)
            rb, ra = pairs["before"][0].residual(), pairs["after"][0].residual()
            print(f"{label} update {step}: payloads equal {pb == pa} ({len(pb):,d} / {len(pa):,d} B), decodes "
                  f"bit-equal {all(torch.equal(db[n], da[n]) for n in db)} (max rel {rel:.1e}), residuals "
                  f"equal {all(torch.equal(rb[n], ra[n]) for n in rb)}")
        error = {k: bench.rel_error(c(**opts).decode(c(**opts).encode(grads)), grads) for k, c in classes.items()}
        for enc, dec in pairs.values():
            dec.decode(bench.received(enc.encode(grads)), reuse=True)        # warm: buffers, scratch
        times = {k: ([], []) for k in pairs}
        copies = []

        def one_round():
            copies.append(memcpy())
            for k in (("before", "after") if len(copies) % 2 else ("after", "before")):
                enc, dec = pairs[k]
                t0 = time.process_time()
                payload = enc.encode(grads)
                times[k][0].append(time.process_time() - t0)
                inbox = bench.received(payload)
                t0 = time.process_time()
                dec.decode(inbox, reuse=True)
                times[k][1].append(time.process_time() - t0)

        if label == "hook bytes":
            # the hook's steps interleaved with spar's rounds: its CPU ratio is measured side by side
            hook_cpu = torch_hook.run_hook(grads, rank, rounds, between=one_round).cpu_s
        else:
            for _ in range(rounds):
                one_round()
        floor = statistics.median(copies)
        if label == "hook bytes":
            hook_x = statistics.median(hook_cpu) / floor
            print(f"{label} hook  : {hook_x:.2f}x memcpy, interleaved with the rounds below")
        for k, (e, d) in times.items():
            e, d = statistics.median(e) / floor, statistics.median(d) / floor
            vs = (f"; / hook: CPU {(e + d) / hook_x:.2f}x, error {error[k] / hook.rel_error:.3f}x"
                  if label == "hook bytes" else "")
            print(f"{label} {k:6s}: encode {e:.2f}x  decode {d:.2f}x  total {e + d:.2f}x memcpy "
                  f"({1e3 * floor:.1f} ms CPU), error {error[k]:.4f}{vs}")
    print(f"load1 {_load1()} at end")
