"""Every cell of a traced run meets the trace from the same point of the cell: the start of its learner's first
update. The first cell used to start the trace's clock ~3 s before its learner listened (it paid the fork
server's imports and the model load inside the trace's time), so its updates met the trace 3 s further on
than the next method's: an unfair comparison."""
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.run.launch import first_phase

pytestmark = pytest.mark.root

ROOT = Path(__file__).resolve().parents[3]
STEP_S = 0.25


def _offset(cell: Path) -> float:
    """Seconds from the cell's trace time 0 (schedule.csv's first due time) to its first update's start."""
    with (cell / "schedule.csv").open() as fh:
        zero = min(float(r["due_t_s"]) for r in csv.DictReader(fh) if float(r["at_s"]) == 0.0)
    rows = [json.loads(line) for line in (cell / "events-learner.jsonl").read_text().splitlines()]
    first = min((r for r in rows if r.get("kind") == "update"), key=lambda r: r["version"])
    return first_phase(first) - zero


def test_every_cell_meets_the_trace_from_its_first_update(tmp_path):
    trace = tmp_path / "steps.csv"
    trace.write_text("time_s,rate_mbit_s\n" + "".join(f"{i * STEP_S},{r}\n" for i, r in enumerate((5, 20, 2))))
    res = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--model", "micro", "--updates", "4",
                          "--seeds", "1", "--workers", "1", "--method", "identity", "--baseline", "full-bf16",
                          "--trace", str(trace), "--run-id", "traced", "--out", str(tmp_path / "results"), "--quiet"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert res.returncode == 0, res.stderr[-3000:]
    cells = sorted((tmp_path / "results" / "traced" / "cells").iterdir())
    assert [c.name for c in cells] == ["full-bf16-s1", "identity-s1"]
    offsets = [_offset(c) for c in cells]
    # the clock starts when the last worker has joined, just before the first update's first phase (its wait
    # for rollouts): the same point in both cells, whichever of them paid the run's start-up
    assert all(-STEP_S <= o <= STEP_S for o in offsets), offsets
    assert abs(offsets[0] - offsets[1]) <= STEP_S, offsets
