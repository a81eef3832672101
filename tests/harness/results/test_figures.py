"""Every figure tested by what it shows: the matplotlib Figure's axes, lines, bands and legend are
read back (not only that a file exists), from checked-in real runs (tests/fixtures/runs/):
    run-spar-20mbit/  spar@1.6% and full, 2 workers, 4 updates, seeds 1,2, 20mbit (no held-out evaluation)
    sweep-bw/         spar@1.6% and full at 10mbit and 50mbit, seed 1
    run-heldout/      spar@12.8% vs full-bf16, micro, 62.5mbit, 3 seeds x 12 updates, held-out evaluation
                      every 3 versions (conftest.py: read with --quality-metric objective)
Expected values are recomputed from the tables or the raw event files."""
import json
import re
import shutil
from pathlib import Path

import matplotlib.colors as mcolors
import matplotlib.pyplot as plt
import pandas as pd
import pytest

from harness.results import compare, plots, quality, tables
from harness.results.compare import CI_MIN_SEEDS
from harness.results.style import link_style

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "runs"
RUN, SWEEP, HELDOUT = FIXTURES / "run-spar-20mbit", FIXTURES / "sweep-bw", FIXTURES / "run-heldout"


@pytest.fixture(scope="module")
def heldout(heldout_run):
    t = tables.read(heldout_run)
    return t, compare.comparison(t.updates, t.cells, t.evals)


@pytest.fixture(autouse=True)
def _close_figures():
    """Each test's rendered figures closed after it (pyplot keeps every open figure alive)."""
    yield
    plt.close("all")


def by_name(t) -> dict[str, plots.Plot]:
    return {p.name: p for p in plots.render(t)}


def legend_texts(ax) -> list[str]:
    leg = ax.get_legend()
    return [t.get_text() for t in leg.get_texts()] if leg else []


# ---- quality vs training seconds ----------------------------------------------------------------

def test_quality_vs_time_is_one_panel_with_one_curve_per_method(heldout):
    t, comp = heldout
    p = plots.draw_quality_vs_time(t.evals, comp)
    axes = p.fig.axes
    assert len(axes) == 1                                   # was one panel per evaluation (objective collided)
    ax = axes[0]
    curves = [line for line in ax.get_lines() if not line.get_label().startswith("_") and line.get_label() != "target"]
    assert sorted(line.get_label() for line in curves) == sorted(f"{v} (n=3)" for v in comp["variant"])
    c = quality.curves(t.evals, [k for k in compare.coords(t.evals) if k in t.evals]).set_index(["variant", "version"])
    versions = sorted(t.evals["version"].unique())
    assert len(versions) >= 4                               # a curve, not a point
    for line in curves:
        variant = line.get_label().split(" (")[0]
        want = c.loc[variant].sort_index()
        assert list(line.get_xdata()) == pytest.approx(list(want["wall_s"]))
        assert list(line.get_ydata()) == pytest.approx(list(want["quality"]))
    assert len(ax.collections) == 2                         # one shaded 95 % CI per method (3 seeds each)
    assert ax.get_ylabel() == "held-out reverse_kl"
    assert "training seconds" in ax.get_xlabel()
    assert "95 % CI over seeds" in p.caption and f">= {CI_MIN_SEEDS} seeds" in p.caption


def test_the_target_line_is_the_baselines_target(heldout):
    t, comp = heldout
    ax = plots.draw_quality_vs_time(t.evals, comp).fig.axes[0]
    target = [line for line in ax.get_lines() if line.get_label() == "target"]
    want = comp["heldout_target"].dropna().unique()
    assert len(want) == 1 and len(target) == 1 and target[0].get_ydata()[0] == pytest.approx(want[0])


def test_no_band_with_fewer_than_three_seeds(heldout):
    t, comp = heldout
    two = t.evals[t.evals["seed"] != t.evals["seed"].max()]
    ax = plots.draw_quality_vs_time(two, comp).fig.axes[0]
    assert len(ax.collections) == 0 and all("(n=2)" in s for s in legend_texts(ax) if s != "target")


# ---- link throughput ----------------------------------------------------------------------------

