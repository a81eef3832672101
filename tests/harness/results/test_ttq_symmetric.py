"""Symmetric time to quality and quality at equal time (harness/results/quality.py), on evaluation
tables written by hand: one target per coordinate group from the baseline's seed-mean curve, every
seed of every method (the baseline's included) reaches and holds it or is censored, and the paired
time ratio method / baseline can go either way."""
import math

import pandas as pd
import pytest

from harness.results import compare, quality, quality_report


def _evals(curves: dict, seconds: dict, cpu: dict | None = None) -> pd.DataFrame:
    """curves: variant -> {seed: [pass@4 at version 0, 5, 10, ...]}; seconds: (variant, seed) or
    variant -> wall seconds per update; cpu: the same for the CPU-charged seconds (default: wall)."""
    rows = []
    for variant, seeds in curves.items():
        for seed, ys in seeds.items():
            spu = seconds.get((variant, seed), seconds.get(variant))
            cps = (cpu or {}).get((variant, seed), (cpu or {}).get(variant, spu))
            for i, y in enumerate(ys):
                v = 5 * i
                rows.append({"variant": variant, "method": variant.split("@")[0], "baseline": "full-bf16",
                             "seed": seed, "version": v, "pass_at_k": y, "pass_at_1": y / 2, "k": 4,
                             "objective_value": y, "objective_metric": "mean_reward", "quality_metric": "pass_at_k",
                             "quality_target": 0.9, "wall_s": v * spu, "cpu_s": v * cps, "profile": "p", "workers": 2})
    return pd.DataFrame(rows)


def _table(ev: pd.DataFrame, basis=None) -> pd.DataFrame:
    return quality.quality_table(ev, ["profile", "workers"], basis).set_index("variant", drop=False)


# The baseline's seed-mean curve goes 0.1 -> 0.51 (gain 0.41): targets 0.305 (50 %), 0.4075 (75 %), 0.469
# (90 %). Seed 2 of the baseline stalls at 0.32: it never reaches the 75 % or 90 % target: censored there.
BASE = {1: [0.1, 0.3, 0.5, 0.6, 0.7], 2: [0.1, 0.2, 0.28, 0.32, 0.32]}


def test_a_baseline_seed_can_miss_the_common_target_and_is_counted_as_censored():
    ev = _evals({"full-bf16": BASE, "spar@1.6%": BASE}, {"full-bf16": 1.0, "spar@1.6%": 1.0})
    q = _table(ev)
    b = q.loc["full-bf16"]
    assert b["ttq50_target"] == pytest.approx(0.305) and b["ttq75_target"] == pytest.approx(0.4075)
    assert b["ttq90_target"] == pytest.approx(0.469) and b["heldout_target"] == pytest.approx(0.469)
    assert (b["ttq50_reached"], b["ttq50_censored"]) == (2, 0)
    assert (b["ttq90_reached"], b["ttq90_censored"]) == (1, 1)      # per-seed targets would have given 2 / 0
    assert b["ttq_reached"] == 1                                    # the --quality-target columns: the same target
    # seed 1 crosses 0.469 between 0.3 (v5) and 0.5 (v10): 5 + 5 x 0.169 / 0.2 updates at 1 s each
    assert b["ttq90_seconds_mean"] == pytest.approx(9.225) and b["ttq_seconds_mean"] == pytest.approx(9.225)
    # 50 %: seed 1 at 5 + 5 x 0.005 / 0.2, seed 2 between 0.28 (v10) and 0.32 (v15): 10 + 5 x 0.025 / 0.04
    assert b["ttq50_seconds_mean"] == pytest.approx((5.125 + 13.125) / 2)
    assert pd.isna(b["ttq90_verdict"]) and b["ttq90_ratio"] == pytest.approx(1.0)   # the baseline's own row
    # a method identical to the baseline: ratio 1 wherever both reached, censored where both missed
    s = q.loc["spar@1.6%"]
    assert (s["ttq90_reached"], s["ttq90_censored"], s["ttq90_ratio_n"]) == (1, 1, 1)
    assert s["ttq90_ratio"] == pytest.approx(1.0) and s["ttq50_verdict"] == "indistinguishable"
    assert s["ttq90_verdict"] == "too few seeds for an interval"   # one seed where both reached
    assert pd.isna(s["ttq_speedup"])                                # not every seed reached it


