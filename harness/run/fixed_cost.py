"""The fixed cost of a run: the wall seconds it spends outside its training loops, split by part.

    clock = Stopwatch()                      # commands.run, before launch.execute (a sweep's later runs:
                                             # Stopwatch(from_import=False), their seconds from their own start)
    with clock.part("network"): ...          # each of the harness's own steps
    split(run_dir, tables, clock)            # meta.json's "overhead" block (launch.overhead)

The run's seconds count from the harness package's first import (harness.IMPORTED_T: the CLI's imports
and the config are part of what a user waits for; the interpreter's own start before it, ~0.05 s, is
not counted, and neither is what ran before it in the same process: `bash -c 'pip install .. && harness
run'` execs the harness in the shell's process, whose start time is the shell's); a sweep's later runs count
from their own start, not the process's, so `run_s` = `loop_s` + `eval_outside_loop_s` +
`overhead_s`, and `parts` splits `overhead_s`: the harness's steps as its Stopwatch timed them
(start-up, preflight, models, network, the wait for the fork server's imports, tables, summary,
prediction, figures, report text), each cell's from its launch.json (learner start: until it
listens; the join and the learner's own start and end: the rest of its life outside the loop and
the held-out evaluations; teardown) and its setup around it (schedule, link sampler), and `other`:
what no part covers (meta.json writes, the gaps between steps). A part that overlaps another counts
once, as the wall time the run waited: the fork server imports from the top of `launch.execute` (the
CLI keeps pandas and matplotlib out of its path until then), while the metadata, the network and
finalize's imports (PREWARM) run here, so its part is only what is left of its imports after them;
the adapter's sizing for the prediction runs in a child of the fork server beside the cells, so the
prediction part is the cost model alone, in this process, even on a first run into a models cache.
Without a Stopwatch (a report rebuilt from the folder alone) the run's seconds count from
meta.json's `started_utc` and only the cells' parts are known.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import importlib
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import harness

if TYPE_CHECKING:   # pandas at run time only where the tables are: the run's first seconds stay free of it
    import pandas as pd

# What finalize imports (matplotlib, its PDF backend's font subsetting, the report's markdown):
# imported while the fork server imports torch on another core, they are off the run's wall time.
PREWARM = ("harness.results.plots", "harness.results.report", "harness.results.compare",
           "matplotlib.backends.backend_agg", "matplotlib.backends.backend_pdf", "fontTools.subset",
           "fontTools.ttLib", "markdown_it")

CELL_PARTS = ("cell setup (schedule, link sampler)", "learner start (until it listens)",
              "join, learner's own start and end", "teardown (stop processes)")


# the seconds from the harness package's first import to the Stopwatch (the interpreter's own start is not in it)
STARTUP_PART = "start-up (CLI imports, config)"


def harness_age_s() -> float:
    """Seconds since the harness package was first imported in this process (harness.IMPORTED_T)."""
    return max(time.monotonic() - harness.IMPORTED_T, 0.0)


class Stopwatch:
    """Wall seconds of the harness's own steps (CLOCK_MONOTONIC), by name, and the run's age.

    `from_import`: the run's seconds start at the harness's first import, its start-up a part of them
    (a process's first run); False: they start here, with no start-up part (a sweep's later runs, whose
    process start-up and earlier runs are not theirs)."""

    def __init__(self, from_import: bool = True) -> None:
        self.t0, self.age0 = time.monotonic(), harness_age_s() if from_import else 0.0
        self.parts: dict[str, float] = {STARTUP_PART: self.age0} if from_import else {}

    def since_start(self) -> float:
        return self.age0 + time.monotonic() - self.t0

    def add(self, name: str, seconds: float) -> None:
        self.parts[name] = self.parts.get(name, 0.0) + max(seconds, 0.0)

    @contextlib.contextmanager
    def part(self, name: str) -> Iterator[None]:
        t = time.monotonic()
        try:
            yield
        finally:
            self.add(name, time.monotonic() - t)


def prewarm() -> None:
    """Import PREWARM now (a module that cannot be imported fails where it is used, as before)."""
    for name in PREWARM:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def loop_spans(tables, run_dir: Path | None = None) -> pd.DataFrame:
    """Per cell: `loop_s` (first update's start to last update's end, evaluations between updates
    included) and `eval_s`: the held-out evaluations outside it. With `run_dir`, by when each ran (the
    cell's events: an evaluation the learner deferred to after its last update is outside the loop,
    whatever version it scores); else by version (before the first update, after the last)."""
    import pandas as pd

    u, e = tables.updates, tables.evals
    if u.empty or not {"cell", "t_start_s", "t_end_s", "update_index"} <= set(u):
        return pd.DataFrame(columns=["loop_s", "eval_s"])
    spans = u.groupby("cell").agg(start=("t_start_s", "min"), end=("t_end_s", "max"),
                                  first=("update_index", "min"), last=("update_index", "max"))
    spans["loop_s"], spans["eval_s"] = spans["end"] - spans["start"], 0.0
    if not e.empty and {"cell", "version", "eval_s"} <= set(e):
        bounds = e.join(spans[["first", "last"]], on="cell", how="inner")
        outside = bounds[(bounds["version"] < bounds["first"]) | (bounds["version"] >= bounds["last"])]
        spans["eval_s"] = outside.groupby("cell")["eval_s"].sum().reindex(spans.index).fillna(0.0)
    if run_dir is not None:
        for cell in spans.index:
            timed = evals_outside_by_time(run_dir / "cells" / str(cell) / "events-learner.jsonl")
            if timed is not None:
                spans.loc[cell, "eval_s"] = timed
    return spans[["loop_s", "eval_s"]].astype(float)


def evals_outside_by_time(events: Path) -> float | None:
    """Seconds of the held-out evaluations in a learner's event file that ran before its first update
    started or after its last ended (CLOCK_MONOTONIC `t`: an eval row's is its end, an update's too);
    None when the file has no update or no timed evaluation."""
    from trainers.events import read_events

    try:
        rows = read_events(events)
    except (OSError, ValueError):
        return None
    updates = [(float(r["t"]) - float(r.get("seconds_per_update") or 0.0), float(r["t"])) for r in rows
               if r.get("kind") == "update" and isinstance(r.get("t"), (int, float))]
    evals = [(float(r["t"]), float(r["eval_s"])) for r in rows if r.get("kind") == "eval"
             and isinstance(r.get("t"), (int, float)) and isinstance(r.get("eval_s"), (int, float))]
    if not updates or not evals:
        return None
    first, last = min(a for a, _ in updates), max(b for _, b in updates)
    return sum(s for end, s in evals if end <= first + 1e-3 or end - s >= last - 1e-3)


def cell_parts(run_dir: Path, spans: pd.DataFrame) -> dict[str, float]:
    """The cells' fixed cost from their launch.json (harness clock) less their loops and evaluations."""
    out = dict.fromkeys(CELL_PARTS[1:], 0.0)
    for path in sorted(run_dir.glob("cells/*/launch.json")):
        try:
            t = json.loads(path.read_text())
            started, listening, stopping, stopped = (float(t[k]) for k in
                                                     ("started_t", "listening_t", "stopping_t", "stopped_t"))
        except (OSError, ValueError, KeyError, TypeError):
            continue   # a cell cut short before its learner listened: its time lands in `other`
        cell = path.parent.name
        inside = float(spans.loc[cell, "loop_s"] + spans.loc[cell, "eval_s"]) if cell in spans.index else 0.0
        out["learner start (until it listens)"] += listening - started
        out["join, learner's own start and end"] += max(stopping - listening - inside, 0.0)
        out["teardown (stop processes)"] += stopped - stopping
    return out


