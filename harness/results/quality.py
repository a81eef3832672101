"""Held-out quality, paired differences and time-to-quality: the other half of the comparison.

From the `evals` table (harness/results/tables.py: one row per cell x evaluated version):

- **quality** of a variant = its final held-out figure (pass@k by default, `--quality-metric`),
  mean over seeds with a 95 % confidence interval (Student's t, seeds as the samples);
- **paired difference** (issue 21): the seeds are paired by design (the same initial adapter, the same
  rollout seeds, the same evaluation dice), so per seed d = variant's final - the baseline's final,
  and the difference is mean(d) ± t(0.975, n-1) sd(d) / sqrt(n). Its **resolution** is the smallest
  difference this design detects with 80 % power at the 5 % level, (t(0.975, n-1) + t(0.80, n-1))
  sd(d) / sqrt(n) (the minimum detectable effect of a paired t test; n = 3 seeds: 3.1 sd(d)). The
  verdict is "better" / "worse" when the 95 % interval excludes 0, else "indistinguishable" (at that
  resolution). `seeds_for(sd, gap)` inverts it: the seeds a pilot's paired sd needs to resolve a gap.
  Student's t, not a bootstrap: with 3-5 seeds a bootstrap's interval is too narrow (it cannot see
  tails it never sampled);
- **time to quality** (issue 21): per seed, the target is that seed's BASELINE improvement, `start +
  quality_target x (final - start)` (default 90 %), so every baseline seed reaches its own target. A
  seed of a variant reaches it when its curve stays at or past the target for the rest of the run
  (a dip below it later un-reaches it); the version and the training seconds (`wall_s`: the sum of
  seconds per update, evaluation excluded) are interpolated linearly between the last evaluation
  short of the target and the next one, so the figure is finer than `--eval-every` (which sets how
  often the curve is sampled: each evaluation costs eval_problems x eval_samples rollouts after the
  loop, none in the timeline). A method 2x faster per update that needs 2.3x the updates is slower
  here, which is the point. Its paired difference with the baseline (seconds) is reported like
  quality's, over the seeds where both reached.

Every variant of a seed starts from the same policy (the LoRA update is zero at version 0) and
is evaluated on the same held-out problems with the same sampling seed, so the methods' curves
differ only by what training did. Pure pandas; imports no torch.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

# Student's t, two-sided 95 %, by degrees of freedom (seeds - 1); between and beyond the tabulated
# dfs, the value at the next smaller one (conservative: t falls as df grows).
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
       10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


# Student's t, one-sided 80 % (the power term of the minimum detectable difference), by degrees of
# freedom, read like T95.
T80 = {1: 1.376, 2: 1.061, 3: 0.978, 4: 0.941, 5: 0.920, 6: 0.906, 7: 0.896, 8: 0.889, 9: 0.883,
       10: 0.879, 12: 0.873, 15: 0.866, 20: 0.860, 30: 0.854}


def _t(table: dict, df: int) -> float:
    """The table's value at the largest tabulated df <= `df` (df >= 1)."""
    return table[max(k for k in table if k <= df)]


def mean_sd(xs: list[float]) -> tuple[float, float | None]:
    """(mean, sample sd with n - 1) of a non-empty list; sd None with fewer than 2 values."""
    mean = sum(xs) / len(xs)
    if len(xs) < 2:
        return mean, None
    return mean, math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))


def ci95(values) -> tuple[float | None, float | None]:
    """(mean, half-width of the 95 % CI) over `values`; half-width None with fewer than 2."""
    xs = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not xs:
        return None, None
    mean, sd = mean_sd(xs)
    if sd is None:
        return mean, None
    return mean, _t(T95, len(xs) - 1) * sd / math.sqrt(len(xs))


def resolution(sd: float, n: int) -> float | None:
    """The smallest paired difference n seeds resolve with 80 % power at the 5 % level (two-sided):
    (t(0.975, n-1) + t(0.80, n-1)) x sd / sqrt(n); None below 2 seeds."""
    if n < 2:
        return None
    return (_t(T95, n - 1) + _t(T80, n - 1)) * sd / math.sqrt(n)


