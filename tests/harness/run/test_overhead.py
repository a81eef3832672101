"""The fixed cost a run reports (launch.overhead, harness/run/fixed_cost.py): its wall seconds split into
training loops, the held-out evaluations outside them and the harness's own rest, and that rest by part
(the run's stopwatch, each cell's launch.json), from a recorded run folder."""
import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.results import tables
from harness.run import fixed_cost, launch

RUN = Path(__file__).resolve().parents[2] / "fixtures" / "runs" / "run-heldout"


def test_a_runs_seconds_split_into_loop_evaluations_and_the_rest():
    t = tables.read(RUN)
    meta = json.loads((RUN / "meta.json").read_text())
    end = dt.datetime.fromisoformat(meta["finished_utc"])
    o = launch.overhead(RUN, t, now=end)
    assert o["run_s"] == (end - dt.datetime.fromisoformat(meta["started_utc"])).total_seconds()
    spans = t.updates.groupby("cell").agg(a=("t_start_s", "min"), b=("t_end_s", "max"))
    assert o["loop_s"] == float((spans["b"] - spans["a"]).sum()) > 0
    assert 0 < o["eval_outside_loop_s"] <= t.evals["eval_s"].sum() + 1e-9
    assert o["overhead_s"] == o["run_s"] - o["loop_s"] - o["eval_outside_loop_s"]
    line = launch.overhead_line(o)
    assert line.startswith(f"harness overhead: {o['overhead_s']:.1f} s outside the training loop (")


def test_a_folder_without_a_start_time_reports_nothing(tmp_path):
    (tmp_path / "meta.json").write_text("{}")
    assert launch.overhead(tmp_path, tables.read(RUN)) is None


def test_the_report_states_the_fixed_cost_meta_json_holds(tmp_path):
    """report.md's run line carries the overhead meta.json records: the cost until the report on the
    run's first write (the report's own writing comes after), the whole cost on a rebuild."""
    import shutil

    from harness.results import report

    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    meta = json.loads((run / "meta.json").read_text())
    for until, says in (("report", "until this report"), (None, "outside the training loops (")):
        cost = {"run_s": 200.0, "loop_s": 150.0, "eval_outside_loop_s": 10.0, "overhead_s": 40.0}
        (run / "meta.json").write_text(json.dumps({**meta, "overhead": {**cost, **({"until": until} if until else {})}}))
        report.write(run)
        text = (run / "report.md").read_text()
        line = next(x for x in text.splitlines() if "harness overhead" in x)
        assert "40.0 s of the run's 200.0 s" in line and "(20%)" in line and says in line
        assert ("until this report" in line) == (until == "report")


