"""The trace figure (harness/results/trace_plots.py) from a fixture run given schedule.csv files."""
import json
import shutil
from pathlib import Path

from harness.results import tables, trace_plots
from harness.results.trace_plots import traced_links

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


def _profile(run, doc):
    cfg = json.loads((run / "config.json").read_text())
    cfg["profile_doc"] = doc
    (run / "config.json").write_text(json.dumps(cfg))
    return run


def _link_caption(run):
    import matplotlib.pyplot as plt

    from harness.results import plots
    rendered = plots.render(tables.read(run))
    plt.close("all")
    return {p.name: p for p in rendered}["link_throughput"].caption


def test_a_traced_run_says_its_links_followed_the_trace_and_points_to_the_trace_figure(tmp_path):
    """The links followed cellular-lte.csv (no static rate in the profile): the caption said "no
    capacity line: the links were not shaped" before."""
    run = _profile(_with_schedules(tmp_path), {"defaults": {"delay": "20ms", "trace": "cellular-lte.csv"},
                                               "learner": {"rate": "1gbit"}})
    cap = _link_caption(run)
    assert "not shaped" not in cap and "unshaped)" not in cap
    assert "no capacity line: the worker links followed a trace" in cap
    assert "the `trace` figure draws w1's capacity as the shaper applied it" in cap
    assert [name for name, _, _ in trace_plots.figures(tables.read(run))] == ["trace"]


def test_a_trace_on_one_worker_names_that_worker_and_keeps_the_static_line_for_the_rest(tmp_path):
    doc = {"defaults": {"rate": "20mbit"}, "workers": {"w2": {"down": {"trace": {"file": "leo-satellite.csv"}}}}}
    assert traced_links(doc) == "w2's links"
    cap = _link_caption(_profile(_with_schedules(tmp_path), doc))
    assert "dotted black: the worker links' capacity (20 Mbit/s" in cap
    assert "which held only where no trace or schedule changed it: w2's links followed a trace" in cap


def test_a_run_whose_cells_logged_a_schedule_says_its_capacity_changed(tmp_path):
    cap = _link_caption(_with_schedules(tmp_path))        # the fixture's profile: 20mbit, no trace
    assert "changed on the profile's schedule" in cap and "the `trace` figure" in cap


def test_static_and_unshaped_runs_keep_their_captions(tmp_path):
    assert trace_plots.followed(tables.read(FIXTURE).runs) is None
    assert "dotted black: the worker links' capacity (20 Mbit/s" in _link_caption(FIXTURE)
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    assert "no capacity line: the links were not shaped" in _link_caption(_profile(run, {"defaults": {"delay": "5ms"}}))


def test_the_trace_is_drawn_over_every_step_any_cell_applied_and_until_the_last_cell_stopped(tmp_path):
    """trace.png drew only the first cell's steps (by name: a cell that ran 2 s of a looped trace), so
    the steps a longer cell met later were missing and the line stopped where that cell did."""
    run = _with_schedules(tmp_path)
    t0 = json.loads((run / "cells" / "full-s1" / "events-learner.jsonl").open().readline())["t"]
    short = [f"{k},{t0 + k},{t0 + k + 0.002},0.002,False,w1,down,{rate},0.0,0.0\n" for k, rate in ((0, 20e6), (1, 5e6))]
    (run / "cells" / "full-s1" / "schedule.csv").write_text(HEAD + "".join(short))
    t = tables.read(run)
    figs = trace_plots.figures(t)
    line = next(ln for ln in figs[0][1].axes[0].get_lines() if ln.get_label() == "trace as applied (w1 down)")
    x, y = list(line.get_xdata()), list(line.get_ydata())
    assert [round(v, 3) for v in x[:3]] == [0.002, 1.002, 3.002] and len(x) == 4
    assert y == [20.0, 5.0, 20.0, 20.0]         # spar's cell applied the loop's step at 3 s; full-s1 stopped at 1 s
    first_seed = t.updates[t.updates["seed"] == t.updates["seed"].min()]
    assert x[-1] >= first_seed["t_end_s"].max() - 0.01    # held until the last cell of the figure stopped


def test_the_figure_starts_at_the_traces_time_0_and_draws_no_rate_from_the_hold_before_it(tmp_path):
    """Each cell's schedule starts at its first update (harness/run/launch.py ScheduleClock); the link
    counters run from before the cell's first event. trace.png drew those samples seconds left of 0 (the
    links held at the trace's first step while the services started), so the axis showed rate before the
    trace began."""
    run = _with_schedules(tmp_path)
    for cell in (run / "cells").iterdir():          # every schedule starts 3 s after the cell's first event
        t0 = json.loads((cell / "events-learner.jsonl").open().readline())["t"]
        rows = [f"{k},{t0 + 3 + k},{t0 + 3 + k + 0.002},0.002,False,w1,{d},{rate},0.0,0.0\n"
                for k, rate in enumerate((20e6, 5e6, 7e6)) for d in ("up", "down")]
        (cell / "schedule.csv").write_text(HEAD + "".join(rows))
    name, fig, caption = trace_plots.figures(tables.read(run))[0]
    ax_rate, ax_spu = fig.axes
    achieved = [ln for ln in ax_rate.get_lines() if "achieved" in str(ln.get_label())]
    assert achieved and all(min(ln.get_xdata()) >= 0 for ln in achieved)
    assert ax_rate.get_xlim()[0] == 0 and ax_spu.get_xlim()[0] == 0
    trace = next(ln for ln in ax_rate.get_lines() if ln.get_label() == "trace as applied (w1 down)")
    assert [round(v, 3) for v in list(trace.get_xdata())[:3]] == [0.002, 1.002, 2.002]
    assert "held at the trace's first step" in caption
