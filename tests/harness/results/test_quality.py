"""Held-out quality and time to quality (harness/results/quality.py), on evaluation tables written by hand:
scoring code checked against numbers worked out here, without training anything (AlgoPerf's way)."""
import pandas as pd
import pytest

from harness.results import compare, quality, quality_report, verdict


def _evals(curves: dict, seconds_per_update: dict, metric="pass_at_k") -> pd.DataFrame:
    """curves: variant -> {seed: [figure at version 0, E, 2E, ...]} with E = 5."""
    rows = []
    for variant, seeds in curves.items():
        for seed, ys in seeds.items():
            for i, y in enumerate(ys):
                v = 5 * i
                rows.append({"variant": variant, "method": variant.split("@")[0], "baseline": "full-bf16",
                             "seed": seed, "version": v, "pass_at_k": y, "pass_at_1": y / 2, "k": 4,
                             "objective_value": 1 - y, "objective_metric": "mean_reward", "quality_metric": metric,
                             "quality_target": 0.9, "wall_s": v * seconds_per_update[variant],
                             "profile": "p", "workers": 2})
    return pd.DataFrame(rows)


# The baseline climbs 0.1 -> 0.5 in 20 updates at 1 s each; spar is twice as fast per update but
# needs 30+ updates to get as far: 2x per update, slower to quality.
BASE = {1: [0.1, 0.3, 0.4, 0.47, 0.5], 2: [0.1, 0.3, 0.42, 0.465, 0.5]}
SPAR = {1: [0.1, 0.2, 0.3, 0.35, 0.40, 0.45, 0.47, 0.5], 2: [0.1, 0.2, 0.3, 0.35, 0.40, 0.45, 0.465, 0.49]}


def test_time_to_quality_uses_the_baselines_seed_mean_gain_held_and_interpolated():
    ev = _evals({"full-bf16": BASE, "spar@1.6%": SPAR}, {"full-bf16": 1.0, "spar@1.6%": 0.5})
    q = quality.quality_table(ev, ["profile", "workers"]).set_index("variant")
    target = 0.1 + 0.9 * (0.5 - 0.1)  # 0.46: the seed-mean curve goes 0.1 -> 0.5; one target for every seed
    assert q.loc["full-bf16", "heldout_target"] == pytest.approx(target)
    # baseline seed 1: 0.40 at v10, 0.47 at v15 -> v = 10 + 5 x 0.06/0.07; seed 2: 0.42 -> 0.465: 10 + 5 x 0.04/0.045
    base = [10 + 5 * 0.06 / 0.07, 10 + 5 * 0.04 / 0.045]
    assert q.loc["full-bf16", "ttq_updates_mean"] == pytest.approx(sum(base) / 2)
    assert q.loc["full-bf16", "ttq_seconds_mean"] == pytest.approx(sum(base) / 2)  # 1 s per update
    assert q.loc["full-bf16", "ttq_reached"] == 2  # both baseline seeds reach the common target here
    # spar: 0.45 at v25, then 0.47 (seed 1) / 0.465 (seed 2) at v30; 0.5 s per update
    spar = [25 + 5 * 0.01 / 0.02, 25 + 5 * 0.01 / 0.015]
    assert q.loc["spar@1.6%", "ttq_updates_mean"] == pytest.approx(sum(spar) / 2)
    assert q.loc["spar@1.6%", "ttq_seconds_mean"] == pytest.approx(sum(spar) / 4)
    assert q.loc["spar@1.6%", "ttq_speedup"] == pytest.approx(sum(base) / (sum(spar) / 2))
    assert q.loc["spar@1.6%", "heldout_mean"] == pytest.approx((0.5 + 0.49) / 2)
    assert q.loc["spar@1.6%", "ttq_reached"] == 2 and q.loc["spar@1.6%", "heldout_seeds"] == 2
    # 95 % CI over 2 seeds: t(1) = 12.706 x sd / sqrt(2)
    sd = abs(0.5 - 0.49) / 2 ** 0.5
    assert q.loc["spar@1.6%", "heldout_ci95"] == pytest.approx(12.706 * sd / 2 ** 0.5)
    # paired: d = 0.0 (seed 1), -0.01 (seed 2); seconds to target d = spar's - the baseline's, seed by seed
    assert q.loc["spar@1.6%", "heldout_diff_mean"] == pytest.approx(-0.005)
    assert q.loc["spar@1.6%", "heldout_diff_ci95"] == pytest.approx(12.706 * sd / 2 ** 0.5)
    assert q.loc["spar@1.6%", "heldout_resolution"] == pytest.approx((12.706 + 1.376) * sd / 2 ** 0.5)
    assert q.loc["spar@1.6%", "heldout_verdict"] == "indistinguishable"
    assert q.loc["spar@1.6%", "ttq_diff_mean"] == pytest.approx((spar[0] / 2 - base[0] + spar[1] / 2 - base[1]) / 2)
    assert q.loc["full-bf16", "heldout_diff_mean"] == 0 and q.loc["spar@1.6%", "ttq_diff_n"] == 2


