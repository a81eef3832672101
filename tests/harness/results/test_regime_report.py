"""The regime in the report and the reproduction figure, on tests/fixtures/runs/sweep-comm-ratio: four
points of a real `harness reproduce hilo-speed --seeds 1 --updates 4` (comm ratio 0.1, paper and 6 at
depth 0, paper at depth 1; learner events, summaries, config, meta and prediction.json kept)."""
from pathlib import Path

import pytest

from harness.results import files, regime_plots, regime_report, report, tables, verdict

SWEEP = Path(__file__).resolve().parents[2] / "fixtures" / "runs" / "sweep-comm-ratio"
PAPER = 18.9 / 14.1


@pytest.fixture(scope="module")
def sweep():
    return tables.read([SWEEP])


def test_each_run_states_the_ratio_it_achieved_against_its_target(sweep):
    docs = {r.dir.name: regime_report.regime_of(r) for r in sweep.runs}
    for name, target in (("comm_ratio0.1-pipeline0", 0.1), ("comm_ratio6-pipeline0", 6.0),
                         ("comm_ratiopaper-pipeline0", PAPER)):
        d = docs[name]
        assert d["target_ratio"] == pytest.approx(target, rel=1e-3)
        assert d["ratio"] == pytest.approx(target, rel=0.35)        # the run's own compute and bytes, measured
        words = regime_report.words(d)
        assert f"placed at {'the paper' if 'paper' in name else '`--comm-ratio`'}" in words
        assert f"link/compute {d['ratio']:.2f}" in words
    section = "\n".join(regime_report.section(sweep.runs))
    assert section.count("--comm-ratio ") == 4 and "| comm_ratio6-pipeline0 | full-bf16 | 6.00 |" in section


def test_a_literal_rate_says_what_the_paper_regime_would_use():
    doc = {"paper_ratio": PAPER, "paper_share": PAPER / (1 + PAPER), "ratio": 0.05, "share": 0.05 / 1.05,
           "link_s": 0.01, "compute_s": 0.2, "target_ratio": None, "placed": {}, "rate_bit_s": 62.5e6,
           "paper_rate_bit_s": 2.3e6}
    words = regime_report.words(doc)
    assert "carries 5% of its update here" in words and "in the paper it carries 57%" in words
    assert "placing full sync at the paper's ratio would take 2.3 Mbit/s" in words and "Compute-bound" in words
    # the flag is named for what it does, never as an addition to a --trace/--bw command (the CLI refuses the pair)
    assert "a --trace or --bw run keeps its literal rates" in words and "`--comm-ratio paper` would" not in words
    unshaped = regime_report.words({**doc, "ratio": None})
    assert unshaped.startswith("localhost, unshaped") and "--comm-ratio paper" in unshaped


def test_the_sweep_report_leads_with_the_range_of_ratios(sweep):
    md, _ = report.build(sweep)
    top = md.split("## Runs")[0]
    assert "**Regime**: 4 runs, full sync's link/compute from" in top and "(the paper's: 1.34)" in top
    assert "## Regime" in md


def test_the_reproduction_figure_draws_points_model_curves_and_the_papers_points(sweep):
    pts = regime_plots.points(sweep)
    assert sorted(pts["pipeline"]) == [0, 0, 0, 1] and (pts["variant"] == "spar@12.8%").all()
    # a link-bound run is faster per update than a compute-bound one (the figure's whole point)
    at = pts.set_index("run")["speedup"]
    assert at["comm_ratio6-pipeline0"] > at["comm_ratiopaper-pipeline0"] > at["comm_ratio0.1-pipeline0"]
    [(name, fig, caption)] = regime_plots.figures(sweep)
    assert name == "speedup_vs_comm_ratio" and "cost model" in caption and "33 s vs 16 s" in caption
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "spar@12.8%, depth 0 (cost model)" in labels and "spar@12.8%, depth 1 (cost model)" in labels
    stars = [line for line in ax.get_lines() if line.get_marker() == "*"]
    assert [round(float(s.get_xdata()[0]), 2) for s in stars] == [1.34, 1.34]
    assert sorted(round(float(s.get_ydata()[0]), 2) for s in stars) == [2.06, 2.25]    # 33/16, 18/8


def test_one_ratio_draws_no_reproduction_figure():
    one = tables.read([SWEEP / "runs" / "comm_ratiopaper-pipeline0"])
    assert regime_plots.figures(one) == []


