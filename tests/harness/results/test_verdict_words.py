"""The verdict's words (harness/results/verdict.py): speed and quality said to disagree only when both
results are resolved, no share of a baseline gain that is not resolved above 0, a run that stopped
said first, the quorum said, and each figure's words complete."""
import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from harness.results import compare, plots, quality_report, report, tables, verdict, workers_report

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "runs"


def _row(**kw) -> dict:
    """A comparison row: 1.9x faster per update [1.5, 2.4], quality indistinguishable, time to quality
    0.73x with an interval that includes 1 (the shape of the default run)."""
    row = {"variant": "spar@12.8%", "method": "spar", "baseline": "full-bf16", "speedup_headline": 1.9,
           "speedup_headline_lo": 1.5, "speedup_headline_hi": 2.4, "speedup_headline_basis": "wall",
           "speedup_seed_mean": 1.9, "speedup_ci_lo": 1.5, "speedup_ci_hi": 2.4, "speedup_seeds": 3,
           "heldout_mean": 0.4, "heldout_name": "P(gold)", "heldout_diff_mean": -0.01, "heldout_diff_ci95": 0.03,
           "heldout_diff_n": 3, "heldout_verdict": "indistinguishable", "heldout_resolution": 0.03,
           "gain_kept": 0.95, "gain_kept_lo": 0.7, "gain_kept_hi": 1.2, "gain_kept_verdict": "keeps all of it"}
    for pct in (50, 75, 90):
        row.update({f"ttq{pct}_target": 0.3, f"ttq{pct}_reached": 3, f"ttq{pct}_censored": 0, f"ttq{pct}_ratio": 0.73,
                    f"ttq{pct}_ratio_lo": 0.4, f"ttq{pct}_ratio_hi": 1.3, f"ttq{pct}_ratio_n": 3,
                    f"ttq{pct}_seconds_basis": "wall", f"ttq{pct}_verdict": "indistinguishable"})
    return {**row, **kw}


def _block(**kw) -> str:
    return "\n".join(verdict.method_block(_row(**kw), "full-bf16", ""))


def test_unresolved_time_to_quality_is_said_unresolved_not_a_disagreement():
    text = _block()
    assert "point different ways" not in text
    assert "its time to 90 % of `full-bf16`'s quality is not resolved with 3 seeds (0.73x the time" in text


def test_speed_and_quality_disagree_only_when_both_are_resolved():
    slower = _block(ttq90_ratio=1.6, ttq90_ratio_lo=1.2, ttq90_ratio_hi=2.1, ttq90_verdict="slower")
    assert "Speed and quality point different ways: faster per update, but slower to 90 % of `full-bf16`'s" in slower
    worse = _block(heldout_verdict="worse", gain_kept_verdict="keeps less")
    assert "Speed and quality point different ways: faster per update, but worse in held-out P(gold)." in worse
    # per update not resolved (its interval includes 1): nothing to disagree with
    assert "point different ways" not in _block(speedup_headline_lo=0.9, heldout_verdict="worse",
                                                 ttq90_verdict="slower")
    # worse with too few seeds for a verdict: not resolved either
    assert "point different ways" not in _block(heldout_verdict="worse", heldout_diff_n=2)


def test_a_resolved_difference_where_the_baseline_did_not_learn_says_its_size():
    """A micro model's P(gold) ~4e-7 that no method moves: "is worse in held-out P(gold)" and "Speed and quality
    point different ways" over a paired difference of -8.1e-09, with no word on its size."""
    text = _block(heldout_mean=4.1e-7, heldout_diff_mean=-8.1e-9, heldout_diff_ci95=5.9e-9, heldout_verdict="worse",
                  heldout_resolution=7e-9, gain_kept=None, gain_kept_lo=None, gain_kept_hi=None,
                  baseline_improvement=1.9e-7)
    assert "point different ways" not in text
    assert "paired difference -8.1e-09 ± 5.9e-09 (3 paired seeds), -1.9 % of `full-bf16`'s final 4.2e-07: **worse**" in text


def _flat_baseline_evals() -> tuple:
    """run-heldout with held-out figures ~1e-6 that move by +-3e-8 (a tiny model's P(gold)): the
    baseline's gain is positive on average, its interval includes 0."""
    t = tables.read(FIXTURES / "run-heldout")
    ev = t.evals.copy()
    last = ev.groupby(["variant", "seed"])["version"].transform("max") == ev["version"]
    gain = {("full-bf16", 1): 3e-8, ("full-bf16", 2): -1e-8, ("full-bf16", 3): 2e-8,
            ("spar@12.8%", 1): 2e-8, ("spar@12.8%", 2): -2e-8, ("spar@12.8%", 3): 3e-8}
    moved = np.array([gain[(v, s)] if at_end else 0.0 for v, s, at_end in zip(ev["variant"], ev["seed"], last)])
    for m in ("pass_at_1", "pass_at_k"):
        ev[m] = 1e-6 + moved
    return t, ev