def test_a_method_can_win_time_to_quality():
    """The same curves, but the method's updates take 0.50, 0.55, 0.45 of the baseline's seconds:
    per-seed ratios 0.50, 0.55, 0.45, geometric mean with a t interval on the logs below 1."""
    base = {1: [0.1, 0.2, 0.3, 0.4, 0.5], 2: [0.1, 0.21, 0.31, 0.41, 0.52], 3: [0.1, 0.19, 0.29, 0.39, 0.48]}
    secs = {"full-bf16": 1.0, ("spar@1.6%", 1): 0.5, ("spar@1.6%", 2): 0.55, ("spar@1.6%", 3): 0.45}
    q = _table(_evals({"full-bf16": base, "spar@1.6%": base}, secs))
    logs = [math.log(x) for x in (0.5, 0.55, 0.45)]
    mean = sum(logs) / 3
    half = 4.303 * (sum((x - mean) ** 2 for x in logs) / 2) ** 0.5 / 3 ** 0.5
    s = q.loc["spar@1.6%"]
    for pct in (50, 75, 90):
        assert s[f"ttq{pct}_ratio"] == pytest.approx(math.exp(mean))
        assert s[f"ttq{pct}_ratio_lo"] == pytest.approx(math.exp(mean - half))
        assert s[f"ttq{pct}_ratio_hi"] == pytest.approx(math.exp(mean + half)) and s[f"ttq{pct}_ratio_hi"] < 1
        assert s[f"ttq{pct}_ratio_n"] == 3 and s[f"ttq{pct}_verdict"] == "faster"
        assert s[f"ttq{pct}_seconds_basis"] == "wall" and s[f"ttq{pct}_ratio_wall"] == pytest.approx(s[f"ttq{pct}_ratio"])
    assert s["ttq_speedup"] > 1
    text = "\n".join(quality_report.ttq_table(q))
    assert "## Time to quality, one target for every method" in text
    assert "50 %, 75 %, 90 % of `full-bf16`'s seed-mean gain in pass@4" in text
    assert "censored" in text and "| 90 %: pass@4 0.460 | 3 / 0 |" in text and "faster" in text


def test_a_method_that_never_reaches_is_slower_censored_and_a_baseline_miss_is_a_win():
    base = {1: [0.1, 0.3, 0.5], 2: [0.1, 0.3, 0.5], 3: [0.1, 0.2, 0.25]}  # gain 0.3167; seed 3 misses 0.3375 (75 %)
    flat = {1: [0.1, 0.12, 0.15], 2: [0.1, 0.12, 0.15], 3: [0.1, 0.12, 0.15]}
    q = _table(_evals({"full-bf16": base, "spar@1.6%": flat}, {"full-bf16": 1.0, "spar@1.6%": 0.5}))
    s = q.loc["spar@1.6%"]
    assert (s["ttq90_reached"], s["ttq90_censored"]) == (0, 3)
    assert s["ttq90_verdict"] == "slower (censored)" and s["ttq90_only_baseline"] == 2
    late = {1: [0.1, 0.2, 0.45], 2: [0.1, 0.2, 0.45], 3: [0.1, 0.3, 0.5]}   # reaches 0.3375 on every seed
    q = _table(_evals({"full-bf16": base, "rank-1": late}, {"full-bf16": 1.0, "rank-1": 1.0}))
    r = q.loc["rank-1"]
    # the baseline's seed 3 never gets to the 75 % target, rank-1's does: a win for rank-1
    assert r["ttq75_only_method"] == 1 and r["ttq75_only_baseline"] == 0 and r["ttq75_reached"] == 3
    assert q.loc["full-bf16", "ttq75_censored"] == 1


def test_time_to_quality_is_on_cpu_time_where_the_run_was_contended_with_the_wall_ratio_beside_it():
    base = {1: [0.1, 0.3, 0.5], 2: [0.1, 0.3, 0.5]}
    ev = _evals({"full-bf16": base, "spar@1.6%": base}, {"full-bf16": 1.0, "spar@1.6%": 2.0},
                cpu={"full-bf16": 1.0, "spar@1.6%": 0.8})   # spar's wall time was mostly waiting for the cores
    wall, cpu = _table(ev), _table(ev, basis={quality.coord_key(["p", 2]): "cpu"})
    assert wall.loc["spar@1.6%", "ttq50_seconds_basis"] == "wall" and wall.loc["spar@1.6%", "ttq50_ratio"] == pytest.approx(2.0)
    s = cpu.loc["spar@1.6%"]
    assert s["ttq50_seconds_basis"] == "cpu" and s["ttq50_ratio"] == pytest.approx(0.8)
    assert s["ttq50_ratio_wall"] == pytest.approx(2.0) and s["equal_time_basis"] == "cpu"
    assert _table(ev.drop(columns="cpu_s"), basis="cpu").loc["spar@1.6%", "ttq50_seconds_basis"] == "wall"