def cells_wall_s(run_dir: Path) -> float:
    """Seconds between each cell's launch.json start and stop, summed (what cell_parts splits)."""
    total = 0.0
    for path in run_dir.glob("cells/*/launch.json"):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            t = json.loads(path.read_text())
            total += float(t["stopped_t"]) - float(t["started_t"])
    return total


def split(run_dir: Path, tables, clock: Stopwatch | None = None, now: dt.datetime | None = None) -> dict | None:
    """meta.json's "overhead" block: run_s, loop_s, eval_outside_loop_s, overhead_s and `parts`
    (seconds by part, `other` the rest). None when the run's start is unknown (no clock, no meta.json)."""
    if clock is not None:
        run_s = clock.since_start()
    else:
        try:
            started = dt.datetime.fromisoformat(json.loads((run_dir / "meta.json").read_text())["started_utc"])
        except (OSError, ValueError, KeyError):
            return None
        run_s = ((now or dt.datetime.now(dt.timezone.utc)) - started).total_seconds()
    spans = loop_spans(tables, run_dir)
    loop_s, eval_s = float(spans["loop_s"].sum()), float(spans["eval_s"].sum())
    overhead_s = max(run_s - loop_s - eval_s, 0.0)
    parts = dict(clock.parts) if clock is not None else {}
    cells = cell_parts(run_dir, spans)
    if clock is not None and "cells" in parts:   # the harness's wall around each cell: setup = it - the cells' own
        parts[CELL_PARTS[0]] = max(parts.pop("cells") - cells_wall_s(run_dir), 0.0)
    parts.update(cells)
    parts = {k: round(v, 3) for k, v in parts.items() if v > 0}
    parts["other"] = round(max(overhead_s - sum(parts.values()), 0.0), 3)
    return {"run_s": run_s, "loop_s": loop_s, "eval_outside_loop_s": eval_s, "overhead_s": overhead_s,
            "parts": parts}