def test_no_share_of_a_baseline_gain_not_resolved_above_zero():
    t, ev = _flat_baseline_evals()
    comp = compare.comparison(t.updates, t.cells, ev)
    r = comp[comp["variant"] == "spar@12.8%"].iloc[0]
    assert r["gain_kept"] is not None and r["gain_kept_lo"] is None    # a share exists, its interval does not
    text = "\n".join(verdict.method_block(r, "full-bf16", ""))
    assert "keeps" not in text and "% of `full-bf16`'s gain" not in text
    assert "`full-bf16` did not learn measurably (+1.3e-08, not resolved above 0 with 3 paired seeds)" in text
    assert "resolution 0.000" not in text and "paired difference -3.3e-09 ± 2.9e-08" in text
    assert "0.000 ± 0.000" not in text and "pass@1 says indistinguishable (-3.3e-09 ± 2.9e-08)" in text
    # one seed: no interval, so no share either
    one = verdict.method_block(_row(gain_kept=0.94, gain_kept_lo=None, gain_kept_hi=None, heldout_diff_n=1),
                               "full-bf16", "")
    assert "keeps 94 %" not in "\n".join(one) and "did not learn measurably" in "\n".join(one)


def test_an_interrupted_run_says_so_first():
    t = tables.read(FIXTURES / "run-interrupted")
    md, _ = report.build(t)
    lines = md.split("## Verdict", 1)[1].strip().splitlines()
    assert lines[0].startswith("**INCOMPLETE**: `run-interrupted` (interrupted) stopped before finishing")
    assert "predates the comm ratio" not in md and "the run stopped before its prediction was written" in md
    assert "paired difference \n" not in md and not md.count("paired difference ;")
    assert "**INCOMPLETE**" not in report.build(tables.read(FIXTURES / "run-heldout"))[0]


def test_a_paired_difference_is_never_left_without_its_figure():
    line = verdict.quality_(_row(heldout_diff_mean=None, heldout_diff_ci95=None, heldout_diff_n=0,
                                 heldout_verdict=None), "full-bf16")[0]
    assert "; paired difference" not in line and "gain; no paired difference (no seed in common)" in line


def test_one_seed_speed_and_time_to_quality_words():
    assert verdict.speed(_row(speedup_headline=1.24, speedup_headline_lo=None, speedup_headline_hi=None))[1] == \
        "is 1.24x faster per update (one seed: no interval)"
    assert verdict.speed(_row(speedup_headline=0.5, speedup_headline_lo=None, speedup_headline_hi=None))[1] == \
        "is 2.00x slower per update (one seed: no interval)"
    one = _row(ttq90_reached=1, ttq90_ratio_n=1, ttq90_verdict="too few seeds for an interval")
    line, clause = verdict.ttq(one, "full-bf16")
    assert "90 %: 0.73x the baseline's wall-clock time (1 of 1 seeds reached: too few seeds for an interval)" in line
    assert "censored" not in line.split("90 %")[1].split("\n")[0]
    assert clause == "its time to 90 % of `full-bf16`'s quality is not resolved with 1 seed (1 of 1 seeds reached it)"


def test_two_seeds_give_no_interval_in_the_verdict_as_in_the_tables():
    """Below CI_MIN_SEEDS the tables print n, not an interval (t = 12.7 at n = 2); the verdict says the
    same, and a speedup whose 2-seed interval excludes 1 is not called resolved."""
    two = _row(speedup_seeds=2, speedup_headline_lo=1.2, speedup_headline_hi=3.0, speedup_ci_lo=1.2, speedup_ci_hi=3.0,
               speedup_cpu=1.8, speedup_cpu_lo=1.1, speedup_cpu_hi=2.9)
    line, clause = verdict.speed(two)
    assert line == "1.90x per update on wall-clock, over 2 paired seeds (too few for an interval); CPU time 1.80x"
    assert clause == "is 1.90x faster per update (2 seeds: too few for an interval)"
    assert not verdict._resolved_faster(two)
    assert verdict._resolved_faster(_row(speedup_headline_lo=1.2, speedup_headline_hi=3.0))
    ttq = _row(ttq90_ratio_n=2, ttq90_reached=2)
    line, clause = verdict.ttq(ttq, "full-bf16")
    assert "interval includes 1" not in clause
    assert clause.endswith("(0.73x the time; 2 paired seeds: too few for an interval)")
    assert "(n=2: too few for an interval)" in line