def _row(**kw):
    base = {"variant": "spar@12.8%", "method": "spar", "baseline": "full-bf16", "speedup_headline": 1.9,
            "speedup_headline_lo": 1.5, "speedup_headline_hi": 2.4, "speedup_headline_basis": "cpu",
            "speedup_seed_mean": 1.4, "speedup_ci_lo": 1.1, "speedup_ci_hi": 1.8, "speedup_seeds": 3,
            "heldout_mean": 0.4, "heldout_name": "P(gold)", "heldout_diff_mean": -0.042, "heldout_diff_ci95": 0.018,
            "heldout_diff_n": 3, "heldout_verdict": "worse", "gain_kept": 0.68, "gain_kept_lo": 0.55,
            "gain_kept_hi": 0.81, "gain_kept_verdict": "keeps less"}
    for pct in (50, 75, 90):
        base.update({f"ttq{pct}_target": 0.3, f"ttq{pct}_reached": 3, f"ttq{pct}_censored": 0, f"ttq{pct}_ratio": 1.1,
                     f"ttq{pct}_ratio_lo": 0.8, f"ttq{pct}_ratio_hi": 1.5, f"ttq{pct}_ratio_n": 3,
                     f"ttq{pct}_seconds_basis": "cpu", f"ttq{pct}_verdict": "indistinguishable"})
    return {**base, **kw}


def test_the_verdict_says_when_the_halves_point_different_ways():
    block = "\n".join(verdict.method_block(_row(), "full-bf16", ""))
    assert ("`spar@12.8%` is 1.90x faster per update, keeps 68 % of `full-bf16`'s gain in P(gold) (worse) and its "
            "time to 90 % of `full-bf16`'s quality is not resolved with 3 seeds (1.10x the time; the interval "
            "includes 1).") in block
    assert "Speed and quality point different ways: faster per update, but worse in held-out P(gold)." in block
    assert "    - 90 %: 1.10x the baseline's CPU time [0.80, 1.50]" in block   # one line per target fraction
    assert "keeps 68 % [55, 81 %] (less than all of it)" in block
    assert "1.90x [1.50, 2.40] per update on CPU time (the machine was contended)" in block


def test_a_method_that_wins_time_to_quality_is_said_to():
    row = _row(heldout_diff_mean=0.0, heldout_verdict="indistinguishable", gain_kept=1.0, gain_kept_lo=0.8,
               gain_kept_hi=1.2, gain_kept_verdict="keeps all of it", ttq90_ratio=0.55, ttq90_ratio_lo=0.4,
               ttq90_ratio_hi=0.7, ttq90_verdict="faster")
    block = "\n".join(verdict.method_block(row, "full-bf16", ""))
    assert "is faster to 90 % of `full-bf16`'s quality" in block and "different ways" not in block
    row.update(ttq90_ratio=None, ttq90_reached=0, ttq90_censored=3, ttq90_verdict="slower (censored)")
    assert "is slower to 90 % of `full-bf16`'s quality" in "\n".join(verdict.method_block(row, "full-bf16", ""))


@pytest.mark.parametrize("field, value, named", [
    ("regime", "x", "regime: expected an object"),
    ("regime", {"a": {"b": 1}}, "regime.compute_s: expected a number"),
    ("regime.ratio", "fast", "regime.ratio: expected a number"),
    ("regime.curve", [{"ratio": 1, "speedup": {"spar": "x"}}], "regime.curve"),
    ("regime.paper_points", [[1]], "regime.paper_points"),
    ("variants", {"spar": {"predicted_s": "x"}}, "variants.spar"),
])
def test_a_malformed_prediction_is_one_line_naming_the_field(tmp_path, field, value, named):
    import json
    import shutil

    run = tmp_path / "run"
    shutil.copytree(SWEEP / "runs" / "comm_ratio6-pipeline0", run)
    doc = json.loads((run / "prediction.json").read_text())
    head, _, key = field.partition(".")
    if key:
        doc[head][key] = value
    else:
        doc[head] = value
    (run / "prediction.json").write_text(json.dumps(doc))
    with pytest.raises(files.ResultsError) as err:
        report.build(tables.read(run))
    assert named in str(err.value) and "prediction.json" in str(err.value) and "\n" not in str(err.value)


# ---- the links in words: a trace, unequal workers (commratio.link_words) --------------------------

HELDOUT = Path(__file__).resolve().parents[2] / "fixtures" / "runs" / "run-heldout"