def test_link_throughput_names_the_seed_shares_time_and_draws_the_capacity():
    t = tables.read(RUN)
    p = plots.draw_link_throughput(t.links)
    axes = p.fig.axes
    assert len(axes) == 2                                   # spar and full
    seed = int(t.links["seed"].min())
    assert [ax.get_title(loc="left") for ax in axes] == [f"spar@1.6% (seed {seed})", f"full (seed {seed})"]
    assert axes[0].get_shared_x_axes().joined(axes[0], axes[1])
    for ax in axes:
        caps = [line for line in ax.get_lines() if line.get_label().startswith("worker link capacity")]
        assert len(caps) == 1 and caps[0].get_ydata()[0] == pytest.approx(20.0)    # 20mbit, in Mbit/s
    g = t.links[(t.links["variant"] == "full") & (t.links["seed"] == seed) & (t.links["t_s"] >= 0)]
    w1 = g[(g["node"] == "w1") & (g["direction"] == "down")]
    line = next(line for line in axes[1].get_lines() if line.get_label() == "w1 down")
    assert list(line.get_ydata()) == pytest.approx(list(w1["throughput_bit_s"] / 1e6))
    legend = legend_texts(axes[0])
    assert "learner (unshaped) up: sends to the workers" in legend and "w1 down" in legend and "worker link capacity 20 Mbit/s" in legend
    assert f"seed {seed}" in p.caption and "capacity" in p.caption


def test_a_run_without_link_samples_says_so_instead_of_naming_seed_none(heldout_run, tmp_path):
    """run-heldout keeps no link counters: the figure and the report's caption say there are no link
    samples (they read "seed None" before)."""
    from harness.results import report

    t = tables.read(heldout_run)
    assert t.links.empty
    p = by_name(t)["link_throughput"]
    assert "seed None" not in p.caption and "no link samples" in p.caption, p.caption
    [ax] = p.fig.axes
    assert ax.get_lines() == [] and ax.get_title(loc="left") == ""
    assert [x.get_text() for x in ax.texts] == ["no link samples"]
    md = report.write(heldout_run, out=tmp_path / "report").read_text()
    [line] = [ln for ln in md.splitlines() if ln.startswith("*link_throughput")]
    assert "seed None" not in line and "no link samples in these runs" in line, line


def test_every_link_has_its_own_style_at_any_worker_count():
    """Beyond 7 workers the colours repeat (8 Okabe-Ito colours); the marker tells them apart."""
    nodes, seen = 64, set()
    for i in range(nodes):
        for direction in ("down", "up"):
            s = link_style(i, direction)
            seen.add((mcolors.to_hex(s["color"]), s["marker"], s["linestyle"]))
    assert len(seen) == 2 * nodes
    assert link_style(0, "down")["color"] == link_style(8, "down")["color"]            # learner vs w8
    assert link_style(0, "down")["marker"] != link_style(8, "down")["marker"]


def test_link_throughput_of_nine_workers_draws_nine_distinct_styles():
    t = tables.read(RUN)
    links = t.links[t.links["node"] == "w1"]
    many = pd.concat([links.assign(node=f"w{i}") for i in range(1, 10)], ignore_index=True)
    ax = plots.draw_link_throughput(many).fig.axes[0]
    styles = {(line.get_color(), line.get_marker(), line.get_linestyle()) for line in ax.get_lines()
              if re.match(r"w\d+ ", line.get_label())}
    assert len(styles) == 2 * 9 or len(styles) == 9         # nine workers x the directions present


# ---- bandwidth, timeline, captions -------------------------------------------------------------

def test_bandwidth_figure_only_where_the_runs_vary_bandwidth():
    assert "seconds_vs_bandwidth" not in by_name(tables.read(RUN))
    sweep = by_name(tables.read(SWEEP))
    ax = sweep["seconds_vs_bandwidth"].fig.axes[0]
    xs = sorted({x for line in ax.get_lines() for x in line.get_xdata()})
    assert xs == [10.0, 50.0]
    assert "interquartile range" in sweep["seconds_vs_bandwidth"].caption


def test_timeline_says_which_seed_and_updates():
    t = tables.read(RUN)
    p = plots.draw_timeline(t.phases)
    titles = [ax.get_title(loc="left") for ax in p.fig.axes]
    assert titles == ["spar@1.6%: seed 1, updates 2-4", "full: seed 1, updates 2-4"]   # the run has 4 updates
    assert "seed 1" in p.caption
    short = plots.draw_timeline(t.phases[t.phases["update_index"] <= 3])   # a 3-update run: "2-3", not "2-5"
    assert [ax.get_title(loc="left") for ax in short.fig.axes][0] == "spar@1.6%: seed 1, updates 2-3"
    assert "updates 2-3 of seed 1" in short.caption


