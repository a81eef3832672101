"""Held-out quality and time-to-quality: the other half of the comparison.

From the `evals` table (harness/results/tables.py: one row per cell x evaluated version):

- **quality** of a variant = its final held-out figure (pass@k by default, `--quality-metric`),
  mean over seeds with a 95 % confidence interval (Student's t, seeds as the samples);
- **time to quality**: the target is `start + quality_target x (final - start)` of the baseline
  (its mean over seeds at version 0 and at its last version; default 90 % of the baseline's final
  improvement). For each seed of each variant: the first evaluated version whose figure reaches
  the target, and the training seconds up to it (`wall_s`: the sum of the updates' seconds per
  update, evaluation excluded). A method 2x faster per update that needs 2.3x the updates is
  slower here, which is the point.

Every variant of a seed starts from the same policy (the LoRA update is zero at version 0) and
is evaluated on the same held-out problems with the same sampling seed, so the methods' curves
differ only by what training did. Pure pandas; imports no torch.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

# Student's t, two-sided 95 %, by degrees of freedom (seeds - 1); 1.96 beyond the table.
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
       10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


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
    df = len(xs) - 1
    t = T95.get(df) or next((T95[k] for k in sorted(T95) if k >= df), 1.96)
    return mean, t * sd / math.sqrt(len(xs))


def metric_column(metric: str) -> str:
    """The evals column a `--quality-metric` reads."""
    return {"pass_at_k": "pass_at_k", "pass_at_1": "pass_at_1", "objective": "objective_value"}[metric]


def lower_is_better(evals: pd.DataFrame, metric: str) -> bool:
    """Reverse KL (distill's objective) falls as the student improves; every other figure rises."""
    return metric == "objective" and "objective_metric" in evals and (evals["objective_metric"] == "reverse_kl").all()


def metric_name(evals: pd.DataFrame, metric: str) -> str:
    if metric == "pass_at_k" and "k" in evals and len(evals):
        return f"pass@{int(evals['k'].iloc[0])}"
    if metric == "pass_at_1":
        return "pass@1"
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
# so neither is any method's difference from it (issue 10: the default run must clear 3).
SIGNAL_SD = 3.0


def improvement_in_sd(s: pd.DataFrame) -> float | None:
    """The mean improvement (final - start) over its seed-to-seed sd (the sd of the per-seed
    improvements: sampling and training noise together); None with fewer than 2 seeds, inf when
    every seed moved by exactly the same amount."""
    mean, sd = mean_sd((s["final"] - s["start"]).astype(float).tolist())
    if sd is None:
        return None
    return abs(mean) / sd if sd > 0 else (math.inf if mean else 0.0)


def first_reach(g: pd.DataFrame, col: str, target: float, lower: bool) -> tuple[int | None, float | None]:
    """(version, training seconds) at which one seed's curve first reaches `target`."""
    g = g.sort_values("version")
    hit = g[g[col] <= target] if lower else g[g[col] >= target]
    hit = hit[hit["version"] > 0]  # version 0 is the shared start, never "reached by training"
    if hit.empty:
        return None, None
    return int(hit["version"].iloc[0]), float(hit["wall_s"].iloc[0])


def quality_table(evals: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per (coordinates, variant): held-out quality (final, mean and 95 % CI over seeds) for
    pass@1, pass@k and the objective, and time to the baseline-derived target (seconds, updates)."""
    import pandas as pd

    if evals is None or evals.empty:
        return pd.DataFrame()
    metric, frac = run_metric(evals)
    col, lower = metric_column(metric), lower_is_better(evals, metric)
    rows = []
    for key, group in evals.groupby(keys, dropna=False, sort=False):
        rows += _group_rows(dict(zip(keys, key if isinstance(key, tuple) else (key,))), group, col, lower, frac)
    out = pd.DataFrame(rows)
    out["heldout_name"] = metric_name(evals, metric)
    out["heldout_lower_is_better"] = lower
    out["objective_name"] = str(evals["objective_metric"].iloc[0]) if "objective_metric" in evals else "objective"
    return out


def _group_rows(coords: dict, group: pd.DataFrame, col: str, lower: bool, frac: float) -> list[dict]:
    """The rows of one coordinate group: the baseline's curve sets the target for every variant."""
    baseline = group["baseline"].iloc[0] if "baseline" in group else None
    base = group[group["method"] == baseline]
    target, improvement, signal = None, None, None
    if not base.empty:
        s = per_seed(base, col)
        improvement = float(s["final"].mean() - s["start"].mean())
        signal = improvement_in_sd(s)
        improving = improvement < 0 if lower else improvement > 0
        target = float(s["start"].mean() + frac * improvement) if improving else None
    rows = []
    for variant, g in group.groupby("variant", sort=False):
        s = per_seed(g, col)
        reach = [first_reach(gs, col, target, lower) if target is not None else (None, None)
                 for _, gs in g.groupby("seed")]
        secs = [r[1] for r in reach if r[1] is not None]
        ups = [r[0] for r in reach if r[0] is not None]
        row = {**coords, "variant": variant, "method": g["method"].iloc[0], "heldout_seeds": int(len(s)),
               "heldout_start": float(s["start"].mean()), "heldout_target": target,
               "baseline_improvement": improvement, "baseline_improvement_sd": signal,
               "ttq_reached": len(secs), "ttq_updates_mean": ci95(ups)[0]}
        row["ttq_seconds_mean"], row["ttq_seconds_ci95"] = ci95(secs)
        row["heldout_mean"], row["heldout_ci95"] = ci95(s["final"])
        for name, c in (("pass_at_1", "pass_at_1"), ("pass_at_k", "pass_at_k"), ("objective", "objective_value")):
            row[f"{name}_mean"], row[f"{name}_ci95"] = ci95(per_seed(g, c)["final"]) if c in g else (None, None)
        rows.append(row)
    return _with_ttq_speedup(rows, baseline)


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