def _traced_copy(tmp_path: Path) -> tuple[Path, dict]:
    """run-heldout as if run with `--trace t.csv` (steps of 5, 20 and 2 Mbit/s: mean 9)."""
    import json
    import shutil

    trace = tmp_path / "t.csv"
    trace.write_text("time_s,rate_mbit_s\n0,5\n1,20\n2,2\n")
    run = tmp_path / "traced"
    shutil.copytree(HELDOUT, run)
    cfg = json.loads((run / "config.json").read_text())
    cfg["profile_doc"]["defaults"] = {"trace": str(trace)}
    cfg["overrides"] = {"trace": str(trace)}       # as config.build records the flag
    (run / "config.json").write_text(json.dumps(cfg))
    return run, cfg


def test_a_traced_run_names_its_trace_with_its_mean_and_range_not_its_first_step(tmp_path):
    """The Regime line said "at a literal 5 Mbit/s" (the trace's first step), the cost model "traced
    links at their trace's mean rate" and the tables' link column "paper-62.5mbit: - [fallback]"."""
    import json

    from harness.net import profiles
    from harness.projection import commratio, prediction

    run, cfg = _traced_copy(tmp_path)
    assert "| paper-62.5mbit: trace t.csv [fallback] |" in report.build(tables.read(run))[0]   # before a prediction
    prof = profiles.from_doc(cfg["profile_doc"], cfg["profile_name"])
    doc = commratio.achieved(tables.read(run).updates, "full-bf16", prof, 2, "cubic")
    words = regime_report.words(doc)
    assert " at trace t.csv, mean 9 Mbit/s (2-20);" in words and "at a literal" not in words
    assert f"the paper's ratio would scale these links x{doc['paper_factor']:.3g}" in words
    assert "`--comm-ratio paper` would" not in words
    link = prediction.network(cfg, 2)[1]
    assert link == "profile paper-62.5mbit, trace t.csv, mean 9 Mbit/s (2-20) (a trace modelled at its mean)"
    (run / "prediction.json").write_text(json.dumps({"model": "m", "link": link, "variants": {}, "regime": doc}))
    md, _ = report.build(tables.read(run))
    assert "**Regime**: full sync's link carries" in md and "at trace t.csv, mean 9 Mbit/s (2-20)" in md
    assert "| paper-62.5mbit: trace t.csv, mean 9 Mbit/s (2-20) [fallback] |" in md
    assert "| trace t.csv, mean 9 Mbit/s (2-20) | literal (paper's ratio at x" in md     # the Regime table


def test_unequal_worker_links_are_each_named_not_w1s_rate():
    """heterogeneous-edge: the regime said "worker links at 40.3 Mbit/s" while w2 ran at 8 and w3's uplink at 4."""
    from harness.net import profiles
    from harness.projection import commratio

    updates = tables.read(HELDOUT).updates
    hetero = profiles.load("heterogeneous-edge")
    doc = commratio.achieved(updates, "full-bf16", hetero, 4, "cubic")
    assert " at worker links w1 50, w2 10, w3 50/5 up, w4 50 Mbit/s;" in regime_report.words(doc)
    placed = {**commratio.achieved(updates, "full-bf16", profiles.scaled(hetero, 0.8), 4, "cubic"),
              "target_ratio": PAPER, "placed": {"target": "paper", "factor": 0.8, "rate_bit_s": 40e6,
                                                "literal_rate_bit_s": 50e6}}
    words = regime_report.words(placed)
    assert "worker links w1 40, w2 8, w3 40/4 up, w4 40 Mbit/s, the profile's rates x0.8," in words
    assert "worker links at 40" not in words
    assert commratio.link_words(hetero, 8) == "worker links 10-50 Mbit/s down, 5-50 up"
    assert commratio.link_words(profiles.load("paper-62.5mbit"), 2) is None       # one flat rate: said as before


def test_the_run_header_names_the_link_flags_given_over_the_profile(tmp_path):
    """A `--trace` or `--bw` run's header said "profile paper-62.5mbit" alone: the profile's own 62.5 Mbit/s."""
    import json

    run, cfg = _traced_copy(tmp_path)
    assert "profile `paper-62.5mbit` with --trace t.csv, backend" in report.build(tables.read(run))[0]
    (run / "config.json").write_text(json.dumps({**cfg, "overrides": {"rate": "1mbit", "delay": "20ms"}}))
    assert "profile `paper-62.5mbit` with --bw 1mbit --delay 20ms, backend" in report.build(tables.read(run))[0]
    (run / "config.json").write_text(json.dumps({**cfg, "overrides": {}}))
    assert "profile `paper-62.5mbit`, backend" in report.build(tables.read(run))[0]
