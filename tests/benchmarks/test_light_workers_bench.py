"""Benchmark: what a worker costs, forked from the fork server (`--spawn fork`) or exec'ed (`--spawn exec`).

    .venv/bin/python -m pytest tests/benchmarks/test_light_workers_bench.py -m benchmark -s
    WAN_BENCH_WORKERS=4,16,64 WAN_BENCH_SPAWN=fork ... (the defaults: 4,16 and both)

Each point is one real `harness run` (root, emulated 20 Mbit/s links, micro model, grpo, 3 updates, one
cell). While it runs, the services' memory is sampled from /proc/<pid>/smaps_rollup every 0.5 s; PSS
charges each shared page to its sharers in equal parts, so the sum over the run's processes is what
they take from the box. Printed per point: the peak PSS of the fork server + workers, PSS per
worker, the marginal PSS per added worker between the smallest and the largest N (the figure that
decides how many fit), and the cell's fixed costs from its launch.json and the learner's events
(CLOCK_MONOTONIC, the same clock in every process): learner start (spawn -> listening), starting the
workers, join (listening -> the last worker joined), the loop, evaluation + summary after the last
update, stopping. Asserts only that each run completed with hash-equal replicas.
"""
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.benchmark, pytest.mark.root]
WORKERS = [int(n) for n in os.environ.get("WAN_BENCH_WORKERS", "4,16").split(",")]
SPAWNS = os.environ.get("WAN_BENCH_SPAWN", "exec,fork").split(",")
FLAGS = ["--model", "micro", "--updates", "3", "--seeds", "1", "--bw", "20mbit", "--method", "spar",
         "--baseline", "none", "--objective", "grpo", "--quiet"]
CELL = "spar-12.8pct-s1"


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def role(pid: int) -> str | None:
    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    for needle, name in (("trainers.forkserver", "server"), ("trainers.hilo.learner", "learner"),
                         ("trainers.hilo.worker", "worker")):
        if needle in cmd:
            return name
    return None


def pss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return 0.0


class PeakPss(threading.Thread):
    """The peak, over samples, of the summed PSS (MB) of a process tree's services, by role."""

    def __init__(self, root: int):
        super().__init__(daemon=True)
        self.root, self.peak, self.done = root, {}, threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.5):
            sample: dict[str, list] = {}
            for pid in descendants(self.root):
                try:
                    name = role(pid)
                    if name:
                        entry = sample.setdefault(name, [0, 0.0])
                        entry[0] += 1
                        entry[1] += pss_mb(pid)
                except OSError:
                    continue  # it ended between the listing and the read
            total = sum(v[1] for k, v in sample.items() if k in ("server", "worker"))
            if total > self.peak.get("server+workers", 0.0):
                self.peak = {"server+workers": total, **{k: tuple(v) for k, v in sample.items()}}


def fixed_costs(cell: Path) -> dict:
    rows = [json.loads(x) for x in (cell / "events-learner.jsonl").read_text().splitlines() if x.strip()]
    t = json.loads((cell / "launch.json").read_text())
    start = next(r["t"] for r in rows if r["kind"] == "start")
    updates = [r["t"] for r in rows if r["kind"] == "update"]
    joined = max(r["t"] for r in rows if r["kind"] == "joined" and r["t"] <= updates[0])
    return {"learner start s": t["listening_t"] - t["started_t"], "start workers s": t["workers_started_t"] - t["listening_t"],
            "join s": joined - start, "loop s": updates[-1] - joined, "eval+summary s": t["stopping_t"] - updates[-1],
            "stop s": t["stopped_t"] - t["stopping_t"], "cell s": t["stopped_t"] - t["started_t"]}


def one_run(out: Path, spawn: str, workers: int) -> dict:
    run_id = f"{spawn}-w{workers}"
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "run", *FLAGS, "--workers", str(workers),
                             "--spawn", spawn, "--run-id", run_id, "--out", str(out)], cwd=ROOT,
                            env=dict(os.environ, OMP_NUM_THREADS="1"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    sampler = PeakPss(proc.pid)
    sampler.start()
    _, stderr = proc.communicate(timeout=3600)
    sampler.done.set()
    sampler.join()
    assert proc.returncode == 0, stderr[-3000:]
    cell = out / run_id / "cells" / CELL
    summary = json.loads((cell / "summary.json").read_text())
    assert summary["complete"] and summary["consistent"], summary
    peak = sampler.peak
    return {"spawn": spawn, "workers": workers, "harness run s": time.monotonic() - t0,
            "server+workers MB": peak.get("server+workers", 0.0), "learner MB": peak.get("learner", (0, 0.0))[1],
            "per worker MB": peak.get("worker", (0, 0.0))[1] / max(1, peak.get("worker", (1, 0))[0]),
            "workers seen": peak.get("worker", (0, 0))[0], **fixed_costs(cell)}


def test_memory_and_fixed_costs_per_worker(tmp_path):
    rows = [one_run(tmp_path, spawn, n) for spawn in SPAWNS for n in WORKERS]
    print(f"\nload average at the end: {os.getloadavg()}, cores: {os.cpu_count()}")
    keys = list(rows[0])
    print(" | ".join(keys))
    for r in rows:
        print(" | ".join(f"{r[k]:.1f}" if isinstance(r[k], float) else str(r[k]) for k in keys))
    for spawn in SPAWNS:
        mine = sorted((r for r in rows if r["spawn"] == spawn), key=lambda r: r["workers"])
        if len(mine) > 1:
            total = lambda r: r["server+workers MB"] + r["learner MB"]  # noqa: E731
            added = (total(mine[-1]) - total(mine[0])) / (mine[-1]["workers"] - mine[0]["workers"])
            print(f"{spawn}: PSS per added worker {added:.1f} MB ({mine[0]['workers']} -> {mine[-1]['workers']} workers)")