def seeds_for(sd: float, gap: float, most: int = 1000) -> int | None:
    """The fewest seeds whose resolution is at most `gap` given a paired sd `sd` (from a pilot run);
    None if more than `most` would be needed."""
    if sd <= 0:
        return 2
    return next((n for n in range(2, most + 1) if resolution(sd, n) <= gap), None)


def power_rows(comp: pd.DataFrame, gaps: list[float]) -> list[dict]:
    """Sizing a run from a pilot (`harness power`): per method, the pilot's paired sd over n seeds,
    the resolution it had, and the seeds each gap in `gaps` would need at that sd."""
    rows = []
    if "heldout_diff_sd" not in comp:
        return rows
    for _, r in comp[comp["heldout_diff_sd"].notna()].iterrows():
        if r.get("method") == r.get("baseline"):
            continue
        sd, n = float(r["heldout_diff_sd"]), int(r["heldout_diff_n"])
        rows.append({"variant": r["variant"], "metric": r.get("heldout_name"), "seeds": n, "paired_sd": sd,
                     "resolution": resolution(sd, n), "diff": float(r["heldout_diff_mean"]),
                     "seeds_needed": {g: seeds_for(sd, g) for g in gaps}})
    return rows


def paired(diffs: list[float], lower: bool = False) -> dict:
    """Mean, 95 % half-width, sd, n, resolution and verdict of per-seed differences (variant -
    baseline); `lower`: a negative difference is the better one (reverse KL)."""
    n = len(diffs)
    if not n:
        return {"n": 0, "mean": None, "ci95": None, "sd": None, "resolution": None, "verdict": None}
    mean, half = ci95(diffs)
    sd = mean_sd(diffs)[1]
    verdict = None
    if half is not None:
        better = mean < 0 if lower else mean > 0
        verdict = "indistinguishable" if abs(mean) <= half else "better" if better else "worse"
    return {"n": n, "mean": mean, "ci95": half, "sd": sd, "verdict": verdict,
            "resolution": resolution(sd, n) if sd is not None else None}


def metric_column(metric: str) -> str:
    """The evals column a `--quality-metric` reads."""
    return {"pass_at_k": "pass_at_k", "pass_at_1": "pass_at_1", "gold_prob": "gold_prob",
            "objective": "objective_value"}[metric]


def lower_is_better(evals: pd.DataFrame, metric: str) -> bool:
    """Reverse KL (distill's objective) falls as the student improves; every other figure rises."""
    return metric == "objective" and "objective_metric" in evals and (evals["objective_metric"] == "reverse_kl").all()


def metric_name(evals: pd.DataFrame, metric: str) -> str:
    if metric == "pass_at_k" and "k" in evals and len(evals):
        return f"pass@{int(evals['k'].iloc[0])}"
    if metric == "pass_at_1":
        return "pass@1"
    if metric == "gold_prob":
        return "P(gold)"
    return str(evals["objective_metric"].iloc[0]) if "objective_metric" in evals and len(evals) else metric


def run_metric(evals: pd.DataFrame) -> tuple[str, float]:
    """(quality metric, target fraction) of these rows (their runs' `--quality-metric`, `--quality-target`)."""
    metric = evals["quality_metric"].iloc[0] if "quality_metric" in evals and evals["quality_metric"].notna().any() \
        else "pass_at_k"
    target = evals["quality_target"].iloc[0] if "quality_target" in evals and evals["quality_target"].notna().any() \
        else 0.9
    return str(metric), float(target)


def per_seed(g: pd.DataFrame, col: str) -> pd.DataFrame:
    """One row per seed: the figure at version 0 (start) and at the seed's last evaluation (final)."""
    g = g.sort_values("version")
    return g.groupby("seed").agg(start=(col, "first"), final=(col, "last"), last_version=("version", "last"))


# Below this many seed-to-seed sds the baseline's own improvement is not told apart from seed noise,
# so neither is any method's difference from it (the default run is tuned to clear 3).
SIGNAL_SD = 3.0


