"""A cell's trace clock: every cell replays its links' schedule (a trace, a profile's `schedule:`) from the
start of its first update (harness/run/launch.py ScheduleClock), and logs each step in its schedule.csv
(harness/net/shaper.py StepLog: due and applied times, time.monotonic() seconds, the clock of the services'
event rows). An update's time on the trace = its time in the cell minus when the cell's schedule started.

``covered`` gives the part of the trace a set of update rows ran over: what the regime's link rate is read
at (harness/projection/prediction.py), since a short run meets only the trace's first seconds.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pandas as pd


def cell_t0(cell_dir: Path) -> float | None:
    """The cell's time origin (its learner's first event, monotonic seconds), as files.CellFiles.t0."""
    try:
        with (cell_dir / "events-learner.jsonl").open() as fh:
            return float(json.loads(fh.readline())["t"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def schedule_start(cell_dir: Path) -> float | None:
    """When the cell's schedule started (its time 0), in seconds after the cell's first event; None
    without a readable schedule.csv (the links never changed) or learner events."""
    t0 = cell_t0(cell_dir)
    try:
        with (cell_dir / "schedule.csv").open(newline="") as fh:
            first = next(csv.DictReader(fh))
        start = float(first["due_t_s"]) - float(first["at_s"])
    except (OSError, StopIteration, KeyError, TypeError, ValueError):
        return None
    return None if t0 is None else start - t0


def covered(run_dir: Path, updates: pd.DataFrame) -> tuple[float, float] | None:
    """(first, last): the seconds of the trace `updates` (rows of the updates table: cell, t_start_s,
    t_end_s) ran over, from the earliest start to the latest end on their cells' own trace clocks; None
    where none of their cells logged a schedule."""
    spans = []
    for cell, g in updates.groupby("cell", sort=False):
        start = schedule_start(Path(run_dir) / "cells" / str(cell))
        if start is not None:
            spans.append((float(g["t_start_s"].min()) - start, float(g["t_end_s"].max()) - start))
    if not spans:
        return None
    return max(0.0, min(a for a, _ in spans)), max(b for _, b in spans)
