"""Benchmark: the fixed cost of a run, what sits outside its training loop, and where it goes.

    .venv/bin/python -m pytest -m benchmark -s tests/benchmarks/test_fixed_cost_bench.py
    WAN_FIXED_COST_BASE=/path/to/other/checkout .venv/bin/python -m pytest -m benchmark -s ...   (before/after)

A 1-worker micro run on the emulated network (5 updates, spar, no baseline, literal rates): ROUNDS times
each with a fresh models cache of its own (a first run into a fresh --out folder), then ROUNDS times with
one warm cache, each alternating with the same command run from the checkout $WAN_FIXED_COST_BASE names
when it is set (an older commit: the "before", side by side under the same load). Each run's wall seconds as this test timed the command, its CPU seconds (the whole process
tree: harness, fork server, services), and meta.json's `overhead` block: the loops, the held-out
evaluations outside them and the rest, split by part where the run records parts (harness/run/fixed_cost.py),
then the medians side by side. Then the overlap the run gets at its start: the fork server's imports
alone, against the wait the run recorded for them. Then the run's prediction step both ways, side by side
on the same folder in fresh processes: its own process with an empty models cache (what every run paid
before the shapes were cached) and in process from the cached shapes; and the report with its figures.
`test_fixed_cost_of_the_default_run` does the same for `harness run` with its defaults (minutes a run;
marked slow too). Figures and load are printed; nothing about time is asserted.
"""
import json
import os
import resource
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
ROUNDS = 3
BASE = os.environ.get("WAN_FIXED_COST_BASE")   # a checkout to run side by side (the "before")

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

# The fork server's imports alone, as a run starts it (the services' modules, one thread). Prints seconds.
SERVER_ALONE = """
import json, sys, tempfile, time
from pathlib import Path
from harness.run import launch
from harness.run.forkserver import ForkServer
with tempfile.TemporaryDirectory() as d:
    t = time.monotonic()
    with ForkServer.started(["trainers.hilo.learner", "trainers.hilo.worker"], launch.python_env(Path(d), 1),
                            Path(d) / "fs.log"):
        print(json.dumps({"server_s": time.monotonic() - t}))
"""