def test_a_seed_that_falls_back_below_the_target_has_not_reached_it():
    """Reaching means holding: a curve that crosses the target and dips below it again reaches it at
    its last crossing, and a curve that ends below it does not reach it at all."""
    g = pd.DataFrame({"version": [0, 5, 10, 15, 20], "wall_s": [0, 5, 10, 15, 20],
                      "q": [0.1, 0.5, 0.3, 0.45, 0.6]})
    v, secs = quality.reach_and_hold(g, "q", 0.4, lower=False)
    assert v == pytest.approx(10 + 5 * 0.1 / 0.15) and secs == pytest.approx(v)  # not 5: it fell back at 10
    g.loc[4, "q"] = 0.35
    assert quality.reach_and_hold(g, "q", 0.4, lower=False) == (None, None)


def test_a_method_faster_per_update_but_slower_to_quality_is_shown_as_slower():
    ev = _evals({"full-bf16": BASE, "spar@1.6%": SPAR}, {"full-bf16": 1.0, "spar@1.6%": 0.6})
    comp = pd.DataFrame([{"variant": "full-bf16", "method": "full-bf16", "baseline": "full-bf16", "speedup": 1.0,
                          "profile": "p", "workers": 2},
                         {"variant": "spar@1.6%", "method": "spar", "baseline": "full-bf16", "speedup": 1 / 0.6,
                          "profile": "p", "workers": 2}])
    comp = compare._with_quality(comp, ev, ["profile", "workers"]).set_index("variant", drop=False)
    base, spar = 10 + 5 * (0.06 / 0.07 + 0.04 / 0.045) / 2, 25 + 5 * (0.5 + 2 / 3) / 2  # mean updates to target
    assert comp.loc["spar@1.6%", "ttq_speedup"] == pytest.approx(base / (0.6 * spar))  # 0.86x
    notes = quality_report.quality_notes(comp)
    assert len(notes) == 1 and "spar@1.6%" in notes[0] and "1.67x per update, 0.86x to quality" in notes[0]
    head, rows = quality_report.quality_rows(comp)
    assert [r[1] for r in rows] == ["full-bf16", "spar@1.6%"] and rows[1][-2:] == ["0.86x", "1.67x"]


def test_seeds_that_never_reach_the_target_are_counted_not_averaged_away():
    spar = {1: [0.1, 0.2, 0.3, 0.35, 0.40], 2: [0.1, 0.3, 0.47, 0.48, 0.5]}
    ev = _evals({"full-bf16": BASE, "spar@1.6%": spar}, {"full-bf16": 1.0, "spar@1.6%": 0.5})
    q = quality.quality_table(ev, ["profile"]).set_index("variant")
    assert q.loc["spar@1.6%", "ttq_reached"] == 1 and pd.isna(q.loc["spar@1.6%", "ttq_speedup"])