def _with_launch_json(tmp_path: Path, cell: str, learner_start_s: float, join_s: float, teardown_s: float) -> Path:
    """A copy of RUN whose `cell` has a launch.json: its learner listening `learner_start_s` after its
    start, stopped `join_s` after its loop and held-out evaluations, gone `teardown_s` later."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    spans = fixed_cost.loop_spans(tables.read(run), run)
    inside = float(spans.loc[cell, "loop_s"] + spans.loc[cell, "eval_s"])
    started = 1000.0
    listening = started + learner_start_s
    stopping = listening + inside + join_s
    (run / "cells" / cell / "launch.json").write_text(json.dumps(
        {"started_t": started, "listening_t": listening, "stopping_t": stopping, "stopped_t": stopping + teardown_s}))
    return run


def test_a_cells_fixed_cost_is_split_from_its_launch_json_less_its_loop_and_evaluations(tmp_path):
    run = _with_launch_json(tmp_path, "spar-12.8pct-s1", learner_start_s=1.5, join_s=2.0, teardown_s=0.25)
    parts = fixed_cost.cell_parts(run, fixed_cost.loop_spans(tables.read(run), run))
    assert parts == pytest.approx({"learner start (until it listens)": 1.5, "join, learner's own start and end": 2.0,
                                   "teardown (stop processes)": 0.25})


def test_with_the_runs_stopwatch_the_parts_and_the_rest_add_up_to_the_fixed_cost(tmp_path):
    """run_s counts from the harness's first import; every part the stopwatch timed is listed, the cells' own
    replace their wall ("cells" -> cell setup), and `other` is what no part covers."""
    run = _with_launch_json(tmp_path, "spar-12.8pct-s1", learner_start_s=1.5, join_s=2.0, teardown_s=0.25)
    t = tables.read(run)
    clock = fixed_cost.Stopwatch()
    assert clock.parts[fixed_cost.STARTUP_PART] == clock.age0 > 0   # this test's process ran before
    clock.t0 -= 100.0                             # the run's cells took the fixture's loops: it started 100 s ago
    clock.add("network (namespaces, shaping)", 0.5)
    cells_wall = fixed_cost.cells_wall_s(run)
    clock.add("cells", cells_wall + 0.3)          # 0.3 s of the harness's own around the cell
    with clock.part("figures"):
        pass
    o = launch.overhead(run, t, clock=clock)
    spans = fixed_cost.loop_spans(t, run)
    assert o["loop_s"] == pytest.approx(spans["loop_s"].sum()) and o["eval_outside_loop_s"] == pytest.approx(spans["eval_s"].sum())
    assert o["run_s"] >= clock.age0 and o["overhead_s"] == pytest.approx(o["run_s"] - o["loop_s"] - o["eval_outside_loop_s"])
    parts = o["parts"]
    assert "cells" not in parts and parts["cell setup (schedule, link sampler)"] == pytest.approx(0.3)
    assert parts["network (namespaces, shaping)"] == 0.5 and parts["learner start (until it listens)"] == 1.5
    assert parts["other"] > 0 and sum(parts.values()) == pytest.approx(o["overhead_s"], abs=0.01)
    line = launch.overhead_line(o)
    assert "learner start (until it listens) 1.5 s" in line and "network (namespaces, shaping) 0.5 s" in line
    assert "figures 0.0 s" not in line               # a part that rounds to nothing is not listed


def test_the_report_lists_the_parts_meta_json_holds(tmp_path):
    import shutil

    from harness.results import report

    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    meta = json.loads((run / "meta.json").read_text())
    cost = {"run_s": 20.0, "loop_s": 10.0, "eval_outside_loop_s": 2.0, "overhead_s": 8.0,
            "parts": {"fork server (the wait for its imports)": 4.0, "figures": 2.5, "tables": 0.01, "other": 1.49}}
    (run / "meta.json").write_text(json.dumps({**meta, "overhead": cost}))
    report.write(run)
    line = next(x for x in (run / "report.md").read_text().splitlines() if "harness overhead" in x)
    assert "adding up to it: fork server (the wait for its imports) 4.0 s; figures 2.5 s; other 1.5 s" in line
    assert "tables" not in line


def test_evaluations_the_learner_deferred_past_its_last_update_are_outside_the_loop(tmp_path):
    """By when they ran, not by the version they score: the evaluations of versions 0 and 1 run after
    update 2 ended (deferred), the one of version 1 in the fixture sense "inside" by its version."""
    rows = [{"kind": "update", "version": 1, "t": 11.0, "seconds_per_update": 1.0},
            {"kind": "eval", "version": 1, "t": 11.5, "eval_s": 0.25},      # between the updates: inside
            {"kind": "update", "version": 2, "t": 13.0, "seconds_per_update": 1.0},
            {"kind": "eval", "version": 0, "t": 15.0, "eval_s": 2.0},
            {"kind": "eval", "version": 1, "t": 17.5, "eval_s": 2.5}]
    events = tmp_path / "events-learner.jsonl"
    events.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert fixed_cost.evals_outside_by_time(events) == pytest.approx(4.5)
    events.write_text(json.dumps(rows[0]) + "\n")
    assert fixed_cost.evals_outside_by_time(events) is None     # no timed evaluation: the version rule stands


def test_start_up_counts_from_the_harness_not_from_what_ran_before_it_in_its_process():
    """`bash -c 'sleep 3 && python ..'`: bash execs python in its own process (started before the
    sleep), so the process is 3 s older than the harness in it; the start-up part is the harness's."""
    code = ("import time; t = time.monotonic(); from harness.run import fixed_cost; "
            "c = fixed_cost.Stopwatch(); print(c.parts[fixed_cost.STARTUP_PART], time.monotonic() - t)")
    out = subprocess.run(["bash", "-c", f"sleep 3 && exec {sys.executable} -c '{code}'"], capture_output=True,
                         text=True, timeout=120, env=dict(os.environ), cwd=Path(__file__).resolve().parents[3])
    assert out.returncode == 0, out.stderr
    startup, imports = map(float, out.stdout.split())
    assert 0 < startup <= imports < 3.0   # the harness's imports, within the span the script timed around them