def _quorum_run(tmp_path: Path) -> Path:
    """run-heldout as if run with --quorum 1 of 2 workers: spar's seed-1 updates at odd versions went
    on without w2, whose rollouts then came late and were dropped stale."""
    run = tmp_path / "run-quorum"
    shutil.copytree(FIXTURES / "run-heldout", run)
    cfg = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**cfg, "quorum": 1}))
    path = run / "cells" / "spar-12.8pct-s1" / "events-learner.jsonl"
    out = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r.get("kind") == "update" and r["version"] % 2:
            r["left_out"] = ["w2"]
            out += [json.dumps(r), json.dumps({"kind": "stale_rollouts", "t": r["t"], "worker": 2,
                                               "batch": r["version"] - 1, "version": r["version"], "staleness": 1})]
        else:
            out.append(json.dumps(r))
    path.write_text("\n".join(out) + "\n")
    return run


def test_a_quorum_run_says_how_many_contributions_it_went_without(tmp_path):
    t = tables.read(_quorum_run(tmp_path))
    spar = t.cells[t.cells["cell"] == "spar-12.8pct-s1"].iloc[0]
    assert (spar["left_out"], spar["stale_dropped"]) == (6, 6)     # 12 updates, the odd ones
    md, _ = report.build(t)
    verdict_block = md.split("## Runs")[0]
    assert ("**Quorum**: each update went on with the first 1 of 2 workers' contributions (--quorum 1), not every "
            "worker's: `spar@12.8%` went without 6 of 72 contributions (8 %), 6 dropped stale; `full-bf16` went "
            "without 0 of 72 contributions (0 %), 0 dropped stale.") in verdict_block
    assert "**Quorum**" not in report.build(tables.read(FIXTURES / "run-heldout"))[0]


def test_the_workers_section_does_not_say_the_others_idled_under_a_quorum(tmp_path):
    from tests.harness.results.test_workers_report import _Run, _worker

    cell = tmp_path / "r1" / "cells" / "spar-12.8pct-s1"
    cell.mkdir(parents=True)
    _worker(cell / "events-w1.jsonl", rollout=0.2, cpu=0.2, straggle=0.5, idle=0.1)
    _worker(cell / "events-w2.jsonl", rollout=0.2, cpu=0.2, straggle=0.0, idle=0.3)
    base = {"straggler": "w1:exp:500ms", "profile_doc": {}, "workers": 2}
    all_in = "\n".join(workers_report.section([_Run(tmp_path / "r1", base)]))
    assert "the others idled for it" in all_in and "| wait s/update (send + receive) | slowest |" in all_in
    quorum = "\n".join(workers_report.section([_Run(tmp_path / "r1", {**base, "quorum": 1})]))
    assert "the others idled for it" not in quorum
    assert "the learner did not wait for it: each update went on with the first 1 of 2 workers'" in quorum


def _learning_evals(gains: dict, target: float | None = None) -> tuple:
    """run-heldout with held-out figures that rise linearly from 0.2 to 0.2 + gains[(variant, seed)]
    over each cell's evaluations; `target`: the run's --quality-target, where not its own 0.9."""
    t = tables.read(FIXTURES / "run-heldout")
    ev = t.evals.copy()
    last = ev.groupby(["variant", "seed"])["version"].transform("max")
    rise = np.array([gains[(v, s)] for v, s in zip(ev["variant"], ev["seed"])]) * ev["version"] / last
    for m in ("pass_at_1", "pass_at_k"):
        ev[m] = 0.2 + rise
    if target is not None:
        ev["quality_target"] = target
    return t, ev


BASE_GAINS = {("full-bf16", 1): 0.10, ("full-bf16", 2): 0.12, ("full-bf16", 3): 0.08}


def _verdict_of(t, ev) -> tuple:
    comp = compare.comparison(t.updates, t.cells, ev)
    r = comp[comp["variant"] == "spar@12.8%"].iloc[0]
    return r, "\n".join(verdict.method_block(r, "full-bf16", ""))