def test_the_comparison_adds_cpu_seconds_from_the_updates_and_takes_the_contended_flag():
    ev = _evals({"full-bf16": {1: [0.1, 0.3, 0.5]}, "spar@1.6%": {1: [0.1, 0.3, 0.5]}}, {"full-bf16": 1.0, "spar@1.6%": 1.0})
    ev = ev.drop(columns="cpu_s")
    ev["cell"] = ev["variant"] + "-s1"
    updates = pd.DataFrame([{"cell": c, "update_index": u, "seconds_per_update": 1.0, "cpu": 0.25 * u}
                            for c in ev["cell"].unique() for u in range(1, 11)])
    out = quality.with_cpu_seconds(ev, updates, lambda g: g["cpu"])
    assert out.set_index(["cell", "version"]).loc[("spar@1.6%-s1", 5), "cpu_s"] == pytest.approx(0.25 * 15)
    assert out.set_index(["cell", "version"]).loc[("spar@1.6%-s1", 0), "cpu_s"] == 0.0
    comp = pd.DataFrame([{"variant": v, "method": v.split("@")[0], "baseline": "full-bf16", "profile": "p",
                          "workers": 2, "contended": v == "spar@1.6%"} for v in ("full-bf16", "spar@1.6%")])
    q = compare._with_quality(comp, ev, ["profile", "workers"], updates).set_index("variant")
    assert (q["ttq50_seconds_basis"] == "cpu").all()   # one contended variant puts the whole link on CPU time
    comp["contended"] = False
    q = compare._with_quality(comp, ev, ["profile", "workers"], updates).set_index("variant")
    assert (q["ttq50_seconds_basis"] == "wall").all()


def test_quality_at_equal_time_reads_each_curve_at_the_baselines_median_end():
    """The baseline's seeds end at 20 s and 30 s (1 and 1.5 s per update): equal time 25 s. The slow
    method (2 s per update) is read between v10 (20 s) and v15 (30 s); the fast one (0.5 s per
    update) ended at 10 s: its last value, flagged."""
    base = {1: [0.1, 0.3, 0.4, 0.45, 0.5], 2: [0.1, 0.3, 0.4, 0.45, 0.5]}
    slow = {1: [0.1, 0.2, 0.3, 0.4, 0.5], 2: [0.1, 0.2, 0.32, 0.42, 0.5]}
    fast = {1: [0.1, 0.2, 0.3, 0.35, 0.38], 2: [0.1, 0.2, 0.3, 0.35, 0.40]}
    secs = {("full-bf16", 1): 1.0, ("full-bf16", 2): 1.5, "slow": 2.0, "fast": 0.5}
    q = _table(_evals({"full-bf16": base, "slow": slow, "fast": fast}, secs))
    assert (q["equal_time_s"] == 25.0).all()
    # baseline at 25 s: seed 1 ended at 20 s (0.5, flagged), seed 2 between 22.5 s (0.45) and 30 s (0.5)
    b = [0.5, 0.45 + (25 - 22.5) / 7.5 * 0.05]
    s = [0.3 + 0.5 * 0.1, 0.32 + 0.5 * 0.1]
    assert q.loc["slow", "q_at_equal_time_mean"] == pytest.approx(sum(s) / 2)
    assert q.loc["slow", "q_at_equal_time_diff_mean"] == pytest.approx((s[0] - b[0] + s[1] - b[1]) / 2)
    assert q.loc["slow", "q_at_equal_time_short"] == 0 and q.loc["full-bf16", "q_at_equal_time_short"] == 1
    assert q.loc["fast", "q_at_equal_time_mean"] == pytest.approx(0.39) and q.loc["fast", "q_at_equal_time_short"] == 2
    lines = quality_report.equal_time_lines(q)
    text = "\n".join(lines)
    assert "## Quality at equal training time" in text and "after 25.0 s of training (wall clock)" in text
    assert "- `fast`:" in text and "2 seed(s) finished training sooner" in text and "- `full-bf16`" not in text