def improvement_in_sd(s: pd.DataFrame) -> float | None:
    """The mean improvement (final - start) over its seed-to-seed sd (the sd of the per-seed
    improvements: sampling and training noise together); None with fewer than 2 seeds, inf when
    every seed moved by exactly the same amount."""
    mean, sd = mean_sd((s["final"] - s["start"]).astype(float).tolist())
    if sd is None:
        return None
    return abs(mean) / sd if sd > 0 else (math.inf if mean else 0.0)


def seed_targets(base: pd.DataFrame, col: str, frac: float, lower: bool) -> dict:
    """seed -> that baseline seed's target, start + frac x (final - start), or None where the seed
    did not improve (no target to reach)."""
    out = {}
    for seed, r in per_seed(base, col).iterrows():
        gain = float(r["final"] - r["start"])
        out[seed] = float(r["start"] + frac * gain) if (gain < 0 if lower else gain > 0) else None
    return out


def reach_and_hold(g: pd.DataFrame, col: str, target: float, lower: bool) -> tuple[float | None, float | None]:
    """(version, training seconds) from which one seed's curve stays at or past `target` to its last
    evaluation, interpolated linearly between the last evaluation short of it and the next; (None,
    None) when the last evaluation is short of it."""
    g = g.sort_values("version")
    ys, vs, ws = (g[c].astype(float).tolist() for c in (col, "version", "wall_s"))
    ok = [(y <= target) if lower else (y >= target) for y in ys]
    if not ok or not ok[-1]:
        return None, None
    short = [i for i, k in enumerate(ok) if not k]
    if not short:
        return vs[0], ws[0]
    i = short[-1]
    f = (target - ys[i]) / (ys[i + 1] - ys[i])  # in (0, 1]: ys[i] is short of the target, ys[i+1] is not
    return vs[i] + f * (vs[i + 1] - vs[i]), ws[i] + f * (ws[i + 1] - ws[i])


