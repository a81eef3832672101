"""The equal-bytes figures (harness/results/equal_bytes.py) read back from their axes: every
point, curve and error bar is recomputed here from the raw event rows of the checked-in runs (json),
not through harness/results/tables.py:
    run-heldout       spar@12.8% vs full-bf16, 3 seeds x 12 updates, held-out evaluation every 3 versions
                      (conftest.py: read with --quality-metric objective: held-out reverse KL)
    dp-micro-excerpt  lordo-global x 3 seeds, lordo-global-none x 2, lordo-local x 1 (steps 1..64 and 192)"""
import json
import statistics
from pathlib import Path

import pytest

from harness.results import compare, equal_bytes, plots, report, tables
from harness.results.compare import CI_MIN_SEEDS
from harness.results.quality import ci95

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "runs"
DP, RUN = FIXTURES / "dp-micro-excerpt", FIXTURES / "run-spar-20mbit"


def rows(run: Path, cell: str, kind: str, process: str = "learner") -> list[dict]:
    lines = (run / "cells" / cell / f"events-{process}.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("kind") == kind]


def cells(run: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for c in sorted(p.name for p in (run / "cells").iterdir()):
        out.setdefault(c.rsplit("-s", 1)[0], []).append(c)
    return out


def curves(ax) -> dict[str, tuple[list[float], list[float]]]:
    return {line.get_label().split(" (n=")[0]: (list(line.get_xdata()), list(line.get_ydata()))
            for line in ax.get_lines() if not line.get_label().startswith("_")}


def error_bars(ax) -> dict[str, tuple[float, float, float]]:
    """label -> (x, y, half-width of the drawn bar) of every errorbar point."""
    out = {}
    for c in ax.containers:
        line, _, (bars,) = c.lines
        (x0, lo), (_, hi) = bars.get_segments()[0]
        out[c.get_label().split(" (n=")[0]] = (float(line.get_xdata()[0]), float(line.get_ydata()[0]), (hi - lo) / 2)
    return out


@pytest.fixture(scope="module")
def hilo(heldout_run):
    t = tables.read(heldout_run)
    return heldout_run, t, compare.comparison(t.updates, t.cells, t.evals)


def test_hilo_cumulative_panel_is_quality_against_bytes_sent_so_far(hilo):
    run, t, comp = hilo
    name, fig, caption = equal_bytes.draw_equal_bytes(t.updates, t.evals, comp)
    ax_u, ax_c = fig.axes
    drawn = curves(ax_c)
    stems = {"spar@12.8%": "spar-12.8pct", "full-bf16": "full-bf16"}
    assert set(drawn) == set(stems)
    for variant, stem in stems.items():
        per_seed = []
        for cell in cells(run)[stem]:
            sent = [sum(r["update_frame_bytes"].values()) for r in sorted(rows(run, cell, "update"), key=lambda r: r["version"])]
            per_seed.append({e["version"]: (sum(sent[:e["version"]]), e["reverse_kl"]) for e in rows(run, cell, "eval")})
        versions = sorted(v for v in per_seed[0] if v > 0)            # version 0: no byte yet, off the log axis
        xs, ys = drawn[variant]
        assert xs == pytest.approx([statistics.mean(s[v][0] for s in per_seed) for v in versions])
        assert ys == pytest.approx([statistics.mean(s[v][1] for s in per_seed) for v in versions])
        assert len(versions) == 4 and xs == sorted(xs)
    assert len(ax_c.collections) == 2                                 # a 95 % CI band per variant (3 seeds)
    assert ax_c.get_xscale() == "log" and "cumulative bytes" in ax_c.get_xlabel()
    assert ax_u.get_ylabel() == "held-out reverse kl"
    assert "95 % CI over seeds" in caption and f">= {CI_MIN_SEEDS} seeds" in caption and "Error bars" in caption


def test_hilo_per_update_panel_is_final_quality_with_its_ci(hilo):
    run, t, comp = hilo
    ax_u = equal_bytes.draw_equal_bytes(t.updates, t.evals, comp)[1].axes[0]
    bars = error_bars(ax_u)
    for variant, stem in {"spar@12.8%": "spar-12.8pct", "full-bf16": "full-bf16"}.items():
        final = [max(rows(run, c, "eval"), key=lambda e: e["version"])["reverse_kl"] for c in cells(run)[stem]]
        sent = [sum(r["update_frame_bytes"].values()) for c in cells(run)[stem] for r in rows(run, c, "update")]
        mean, half = ci95(final)
        x, y, bar = bars[variant]
        assert y == pytest.approx(mean) and bar == pytest.approx(half) and x == pytest.approx(statistics.median(sent))
    assert bars["spar@12.8%"][0] < bars["full-bf16"][0] / 5          # spar sends far less per update


def test_dp_panels_from_the_raw_rows():
    t = tables.read(DP)
    name, fig, caption = equal_bytes.draw_dp_equal_bytes(t.updates)
    assert name == "dp_equal_bytes"
    ax_u, ax_c = fig.axes
    drawn, bars = curves(ax_c), error_bars(ax_u)
    assert set(drawn) == set(bars) == {"lordo-global", "lordo-global-none", "lordo-local"}
    for method, cs in cells(DP).items():
        per_seed = []
        for cell in cs:
            total, points = 0.0, {}
            for r in sorted(rows(DP, cell, "update"), key=lambda r: r["version"]):
                total += (r["wire_bytes_up"] + sum(r["update_frame_bytes"].values())) / 2    # 2 workers
                if total > 0:
                    points[r["version"]] = (total, r["loss"])
            per_seed.append(points)
        steps = sorted(per_seed[0])
        xs, ys = drawn[method]
        assert xs == pytest.approx([statistics.mean(s[v][0] for s in per_seed) for v in steps])
        assert ys == pytest.approx([statistics.mean(s[v][1] for s in per_seed) for v in steps])
        ppl = [rows(DP, c, "update")[-1]["heldout_ppl"] for c in cs]
        mean, half = ci95(ppl)
        assert bars[method][1] == pytest.approx(mean)
        assert bars[method][2] == pytest.approx(half if len(cs) >= CI_MIN_SEEDS else 0.0)   # no bar below 3 seeds
    assert len(ax_c.collections) == 1                                 # the band of the only 3-seed method
    assert "training batch" in caption and "held-out perplexity" in caption and "95 % CI over seeds" in caption


def test_each_family_gets_only_its_own_figure():
    dp = tables.read(DP)
    names = [n for n, _, _ in equal_bytes.figures(dp.updates, dp.evals, compare.comparison(dp.updates, dp.cells, dp.evals))]
    assert names == ["dp_equal_bytes"]
    spar = tables.read(RUN)                                          # no held-out evaluation: nothing to draw
    assert equal_bytes.figures(spar.updates, spar.evals, compare.comparison(spar.updates, spar.cells, spar.evals)) == []


def test_the_report_embeds_the_figure_with_its_caption(heldout_copy, tmp_path):
    run = heldout_copy(tmp_path / "run-heldout")
    assert "equal_bytes" in {p.name for p in plots.render(tables.read(run))}
    md = report.write(run, out=tmp_path / "report").read_text()
    [line] = [ln for ln in md.splitlines() if ln.startswith("*equal_bytes.png*")]
    assert "cumulative" in line and "95 % CI over seeds" in line
    assert (tmp_path / "report" / "figures" / "equal_bytes.png").stat().st_size > 1000


def test_a_dp_run_shorter_than_its_sync_window_says_why_its_left_panel_is_empty(recwarn):
    """A run that ends before its first whole sync window (here 33 steps read with K = 64; the run's last
    step syncs what it has): the left panel was an empty frame (a perplexity axis from 0 to 1, no point)
    and matplotlib warned that its legend had nothing to show. With no sync at all, no figure."""
    t = tables.read(DP)
    short = t.updates[t.updates["update_index"] <= 33].assign(lordo_k=64)
    short.loc[short["update_index"] == 33, "heldout_ppl"] = 100.0   # evaluated after its last step, as a run is
    name, fig, caption = equal_bytes.draw_dp_equal_bytes(short)
    ax_u, ax_c = fig.axes
    assert not error_bars(ax_u) and ax_u.get_legend() is None
    assert [x.get_text() for x in ax_u.texts] == ["no point: no seed ran a whole sync window\n"
                                                  "(bytes per step are counted over whole windows)"]
    assert curves(ax_c) and ax_c.get_legend() is not None and not ax_c.texts
    assert caption.endswith("Left is empty: no seed ran a whole sync window.")
    assert not [w for w in recwarn if "legend" in str(w.message)]
    assert equal_bytes.draw_dp_equal_bytes(t.updates[t.updates["update_index"] <= 31]) is None


def test_a_byte_axis_within_a_factor_of_two_is_linear_with_byte_ticks():
    """ddp and lordo-global ship about the same per step (1.01 and 1.06 MB): on a log axis matplotlib labelled
    its minor ticks there, "1.01 x 10^6" to "1.045 x 10^6", run into one another."""
    t = tables.read(FIXTURES / "dp-vs-ddp")
    _, fig, _ = equal_bytes.draw_dp_equal_bytes(t.updates)
    ax_u, ax_c = fig.axes
    fig.canvas.draw()
    assert ax_u.get_xscale() == "linear" and ax_c.get_xscale() == "log"     # the cumulative bytes span decades
    labels = [x.get_text() for x in ax_u.get_xticklabels() if x.get_text()]
    assert labels and all(label.endswith(" MB") for label in labels) and len(labels) <= 5


def test_a_run_stopped_before_its_held_out_evaluation_says_so_not_no_window():
    """SIGTERM at step 62 of a K = 2 run: bytes were counted over 31 whole windows, yet the empty left panel said
    "no seed ran a whole sync window"; the perplexity (evaluated after the last step) is what is missing."""
    t = tables.read(FIXTURES / "dp-vs-ddp")
    stopped = t.updates.assign(heldout_ppl=float("nan"))
    _, fig, caption = equal_bytes.draw_dp_equal_bytes(stopped)
    assert [x.get_text() for x in fig.axes[0].texts] == [
        "no point: no seed recorded a held-out perplexity (evaluated after the last step: the run stopped first)"]
    assert caption.endswith("Left is empty: no seed recorded a held-out perplexity (evaluated after the last step: "
                            "the run stopped first).")
