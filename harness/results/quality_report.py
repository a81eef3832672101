"""The report's held-out quality sections, as markdown lines: what quality.py measured, in words.

    section(comp)          every section below, in the report's order (report.build calls it)
    quality_section(comp)  final figures, the common target and time to it (the single-target table)
    paired_section(comp)   per method: the decision figure's paired difference, resolution, verdict
    metrics_table(comp)    per method and figure: paired difference, resolution, verdict, share of the
                           baseline's gain kept; a line where the figures' verdicts disagree
    ttq_table(comp)        per method and target fraction: seeds reaching / censored, the paired time
                           ratio with its CI, the clock, the verdict
    equal_time_lines(comp) per method: its quality at the baseline's median training time

Numbers come from compare.py's table (quality.py's columns); this module only formats them.
report.py imports it, so it keeps its own few formatters rather than import report's.
"""
from __future__ import annotations

import math

import pandas as pd

from harness.results import compare, quality
from harness.results.compare import CI_MIN_SEEDS
from harness.results.quality import SIGNAL_SD, TTQ_FRACTIONS
from harness.results.verdict import SHARE_RESOLVED, beyond_link, share_unresolved
from harness.results.wording import count as _count, interval as _interval, link as _link, markdown_table
from harness.results.wording import figure, fmt, none as _none, pm as _pm
from trainers.spec import NO_BASELINE


def _x(v) -> str:
    return fmt(v, "x")

# The HiLo paper's quality gap (K&K pass@4 83.2 full sync vs 81.6 Spar at 1.6 %): what a run should resolve.
PAPER_GAP = 0.016


def _methods(comp: pd.DataFrame) -> pd.DataFrame:
    """The rows that are not their own baseline and were evaluated."""
    if comp.empty or "heldout_mean" not in comp:
        return comp.iloc[0:0]
    return comp[(comp["method"] != comp["baseline"]) & comp["heldout_mean"].notna()]


def apart(comp: pd.DataFrame, r) -> list[str]:
    """What tells a row apart from the report's other rows beside its link (a swept run parameter, the
    workers of runs at one link: verdict.beyond_link)."""
    return beyond_link(r, comp, [k for k in compare.coords(comp) if k in comp])


def method_cell(comp: pd.DataFrame, r) -> str:
    """A table row's method, with what tells it apart beside its link column (`apart`)."""
    extra = apart(comp, r)
    return r["variant"] + (f" ({', '.join(extra)})" if extra else "")


def _who(comp: pd.DataFrame, r) -> str:
    """A line's method, with its link where the report holds more than one and what else tells it apart (two
    runs or a sweep: the same method twice would read alike)."""
    several = len({_link(row) for _, row in comp.iterrows()}) > 1
    extra = ([_link(r)] if several else []) + apart(comp, r)
    return f"`{r['variant']}`" + (f" ({', '.join(extra)})" if extra else "")


def _clock(basis) -> str:
    return "CPU time" if basis == "cpu" else "wall clock"


# ---- final figures and the single target --------------------------------------------------------

