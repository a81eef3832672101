"""Held-out quality and time to quality (harness/results/quality.py), on evaluation tables written by hand:
scoring code checked against numbers worked out here, without training anything (AlgoPerf's way)."""
import pandas as pd
import pytest

from harness.results import compare, quality, report


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


def test_time_to_quality_uses_the_baselines_improvement_and_training_seconds():
    ev = _evals({"full-bf16": BASE, "spar@1.6%": SPAR}, {"full-bf16": 1.0, "spar@1.6%": 0.5})
    q = quality.quality_table(ev, ["profile", "workers"]).set_index("variant")
    target = 0.1 + 0.9 * (0.5 - 0.1)  # 0.46
    assert q.loc["full-bf16", "heldout_target"] == pytest.approx(target)
    # baseline: seed 1 reaches 0.47 at v15, seed 2 0.465 at v15 -> 15 s each
    assert q.loc["full-bf16", "ttq_seconds_mean"] == pytest.approx(15.0)
    assert q.loc["full-bf16", "ttq_updates_mean"] == pytest.approx(15.0)
    # spar: 0.47 at v30 (seed 1), 0.465 at v30 (seed 2): 30 updates x 0.5 s = 15 s... and the speedup is 1.0
    assert q.loc["spar@1.6%", "ttq_updates_mean"] == pytest.approx(30.0)
    assert q.loc["spar@1.6%", "ttq_seconds_mean"] == pytest.approx(15.0)
    assert q.loc["spar@1.6%", "ttq_speedup"] == pytest.approx(1.0)
    assert q.loc["spar@1.6%", "heldout_mean"] == pytest.approx((0.5 + 0.49) / 2)
    assert q.loc["spar@1.6%", "ttq_reached"] == 2 and q.loc["spar@1.6%", "heldout_seeds"] == 2
    # 95 % CI over 2 seeds: t(1) = 12.706 x sd / sqrt(2)
    sd = abs(0.5 - 0.49) / 2 ** 0.5
    assert q.loc["spar@1.6%", "heldout_ci95"] == pytest.approx(12.706 * sd / 2 ** 0.5)


def test_a_method_faster_per_update_but_slower_to_quality_is_shown_as_slower():
    ev = _evals({"full-bf16": BASE, "spar@1.6%": SPAR}, {"full-bf16": 1.0, "spar@1.6%": 0.6})
    comp = pd.DataFrame([{"variant": "full-bf16", "method": "full-bf16", "baseline": "full-bf16", "speedup": 1.0,
                          "profile": "p", "workers": 2},
                         {"variant": "spar@1.6%", "method": "spar", "baseline": "full-bf16", "speedup": 1 / 0.6,
                          "profile": "p", "workers": 2}])
    comp = compare._with_quality(comp, ev, ["profile", "workers"]).set_index("variant", drop=False)
    assert comp.loc["spar@1.6%", "ttq_speedup"] == pytest.approx(15.0 / 18.0)  # 30 updates x 0.6 s vs 15 s
    notes = report._quality_notes(comp)
    assert len(notes) == 1 and "spar@1.6%" in notes[0] and "1.67x per update, 0.83x to quality" in notes[0]
    head, rows = report.quality_rows(comp)
    assert [r[1] for r in rows] == ["full-bf16", "spar@1.6%"] and rows[1][-2:] == ["0.83x", "1.67x"]


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
    assert q.loc["full-bf16", "ttq_updates_mean"] == pytest.approx(15.0)
    flat = _evals({"full-bf16": {1: [0.2, 0.2, 0.2]}, "spar@1.6%": {1: [0.2, 0.3, 0.4]}},
                  {"full-bf16": 1.0, "spar@1.6%": 1.0})
    q = quality.quality_table(flat, ["profile"])
    assert q["heldout_target"].isna().all() and (q["ttq_reached"] == 0).all()


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
    text = report._signal_text(q)
    assert "+0.225 (0.9 sd)" in text and "Weak signal" in text
    q = compare._with_quality(comp, strong, ["profile", "workers"])
    text = report._signal_text(q)
    assert "+0.400 (all seeds equal)" in text and "Weak signal" not in text
    one = _evals({"full-bf16": {1: [0.1, 0.5]}, "spar@1.6%": {1: [0.1, 0.4]}}, {"full-bf16": 1.0, "spar@1.6%": 1.0})
    assert report._signal_text(compare._with_quality(comp, one, ["profile", "workers"])) == ""  # 1 seed: no sd