def quality_table(evals: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per (coordinates, variant): held-out quality (final, mean and 95 % CI over seeds) for
    pass@1, pass@k and the objective, and time to the baseline-derived target (seconds, updates)."""
    import pandas as pd

    if evals is None or evals.empty:
        return pd.DataFrame()
    metric, frac = run_metric(evals)
    col, lower = metric_column(metric), lower_is_better(evals, metric)
    if col not in evals:  # e.g. gold_prob asked of a run recorded before the learner wrote it
        return pd.DataFrame()
    rows = []
    for key, group in evals.groupby(keys, dropna=False, sort=False):
        rows += _group_rows(dict(zip(keys, key if isinstance(key, tuple) else (key,))), group, col, lower, frac)
    out = pd.DataFrame(rows)
    out["heldout_name"] = metric_name(evals, metric)
    out["heldout_lower_is_better"] = lower
    out["objective_name"] = str(evals["objective_metric"].iloc[0]) if "objective_metric" in evals else "objective"
    return out


def _group_rows(coords: dict, group: pd.DataFrame, col: str, lower: bool, frac: float) -> list[dict]:
    """The rows of one coordinate group: each baseline seed's curve sets that seed's target."""
    baseline = group["baseline"].iloc[0] if "baseline" in group else None
    base = group[group["method"] == baseline]
    targets, improvement, signal, base_final, base_ttq = {}, None, None, None, {}
    if not base.empty:
        s = per_seed(base, col)
        improvement = float(s["final"].mean() - s["start"].mean())
        signal = improvement_in_sd(s)
        targets = seed_targets(base, col, frac, lower)
        base_final = s["final"]
        base_ttq = _ttq(base, col, targets, lower)
    shown = [t for t in targets.values() if t is not None]
    rows = []
    for variant, g in group.groupby("variant", sort=False):
        s = per_seed(g, col)
        ttq = _ttq(g, col, targets, lower)
        secs = [r[1] for r in ttq.values() if r[1] is not None]
        row = {**coords, "variant": variant, "method": g["method"].iloc[0], "heldout_seeds": int(len(s)),
               "heldout_start": float(s["start"].mean()), "heldout_target": sum(shown) / len(shown) if shown else None,
               "baseline_improvement": improvement, "baseline_improvement_sd": signal,
               "ttq_reached": len(secs), "ttq_updates_mean": ci95([r[0] for r in ttq.values() if r[0] is not None])[0]}
        row["ttq_seconds_mean"], row["ttq_seconds_ci95"] = ci95(secs)
        row["heldout_mean"], row["heldout_ci95"] = ci95(s["final"])
        for name, c in (("pass_at_1", "pass_at_1"), ("pass_at_k", "pass_at_k"), ("gold_prob", "gold_prob"),
                        ("objective", "objective_value")):
            row[f"{name}_mean"], row[f"{name}_ci95"] = ci95(per_seed(g, c)["final"]) if c in g else (None, None)
        row.update(_paired_columns(s["final"], base_final, ttq, base_ttq, lower))
        rows.append(row)
    return _with_ttq_speedup(rows, baseline)


def _ttq(g: pd.DataFrame, col: str, targets: dict, lower: bool) -> dict:
    """seed -> (version, seconds) at which the seed reaches and holds its baseline seed's target."""
    return {seed: reach_and_hold(gs, col, targets[seed], lower) if targets.get(seed) is not None else (None, None)
            for seed, gs in g.groupby("seed")}


def _paired_columns(final, base_final, ttq: dict, base_ttq: dict, lower: bool) -> dict:
    """Per-seed differences from the baseline: final quality (heldout_diff_*) and seconds to the
    target (ttq_diff_*, over the seeds where both reached it; fewer seconds is better)."""
    if base_final is None:
        return {}
    seeds = [x for x in final.index if x in base_final.index]
    q = paired([float(final[x] - base_final[x]) for x in seeds], lower)
    both = [x for x in seeds if ttq.get(x, (None, None))[1] is not None and base_ttq.get(x, (None, None))[1] is not None]
    t = paired([ttq[x][1] - base_ttq[x][1] for x in both], lower=True)
    return {"heldout_diff_mean": q["mean"], "heldout_diff_ci95": q["ci95"], "heldout_diff_sd": q["sd"],
            "heldout_diff_n": q["n"], "heldout_resolution": q["resolution"], "heldout_verdict": q["verdict"],
            "ttq_diff_mean": t["mean"], "ttq_diff_ci95": t["ci95"], "ttq_diff_n": t["n"], "ttq_verdict": t["verdict"]}


def _with_ttq_speedup(rows: list[dict], baseline) -> list[dict]:
    """Time-to-quality speedup = the baseline's mean seconds to the target / the variant's; only
    where every seed of both reached it (otherwise a mean over the lucky seeds would flatter)."""
    base = next((r for r in rows if r["method"] == baseline), None)
    for r in rows:
        ok = base and base["ttq_reached"] == base["heldout_seeds"] and r["ttq_reached"] == r["heldout_seeds"] \
            and r["ttq_seconds_mean"]
        r["ttq_speedup"] = base["ttq_seconds_mean"] / r["ttq_seconds_mean"] if ok else None
    return rows


def curves(evals: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per (coordinates, variant, version): the quality figure's mean and 95 % CI over seeds and the
    mean training seconds to that version (what the quality-vs-wall-clock figure draws)."""
    import pandas as pd

    if evals is None or evals.empty:
        return pd.DataFrame()
    metric, _ = run_metric(evals)
    col = metric_column(metric)
    rows = []
    for key, g in evals.groupby(keys + ["variant", "version"], dropna=False, sort=False):
        mean, half = ci95(g[col])
        rows.append({**dict(zip(keys + ["variant", "version"], key)), "quality": mean, "ci95": half or 0.0,
                     "wall_s": float(g["wall_s"].mean()), "seeds": int(g["seed"].nunique())})
    out = pd.DataFrame(rows)
    out["heldout_name"] = metric_name(evals, metric)
    return out