def test_a_kept_share_with_a_wide_interval_is_said_not_resolved():
    t, ev = _learning_evals({**BASE_GAINS, ("spar@12.8%", 1): 0.05, ("spar@12.8%", 2): 0.15,
                             ("spar@12.8%", 3): 0.09})
    r, text = _verdict_of(t, ev)
    assert r["gain_kept_verdict"] == "keeps all of it" and r["gain_kept_lo"] < 0.75     # holds 100 %, and far more
    assert "at this resolution" not in text and "within ±25 points" not in text
    share = f"keeps {100 * r['gain_kept']:.0f} % [{100 * r['gain_kept_lo']:.0f}, {100 * r['gain_kept_hi']:.0f} %]"
    assert f"{share} (not resolved: the interval reaches past 100 % ± 25 points) of `full-bf16`'s gain" in text
    headline = text.splitlines()[0]
    assert f"{share} of `full-bf16`'s gain in pass@" in headline and " (not resolved)" in headline
    # the table of every held-out figure says the same of that figure (it said "keeps all of it" there)
    [row] = [line for line in "\n".join(quality_report.metrics_table(pd.DataFrame([r]))).splitlines()
             if "(decides)" in line]
    assert row.endswith(" | not resolved |")


def test_a_kept_share_within_the_bound_is_said_all_of_it():
    t, ev = _learning_evals({**BASE_GAINS, ("spar@12.8%", 1): 0.101, ("spar@12.8%", 2): 0.119,
                             ("spar@12.8%", 3): 0.081})
    r, text = _verdict_of(t, ev)
    assert 0.75 <= r["gain_kept_lo"] <= 1 <= r["gain_kept_hi"] <= 1.25
    assert f"[{100 * r['gain_kept_lo']:.0f}, {100 * r['gain_kept_hi']:.0f} %] (all of it, within ±25 points)" in text
    assert "not resolved" not in text.split("  - quality")[1].split("\n")[0]


def test_the_headline_names_the_configured_quality_target():
    gains = {**BASE_GAINS, ("spar@12.8%", 1): 0.101, ("spar@12.8%", 2): 0.119, ("spar@12.8%", 3): 0.081}
    for target, words in ((None, "90 % of `full-bf16`'s quality"),     # the fixture's own --quality-target 0.9
                          (0.8, "75 % of `full-bf16`'s quality (--quality-target 80 % is not one of 50, 75, 90 %: "
                                "the nearest)")):
        t, ev = _learning_evals(gains, target)
        md = report.build(dataclasses.replace(t, evals=ev))[0]
        headline = md.split("## Verdict")[1].split("\n- **")[1].splitlines()[0]
        assert words in headline and headline.count(" % of `full-bf16`'s quality") == 1
        assert f"Target = {100 * (target or 0.9):g} % of `full-bf16`'s seed-mean gain" in md


def test_no_time_to_quality_when_the_baseline_did_not_learn_measurably():
    from harness.results import quality_report

    t, ev = _flat_baseline_evals()
    comp = compare.comparison(t.updates, t.cells, ev)
    r = comp[comp["variant"] == "spar@12.8%"].iloc[0]
    assert r["ttq90_target"] is not None and r["ttq90_ratio"] is not None    # a ratio exists: it must not be said
    text = "\n".join(verdict.method_block(r, "full-bf16", ""))
    assert "x the baseline's" not in text and "x the time" not in text
    assert ("time to quality: not measurable: `full-bf16` did not learn measurably (its held-out gain is not "
            "resolved above 0), so a fraction of that gain is no target to reach") in text
    assert "its time to quality is not measurable" in text.splitlines()[0]
    assert not any("to quality (it needs" in n for n in quality_report.quality_notes(comp))


def test_the_held_out_tables_give_no_time_ratio_when_the_baseline_did_not_learn_measurably():
    t, ev = _flat_baseline_evals()
    md = report.build(dataclasses.replace(t, evals=ev))[0]
    held = md.split("## Held-out quality and time to quality")[1].split("\n## ")[0]
    assert "| not measurable (baseline's gain not resolved above 0) |" in held
    assert "to quality (it needs" not in held
    ttq = md.split("## Time to quality, one target for every method")[1].split("\n## ")[0]
    spar = [line for line in ttq.splitlines() if line.startswith("| ") and "| spar@12.8% |" in line]
    assert len(spar) == 3 and all(line.count("not measurable") == 2 and "x (" not in line for line in spar)
    rows = [line for line in held.splitlines() if line.startswith("| ") and ("| spar@12.8% |" in line
                                                                          or "| full-bf16 |" in line)]
    assert len(rows) == 2 and all("| no target: the baseline's gain is not resolved above 0 | - | - | - |" in line
                                  for line in rows)   # no target, seeds reaching it or seconds to it, either row


