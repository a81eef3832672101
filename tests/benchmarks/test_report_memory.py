"""`harness report` on a huge event file: peak memory (RSS) and time, printed (marker `benchmark`).

A run folder is built synthetically from the run-heldout fixture: its first cell's learner event
file with its 12 update rows repeated (version, batch and times renumbered) to ROWS update rows,
about 1.4 kB each (417 MB at the default 300,000), every other file as recorded. `harness report` runs
in a child process; its peak RSS is the child's ru_maxrss (resource.getrusage(RUSAGE_CHILDREN)).
Goal: peak RSS <= 2x the events file and <= 1 GB.

    REPORT_ROWS=300000 pytest -m benchmark tests/benchmarks/test_report_memory.py -s
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

FIXTURE = Path(__file__).parents[1] / "fixtures" / "runs" / "run-heldout"
ROWS = int(os.environ.get("REPORT_ROWS", "300000"))


def build_run(root: Path, rows: int) -> Path:
    """A one-cell run whose learner event file holds `rows` update rows; returns the events file."""
    run = root / "run-huge"
    shutil.copytree(FIXTURE, run, ignore=shutil.ignore_patterns("report*", "figures", "*.parquet", "*.csv"))
    cells = sorted((run / "cells").iterdir())
    for extra in cells[1:]:
        shutil.rmtree(extra)
    cell = cells[0]
    cfg = json.loads((run / "config.json").read_text())
    cfg["seeds"] = [int(cell.name.rsplit("-s", 1)[1])]
    (run / "config.json").write_text(json.dumps(cfg))
    meta = json.loads((run / "meta.json").read_text())
    meta["cells"] = [cell.name]
    (run / "meta.json").write_text(json.dumps(meta))
    events = cell / "events-learner.jsonl"
    lines = [json.loads(x) for x in events.read_text().splitlines() if x.strip()]
    head = [r for r in lines if r["kind"] in ("start", "joined")]
    updates = [r for r in lines if r["kind"] == "update"]
    span = updates[-1]["t"] - updates[0]["t"] + updates[0]["seconds_per_update"]
    with events.open("w") as fh:
        for r in head:
            fh.write(json.dumps(r) + "\n")
        for i in range(rows):
            base = updates[i % len(updates)]
            shift = (i // len(updates)) * span
            r = {**base, "version": i + 1, "batch": i, "t": base["t"] + shift,
                 "phases": {k: [a + shift, b + shift] for k, (a, b) in base["phases"].items()},
                 "rollout_arrival": {k: v + shift for k, v in base["rollout_arrival"].items()}}
            fh.write(json.dumps(r) + "\n")
    summary = json.loads((cell / "summary.json").read_text())
    summary.update(updates=rows, updates_planned=rows)
    (cell / "summary.json").write_text(json.dumps(summary))
    return events


@pytest.mark.benchmark
def test_report_memory_on_a_huge_event_file(tmp_path):
    events = build_run(tmp_path, ROWS)
    size = events.stat().st_size
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0, c0 = time.monotonic(), os.times()
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "report", str(events.parents[2]), "--quiet"],
                          capture_output=True, text=True)
    wall, c1 = time.monotonic() - t0, os.times()
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024   # kB -> bytes (Linux)
    load = os.getloadavg()[0]
    print(f"\nreport of {ROWS:,} update rows, events file {size / 1e6:.0f} MB: peak RSS {peak / 1e6:.0f} MB "
          f"({peak / size:.2f}x the file), {wall:.0f} s wall, {c1.children_user + c1.children_system - c0.children_user - c0.children_system:.0f} s CPU, "
          f"load {load:.1f}; exit {proc.returncode}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert peak > before
    assert peak <= 2 * size and peak <= 2**30, f"peak RSS {peak / 1e6:.0f} MB"