def test_lower_is_better_for_reverse_kl_and_no_target_when_the_baseline_does_not_improve():
    ev = _evals({"full-bf16": BASE, "spar@1.6%": SPAR}, {"full-bf16": 1.0, "spar@1.6%": 0.5}, metric="objective")
    ev["objective_metric"] = "reverse_kl"
    q = quality.quality_table(ev, ["profile"]).set_index("variant")
    assert bool(q["heldout_lower_is_better"].all())
    assert q.loc["full-bf16", "heldout_target"] == pytest.approx(0.9 - 0.9 * 0.4)  # KL falls 0.9 -> 0.5
    assert q.loc["full-bf16", "ttq_updates_mean"] == pytest.approx(10 + 5 * (0.06 / 0.07 + 0.04 / 0.045) / 2)
    assert q.loc["spar@1.6%", "heldout_verdict"] == "indistinguishable"
    flat = _evals({"full-bf16": {1: [0.2, 0.2, 0.2]}, "spar@1.6%": {1: [0.2, 0.3, 0.4]}},
                  {"full-bf16": 1.0, "spar@1.6%": 1.0})
    q = quality.quality_table(flat, ["profile"])
    assert q["heldout_target"].isna().all() and (q["ttq_reached"] == 0).all()


def test_paired_difference_resolution_and_verdict():
    """Worked by hand: d = 0.02, 0.03, 0.04 -> mean 0.03, sd 0.01, 95 % half-width 4.303 x 0.01/sqrt(3);
    resolution (4.303 + 1.061) x 0.01 / sqrt(3) = 3.1 sd (3 seeds); the interval excludes 0: better."""
    p = quality.paired([0.02, 0.03, 0.04])
    assert p["mean"] == pytest.approx(0.03) and p["sd"] == pytest.approx(0.01)
    assert p["ci95"] == pytest.approx(4.303 * 0.01 / 3 ** 0.5)
    assert p["resolution"] == pytest.approx((4.303 + 1.061) * 0.01 / 3 ** 0.5)
    assert p["verdict"] == "better" and quality.paired([-0.02, -0.03, -0.04])["verdict"] == "worse"
    assert quality.paired([-0.02, -0.03, -0.04], lower=True)["verdict"] == "better"  # reverse KL falls
    assert quality.paired([0.01, -0.02, 0.015])["verdict"] == "indistinguishable"
    assert quality.paired([0.0, 0.0, 0.0])["verdict"] == "indistinguishable"  # bit-identical methods
    assert quality.paired([0.01])["verdict"] is None and quality.paired([])["n"] == 0


def test_seeds_for_inverts_the_resolution():
    # the HiLo paper's gap, 0.016, at a paired sd of 0.015: resolution(n) <= 0.016 first at n = 9
    n = quality.seeds_for(0.015, 0.016)
    assert quality.resolution(0.015, n) <= 0.016 < quality.resolution(0.015, n - 1)
    assert quality.seeds_for(0.0, 0.01) == 2 and quality.seeds_for(1.0, 1e-6) is None


def test_ci95_matches_students_t():
    mean, half = quality.ci95([1.0, 2.0, 3.0])
    assert mean == 2.0 and half == pytest.approx(4.303 * 1.0 / 3 ** 0.5)
    assert quality.ci95([5.0]) == (5.0, None) and quality.ci95([]) == (None, None)


def test_the_report_states_the_baselines_signal_in_seed_sds_and_flags_a_weak_one():
    # strong: both seeds +0.4 and +0.4 -> every seed equal; weak: +0.4 and +0.05 -> mean 0.225, sd 0.247
    strong = _evals({"full-bf16": BASE, "spar@1.6%": SPAR}, {"full-bf16": 1.0, "spar@1.6%": 0.5})
    weak = _evals({"full-bf16": {1: [0.1, 0.3, 0.5], 2: [0.1, 0.12, 0.15]}, "spar@1.6%": SPAR},
                  {"full-bf16": 1.0, "spar@1.6%": 0.5})
    comp = pd.DataFrame([{"variant": v, "method": v.split("@")[0], "baseline": "full-bf16", "speedup": 1.0,
                          "profile": "p", "workers": 2} for v in ("full-bf16", "spar@1.6%")])
    q = compare._with_quality(comp, weak, ["profile", "workers"]).set_index("variant", drop=False)
    d = [0.4, 0.05]
    sd = ((d[0] - 0.225) ** 2 + (d[1] - 0.225) ** 2) ** 0.5
    assert q.loc["full-bf16", "baseline_improvement_sd"] == pytest.approx(0.225 / sd)
    text = quality_report.signal_text(q)
    assert "+0.225 (0.9 sd)" in text and "Weak signal" in text
    q = compare._with_quality(comp, strong, ["profile", "workers"])
    text = quality_report.signal_text(q)
    assert "+0.400 (all seeds equal)" in text and "Weak signal" not in text
    one = _evals({"full-bf16": {1: [0.1, 0.5]}, "spar@1.6%": {1: [0.1, 0.4]}}, {"full-bf16": 1.0, "spar@1.6%": 1.0})
    assert quality_report.signal_text(compare._with_quality(comp, one, ["profile", "workers"])) == ""  # 1 seed: no sd