def test_every_caption_defines_its_error_bars(heldout):
    t, _ = heldout
    for run_tables in (t, tables.read(RUN), tables.read(SWEEP)):
        for p in plots.render(run_tables):
            assert "error bar" in p.caption or "shaded" in p.caption, p.name
            plt.close(p.fig)
    qb = by_name(t)["quality_vs_bytes"]
    assert "95 % CI over seeds" in qb.caption
    assert qb.fig.axes[0].get_ylabel() == "held-out reverse kl"
    no_heldout = by_name(tables.read(RUN))["quality_vs_bytes"]
    assert "± 1 sd over seeds" in no_heldout.caption and "training-batch" in no_heldout.fig.axes[0].get_ylabel()


def test_write_saves_every_rendered_figure(tmp_path):
    paths = plots.write(RUN, out=tmp_path / "figures")
    names = {p.name for p in paths}
    assert {"quality_vs_bytes.png", "link_throughput.pdf", "timeline.png", "phase_breakdown.png"} <= names
    assert "seconds_vs_bandwidth.png" not in names and "quality_vs_time.png" not in names   # one rate, no evals
    assert all(p.stat().st_size > 1000 for p in paths)


def test_fixture_has_three_seeds_and_a_baseline_that_moves(heldout):
    t, comp = heldout
    assert sorted(t.evals["seed"].unique()) == [1, 2, 3] and (comp["baseline"] == "full-bf16").all()
    assert comp["baseline_improvement_sd"].iloc[0] > 3      # a curve that goes somewhere


# ---- a swept parameter's points stay apart ----------------------------------------------------

def test_the_timeline_draws_each_sweep_point_in_its_own_panel():
    """Both runs of the --bw sweep were drawn in one panel per method: two updates 2 side by side in one
    row of bars, neither named by its rate."""
    titles = [ax.get_title(loc="left") for ax in by_name(tables.read(SWEEP))["timeline"].fig.axes]
    assert len(titles) == 4
    assert {t.split(":")[0] for t in titles} == {"spar@1.6% (10 Mbit/s)", "full (10 Mbit/s)",
                                                 "spar@1.6% (50 Mbit/s)", "full (50 Mbit/s)"}
    assert [ax.get_title(loc="left") for ax in by_name(tables.read(RUN))["timeline"].fig.axes] == [
        "spar@1.6%: seed 1, updates 2-4", "full: seed 1, updates 2-4"]      # one run: the method alone


def test_runs_that_differ_in_a_run_parameter_get_a_bar_and_a_panel_each(tmp_path):
    """Two runs at one link that differ only in --lr: phase_breakdown drew one bar per method (their
    updates pooled into one median) and the timeline one panel per method."""
    for name, lr in (("lr-low", 0.001), ("lr-high", 0.004)):
        shutil.copytree(RUN, tmp_path / name)
        cfg = json.loads((tmp_path / name / "config.json").read_text())
        (tmp_path / name / "config.json").write_text(json.dumps({**cfg, "lr": lr}))
    t = tables.read([tmp_path / "lr-low", tmp_path / "lr-high"])
    drawn = by_name(t)
    ticks = [tick.get_text() for tick in drawn["phase_breakdown"].fig.axes[0].get_xticklabels()]
    assert sorted(ticks) == ["full\nlr 0.001", "full\nlr 0.004", "spar@1.6%\nlr 0.001", "spar@1.6%\nlr 0.004"]
    high = t.updates[(t.updates["lr"] == 0.004) & (t.updates["variant"] == "full")]
    bar = next(p for p in drawn["phase_breakdown"].fig.axes[0].patches
               if round(p.get_x() + p.get_width() / 2) == ticks.index("full\nlr 0.004"))   # its bottom segment: idle
    assert bar.get_height() == pytest.approx(high["idle_s"].median())
    titles = [ax.get_title(loc="left").split(":")[0] for ax in drawn["timeline"].fig.axes]
    assert sorted(titles) == ["full (lr 0.001)", "full (lr 0.004)", "spar@1.6% (lr 0.001)", "spar@1.6% (lr 0.004)"]