def _load1() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def _run(tree: Path, args: list[str], out: Path, run_id: str, env: dict, timeout: int) -> dict:
    """One `harness run` from checkout `tree`: wall and CPU seconds (the whole process tree) and its overhead block."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "harness.cli", *args, "--out", str(out), "--run-id", run_id],
                          cwd=tree, env={**env, "PYTHONPATH": str(tree)}, capture_output=True, text=True, timeout=timeout)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0, done.stderr[-2000:]
    cost = json.loads((out / run_id / "meta.json").read_text()).get("overhead") or {}
    return {"wall_s": wall, "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "load1": _load1(), **cost}


def _row(label: str, r: dict) -> str:
    parts = r.get("parts") or {}
    split = ", ".join(f"{k} {v:.1f}" for k, v in sorted(parts.items(), key=lambda kv: -kv[1]) if v >= 0.05)
    return (f"  {label}: wall {r['wall_s']:.1f} s, CPU {r['cpu_s']:.1f} s, meta.json run {r.get('run_s', 0):.1f} s = "
            f"loop {r.get('loop_s', 0):.1f} + evaluations {r.get('eval_outside_loop_s', 0):.1f} + fixed "
            f"{r.get('overhead_s', 0):.1f} (load1 {r['load1']})" + (f"\n      by part (s): {split}" if split else ""))


def _side_by_side(args: list[str], tmp_path: Path, env: dict, rounds: int, timeout: int, what: str,
                  fresh: bool = False) -> list[dict]:
    """`rounds` runs of this checkout, each after one of BASE's when set; prints each and the medians.
    `fresh`: each run with a models cache of its own, empty (a first run into a fresh --out folder)."""
    trees = ([("before", Path(BASE))] if BASE else []) + [("after", ROOT)]
    runs: dict[str, list[dict]] = {name: [] for name, _ in trees}
    for i in range(rounds):
        for name, tree in trees:
            own = {**env, "WAN_CACHE_DIR": str(tmp_path / name / f"models-{i}")} if fresh else env
            r = _run(tree, args, tmp_path / name, f"r{i}", own, timeout)
            runs[name].append(r)
            print(_row(f"{what}, {name} ({tree}) round {i + 1}", r))
    for name, rows in runs.items():
        med = {k: statistics.median(float(r[k]) for r in rows) for k in ("wall_s", "cpu_s", "run_s", "overhead_s")}
        share = med["overhead_s"] / med["run_s"] if med["run_s"] else 0.0
        print(f"{what}, {name}: median of {len(rows)}: wall {med['wall_s']:.1f} s, CPU {med['cpu_s']:.1f} s, "
              f"fixed cost {med['overhead_s']:.1f} s ({share:.0%} of the run)")
        parts = [r["parts"] for r in rows if r.get("parts")]
        if parts:
            names = sorted({k for p in parts for k in p}, key=lambda k: -statistics.median(p.get(k, 0.0) for p in parts))
            print("    median by part (s): " + ", ".join(f"{k} {statistics.median(p.get(k, 0.0) for p in parts):.2f}"
                                                       for k in names))
    if BASE:
        b, a = (statistics.median(float(r["overhead_s"]) for r in runs[n]) for n in ("before", "after"))
        bc, ac = (statistics.median(float(r["cpu_s"]) for r in runs[n]) for n in ("before", "after"))
        print(f"{what}: fixed cost after/before {a / b:.2f} ({b:.1f} s -> {a:.1f} s); CPU after/before {ac / bc:.2f}")
    return runs["after"]


@pytest.mark.benchmark
@pytest.mark.root
@pytest.mark.timeout(3600)
def test_fixed_cost_of_a_one_worker_micro_run(tmp_path):
    env = {**os.environ, "WAN_CACHE_DIR": str(tmp_path / "models")}
    print(f"\nload1 {_load1()} at start")
    _side_by_side(RUN, tmp_path / "fresh", env, ROUNDS, 1500, "micro, 1 worker, 5 updates, a fresh models cache",
                  fresh=True)
    print(_row("filling the shared models cache", _run(ROOT, RUN, tmp_path / "first", "first", env, 1500)))
    after = _side_by_side(RUN, tmp_path, env, ROUNDS, 1500, "micro, 1 worker, 5 updates, a warm models cache")
    alone = [json.loads(subprocess.run([sys.executable, "-c", SERVER_ALONE], cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)},
                                       capture_output=True, text=True, timeout=900).stdout)["server_s"] for _ in range(2)]
    waited = [r["parts"].get("fork server (the wait for its imports)", 0.0) for r in after]
    print(f"fork server: its imports alone {statistics.median(alone):.1f} s (median of 2, side by side); the runs "
          f"waited {statistics.median(waited):.1f} s for them after the network and finalize's imports "
          f"(median of {len(waited)}); load1 {_load1()}")
    run = tmp_path / "after" / "r0"
    rows = []
    for _ in range(3):
        with tempfile.TemporaryDirectory() as cache:
            probe = subprocess.run([sys.executable, "-c", PROBE, str(run)], cwd=ROOT, capture_output=True, text=True,
                                   env={**env, "PYTHONPATH": str(ROOT), "WAN_CACHE_DIR": cache}, timeout=600)
        assert probe.returncode == 0, probe.stderr[-2000:]
        rows.append(json.loads(probe.stdout.strip().splitlines()[-1]))
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(f"prediction step, median of 3 side by side: its own process (cold cache, as before) {med['process_s']:.2f} s, "
          f"in process from cached shapes {med['in_process_s']:.3f} s; report + figures {med['report_s']:.2f} s; "
          f"importing launch {med['import_s']:.2f} s; load1 {_load1()} at end")
    assert (run / "prediction.json").is_file()
    assert all(r["parts"] for r in after)   # every run of this checkout recorded its split


@pytest.mark.benchmark
@pytest.mark.slow
@pytest.mark.root
@pytest.mark.timeout(7200)
def test_fixed_cost_of_the_default_run(tmp_path):
    """`harness run` with its defaults (2 workers, spar against full-bf16, 3 seeds, the paper's ratio):
    a first run fills the models cache and the regime pilot's; then one run per checkout, side by side."""
    env = {**os.environ, "WAN_CACHE_DIR": str(tmp_path / "models")}
    print(f"\nload1 {_load1()} at start")
    print(_row("default run, a fresh models cache", _run(ROOT, ["run", "--quiet"], tmp_path / "first", "first", env, 5400)))
    after = _side_by_side(["run", "--quiet"], tmp_path, env, 1, 5400, "default run")
    assert all(r["parts"] for r in after)