def test_the_time_to_quality_figure_draws_no_target_when_the_baseline_did_not_learn_measurably():
    t, ev = _flat_baseline_evals()
    comp = compare.comparison(t.updates, t.cells, ev)
    plot = plots.draw_quality_vs_time(ev, comp)
    assert not any(line.get_label() == "target" for ax in plot.fig.axes for line in ax.get_lines())
    assert "no time-to-quality target" in plot.caption and "dashed grey" not in plot.caption
    t, ev = _learning_evals({**BASE_GAINS, ("spar@12.8%", 1): 0.10, ("spar@12.8%", 2): 0.11,
                             ("spar@12.8%", 3): 0.09})   # a baseline that learned: its target is drawn
    comp = compare.comparison(t.updates, t.cells, ev)
    fig = plots.draw_quality_vs_time(ev, comp).fig
    assert any(line.get_label() == "target" for ax in fig.axes for line in ax.get_lines())


def test_a_run_without_a_baseline_names_none_as_a_method_nowhere(tmp_path):
    """--baseline none: the verdict states the method's own figures and no comparison; no sentence treats
    `none` as a method that did or did not learn, and the regime says why it has no ratio."""
    run = tmp_path / "run-alone"
    shutil.copytree(FIXTURES / "run-heldout", run)
    cfg = json.loads((run / "config.json").read_text())
    cfg.update(baseline="none", variants=[v for v in cfg["variants"] if v["method"] == "spar"])
    (run / "config.json").write_text(json.dumps(cfg))
    for seed in (1, 2, 3):
        shutil.rmtree(run / "cells" / f"full-bf16-s{seed}")
    md, _ = report.build(tables.read(run))
    verdict_block = md.split("## Runs")[0]
    assert "- **`spar@12.8%` ran without a baseline (`--baseline none`): no speedup, kept quality or time to " \
           "quality to state.**" in verdict_block
    assert "s per update (median); held-out " in verdict_block and "at its last evaluation (3 seeds)" in verdict_block
    assert "**Regime**: not measured: no full-sync cell ran (`--baseline none`)" in verdict_block
    assert "`none`" not in md.replace("(`--baseline none`", "")
    assert "No speedup: no baseline ran (`--baseline none`)." in md
    assert "**No target**: no baseline ran (`--baseline none`)" in md and "not measurable (baseline's" not in md


def test_each_run_says_what_it_trained():
    """The runs section names the model, task and objective (with the options given), workers, updates,
    seeds and rank: a report read alone says what was trained, not only config.json."""
    md, _ = report.build(tables.read(FIXTURES / "run-heldout"))
    assert "  - setup: model `micro`, task `digits`, objective `distill`, 2 workers, 12 updates x seeds 1, 2, 3, " \
           "LoRA rank 8" in md
    assert report._setup({"model": "micro", "task": "knights_knaves", "task_options": "max_people=3",
                          "objective": "grpo", "objective_options": "kl_coef=0.05", "workers": 1, "updates": 3,
                          "seeds": [1]}) == \
        "model `micro`, task `knights_knaves` (max_people=3), objective `grpo` (kl_coef=0.05), 1 worker, 3 updates x seeds 1"


def test_the_table_of_every_figure_gives_no_share_where_the_verdict_gives_none():
    """A baseline whose gain is within its seed noise: the verdict said "no share of its gain to keep" while
    the table of every held-out figure printed "94 % [unbounded]" and "keeps all of it"."""
    t, ev = _learning_evals({("full-bf16", 1): 0.05, ("full-bf16", 2): -0.04, ("full-bf16", 3): 0.02,
                             ("spar@12.8%", 1): 0.04, ("spar@12.8%", 2): -0.03, ("spar@12.8%", 3): 0.02})
    r, text = _verdict_of(t, ev)
    assert "no share of its gain to keep" in text
    rows = [line for line in "\n".join(quality_report.metrics_table(pd.DataFrame([r]))).splitlines()
            if line.startswith("| ") and "pass@" in line]
    assert rows and all(row.endswith(" | no share: the baseline's gain is not resolved above 0 | - |") for row in rows)