def test_the_report_has_a_paired_line_per_method_with_resolution_and_verdict():
    spar = {1: [0.1, 0.3, 0.38, 0.44, 0.47], 2: [0.1, 0.3, 0.40, 0.45, 0.48], 3: [0.1, 0.3, 0.39, 0.43, 0.46]}
    base = {1: [0.1, 0.3, 0.4, 0.47, 0.5], 2: [0.1, 0.3, 0.42, 0.465, 0.51], 3: [0.1, 0.3, 0.41, 0.46, 0.49]}
    ev = _evals({"full-bf16": base, "spar@1.6%": spar}, {"full-bf16": 1.0, "spar@1.6%": 0.5})
    comp = pd.DataFrame([{"variant": v, "method": v.split("@")[0], "baseline": "full-bf16", "speedup": 1.0,
                          "profile": "p", "workers": 2} for v in ("full-bf16", "spar@1.6%")])
    comp = compare._with_quality(comp, ev, ["profile", "workers"])
    lines = quality_report.paired_section(comp)
    text = "\n".join(lines)
    assert "## Paired differences from the baseline" in text and text.count("- `") == 1
    # d = -0.03 on every seed: sd 0, the interval is a point away from 0
    assert "`spar@1.6%` − baseline: pass@4 -0.030 on every one of 3 paired seeds (paired sd 0): **worse**" in text
    spar[3] = [0.1, 0.3, 0.39, 0.43, 0.47]  # d = -0.03, -0.03, -0.02: a spread, an interval, a resolution
    comp = compare._with_quality(comp[["variant", "method", "baseline", "speedup", "profile", "workers"]],
                                 _evals({"full-bf16": base, "spar@1.6%": spar}, {"full-bf16": 1.0, "spar@1.6%": 0.5}),
                                 ["profile", "workers"])
    text = "\n".join(quality_report.paired_section(comp))
    assert "pass@4 -0.027 ± 0.014 (3 paired seeds, sd 0.006); this run resolves differences of 0.018 or more: " \
           "**worse**" in text and "The paper's gap (0.016) needs" in text
    assert "paired difference -0.027 ± 0.014 (3 paired seeds): **worse**" in " ".join(verdict.verdict(comp, []))


def test_power_rows_size_a_run_from_a_pilots_paired_sd():
    base = {1: [0.1, 0.5], 2: [0.1, 0.52], 3: [0.1, 0.48]}
    spar = {1: [0.1, 0.49], 2: [0.1, 0.49], 3: [0.1, 0.47]}  # d = -0.01, -0.03, -0.01: sd 0.01155
    ev = _evals({"full-bf16": base, "spar@1.6%": spar}, {"full-bf16": 1.0, "spar@1.6%": 0.5})
    comp = pd.DataFrame([{"variant": v, "method": v.split("@")[0], "baseline": "full-bf16", "speedup": 1.0,
                          "profile": "p", "workers": 2} for v in ("full-bf16", "spar@1.6%")])
    rows = quality.power_rows(compare._with_quality(comp, ev, ["profile", "workers"]), [0.016, 0.03])
    assert len(rows) == 1 and rows[0]["variant"] == "spar@1.6%" and rows[0]["seeds"] == 3
    sd = rows[0]["paired_sd"]
    assert sd == pytest.approx(0.02 / 3 ** 0.5, rel=1e-6)
    assert rows[0]["seeds_needed"] == {0.016: quality.seeds_for(sd, 0.016), 0.03: quality.seeds_for(sd, 0.03)}
    assert rows[0]["seeds_needed"][0.016] > rows[0]["seeds_needed"][0.03] >= 2


