"""Held-out quality, paired differences and time to quality: the other half of the comparison.

From the `evals` table (harness/results/tables.py: one row per cell x evaluated version):

- **the decision metric** (`--quality-metric`, default `auto`): `auto` is resolved here, from the
  rows, so a run recorded before a figure existed still resolves: the exact P(gold) where the task's
  gold is its only right answer (`trainers.tasks.unique_gold`: digits, knights_knaves) and the run
  recorded `gold_prob`; pass@1 (eval_samples samples per problem) otherwise (countdown: many
  expressions hit the target, so P(the canonical one) is not the quality). The finest figure
  decides because a coarse one can hide a loss (pass@4 saturates where P(gold) still moves);
- **quality** of a variant = its final held-out figure, mean over seeds with a 95 % confidence
  interval (Student's t, seeds as the samples);
- **paired difference**: the seeds are paired by design (the same initial adapter, the same
  rollout seeds, the same evaluation dice), so per seed d = variant's final - the baseline's final,
  and the difference is mean(d) ± t(0.975, n-1) sd(d) / sqrt(n). Its **resolution** is the smallest
  difference this design detects with 80 % power at the 5 % level, (t(0.975, n-1) + t(0.80, n-1))
  sd(d) / sqrt(n) (the minimum detectable effect of a paired t test; n = 3 seeds: 3.1 sd(d)). The
  verdict is "better" / "worse" when the 95 % interval excludes 0, else "indistinguishable" (at that
  resolution). `seeds_for(sd, gap)` inverts it: the seeds a pilot's paired sd needs to resolve a gap.
  Student's t, not a bootstrap: with 3-5 seeds a bootstrap's interval is too narrow (it cannot see
  tails it never sampled). The decision metric's are the `heldout_diff_*` columns; every figure the
  run recorded gets its own beside them (`diff_<m>_*`, m in METRICS), and `metrics_disagree` flags
  a row whose figures' verdicts differ;
- **share of the baseline's gain kept** (`gain_kept*`, `gain_share`): over the paired seeds,
  mean(method final - start) / mean(baseline final - start), with Fieller's 95 % interval;
- **time to quality, symmetric** (AlgoPerf's rule):
  one target per coordinate group, common to every method, from the baseline's seed-mean curve:
  start + f x (final - start) of the mean over seeds (f in TTQ_FRACTIONS, and `--quality-target` for
  the single-target `heldout_target` / `ttq_*` columns). Every seed of every method, the baseline
  included, reaches it when its curve stays at or past it for the rest of the run (a dip below it
  later un-reaches it), at a version and a training time interpolated linearly between the last
  evaluation short of it and the next (so the figure is finer than `--eval-every`); a seed that
  does not is censored: counted, never averaged away (AlgoPerf scores it as an infinite time). A
  per-seed target from each baseline seed's own curve would let the baseline reach its target by
  construction. The `ttq<pct>_*` columns compare times as a paired
  ratio method / baseline (`ttq_ratio`); training time is `cpu_s` (each update charged at its CPU
  seconds, compare.cpu_charged) where the machine was contended, else `wall_s` (the sum of seconds
  per update; evaluation time is in neither), and the wall ratio stands beside it. A method 2x
  faster per update that needs 2.3x the updates is slower here, which is the point;
- **quality at equal time** (`q_at_equal_time_*`): each seed's decision figure at the baseline's
  median training time, interpolated on its curve (a curve that ends sooner gives its last value and
  is counted in `q_at_equal_time_short`), mean ± CI and the paired difference from the baseline.

Every variant of a seed starts from the same policy (the LoRA update is zero at version 0) and
is evaluated on the same held-out problems with the same sampling seed, so the methods' curves
differ only by what training did. Pure pandas; imports no torch (trainers.tasks is torch-free).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable

from harness.results.wording import figure, num
from trainers import events
from trainers.spec import NO_BASELINE

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
    # (x - mean) * (x - mean), not ** 2: a float power raises OverflowError where a product goes to inf
    # (a result file holding 1e308 reads as an infinite spread, not a traceback)
    return mean, math.sqrt(sum((x - mean) * (x - mean) for x in xs) / (len(xs) - 1))


def ci95(values) -> tuple[float | None, float | None]:
    """(mean, half-width of the 95 % CI) over `values`; half-width None with fewer than 2."""
    xs = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not xs:
        return None, None
    mean, sd = mean_sd(xs)
    if sd is None:
        return mean, None
    return mean, _t(T95, len(xs) - 1) * sd / math.sqrt(len(xs))


def geo_ci(logs: list[float]) -> tuple[float | None, float | None, float | None]:
    """(geometric mean, 95 % CI low, high) of ratios given as their logs: a t interval on the logs
    (paired per-seed speedups and time ratios); (None, None, None) for none, no interval for one."""
    if not logs:
        return None, None, None
    mean, half = ci95(logs)
    if half is None:
        return math.exp(mean), None, None
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


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


METRICS = ("gold_prob", "pass_at_1", "pass_at_k", "objective")   # every figure a run may record, finest first
TTQ_FRACTIONS = (0.5, 0.75, 0.9)   # time-to-quality targets: these fractions of the baseline's seed-mean gain


def metric_column(metric: str) -> str:
    """The evals column a (resolved) `--quality-metric` reads."""
    return {"pass_at_k": "pass_at_k", "pass_at_1": "pass_at_1", "gold_prob": "gold_prob",
            "objective": "objective_value"}[metric]


def recorded(evals: pd.DataFrame, metric: str) -> bool:
    """The rows carry this figure (gold_prob is absent or empty in runs recorded before it)."""
    col = metric_column(metric)
    return col in evals and bool(evals[col].notna().any())


def resolve_metric(evals: pd.DataFrame, metric: str) -> str:
    """`auto` -> gold_prob where every task of the rows has a unique gold (`trainers.tasks.unique_gold`;
    no task column: not known, so not trusted) and the rows carry it, else pass_at_1 (else pass_at_k);
    any other name as it is."""
    if metric != "auto":
        return metric
    from trainers import tasks  # torch-free, but only `auto` needs the task registry: importing results stays light

    names = set(evals["task"].dropna().astype(str)) if "task" in evals else set()
    if names and all(tasks.unique_gold(n) for n in names) and recorded(evals, "gold_prob"):
        return "gold_prob"
    return "pass_at_1" if recorded(evals, "pass_at_1") else "pass_at_k"


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
    """(quality metric, target fraction) of these rows: their runs' `--quality-metric` with `auto`
    resolved (resolve_metric; `auto` also where the rows do not say), and `--quality-target`."""
    metric = evals["quality_metric"].dropna().iloc[0] if "quality_metric" in evals and evals["quality_metric"].notna().any() \
        else "auto"
    target = evals["quality_target"].iloc[0] if "quality_target" in evals and evals["quality_target"].notna().any() \
        else 0.9
    return resolve_metric(evals, str(metric)), float(target)


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


def _gained(gain: float, lower: bool) -> bool:
    return gain < 0 if lower else gain > 0


def common_target(s: pd.DataFrame, frac: float, lower: bool) -> float | None:
    """The target every method's seeds must reach: start + frac x (final - start) of the baseline's
    seed-mean curve (`s`: per_seed of the baseline; the curve's start and final are the means of the
    seeds' starts and finals); None where that curve did not gain (no target to reach)."""
    start, gain = float(s["start"].mean()), float(s["final"].mean() - s["start"].mean())
    return start + frac * gain if _gained(gain, lower) else None


def reach_and_hold(g: pd.DataFrame, col: str, target: float, lower: bool,
                   clock: str = "wall_s") -> tuple[float | None, float | None]:
    """(version, training seconds on `clock`) from which one seed's curve stays at or past `target`
    to its last evaluation, interpolated linearly between the last evaluation short of it and the
    next; (None, None) when the last evaluation is short of it."""
    g = g.sort_values("version")
    ys, vs, ws = (g[c].astype(float).tolist() for c in (col, "version", clock))
    ok = [(y <= target) if lower else (y >= target) for y in ys]
    if not ok or not ok[-1]:
        return None, None
    short = [i for i, k in enumerate(ok) if not k]
    if not short:
        return vs[0], ws[0]
    i = short[-1]
    f = (target - ys[i]) / (ys[i + 1] - ys[i])  # in (0, 1]: ys[i] is short of the target, ys[i+1] is not
    return vs[i] + f * (vs[i + 1] - vs[i]), ws[i] + f * (ws[i + 1] - ws[i])


def _times(g: pd.DataFrame, col: str, target: float | None, lower: bool, clock: str) -> dict:
    """seed -> (version, seconds on `clock`, wall seconds) at which it reaches and holds `target`;
    (None, None, None) for a censored seed (or every seed, without a target)."""
    out = {}
    for seed, gs in g.groupby("seed"):
        if target is None:
            out[seed] = (None, None, None)
            continue
        v, secs = reach_and_hold(gs, col, target, lower, clock)
        out[seed] = (v, secs, reach_and_hold(gs, col, target, lower)[1] if clock != "wall_s" else secs)
    return out


def gain_share(a: list[float], b: list[float], lower: bool = False) -> dict:
    """The share of the baseline's gain a method kept, over paired seeds: a = the method's final -
    start per seed, b = the baseline's; share = mean(a) / mean(b) (None when the baseline did not gain).

    The interval is Fieller's for a ratio of paired means: every share R for which a paired t test
    does not reject mean(a - R b) = 0 at the 5 % level, i.e. the roots of (ā - R b̄)² = t² var(a - R b)
    / n. Not the delta method: with 3-5 seeds and a baseline gain a few sds from 0 its symmetric
    interval misstates the skew of a ratio; Fieller's is exact under normality and opens up
    (lo, hi None) when the baseline's own gain is not resolved. At R = 1 the test is the paired test
    of the finals (a - b = method's final - baseline's final: the same start), so "keeps all of it"
    (the interval holds 1) agrees with the paired difference's "indistinguishable", by construction."""
    n = len(a)
    out = {"share": None, "lo": None, "hi": None, "verdict": None}
    if not n or not _gained(sum(b) / n, lower):
        return out
    ma, mb = sum(a) / n, sum(b) / n
    out["share"] = ma / mb
    if n < 2:
        return out
    q = _t(T95, n - 1) ** 2 / n
    cov = lambda x, y: sum((u - sum(x) / n) * (v - sum(y) / n) for u, v in zip(x, y)) / (n - 1)  # noqa: E731
    saa, sbb, sab = cov(a, a), cov(b, b), cov(a, b)
    qa, qb, qc = mb * mb - q * sbb, -2 * (ma * mb - q * sab), ma * ma - q * saa
    if qa > 0:   # bounded: the baseline's gain is resolved
        root = math.sqrt(max(qb * qb - 4 * qa * qc, 0.0))
        out["lo"], out["hi"] = (-qb - root) / (2 * qa), (-qb + root) / (2 * qa)
    d = [x - y for x, y in zip(a, b)]
    mean, half = ci95(d)
    out["verdict"] = ("keeps all of it" if abs(mean) <= half else "keeps less" if mean / mb < 0 else "keeps more")
    return out


def baseline_learned(r) -> bool:
    """Whether a comparison row's baseline gained measurably in held-out quality over the paired seeds:
    Fieller's interval for the share kept (gain_share) is bounded only when the baseline's gain's own
    95 % interval excludes 0; with one seed there is no interval, and a gain of 0 is none."""
    return all(num(r.get(c)) is not None for c in ("gain_kept", "gain_kept_lo", "gain_kept_hi"))


def baseline_missing(r) -> str | None:
    """Why a method's comparison row has no baseline figure to be held to, or None when it has one:
    the baseline has no cell recorded under the row's coordinates (a run stopped before it, or ran
    without it: no speedup either), or its cell has no held-out evaluation. Neither is a baseline
    that did not learn."""
    if "baseline_improvement" not in r or num(r.get("baseline_improvement")) is not None:
        return None   # a row from no held-out comparison, or one whose baseline has its figure
    if all(num(r.get(c)) is None for c in ("speedup_headline", "speedup_seed_mean", "speedup")):
        return "has no recorded cell under this link"
    return "has no held-out figure under this link"


def baseline_unlearned(r) -> bool:
    """A method's comparison row whose baseline's held-out gain is not resolved above 0 (`baseline_learned`):
    a time to a fraction of that gain is no time to quality, so its link has no target to reach. A
    baseline with no figure at all (`baseline_missing`) is not one that did not learn."""
    return (r.get("method") != r.get("baseline") and str(r.get("baseline")) != NO_BASELINE and "gain_kept_lo" in r
            and not baseline_learned(r) and baseline_missing(r) is None)


def ttq_ratio(mine: dict, base: dict) -> dict:
    """The paired ratio of times to a target, method / baseline, over the seeds both have: geometric
    mean and a t interval on the logs over the seeds where both reached it (compare._speedup_ci's
    pattern), the seeds only one reached, and the verdict (`ttq_verdict`). mine, base: seed -> seconds
    or None (censored)."""
    seeds = [s for s in mine if s in base]
    both = [s for s in seeds if mine[s] is not None and base[s] is not None]
    ties = [s for s in both if mine[s] == base[s] == 0]      # both past the target at version 0
    logs = [math.log(mine[s] / base[s]) for s in both if mine[s] > 0 and base[s] > 0] + [0.0] * len(ties)
    wins = [s for s in seeds if mine[s] is not None and (base[s] is None or (mine[s] == 0 < base[s]))]
    losses = [s for s in seeds if base[s] is not None and (mine[s] is None or (base[s] == 0 < mine[s]))]
    out = {"ratio": None, "lo": None, "hi": None, "n": len(logs), "only_method": len(wins),
           "only_baseline": len(losses)}
    out["ratio"], out["lo"], out["hi"] = geo_ci(logs)
    out["verdict"] = ttq_verdict(out, [math.exp(x) for x in logs])
    return out


def ttq_verdict(r: dict, ratios: list[float]) -> str:
    """faster / slower: the ratio's 95 % interval lies below / above 1 (and no censored seed says the
    opposite); indistinguishable; with fewer than 2 seeds where both reached, the censored seeds
    decide only when every seed points one way ("slower (censored)": the baseline reached where the
    method did not, never the other way round), "too few seeds for an interval" when no seed was
    censored on one side only, else "censored" with the reason."""
    wins, losses = r["only_method"], r["only_baseline"]
    if r["lo"] is not None:
        v = "faster" if r["hi"] < 1 else "slower" if r["lo"] > 1 else "indistinguishable"
        if (v == "faster" and losses) or (v == "slower" and wins):
            return "indistinguishable (censored seeds disagree)"
        return v
    if not (ratios or wins or losses):
        return "censored: no seed of either reached it"
    if wins and not losses and all(x < 1 for x in ratios):
        return "faster (censored)"
    if losses and not wins and all(x > 1 for x in ratios):
        return "slower (censored)"
    if not (wins or losses):   # every seed either both reached (too few of them) or neither did
        return "too few seeds for an interval"
    return "censored: too few seeds reached it"


def coord_key(values) -> tuple:
    """A coordinate tuple as a dict key (NaN and None both -> None: an unshaped run has no rate)."""
    return tuple(None if v is None or (isinstance(v, float) and math.isnan(v)) else v for v in values)


def with_cpu_seconds(evals: pd.DataFrame, updates: pd.DataFrame, charged: Callable) -> pd.DataFrame:
    """evals + `cpu_s`: per cell, the sum of its updates' CPU-charged seconds (`charged(rows)`, one
    value per update row: compare.cpu_charged) up to each evaluated version; unchanged where the rows
    do not say which cell they are (no `cell` column)."""
    import pandas as pd

    on = [c for c in ("run_id", "cell") if c in evals and c in updates]
    if "cell" not in on or updates.empty or "update_index" not in updates:
        return evals
    sums = {}
    for key, g in updates.groupby(on, dropna=False, sort=False):
        by = pd.Series(charged(g), index=g.index).groupby(g["update_index"]).sum().sort_index().cumsum()
        sums[coord_key(key if isinstance(key, tuple) else (key,))] = by
    evals = evals.copy()
    evals["cpu_s"] = [_upto(sums.get(coord_key([r[c] for c in on])), r["version"]) for _, r in evals.iterrows()]
    return evals


def _upto(cum, version) -> float | None:
    """The cumulative sum at the last update <= version (0 before the first); None without updates."""
    if cum is None:
        return None
    past = cum[cum.index <= version]
    return float(past.iloc[-1]) if len(past) else 0.0


def quality_table(evals: pd.DataFrame, keys: list[str], basis: str | dict | None = None) -> pd.DataFrame:
    """One row per (coordinates, variant): held-out quality (final, mean and 95 % CI over seeds) of
    every figure, the decision figure's paired difference (heldout_diff_*) and every figure's
    (diff_<m>_*), the share of the baseline's gain kept, time to the common targets and quality at
    equal time. `basis`: the clock of the ttq<pct>_* and equal-time columns, "cpu" or "wall" for every
    group, or {coord_key(coordinates): "cpu" | "wall"} (compare: "cpu" where the machine was
    contended); cpu needs the `cpu_s` column (with_cpu_seconds), else wall."""
    import pandas as pd

    if evals is None or evals.empty:
        return pd.DataFrame()
    metric, frac = run_metric(evals)
    col, lower = metric_column(metric), lower_is_better(evals, metric)
    if col not in evals:  # e.g. gold_prob asked of a run recorded before the learner wrote it
        return pd.DataFrame()
    figures = {m: (metric_column(m), lower_is_better(evals, m), metric_name(evals, m)) for m in METRICS
               if recorded(evals, m)}
    rows = []
    for key, group in evals.groupby(keys, dropna=False, sort=False):
        values = key if isinstance(key, tuple) else (key,)
        clock = basis.get(coord_key(values), "wall") if isinstance(basis, dict) else (basis or "wall")
        clock = "cpu" if clock == "cpu" and "cpu_s" in group and group["cpu_s"].notna().all() else "wall"
        rows += _group_rows(dict(zip(keys, values)), group, (metric, col, lower, frac), figures, clock)
    out = pd.DataFrame(rows)
    out["heldout_metric"] = metric
    out["heldout_name"] = metric_name(evals, metric)
    out["quality_target"] = frac     # --quality-target: the single-target columns' fraction, the verdict's headline
    out["heldout_lower_is_better"] = lower
    out["objective_name"] = str(evals["objective_metric"].iloc[0]) if "objective_metric" in evals else "objective"
    return out


def _group_rows(coords: dict, group: pd.DataFrame, decision: tuple, figures: dict, clock: str) -> list[dict]:
    """The rows of one coordinate group: the baseline's seed-mean curve sets the targets every
    method's seeds (the baseline's included) must reach and hold."""
    metric, col, lower, frac = decision
    baseline = group["baseline"].iloc[0] if "baseline" in group else None
    base = group[group["method"] == baseline]
    sb = per_seed(base, col) if not base.empty else None
    improvement = float(sb["final"].mean() - sb["start"].mean()) if sb is not None else None
    target = common_target(sb, frac, lower) if sb is not None else None
    targets = {f: common_target(sb, f, lower) if sb is not None else None for f in TTQ_FRACTIONS}
    secs = "cpu_s" if clock == "cpu" else "wall_s"
    base_ttq = _times(base, col, target, lower, "wall_s")
    base_times = {f: _times(base, col, t, lower, secs) for f, t in targets.items()}
    end = events.median([float(g.sort_values("version")[secs].iloc[-1]) for _, g in base.groupby("seed")])
    base_at = _at_time(base, col, secs, end)[0]
    rows = []
    for variant, g in group.groupby("variant", sort=False):
        s = per_seed(g, col)
        ttq = _times(g, col, target, lower, "wall_s")
        row = {**coords, "variant": variant, "method": g["method"].iloc[0], "baseline": baseline,
               "heldout_seeds": int(len(s)),
               "heldout_start": float(s["start"].mean()), "heldout_target": target,
               "baseline_improvement": improvement,
               "baseline_improvement_sd": improvement_in_sd(sb) if sb is not None else None}
        row["heldout_mean"], row["heldout_ci95"] = ci95(s["final"])
        row.update(_single_target(ttq, base_ttq, target))
        row.update(_figure_columns(g, base, figures, metric))
        for f, t in targets.items():
            row.update(_ttq_columns(int(round(100 * f)), t, _times(g, col, t, lower, secs), base_times[f],
                                    clock, g["method"].iloc[0] == baseline))
        row.update(_equal_time_columns(g, col, secs, end, base_at, lower, clock))
        rows.append(row)
    return _with_ttq_speedup(rows, baseline)


def _figure_columns(g: pd.DataFrame, base: pd.DataFrame, figures: dict, decision: str) -> dict:
    """Per figure m the run recorded: final mean ± CI (<m>_mean, <m>_ci95), the paired difference from
    the baseline (diff_<m>_*: name as the report prints it, mean, ci95, sd, n, resolution, verdict) and the share of its gain kept
    (gain_kept_<m>, _lo, _hi, _verdict); the decision figure's also as heldout_diff_* and gain_kept*,
    and metrics_disagree (+ a note) where the verdicts of the figures that have one differ."""
    out, said = {}, {}
    for m in ("pass_at_1", "pass_at_k", "gold_prob", "objective"):
        c = metric_column(m)
        out[f"{m}_mean"], out[f"{m}_ci95"] = ci95(per_seed(g, c)["final"]) if c in g else (None, None)
    for m, (c, lower, name) in figures.items():
        s, sb = per_seed(g, c), per_seed(base, c) if not base.empty else None
        seeds = [x for x in s.index if sb is not None and x in sb.index]
        d = paired([float(s.loc[x, "final"] - sb.loc[x, "final"]) for x in seeds], lower)
        out[f"diff_{m}_name"] = name
        out.update({f"diff_{m}_{k}": d[k] for k in ("mean", "ci95", "sd", "n", "resolution", "verdict")})
        share = gain_share([float(s.loc[x, "final"] - s.loc[x, "start"]) for x in seeds],
                           [float(sb.loc[x, "final"] - sb.loc[x, "start"]) for x in seeds], lower)
        out.update({f"gain_kept_{m}": share["share"], f"gain_kept_{m}_lo": share["lo"],
                    f"gain_kept_{m}_hi": share["hi"], f"gain_kept_{m}_verdict": share["verdict"]})
        if d["verdict"] is not None:
            said[name] = (d["verdict"], d["mean"], d["ci95"])
    if decision in figures:
        out.update({f"heldout_{k}": out[f"diff_{decision}_{k}"] for k in ("resolution", "verdict")})
        out.update({f"heldout_diff_{k}": out[f"diff_{decision}_{k}"] for k in ("mean", "ci95", "sd", "n")})
        out.update({f"gain_kept{k}": out[f"gain_kept_{decision}{k}"] for k in ("", "_lo", "_hi", "_verdict")})
    out["metrics_disagree"] = len({v[0] for v in said.values()}) > 1
    out["metrics_disagree_note"] = ("; ".join(f"{n} says {v} ({figure(m, '+')} ± {figure(h)})"
                                              for n, (v, m, h) in said.items())
                                    if out["metrics_disagree"] else None)
    return out


def _single_target(ttq: dict, base_ttq: dict, target: float | None) -> dict:
    """The `--quality-target` columns (wall seconds): seeds reaching the common target, mean updates
    and seconds to it over those seeds, and the paired seconds difference from the baseline over the
    seeds where both reached it (ttq_diff_*; fewer seconds is better)."""
    reached = {s: t for s, t in ttq.items() if t[1] is not None}
    out = {"ttq_reached": len(reached), "ttq_updates_mean": ci95([t[0] for t in reached.values()])[0]}
    out["ttq_seconds_mean"], out["ttq_seconds_ci95"] = ci95([t[1] for t in reached.values()])
    both = [s for s in reached if base_ttq.get(s, (None, None))[1] is not None]
    t = paired([reached[s][1] - base_ttq[s][1] for s in both], lower=True)
    out.update({"ttq_diff_mean": t["mean"], "ttq_diff_ci95": t["ci95"], "ttq_diff_n": t["n"],
                "ttq_verdict": t["verdict"]})
    return out


def _ttq_columns(pct: int, target: float | None, mine: dict, base: dict, clock: str, is_baseline: bool) -> dict:
    """ttq<pct>_*: the common target, seeds that reached / were censored, mean seconds over the
    reaching seeds, the paired ratio method / baseline on `clock` (and on wall time) with its CI and
    verdict (None for the baseline's own row, and everything but the target without a target)."""
    p = f"ttq{pct}_"
    done = [t[1] for t in mine.values() if t[1] is not None]
    out = {p + "target": target, p + "seconds_basis": clock, p + "reached": None, p + "censored": None,
           p + "seconds_mean": None, p + "ratio": None, p + "ratio_lo": None, p + "ratio_hi": None,
           p + "ratio_n": 0, p + "ratio_wall": None, p + "only_method": None, p + "only_baseline": None,
           p + "verdict": None}
    if target is None:
        return out
    r = ttq_ratio({s: t[1] for s, t in mine.items()}, {s: t[1] for s, t in base.items()})
    wall = ttq_ratio({s: t[2] for s, t in mine.items()}, {s: t[2] for s, t in base.items()})
    out.update({p + "reached": len(done), p + "censored": len(mine) - len(done),
                p + "seconds_mean": sum(done) / len(done) if done else None, p + "ratio": r["ratio"],
                p + "ratio_lo": r["lo"], p + "ratio_hi": r["hi"], p + "ratio_n": r["n"], p + "ratio_wall": wall["ratio"],
                p + "only_method": r["only_method"], p + "only_baseline": r["only_baseline"],
                p + "verdict": None if is_baseline else r["verdict"]})
    return out


def _at_time(g: pd.DataFrame, col: str, clock: str, when: float | None) -> tuple[dict, int]:
    """({seed: the figure at training time `when`, linear between evaluations}, seeds whose curve
    ended before `when`: their last value)."""
    out, short = {}, 0
    if when is None:
        return out, 0
    for seed, gs in g.groupby("seed"):
        gs = gs.sort_values("version")
        ts, ys = gs[clock].astype(float).tolist(), gs[col].astype(float).tolist()
        if when >= ts[-1]:
            out[seed], short = ys[-1], short + (when > ts[-1])
            continue
        i = next(i for i, t in enumerate(ts) if t > when)   # ts[0] = 0 <= when < ts[i]
        f = 0.0 if i == 0 else (when - ts[i - 1]) / (ts[i] - ts[i - 1])
        out[seed] = ys[i] if i == 0 else ys[i - 1] + f * (ys[i] - ys[i - 1])
    return out, short


def _equal_time_columns(g, col: str, clock: str, when: float | None, base_at: dict, lower: bool,
                        basis: str) -> dict:
    """Quality at equal time: each seed's decision figure at the baseline's median training time
    `when` (equal_time_s, on `basis`), mean ± CI, seeds whose curve ended sooner (their last value:
    q_at_equal_time_short), and the paired difference from the baseline."""
    at, short = _at_time(g, col, clock, when)
    mean, half = ci95(list(at.values()))
    d = paired([at[s] - base_at[s] for s in at if s in base_at], lower)
    return {"equal_time_s": when, "equal_time_basis": basis, "q_at_equal_time_mean": mean,
            "q_at_equal_time_ci95": half, "q_at_equal_time_short": short if when is not None else None,
            "q_at_equal_time_diff_mean": d["mean"], "q_at_equal_time_diff_ci95": d["ci95"],
            "q_at_equal_time_diff_n": d["n"], "q_at_equal_time_diff_verdict": d["verdict"]}


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