def quality_rows(comp: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """The held-out quality and time-to-quality table: one row per (link, variant)."""
    # P(gold) (exact, trainers/hilo/evaluate.py) where the run recorded it: runs before it did not
    gold = "gold_prob_mean" in comp and comp["gold_prob_mean"].notna().any()
    head = ["link", "method", "held-out pass@1 (final)", "held-out pass@k (final)",
            *(["held-out P(gold) (final)"] if gold else []), "held-out objective (final)",
            "target", "seeds reaching it", "training s to target", "updates to target", "speedup to quality",
            "speedup per update"]
    rows = []
    no_target = {_link(r) for _, r in comp.iterrows() if quality.baseline_unlearned(r)}   # its baseline did not learn
    for _, r in comp.iterrows():
        if _none(r.get("heldout_mean", float("nan"))):
            continue
        obj = {"reverse_kl": "reverse KL", "mean_reward": "reward"}.get(r.get("objective_name"), "objective")
        n = r.get("heldout_seeds")
        ttq = (["no target: the baseline's gain is not resolved above 0", "-", "-", "-"] if _link(r) in no_target else
               ["-" if _none(r.get("heldout_target")) else f"{r['heldout_name']} {figure(r['heldout_target'])}",
                f"{_count(r.get('ttq_reached'))} / {_count(r.get('heldout_seeds'))}",
                _pm(r.get("ttq_seconds_mean"), r.get("ttq_seconds_ci95"), ".2f", n=r.get("ttq_reached")),
                _pm(r.get("ttq_updates_mean"), None, ".1f")])
        rows.append([_link(r), method_cell(comp, r), _pm(r.get("pass_at_1_mean"), r.get("pass_at_1_ci95"), n=n),
                     _pm(r.get("pass_at_k_mean"), r.get("pass_at_k_ci95"), n=n),
                     *([_pm(r.get("gold_prob_mean"), r.get("gold_prob_ci95"), n=n)] if gold else []),
                     f"{obj} {_pm(r.get('objective_mean'), r.get('objective_ci95'), n=n)}", *ttq,
                     NOT_MEASURABLE if quality.baseline_unlearned(r) else _x(r.get("ttq_speedup")), _x(r.get("speedup"))])
    return head, rows


NOT_MEASURABLE = "not measurable (baseline's gain not resolved above 0)"


def signal_text(comp: pd.DataFrame) -> str:
    """How far the baseline's own held-out figure moved, in seed-to-seed sds, per link: below
    SIGNAL_SD the run cannot tell a method's quality cost from seed noise, and the report says so."""
    if "baseline_improvement_sd" not in comp:
        return ""
    base = comp[(comp["method"] == comp["baseline"]) & comp["baseline_improvement_sd"].notna()]
    parts, weak, worse = [], False, False
    for _, r in base.iterrows():
        sd = float(r["baseline_improvement_sd"])
        weak |= sd < SIGNAL_SD
        lower = bool(r.get("heldout_lower_is_better", False))
        worse |= sd >= SIGNAL_SD and (r["baseline_improvement"] > 0 if lower else r["baseline_improvement"] < 0)
        where = f" ({_link(r)})" if len(base) > 1 else ""
        parts.append(f"{figure(r['baseline_improvement'], '+')} ({'all seeds equal' if math.isinf(sd) else f'{sd:.1f} sd'})"
                     f"{where}")
    if not parts:
        return ""
    text = f" Baseline's {base['heldout_name'].iloc[0]} moved by {', '.join(parts)} over its seeds."
    if weak:
        text += (f" **Weak signal**: below {SIGNAL_SD:g} seed-to-seed sds a method's difference from the baseline "
                 "is not told apart from noise (more updates, seeds or held-out problems).")
    if worse:   # a clear move the wrong way: training hurt held-out quality, so no method has a target to reach
        text += (" **The baseline got worse**: its training lowered held-out quality, so time to quality has no "
                 "target and a method's 'quality cost' is measured against a decline (check the learning rate).")
    return text


def quality_notes(comp: pd.DataFrame) -> list[str]:
    """One line per variant whose per-update speedup does not survive as a time-to-quality speedup."""
    out = []
    base = {r.get("baseline"): r for _, r in comp.iterrows() if r.get("method") == r.get("baseline")}
    for _, r in comp.iterrows():
        per_update, ttq = r.get("speedup"), r.get("ttq_speedup")
        if r.get("method") == r.get("baseline") or _none(per_update) or _none(r.get("heldout_target", float("nan"))):
            continue
        if quality.baseline_unlearned(r):
            continue   # the baseline's gain is not resolved above 0: no target to time
        b = base.get(r.get("baseline"))
        base_reached = b.get("ttq_reached", 0) if b is not None else r.get("heldout_seeds", 0)
        if r.get("ttq_reached", 0) < min(base_reached, r.get("heldout_seeds", 0)):   # fewer than the baseline did
            out.append(f"- **{r['variant']}**: {_x(per_update)} per update, but only "
                       f"{_count(r['ttq_reached'])} of {_count(r['heldout_seeds'])} seeds reached the target "
                       f"(the baseline: {_count(base_reached)}).")
        elif not _none(ttq) and ttq < per_update:
            out.append(f"- **{r['variant']}**: {_x(per_update)} per update, {_x(ttq)} to quality "
                       f"(it needs {r['ttq_updates_mean']:.1f} updates to the target).")
    return out


def quality_section(comp: pd.DataFrame) -> list[str]:
    head, rows = quality_rows(comp)
    if not rows:
        return []
    r = comp[comp["heldout_mean"].notna()].iloc[0]
    frac = r.get("quality_target") if not _none(r.get("quality_target")) else 0.9
    text = (f"Held-out problems (never trained on; trainers/tasks/heldout.py), evaluated after each cell's training "
            f"loop, so evaluation time is in no update's seconds. Final figures: the figure at each seed's last evaluated "
            f"version, mean ± 95 % CI over seeds (Student's t; with fewer than {CI_MIN_SEEDS} seeds the mean and n). "
            f"Quality is decided on {r['heldout_name']}{_metric_why(r)}. Target = {100 * frac:g} % of "
            f"`{r['baseline']}`'s seed-mean gain in {r['heldout_name']} (start + {frac:g} × (final − start) of its curve "
            "averaged over seeds), common to every method, the baseline included; a seed reaches it when its curve "
            "stays at or past it to the end, and a seed that never does is counted, not averaged. Training s to "
            "target = the sum of wall seconds per update up to that point, interpolated between evaluations; speedup "
            "to quality = the baseline's / the method's (only where every seed of both reached it).")
    notes = quality_notes(comp)
    text += signal_text(comp)
    if comp["baseline"].astype(str).eq(NO_BASELINE).all():   # the text above has no baseline to name
        text = text[:text.index(" Target = ")] + (" **No target**: no baseline ran (`--baseline none`), so there "
                                                   "is no gain to reach a share of and no time to quality.")
    elif comp["heldout_target"].isna().all():
        text += (" **No target**: the baseline's held-out figure did not improve in this run, so no time to "
                 "quality can be measured (more updates, or a task/model that learns: see the presets).")
    return ["## Held-out quality and time to quality", "", text, "", markdown_table(head, rows), "",
            *(["Per-update speedups that do not carry over to time to quality:", "", *notes, ""] if notes else [])]


def _metric_why(r) -> str:
    """Why this figure decides (`auto` resolves to the finest figure that means quality)."""
    return {"gold_prob": " (the exact probability that one sample is the gold answer: this task's gold is its only "
                         "right answer, and P(gold) carries no sampling noise)",
            "pass_at_1": " (the share of samples that are right; P(gold) is not the quality where many answers are "
                         "right, or was not recorded)"}.get(r.get("heldout_metric"), "")


# ---- paired differences -------------------------------------------------------------------------

def paired_section(comp: pd.DataFrame) -> list[str]:
    """One line per method: its paired difference from the baseline (final held-out figure and seconds
    to target, 95 % CI over seeds), the smallest difference this run resolves, and the verdict."""
    if "heldout_diff_n" not in comp:
        return []
    lines = []
    for _, r in comp[(comp["method"] != comp["baseline"]) & (comp["heldout_diff_n"].fillna(0) > 0)].iterrows():
        n, res = int(r["heldout_diff_n"]), r.get("heldout_resolution")
        if _none(r.get("heldout_diff_ci95")):
            lines.append(f"- {_who(comp, r)}: {r['heldout_name']} {figure(r['heldout_diff_mean'], '+')} over {n} "
                         "paired seed: too few for an interval or a resolution.")
            continue
        if r["heldout_diff_sd"] < 1e-12:  # the same difference on every seed (bit-identical methods, no learning)
            lines.append(f"- {_who(comp, r)} − baseline: {r['heldout_name']} {figure(r['heldout_diff_mean'], '+')} on "
                         f"every one of {n} paired seeds (paired sd 0): **{r['heldout_verdict']}**, with no spread to state a "
                         "resolution from.")
            continue
        need = quality.seeds_for(float(r["heldout_diff_sd"]), PAPER_GAP)
        ttq = (f"; seconds to target {r['ttq_diff_mean']:+.1f} ± {r['ttq_diff_ci95']:.1f} ({int(r['ttq_diff_n'])} seeds: "
               f"{r['ttq_verdict']})" if not _none(r.get("ttq_diff_ci95")) else "")
        lines.append(f"- {_who(comp, r)} − baseline: {r['heldout_name']} {figure(r['heldout_diff_mean'], '+')} ± "
                     f"{figure(r['heldout_diff_ci95'])} ({n} paired seeds, sd {figure(r['heldout_diff_sd'])}); this run "
                     f"resolves differences of {figure(res)} or more: **{r['heldout_verdict']}**{ttq}. The paper's gap "
                     f"({PAPER_GAP}) needs {need or 'over 1000'} seeds at this sd.")
    if not lines:
        return []
    return ["## Paired differences from the baseline", "",
            "Seeds are paired by design (same initial adapter, rollout seeds and evaluation dice): per seed, the "
            "method's final held-out figure minus the baseline's, mean ± 95 % CI (Student's t over seeds). "
            "Resolution: the smallest difference this many seeds detect with 80 % power at the 5 % level, "
            "(t(0.975) + t(0.80)) × sd / √n. Better / worse: the interval excludes 0; otherwise indistinguishable "
            "at that resolution (harness/results/quality.py).", "", *lines, ""]


NO_SHARE = "no share: the baseline's gain is not resolved above 0"   # the verdict's "no share of its gain to keep"


def metrics_table(comp: pd.DataFrame) -> list[str]:
    """Per method and held-out figure: the paired difference ± CI (n), resolution, verdict, and the share
    of the baseline's gain kept with its CI; a line under the table for each method whose figures'
    verdicts disagree."""
    rows, notes = [], []
    for _, r in _methods(comp).iterrows():
        for m in quality.METRICS:
            if _none(r.get(f"diff_{m}_n")) or not r.get(f"diff_{m}_n"):
                continue
            name = r.get(f"diff_{m}_name") or m
            lo, hi = r.get(f"gain_kept_{m}_lo"), r.get(f"gain_kept_{m}_hi")
            share = r.get(f"gain_kept_{m}")
            n = int(r[f"diff_{m}_n"])
            # no share where the verdict gives none: the baseline's gain not resolved above 0 (no interval), or the
            # deciding figure of a baseline that did not learn measurably, or one paired seed (no interval at all)
            unbounded = (_none(lo) or _none(hi)) and n >= 2 or (m == r.get("heldout_metric")
                                                                  and quality.baseline_unlearned(r))
            kept = ("-" if _none(share) else NO_SHARE if unbounded else "no share: one paired seed, no interval"
                    if n < 2 else f"{100 * share:.0f} % [{100 * lo:.0f}, {100 * hi:.0f}]")
            share_verdict = "-" if unbounded or n < 2 else r.get(f"gain_kept_{m}_verdict") or "-"
            if share_verdict == "keeps all of it" and share_unresolved(lo, hi, share_verdict):
                share_verdict = "not resolved"   # as the verdict words it: an interval past 100 % ± SHARE_RESOLVED
            rows.append([_link(r), method_cell(comp, r), name + (" (decides)" if m == r.get("heldout_metric") else ""),
                         _pm(r.get(f"diff_{m}_mean"), r.get(f"diff_{m}_ci95"), "+.3f") + f" ({int(r[f'diff_{m}_n'])})",
                         "-" if _none(r.get(f"diff_{m}_resolution")) else figure(r[f'diff_{m}_resolution']),
                         r.get(f"diff_{m}_verdict") or "-", kept, share_verdict])
        if r.get("metrics_disagree") is True:
            notes.append(f"- `{r['variant']}`: the figures disagree: {r['metrics_disagree_note']}. The decision is "
                         f"{r['heldout_name']}'s.")
    if not rows:
        return []
    head = ["link", "method", "figure", "method − baseline, ± 95 % CI (paired seeds)", "resolution", "verdict",
            "share of the baseline's gain kept [95 % CI]", "share verdict"]
    return ["## Every held-out figure, side by side", "",
            "Each figure the run recorded, per method: the paired difference from the baseline (per seed, the "
            "method's final figure minus the baseline's; mean ± 95 % CI over seeds), the smallest difference this "
            "run resolves, the verdict, and the share of the baseline's gain (final − start) the method kept: "
            "mean gain / the baseline's mean gain over the paired seeds, with Fieller's 95 % interval (none where the "
            "baseline's own gain is within its seed noise: no share). The share keeps all of it when that interval "
            f"holds 100 % and lies within 100 % ± {100 * SHARE_RESOLVED:.0f} points (not resolved where it reaches "
            "past them: it cannot tell all of the gain from half or twice it). A coarse figure can "
            "hide what a "
            "fine one resolves (pass@4 saturates where P(gold) still moves): the decision is the finest figure "
            "that means quality.", "", markdown_table(head, rows), "", *notes, *([""] if notes else [])]


# ---- time to quality, symmetric -----------------------------------------------------------------

def ttq_table(comp: pd.DataFrame) -> list[str]:
    """Per method and target fraction: the common target, seeds reaching / censored, mean seconds over
    the reaching seeds, the paired time ratio method / baseline with its CI and seeds, the wall-clock
    ratio beside it, the clock, the verdict."""
    if comp.empty or "ttq50_target" not in comp:
        return []
    rows = []
    for _, r in comp[comp["heldout_mean"].notna()].iterrows():
        base, unlearned = r["method"] == r["baseline"], quality.baseline_unlearned(r)
        for f in TTQ_FRACTIONS:
            p = f"ttq{int(round(100 * f))}_"
            if _none(r.get(p + "target")):
                continue
            ratio = "-" if base or _none(r.get(p + "ratio")) else NOT_MEASURABLE if unlearned else (
                _x(r[p + "ratio"]) + _interval(r.get(p + "ratio_lo"), r.get(p + "ratio_hi"))
                + f" ({int(r[p + 'ratio_n'])})")
            rows.append([_link(r), method_cell(comp, r), f"{100 * f:g} %: {r['heldout_name']} {figure(r[p + 'target'])}",
                         f"{_count(r.get(p + 'reached'))} / {_count(r.get(p + 'censored'))}",
                         _pm(r.get(p + "seconds_mean"), None, ".1f"), ratio,
                         "-" if base or unlearned else _x(r.get(p + "ratio_wall")),
                         _clock(r.get(p + "seconds_basis")),
                         "baseline" if base else "not measurable" if unlearned else _ttq_words(r, p)])
    if not rows:
        return []
    r = comp[comp["ttq50_target"].notna()].iloc[0]
    head = ["link", "method", "target", "seeds reached / censored", "mean s to target (reaching seeds)",
            "time ratio method / baseline [95 % CI] (seeds both reached)", "wall-clock ratio", "clock", "verdict"]
    return ["## Time to quality, one target for every method", "",
            f"Target: {', '.join(f'{100 * f:g} %' for f in TTQ_FRACTIONS)} of `{r['baseline']}`'s seed-mean gain "
            f"in {r['heldout_name']} (its curve averaged over seeds: start + fraction × (final − start)), common to "
            "every method, the baseline included. A seed reaches it at the training time from which its curve stays "
            "at or past it (interpolated between evaluations); a seed that never reaches and holds it is censored: "
            "counted, never averaged away. Time ratio: per seed where both reached, the method's seconds / the "
            "baseline's; geometric mean with a t interval on the logs; below 1 the method is faster. A baseline "
            "seed that misses a target its method seed reaches counts for the method, the other way round against "
            "it. Clock: CPU time (each update charged at the CPU seconds it used) where the machine was contended, "
            "else the wall clock; the wall-clock ratio stands beside it.", "", markdown_table(head, rows), ""]


def _ttq_words(r, p: str) -> str:
    """The verdict, with the censored seeds that speak for one side."""
    v = r.get(p + "verdict") or "-"
    extra = [f"{int(r[p + k])} seed(s) only {who} reached" for k, who in (("only_method", "the method"),
                                                                          ("only_baseline", "the baseline"))
             if not _none(r.get(p + k)) and r.get(p + k)]
    return v + (f" ({'; '.join(extra)})" if extra else "")


# ---- quality at equal time ----------------------------------------------------------------------

def equal_time_lines(comp: pd.DataFrame) -> list[str]:
    """One line per method: its decision figure at the baseline's median training time, mean ± CI over
    seeds, and its paired difference from the baseline's at that time."""
    lines = []
    for _, r in _methods(comp).iterrows():
        if _none(r.get("equal_time_s")) or _none(r.get("q_at_equal_time_mean")):
            continue
        n, short = r.get("q_at_equal_time_diff_n"), r.get("q_at_equal_time_short")
        diff = ("" if _none(r.get("q_at_equal_time_diff_mean")) else
                f"; − baseline {_pm(r['q_at_equal_time_diff_mean'], r.get('q_at_equal_time_diff_ci95'), '+.3f', n=n)}"
                f" over {int(n)} paired seeds: **{r.get('q_at_equal_time_diff_verdict') or 'no interval'}**")
        flag = (f" ({int(short)} seed(s) finished training sooner: their last value, an under-statement if they "
                "were still improving)" if not _none(short) and short else "")
        lines.append(f"- {_who(comp, r)}: {r['heldout_name']} {_pm(r['q_at_equal_time_mean'], r.get('q_at_equal_time_ci95'), n=r.get('heldout_seeds'))}"
                     f" after {r['equal_time_s']:.1f} s of training ({_clock(r.get('equal_time_basis'))}){diff}{flag}.")
    if not lines:
        return []
    return ["## Quality at equal training time", "",
            "Each method's held-out figure at the baseline's median training time (the time its seeds' curves end), "
            "read off each seed's curve, linear between evaluations; a method whose training ended sooner gives its "
            "last value. Paired difference: per seed, method minus baseline at that time.", "", *lines, ""]


def section(comp: pd.DataFrame) -> list[str]:
    """Every quality section, in the report's order."""
    return [*quality_section(comp), *paired_section(comp), *metrics_table(comp), *ttq_table(comp),
            *equal_time_lines(comp)]