def test_a_baseline_that_got_worse_is_flagged():
    comp = pd.DataFrame([{"method": "full-bf16", "baseline": "full-bf16", "baseline_improvement": -0.176,
                          "baseline_improvement_sd": 10.9, "heldout_name": "pass@4", "heldout_lower_is_better": False}])
    assert "The baseline got worse" in quality_report.signal_text(comp)
    comp.loc[0, "baseline_improvement"] = 0.176
    assert "got worse" not in quality_report.signal_text(comp)
    comp.loc[0, ["baseline_improvement", "heldout_lower_is_better"]] = [0.05, True]   # reverse KL rose: worse
    assert "The baseline got worse" in quality_report.signal_text(comp)


def test_gold_prob_as_the_quality_metric_drives_targets_and_shows_its_column():
    """--quality-metric gold_prob: targets, paired differences and the report read the exact P(gold)
    column (here a third of pass@k), and name it; a run recorded before it has no quality table."""
    ev = _evals({"full-bf16": BASE, "spar@1.6%": SPAR}, {"full-bf16": 1.0, "spar@1.6%": 0.5}, metric="gold_prob")
    ev["gold_prob"] = ev["pass_at_k"] / 3
    q = quality.quality_table(ev, ["profile", "workers"]).set_index("variant")
    assert q.loc["full-bf16", "heldout_target"] == pytest.approx((0.1 + 0.9 * 0.4) / 3)
    assert q.loc["spar@1.6%", "heldout_diff_mean"] == pytest.approx(-0.005 / 3)
    assert q.loc["spar@1.6%", "gold_prob_mean"] == pytest.approx((0.5 + 0.49) / 6)
    assert (q["heldout_name"] == "P(gold)").all()
    comp = pd.DataFrame([{"variant": v, "method": v.split("@")[0], "baseline": "full-bf16", "speedup": 1.0,
                          "profile": "p", "workers": 2} for v in ("full-bf16", "spar@1.6%")])
    head, rows = quality_report.quality_rows(compare._with_quality(comp, ev, ["profile", "workers"]))
    assert head[4] == "held-out P(gold) (final)" and rows[1][4].startswith("0.165")
    assert quality.quality_table(ev.drop(columns="gold_prob"), ["profile", "workers"]).empty


def test_the_verdict_compares_a_run_cut_short_over_the_seeds_both_have():
    """A method with one seed against a baseline with two (an interrupted run): the verdict's held-out
    difference is the paired one over seed 1, as in the paired section, not the difference of means."""
    base = {1: [0.1, 0.3, 0.4, 0.47, 0.5], 2: [0.1, 0.3, 0.42, 0.465, 0.6]}
    ev = _evals({"full-bf16": base, "spar@1.6%": {1: [0.1, 0.2, 0.3, 0.35, 0.48]}},
                {"full-bf16": 1.0, "spar@1.6%": 0.5})
    comp = pd.DataFrame([{"variant": v, "method": v.split("@")[0], "baseline": "full-bf16", "speedup": 1.0,
                          "profile": "p", "workers": 2} for v in ("full-bf16", "spar@1.6%")])
    text = " ".join(verdict.verdict(compare._with_quality(comp, ev, ["profile", "workers"]), []))
    assert "paired difference -0.020 (n=1 seeds: too few for an interval)" in text, text  # 0.48 - 0.5, not - 0.55


def _pair(ev: pd.DataFrame) -> pd.DataFrame:
    """The comparison of full-bf16 and spar@1.6% on `ev` (no update rows: the held-out columns only)."""
    comp = pd.DataFrame([{"variant": v, "method": v.split("@")[0], "baseline": "full-bf16", "speedup": 1.0,
                          "profile": "p", "workers": 2} for v in ("full-bf16", "spar@1.6%")])
    return compare._with_quality(comp, ev, ["profile", "workers"]).set_index("variant", drop=False)


