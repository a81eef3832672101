"""Benchmark: the fixed cost of a run, what sits outside its training loop.

    .venv/bin/python -m pytest -m benchmark -s tests/benchmarks/test_fixed_cost_bench.py

A 1-worker micro run on the emulated network (5 updates, spar, no baseline, literal rates), twice (a
fresh models cache, then the one the first filled), its wall seconds as this test timed the command and
as meta.json's `overhead` block splits them (training loops against the rest), then the run's prediction step both ways, side by side on the same folder in fresh
processes: its own process with an empty models cache (what every run paid before the shapes were
cached: python, torch and the meta-device model) and in process from the cached shapes; and the report
with its figures (one process, matplotlib imported once). Figures and load are printed; nothing about
time is asserted.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN = ["run", "--model", "micro", "--workers", "1", "--updates", "5", "--seeds", "0", "--method", "spar",
       "--baseline", "none", "--comm-ratio", "off", "--quiet"]

# In a fresh process: write_prediction twice (a cold models cache: the process way, which fills the cache;
# then in process from it), then the report and its figures. Prints seconds as JSON.
PROBE = """
import json, sys, time
from pathlib import Path
t = time.monotonic()
from harness.run import launch
from harness.results import report, tables
run = Path(sys.argv[1]); out = {"import_s": time.monotonic() - t}
for key in ("process_s", "in_process_s"):
    t = time.monotonic(); launch.write_prediction(run); out[key] = time.monotonic() - t
t = time.monotonic(); report.write(run, tables=tables.read(run)); out["report_s"] = time.monotonic() - t
print(json.dumps(out))
"""


def _load1() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


@pytest.mark.benchmark
@pytest.mark.root
@pytest.mark.timeout(1800)
def test_fixed_cost_of_a_one_worker_micro_run(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WAN_CACHE_DIR": str(tmp_path / "models")}
    print(f"\nload1 {_load1()} at start")
    for run_id, words in (("first", "a fresh models cache"), ("fixed", "the cache the first filled")):
        t0 = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "harness.cli", *RUN, "--out", str(tmp_path), "--run-id", run_id],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
        wall = time.monotonic() - t0
        assert done.returncode == 0, done.stderr[-2000:]
        cost = json.loads((tmp_path / run_id / "meta.json").read_text())["overhead"]
        line = [x for x in done.stderr.splitlines() if x.startswith("harness overhead:")]
        print(f"harness run (micro, 1 worker, 5 updates; {words}): {wall:.1f} s wall for the command, "
              f"{cost['run_s']:.1f} s from its start in meta.json; it printed: {line[0] if line else '(nothing)'}")
    run = tmp_path / "fixed"
    rows = []
    for _ in range(3):
        with tempfile.TemporaryDirectory() as cache:
            probe = subprocess.run([sys.executable, "-c", PROBE, str(run)], cwd=ROOT, capture_output=True, text=True,
                                   env={**env, "WAN_CACHE_DIR": cache}, timeout=600)
        assert probe.returncode == 0, probe.stderr[-2000:]
        rows.append(json.loads(probe.stdout.strip().splitlines()[-1]))
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(f"prediction step, median of 3 side by side: its own process (cold cache, as before) {med['process_s']:.2f} s, "
          f"in process from cached shapes {med['in_process_s']:.3f} s; report + figures {med['report_s']:.2f} s; "
          f"importing launch {med['import_s']:.2f} s; load1 {_load1()} at end")
    assert (run / "prediction.json").is_file()