def test_an_interrupted_cell_reads_not_checked_and_only_a_recorded_mismatch_reads_no(tmp_path):
    """"consistent NO" for a cell cut short read like a hash mismatch: its final check never ran."""
    md, _ = report.build(tables.read(FIXTURES / "run-interrupted"))
    cells = md.split("## Cells", 1)[1]
    assert "| run-interrupted | spar-1.6pct-s1 | interrupted: SIGTERM | 3 / 20 | 8 | not checked (interrupted) |" in cells
    assert "| NO |" not in md
    run = tmp_path / "run-interrupted"
    shutil.copytree(FIXTURES / "run-interrupted", run)
    events = run / "cells" / "spar-1.6pct-s1" / "events-learner.jsonl"
    first = json.loads(events.read_text().splitlines()[0])
    events.write_text(events.read_text() + json.dumps({"kind": "hash", "equal": False, "replica": "w1", "version": 3,
                                                       "process": "learner", "t": first["t"]}) + "\n")
    md, _ = report.build(tables.read(run))
    assert "| 8 | NO |" in md.split("## Cells", 1)[1] and "not checked" not in md


def test_a_stopped_run_with_a_prediction_says_why_it_has_no_regime(tmp_path):
    """prediction.json was written, from updates with no full-sync row: the verdict said the run
    stopped before its prediction was written."""
    run = tmp_path / "run-interrupted"
    shutil.copytree(FIXTURES / "run-interrupted", run)
    (run / "prediction.json").write_text(json.dumps({"model": "m", "link": "l", "variants": {}, "regime": {}}))
    md, _ = report.build(tables.read(run))
    assert "before its prediction was written" not in md
    assert "**Regime**: not placed: the run stopped before recording any update of full sync (`full`)" in md


def test_a_baseline_that_never_ran_is_not_one_that_did_not_learn():
    """Combined with a run that evaluated held-out quality, the interrupted run (whose `full` never
    ran) read "`full` did not learn measurably"."""
    md, _ = report.build(tables.read([FIXTURES / "run-interrupted", FIXTURES / "run-heldout"]))
    block = md.split("- **`spar@1.6%`", 1)[1].split("\n- **", 1)[0]
    assert "did not learn" not in block
    assert "`full` has no recorded cell under this link, so no fraction of its gain is a target" in block
    assert verdict.quality_({**_row(), "baseline_improvement": None, "speedup_headline": 1.5},
                            "full-bf16")[0].startswith("held-out P(gold): 0.400 at its last evaluation; `full-bf16` has "
                                                       "no held-out figure under this link")


def _slowed(tmp_path: Path, name: str, straggler: str) -> Path:
    run = tmp_path / name
    shutil.copytree(FIXTURES / "run-spar-20mbit", run)
    cfg = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**cfg, "straggler": straggler}))
    return run


def test_a_run_without_a_straggler_is_not_labelled_straggler_nan(tmp_path):
    """Combined with runs that set --straggler, a run without one read "straggler nan"; with a single
    other value the straggler was not even a coordinate (pandas' astype(str) keeps None as a missing
    value, which nunique leaves out), so a slowed run could pool with an unslowed one."""
    plain = FIXTURES / "run-spar-20mbit"
    md, _ = report.build(tables.read([plain, _slowed(tmp_path, "fixed", "w2:fixed:100ms"),
                                      _slowed(tmp_path, "exp", "w2:exp:2s")]))
    blocks = [line for line in md.split("## Verdict", 1)[1].splitlines() if line.startswith("- **")]
    assert "nan" not in "\n".join(blocks) and len(blocks) == 3
    assert sum("straggler w2:fixed:100ms" in b for b in blocks) == sum("straggler w2:exp:2s" in b for b in blocks) == 1
    md, _ = report.build(tables.read([plain, tmp_path / "fixed"]))
    blocks = [line for line in md.split("## Verdict", 1)[1].splitlines() if line.startswith("- **")]
    assert len(blocks) == 2 and sum("straggler w2:fixed:100ms" in b for b in blocks) == 1


def test_one_paired_seed_gives_no_share_in_the_table_either():
    """One seed: the verdict said "no share of its gain to keep" while the table printed "59 %"."""
    t, ev = _learning_evals({**BASE_GAINS, ("spar@12.8%", 1): 0.06, ("spar@12.8%", 2): 0.1, ("spar@12.8%", 3): 0.1})
    ev = ev[ev["seed"] == 1]
    r, text = _verdict_of(t, ev)
    rows = [line for line in "\n".join(quality_report.metrics_table(pd.DataFrame([r]))).splitlines()
            if line.startswith("| ") and "pass@" in line]
    assert rows and all(" | no share: " in row and " % [" not in row for row in rows)
