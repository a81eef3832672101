"""Benchmark: how the harness's own costs grow with the number of workers, with fitted exponents.

    .venv/bin/python -m pytest tests/benchmarks/test_scale_bench.py -m benchmark -s
    WAN_BENCH_SCALE=1,4,16,64,256 WAN_BENCH_METHOD=ddp ... (the defaults: 1,4,16,64 and spar)

For each N: the emulated network alone (`shaper.emulate`, 20 Mbit/s links) built and torn down in this
process (its setup and teardown seconds), then one real `harness run` (root, micro model, grpo,
2 updates, one cell, no baseline) whose services are sampled while it runs (/proc: PSS per worker,
the learner's or aggregator's threads). Printed per N: network setup / teardown s, start workers s
(launch.json), join s (the learner's start row -> the last `joined` row), the harness's time per
update (the HiLo learner's `harness_s`; the aggregator's decode_replay + send_update phases: its
own work in a sync), the learner's peak threads, PSS per worker (MB), and the load average. Then
the exponent b of each figure's least-squares fit y = a * N^b in log-log over the points with N >= 4
(linear: b ~ 1; a constant: b ~ 0), with `uptime` at the end. Asserts only that each run completed
with hash-equal replicas; nothing about time.
"""
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.benchmarks.test_light_workers_bench import descendants, pss_mb
from trainers.events import read_events

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.benchmark, pytest.mark.root]
SCALE = [int(n) for n in os.environ.get("WAN_BENCH_SCALE", "1,4,16,64").split(",")]
METHOD = os.environ.get("WAN_BENCH_METHOD", "spar")
FLAGS = ["--model", "micro", "--updates", "2", "--seeds", "1", "--bw", "20mbit", "--baseline", "none",
         "--objective", "grpo", "--quiet"]
ROLES = (("trainers.forkserver", "server"), ("trainers.hilo.learner", "learner"),
         ("trainers.dataparallel.aggregator", "learner"), ("trainers.hilo.worker", "worker"),
         ("trainers.dataparallel.worker", "worker"))


def role(pid: int) -> str | None:
    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return next((name for needle, name in ROLES if needle in cmd), None)


def threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


class Sampler(threading.Thread):
    """Peaks over the run: the learner's threads; the workers' summed PSS and how many were sampled."""

    def __init__(self, root: int, interval_s: float):
        super().__init__(daemon=True)
        self.root, self.interval_s, self.done = root, interval_s, threading.Event()
        self.learner_threads, self.workers_pss, self.workers_seen = 0, 0.0, 0

    def run(self) -> None:
        while not self.done.wait(self.interval_s):
            pss, seen = 0.0, 0
            for pid in descendants(self.root):
                try:
                    name = role(pid)
                    if name == "learner":
                        self.learner_threads = max(self.learner_threads, threads(pid))
                    elif name == "worker":
                        pss += pss_mb(pid)
                        seen += 1
                except OSError:
                    continue  # it ended between the listing and the read
            if seen > self.workers_seen or (seen == self.workers_seen and pss > self.workers_pss):
                self.workers_pss, self.workers_seen = pss, seen


def network_s(n: int) -> tuple[float, float]:
    """Seconds to build the emulated network of n workers (namespaces, links, qdiscs) and to remove it."""
    from harness.net import profiles, shaper
    profile = profiles.resolve("paper-62.5mbit", {"rate": "20mbit"})
    t0 = time.monotonic()
    with shaper.emulate(profile, n):
        t1 = time.monotonic()
    return t1 - t0, time.monotonic() - t1


def harness_per_update(rows: list[dict]) -> float:
    """Median seconds per update the centre spent on its own work (not waiting for workers)."""
    updates = [r for r in rows if r["kind"] == "update" and r.get("sync", True)]
    if all("harness_s" in r for r in updates):
        return statistics.median(r["harness_s"] for r in updates)
    own = [sum(b - a for name, (a, b) in r.get("phases", {}).items() if name in ("decode_replay", "send_update"))
           for r in updates]
    return statistics.median(own)


def one_point(out: Path, n: int) -> dict:
    setup_s, teardown_s = network_s(n)
    run_id = f"{METHOD}-w{n}"
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "run", *FLAGS, "--method", METHOD,
                             "--workers", str(n), "--run-id", run_id, "--out", str(out)], cwd=ROOT,
                            env=dict(os.environ, OMP_NUM_THREADS="1"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    sampler = Sampler(proc.pid, max(0.5, n / 64))  # reading smaps of 256 processes is itself work
    sampler.start()
    _, stderr = proc.communicate(timeout=3600)
    sampler.done.set()
    sampler.join()
    assert proc.returncode == 0, stderr[-3000:]
    cell = next((out / run_id / "cells").iterdir())
    summary = json.loads((cell / "summary.json").read_text())
    assert summary["complete"] and summary["consistent"], {k: summary.get(k) for k in ("status", "hashes")}
    rows = read_events(cell / "events-learner.jsonl")
    start = next(r["t"] for r in rows if r["kind"] == "start")
    launch = json.loads((cell / "launch.json").read_text())
    return {"N": n, "setup s": setup_s, "teardown s": teardown_s,
            "start workers s": launch["workers_started_t"] - launch["listening_t"],
            "join s": max(r["t"] for r in rows if r["kind"] == "joined") - start,
            "harness s/update": harness_per_update(rows), "learner threads": sampler.learner_threads,
            "PSS/worker MB": sampler.workers_pss / max(1, sampler.workers_seen), "load1": os.getloadavg()[0]}


def exponent(points: list[tuple[int, float]]) -> float | None:
    """b of the least-squares line log y = log a + b log N (points with y > 0)."""
    xy = [(math.log(n), math.log(y)) for n, y in points if y > 0]
    if len(xy) < 2:
        return None
    mx, my = statistics.fmean(x for x, _ in xy), statistics.fmean(y for _, y in xy)
    sxx = sum((x - mx) ** 2 for x, _ in xy)
    return sum((x - mx) * (y - my) for x, y in xy) / sxx if sxx else None


@pytest.mark.timeout(7200)
def test_harness_costs_by_number_of_workers(tmp_path):
    rows = [one_point(tmp_path, n) for n in SCALE]
    keys = list(rows[0])
    print(f"\nmethod {METHOD}, cores {os.cpu_count()}")
    print(" | ".join(keys))
    for r in rows:
        print(" | ".join(f"{r[k]:.3f}" if isinstance(r[k], float) else str(r[k]) for k in keys))
    fitted = [r for r in rows if r["N"] >= 4] if sum(r["N"] >= 4 for r in rows) >= 2 else rows
    print(f"exponent b of y = a * N^b over N = {[r['N'] for r in fitted]}:")
    for k in keys[1:-1]:
        b = exponent([(r["N"], float(r[k])) for r in fitted])
        print(f"  {k}: {'n/a' if b is None else f'{b:.2f}'}")
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
