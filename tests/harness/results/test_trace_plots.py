"""The trace figure (harness/results/trace_plots.py) from a fixture run given schedule.csv files."""
import json
import shutil
from pathlib import Path

from harness.results import tables, trace_plots

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "runs" / "run-spar-20mbit"
HEAD = "at_s,due_t_s,applied_t_s,lag_s,skipped,node,direction,rate_bit_s,delay_s,loss_frac\n"


def _with_schedules(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    for cell in (run / "cells").iterdir():
        t0 = json.loads((cell / "events-learner.jsonl").open().readline())["t"]
        rows = [f"{k},{t0 + k},{t0 + k + 0.002},0.002,{k == 2},w1,{d},{rate},0.0,0.0\n"
                for k, rate in enumerate((20e6, 5e6, 7e6, 20e6)) for d in ("up", "down")]
        (cell / "schedule.csv").write_text(HEAD + "".join(rows))
    return run


def test_the_schedule_is_read_on_each_cell_clock_without_skipped_steps(tmp_path):
    sched = trace_plots.schedule(tables.read(_with_schedules(tmp_path)).runs[0])
    one = sched[(sched["cell"] == "full-s1") & (sched["direction"] == "down")]
    assert list(one["t_s"].round(3)) == [0.002, 1.002, 3.002]        # the skipped step at 2 s is not drawn
    assert list(one["rate_bit_s"]) == [20e6, 5e6, 20e6]


def test_a_run_with_schedules_gets_the_trace_figure_and_one_without_none(tmp_path):
    figs = trace_plots.figures(tables.read(_with_schedules(tmp_path)))
    assert [name for name, _, _ in figs] == ["trace"]
    axes = figs[0][1].axes
    assert len(axes) == 2 and axes[1].get_ylabel() == "seconds per update"
    assert trace_plots.figures(tables.read(FIXTURE)) == []