@pytest.mark.parametrize("task, gold, want", [
    ("digits", True, "gold_prob"), ("knights_knaves", True, "gold_prob"),  # one right answer: its exact P(gold)
    ("countdown", True, "pass_at_1"),      # many expressions hit the target: P(the canonical one) is not quality
    ("digits", False, "pass_at_1"),        # a run recorded before gold_prob existed
    (None, True, "pass_at_1"),             # no task column: uniqueness unknown, P(gold) not trusted
])
def test_auto_picks_the_exact_p_gold_only_where_the_gold_is_the_only_right_answer(task, gold, want):
    ev = _evals({"full-bf16": BASE, "spar@1.6%": SPAR}, {"full-bf16": 1.0, "spar@1.6%": 0.5}, metric="auto")
    if task is not None:
        ev["task"] = task
    if gold:
        ev["gold_prob"] = ev["pass_at_k"] / 3
    assert quality.run_metric(ev) == (want, 0.9)
    q = quality.quality_table(ev, ["profile"]).set_index("variant")
    assert (q["heldout_metric"] == want).all() and (q["heldout_name"] == {"gold_prob": "P(gold)", "pass_at_1": "pass@1"}[want]).all()
    col = quality.metric_column(want)
    assert q.loc["spar@1.6%", "heldout_diff_mean"] == pytest.approx(
        ((ev[ev["variant"] == "spar@1.6%"].groupby("seed")[col].last()
          - ev[ev["variant"] == "full-bf16"].groupby("seed")[col].last()).mean()))


def test_a_run_that_names_its_metric_keeps_it_and_a_run_that_names_none_is_auto():
    ev = _evals({"full-bf16": BASE, "spar@1.6%": SPAR}, {"full-bf16": 1.0, "spar@1.6%": 0.5})  # pass_at_k
    ev["task"], ev["gold_prob"] = "digits", ev["pass_at_k"] / 3
    assert quality.run_metric(ev)[0] == "pass_at_k"
    assert quality.run_metric(ev.drop(columns="quality_metric"))[0] == "gold_prob"
    assert quality.resolve_metric(ev, "objective") == "objective"


def test_the_share_of_the_baselines_gain_kept_and_fiellers_interval_by_hand():
    """Baseline gains b = 0.40, 0.42, 0.38, method gains a = 0.30, 0.33, 0.27 (start 0.1 for all):
    share = mean(a) / mean(b) = 0.30 / 0.40. Fieller: the R with (ā - R b̄)² = t² var(a - R b) / n."""
    base = {1: [0.1, 0.3, 0.5], 2: [0.1, 0.3, 0.52], 3: [0.1, 0.3, 0.48]}
    spar = {1: [0.1, 0.2, 0.40], 2: [0.1, 0.2, 0.43], 3: [0.1, 0.2, 0.37]}
    q = _pair(_evals({"full-bf16": base, "spar@1.6%": spar}, {"full-bf16": 1.0, "spar@1.6%": 1.0}))
    a, b, n, t = [0.30, 0.33, 0.27], [0.40, 0.42, 0.38], 3, 4.303
    ma, mb = sum(a) / n, sum(b) / n
    cov = lambda x, y: sum((u - sum(x) / n) * (v - sum(y) / n) for u, v in zip(x, y)) / (n - 1)  # noqa: E731
    A = mb ** 2 - t * t / n * cov(b, b)
    B = -2 * (ma * mb - t * t / n * cov(a, b))
    C = ma ** 2 - t * t / n * cov(a, a)
    lo, hi = sorted(((-B - (B * B - 4 * A * C) ** 0.5) / (2 * A), (-B + (B * B - 4 * A * C) ** 0.5) / (2 * A)))
    r = q.loc["spar@1.6%"]
    assert r["gain_kept"] == pytest.approx(0.75) and r["gain_kept_pass_at_k"] == pytest.approx(0.75)
    assert r["gain_kept_lo"] == pytest.approx(lo) and r["gain_kept_hi"] == pytest.approx(hi)
    for R in (lo, hi):  # on the boundary the paired t statistic of a - R b is exactly t
        d = [x - R * y for x, y in zip(a, b)]
        assert abs(sum(d) / n) == pytest.approx(t * cov(d, d) ** 0.5 / n ** 0.5)
    # d = a - b = -0.10, -0.09, -0.11: the paired difference says worse, so the interval excludes 1
    assert hi < 1 and r["gain_kept_verdict"] == "keeps less" and r["heldout_verdict"] == "worse"
    assert q.loc["full-bf16", "gain_kept"] == pytest.approx(1.0)
    assert q.loc["full-bf16", "gain_kept_verdict"] == "keeps all of it"
    # pass@1 is pass@k / 2 in these rows: the same share, its own columns
    assert r["gain_kept_pass_at_1"] == pytest.approx(0.75) and r["gain_kept_pass_at_1_verdict"] == "keeps less"


def test_gain_share_agrees_with_the_paired_difference_and_is_none_without_a_gain():
    keeps = quality.gain_share([0.35, 0.39, 0.30], [0.40, 0.42, 0.38])   # d = -0.05, -0.03, -0.08
    assert keeps["verdict"] == "keeps all of it" and keeps["lo"] < 1 < keeps["hi"]
    assert quality.paired([-0.05, -0.03, -0.08])["verdict"] == "indistinguishable"
    assert quality.gain_share([0.5, 0.52, 0.49], [0.40, 0.42, 0.38])["verdict"] == "keeps more"
    assert quality.gain_share([0.1, 0.2], [-0.1, -0.05]) == {"share": None, "lo": None, "hi": None, "verdict": None}
    # reverse KL falls: gains are negative, and a larger fall is a larger share
    assert quality.gain_share([-0.5, -0.52, -0.49], [-0.40, -0.42, -0.38], lower=True)["verdict"] == "keeps more"
    # a baseline gain within its own noise: Fieller's interval is unbounded, the verdict still stands
    loose = quality.gain_share([0.01, 0.02, -0.01], [0.05, -0.04, 0.02])
    assert loose["lo"] is None and loose["hi"] is None and loose["verdict"] == "keeps all of it"


def test_metrics_disagree_when_p_gold_resolves_a_loss_that_pass_at_k_does_not():
    base = {1: [0.1, 0.3, 0.5], 2: [0.1, 0.3, 0.5], 3: [0.1, 0.3, 0.5]}
    spar = {1: [0.1, 0.3, 0.51], 2: [0.1, 0.3, 0.48], 3: [0.1, 0.3, 0.515]}   # pass@4: +0.01, -0.02, +0.015
    ev = _evals({"full-bf16": base, "spar@1.6%": spar}, {"full-bf16": 1.0, "spar@1.6%": 1.0}, metric="auto")
    ev["task"] = "knights_knaves"
    ev["gold_prob"] = ev["pass_at_k"] / 3 - ((ev["variant"] == "spar@1.6%") & (ev["version"] > 0)) * 0.02
    q = _pair(ev)
    r = q.loc["spar@1.6%"]
    assert r["heldout_metric"] == "gold_prob" and r["diff_gold_prob_verdict"] == "worse"
    assert r["diff_pass_at_k_verdict"] == "indistinguishable" and r["diff_pass_at_k_name"] == "pass@4"
    assert r["diff_gold_prob_mean"] == pytest.approx((0.01 - 0.02 + 0.015) / 9 - 0.02)
    assert r["heldout_diff_mean"] == r["diff_gold_prob_mean"] and r["heldout_verdict"] == "worse"
    assert bool(r["metrics_disagree"]) and "P(gold) says worse" in r["metrics_disagree_note"]
    assert "pass@4 says indistinguishable" in r["metrics_disagree_note"]
    assert not q.loc["full-bf16", "metrics_disagree"]
    lines = quality_report.metrics_table(q)
    text = "\n".join(lines)
    assert "## Every held-out figure, side by side" in text and "P(gold) (decides)" in text
    assert "- `spar@1.6%`: the figures disagree: P(gold) says worse" in text and "The decision is P(gold)'s." in text
    assert text.count("| spar@1.6% |") == 4    # gold_prob, pass@1, pass@k and the objective, one row each
