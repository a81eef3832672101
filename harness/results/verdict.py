"""The verdict: the report's first screen, both halves of the answer in one place.

Per method (and link), against the run's baseline:
- **speed**: the headline speedup per update with its 95 % interval over paired seeds (compare.py:
  CPU time when the machine was contended, wall-clock otherwise), the other clock beside it;
- **quality**: the share of the baseline's held-out gain the method keeps (its 95 % interval and
  verdict) in the finest metric the task supports (quality.py: the exact P(gold) where the gold
  answer is unique, else pass@1), with the paired difference, and a line when metrics disagree;
- **time to quality**: at each fraction of the baseline's seed-mean gain (one target common to every
  method), the paired ratio of training seconds (method / baseline) or how many seeds were censored;
  the summary names the run's `--quality-target` (the held-out section's "Target"); where the baseline
  did not learn measurably, "not measurable" instead of any ratio (a fraction of no gain is no target);
- **regime**: how much of full sync's update the link carried (regime_report.py), against the paper's.
Then one sentence per method in words, and a line when the resolved halves point different ways
("is 1.90x faster per update, keeps 68 % of full-bf16's gain in P(gold) (worse) and is slower to 90 %
of full-bf16's quality"); an unresolved half is said as such ("its time to 90 % of full-bf16's
quality is not resolved with 3 seeds", "keeps 99 % [55, 201 %] of full-bf16's gain (not resolved)":
a share whose interval holds 100 % but reaches past 100 % ± SHARE_RESOLVED), never as a
disagreement, and no share of a baseline gain that is not resolved above 0 is given. Numbers come
from compare.py / quality.py; this module only words them.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.results import compare, dataparallel_report, ledger, regime_report, tables
from harness.results.quality import baseline_learned, baseline_missing
from harness.results.wording import CI_MIN_SEEDS, LINK_WORDS, figure as _fig, interval as _ci, link, none as _none
from harness.results.wording import num as _num, run_name
from trainers import spec
from trainers.spec import NO_BASELINE, is_data_parallel

NO_REGIME = ("**Regime**: not recorded (this run's prediction.json predates the comm ratio, or it has no full-sync "
             "rows: `python -m harness.projection.prediction RUN` rebuilds it from the run folder).")
NO_FULL_SYNC = ("**Regime**: not measured: no full-sync cell ran (`--baseline none`), so there is no full sync's "
                "link/compute ratio to state.")
DP_REGIME = ("**Regime**: not stated for data-parallel methods (the regime is HiLo full sync's link/compute ratio per "
             "update); ")
FRACTIONS = (50, 75, 90)     # the time-to-quality fractions quality.py measures (TTQ_FRACTIONS, in %)
DEFAULT_TARGET = 90          # --quality-target's default (trainers/spec.py), for rows that do not carry theirs
SHARE_RESOLVED = 0.25        # a kept share is "all of it" only when its whole interval lies within 100 % ± this


def speed(r) -> tuple[str, str]:
    """(words for the speed line, the summary's clause) of a comparison row."""
    s, lo, hi = _num(r.get("speedup_headline")), r.get("speedup_headline_lo"), r.get("speedup_headline_hi")
    basis = str(r.get("speedup_headline_basis") or "wall")
    if s is None:   # results older than the headline columns: the paired wall-clock figure
        s, lo, hi = _num(r.get("speedup_seed_mean")) or _num(r.get("speedup")), r.get("speedup_ci_lo"), r.get("speedup_ci_hi")
    if s is None:
        return "no speedup (no baseline under the same link)", "has no speedup to state"
    clock = ("CPU time (the machine was contended)" if basis == "cpu" else
             "wall-clock (workers were slowed on purpose: a CPU share or --straggler, which CPU time would not count)"
             if r.get("run_slowed") is True or r.get("run_slowed") == 1 else "wall-clock")
    n = int(_num(r.get("speedup_seeds")) or 0)
    few = 1 < n < CI_MIN_SEEDS   # an interval over 2 seeds (t = 12.7) is not printed, as in the tables
    ci = (lambda a, b: "") if few else _ci
    other = (f"; wall-clock {_num(r.get('speedup_seed_mean')):.2f}x{ci(r.get('speedup_ci_lo'), r.get('speedup_ci_hi'))}"
             if basis == "cpu" and _num(r.get("speedup_seed_mean")) else
             f"; CPU time {_num(r.get('speedup_cpu')):.2f}x{ci(r.get('speedup_cpu_lo'), r.get('speedup_cpu_hi'))}"
             if _num(r.get("speedup_cpu")) else "")
    if few:
        lo = hi = None
    lo_, hi_ = _num(lo), _num(hi)
    resolved = lo_ is not None and hi_ is not None and not lo_ <= 1 <= hi_
    none_why = f"{n} seeds: too few for an interval" if few else "one seed: no interval"
    line = (f"{s:.2f}x{_ci(lo, hi)} per update on {clock}, over {n} paired seed{'s' if n != 1 else ''}"
            f"{' (too few for an interval)' if few else ''}{other}")
    if not resolved:
        clause = (f"is no faster per update at this resolution ({s:.2f}x, its interval includes 1)"
                  if lo_ is not None else
                  f"is {s:.2f}x faster per update ({none_why})" if s >= 1 else
                  f"is {1 / s:.2f}x slower per update ({none_why})")
    else:
        clause = f"is {s:.2f}x faster per update" if s > 1 else f"is {1 / s:.2f}x slower per update"
    return line, clause


SHARE_WORDS = {"keeps all of it": f"all of it, within ±{100 * SHARE_RESOLVED:.0f} points",
               "keeps less": "less than all of it", "keeps more": "more than all of it"}
# quality.py's gain_kept_verdict, in the verdict's words


def share_unresolved(lo, hi, verdict: str | None) -> bool:
    """Whether "keeps all of it" (the share's interval holds 100 %) says nothing: the interval also
    reaches past 100 % ± SHARE_RESOLVED (e.g. [55, 201 %]), so the data cannot tell all of the gain
    from half or twice it. An interval that excludes 100 % (keeps less / more) is resolved."""
    lo_, hi_ = _num(lo), _num(hi)
    return verdict == "keeps all of it" and lo_ is not None and hi_ is not None and \
        (lo_ < 1 - SHARE_RESOLVED or hi_ > 1 + SHARE_RESOLVED)


def _share_words(share, lo, hi, verdict: str | None, n: int) -> str:
    if _num(share) is None:
        return ""
    text = f"keeps {100 * share:.0f} %"
    if n < CI_MIN_SEEDS:
        return text + f" (n={n} seeds: too few for an interval)"
    if _num(lo) is not None and _num(hi) is not None:
        text += f" [{100 * lo:.0f}, {100 * hi:.0f} %]"
    if share_unresolved(lo, hi, verdict):
        return text + f" (not resolved: the interval reaches past 100 % ± {100 * SHARE_RESOLVED:.0f} points)"
    return text + (f" ({SHARE_WORDS.get(verdict, verdict)})" if verdict else "")


def quality_(r, base_name: str) -> tuple[str, str]:
    """(words for the quality line, the summary's clause)."""
    if _num(r.get("heldout_mean")) is None:
        return "not evaluated on held-out problems", ""
    name = r.get("heldout_name") or "quality"
    diff, half = _num(r.get("heldout_diff_mean")), _num(r.get("heldout_diff_ci95"))
    verdict = r.get("heldout_verdict")
    n = int(_num(r.get("heldout_diff_n")) or 0)
    diff_words = ("" if diff is None else _fig(diff, "+") + (
        f" ± {_fig(half)} ({n} paired seeds)" if half is not None and n >= CI_MIN_SEEDS
        else f" (n={n} seeds: too few for an interval)"))
    verdict = verdict if n >= CI_MIN_SEEDS else None
    missing = baseline_missing(r)
    if missing:
        return (f"held-out {name}: {_fig(_num(r['heldout_mean']))} at its last evaluation; `{base_name}` {missing}, "
                "so no share of its gain and no paired difference"), ""
    learned = baseline_learned(r)
    share = _share_words(r.get("gain_kept"), r.get("gain_kept_lo"), r.get("gain_kept_hi"), r.get("gain_kept_verdict"),
                         n) if learned else ""
    gain = _num(r.get("baseline_improvement")) or 0.0
    res = _num(r.get("heldout_resolution"))
    base_final = _num(r["heldout_mean"]) - diff if diff is not None else None
    if not learned and verdict in ("worse", "better") and base_final:   # resolved, but of what size: say it
        diff_words += f", {100 * diff / abs(base_final):+.1f} % of `{base_name}`'s final {_fig(base_final)}"
    line = (f"held-out {name}: " + (
        f"{share} of `{base_name}`'s gain; " if share else
        f"`{base_name}` did not learn measurably ({_fig(gain, '+')}, not resolved above 0"
        f"{f' with {n} paired seeds' if n else ''}): no share of its gain to keep; ")
            + (f"paired difference {diff_words}" if diff_words else "no paired difference (no seed in common)")
            + (f": **{verdict}**" if verdict else "")
            + (f", resolution {_fig(res)}" if res else ""))
    if isinstance(r.get("metrics_disagree_note"), str) and r.get("metrics_disagree"):
        line += f". Metrics disagree: {r['metrics_disagree_note']}"
    if share:
        kept = _num(r.get("gain_kept"))
        clause = f"keeps {100 * kept:.0f} % of `{base_name}`'s gain in {name}"
        if share_unresolved(r.get("gain_kept_lo"), r.get("gain_kept_hi"), r.get("gain_kept_verdict")):
            clause = (f"keeps {100 * kept:.0f} % [{100 * _num(r['gain_kept_lo']):.0f}, "
                      f"{100 * _num(r['gain_kept_hi']):.0f} %] of `{base_name}`'s gain in {name} (not resolved)")
        elif verdict in ("worse", "better"):
            clause += f" ({verdict})"
    elif verdict:
        clause = f"is {verdict} in held-out {name}" if verdict != "indistinguishable" else \
            f"is indistinguishable in held-out {name}"
    else:
        clause = ""
    if not learned:
        clause = (clause + " (" if clause else "") + f"`{base_name}` did not learn measurably" + (")" if clause else "")
    return line, clause


def dp_quality(r, pairs: pd.DataFrame | None, base_name: str) -> tuple[str, str] | None:
    """(words for the quality line, the summary's clause) of a data-parallel row from its held-out perplexity
    paired seed by seed against the run's data-parallel baseline (dataparallel_report.baseline_pairs); None
    without a pair (no seed in common, or no whole sync window to count)."""
    if pairs is None or pairs.empty:
        return None
    match = pairs[pairs["method"].astype(str) == str(r["method"])]
    # every coordinate the pairs are grouped on: the link, the workers, a swept run parameter (lordo_k)
    for k in [k for k in dataparallel_report.present_keys(pairs) if k in r and k != "baseline"]:
        match = match[match[k].isna()] if pd.isna(r[k]) else match[match[k].astype(str) == str(r[k])]
    if len(match) != 1:
        return None
    p = match.iloc[0]
    n, diff, half = int(p["pairs"]), _num(p["diff"]), _num(p["diff_ci95"])
    if diff is None:
        return None
    verdict = (None if n < CI_MIN_SEEDS or half is None else
               "worse" if diff - half > 0 else "better" if diff + half < 0 else "indistinguishable")
    spread = f" ± {_fig(half)} ({n} paired seeds)" if verdict else f" (n={n} seeds: too few for an interval)"
    line = (f"held-out perplexity (lower is better): {_fig(_num(p['ppl']))} against `{base_name}`'s "
            f"{_fig(_num(p['ppl_base']))}; paired difference {_fig(diff, '+')}{spread}"
            + (f": **{verdict}**" if verdict else ""))
    return line, (f"is {verdict} in held-out perplexity" if verdict else "")


def _ttq_cell(r, pct: int) -> tuple[str, str | None]:
    """(words, verdict) of one time-to-quality fraction; verdict: faster / slower / indistinguishable /
    censored / None (no target)."""
    target = _num(r.get(f"ttq{pct}_target"))
    if target is None:
        return f"{pct} %: no target", None
    reached, censored = _num(r.get(f"ttq{pct}_reached")), _num(r.get(f"ttq{pct}_censored"))
    ratio = _num(r.get(f"ttq{pct}_ratio"))
    verdict = r.get(f"ttq{pct}_verdict")
    seeds = f"{int(reached or 0)} of {int((reached or 0) + (censored or 0))} seeds reached"
    if ratio is None:
        return f"{pct} %: {seeds}" + (f" ({verdict})" if verdict else ""), verdict or "censored"
    basis = "CPU" if r.get(f"ttq{pct}_seconds_basis") == "cpu" else "wall-clock"
    wall = _num(r.get(f"ttq{pct}_ratio_wall"))
    beside = f", wall-clock {wall:.2f}x" if basis == "CPU" and wall is not None else ""
    both = int(_num(r.get(f"ttq{pct}_ratio_n")) or 0)
    ci = (_ci(r.get(f"ttq{pct}_ratio_lo"), r.get(f"ttq{pct}_ratio_hi")) if both >= CI_MIN_SEEDS
          else f" (n={both}: too few for an interval)")
    if verdict and verdict.startswith("too few"):   # the interval's absence is said once, with the seeds
        ci, seeds, verdict_words = "", f"{seeds}: {verdict}", ""
    else:
        verdict_words = f", {verdict}" if verdict else ""
    return f"{pct} %: {ratio:.2f}x the baseline's {basis} time{ci}{beside} ({seeds}{verdict_words})", verdict


def headline_fraction(r) -> tuple[int | None, str]:
    """(the time-to-quality fraction the summary names, why it is that one): the run's
    `--quality-target` (the held-out section's "Target"), or where it is none of FRACTIONS the
    nearest of them, said so; None where the row has no time-to-quality columns."""
    have = [p for p in FRACTIONS if f"ttq{p}_target" in r]
    if not have:
        return None, ""
    configured = int(round(100 * (_num(r.get("quality_target")) or DEFAULT_TARGET / 100)))
    if configured in have:
        return configured, ""
    pct = min(have, key=lambda p: abs(p - configured))
    return pct, f"--quality-target {configured} % is not one of {', '.join(map(str, have))} %: the nearest"


def ttq(r, base_name: str) -> tuple[str, str]:
    """(words for the time-to-quality line, the summary's clause at headline_fraction); where the
    baseline did not learn measurably (baseline_learned) no time is given: a fraction of a gain that
    is not resolved above 0 is no target, and a ratio of times to it would let either side win."""
    cells = {pct: _ttq_cell(r, pct) for pct in FRACTIONS if f"ttq{pct}_target" in r}
    if not cells:
        return "", ""
    if missing := baseline_missing(r):
        return (f"time to quality: not measurable: `{base_name}` {missing}, so no fraction of its gain is a target "
                "to reach", "its time to quality is not measurable")
    if not baseline_learned(r):
        return (f"time to quality: not measurable: `{base_name}` did not learn measurably (its held-out gain is not "
                "resolved above 0), so a fraction of that gain is no target to reach",
                "its time to quality is not measurable")
    line = ("time to quality (one target for every method: a fraction of "
            f"`{base_name}`'s seed-mean gain; method / baseline training seconds over paired seeds):\n"
            + "\n".join(f"    - {w}" for w, _ in cells.values()))
    pct, why = headline_fraction(r)
    reached, censored = (int(_num(r.get(f"ttq{pct}_{k}")) or 0) for k in ("reached", "censored"))
    ratio = _num(r.get(f"ttq{pct}_ratio"))
    words = (f"{ratio:.2f}x the time" if ratio is not None and cells[pct][1] and cells[pct][1].startswith("indist")
             else f"{reached} of {reached + censored} seeds reached it")
    paired = int(_num(r.get(f"ttq{pct}_ratio_n")) or 0)
    return line, _ttq_clause(cells[pct][1], pct, base_name, words, reached + censored, why, paired)


def _ttq_clause(verdict: str | None, pct: int, base_name: str, words: str, seeds: int, why: str = "",
                paired: int = CI_MIN_SEEDS) -> str:
    """The summary's words for one time-to-quality verdict (quality.py: faster / slower /
    indistinguishable, each maybe "(censored)" or "(censored seeds disagree)", or "censored: why");
    `why`: the reason the fraction is not the run's --quality-target, said beside it."""
    target = f"{pct} % of `{base_name}`'s quality" + (f" ({why})" if why else "")
    if not verdict:
        return ""
    if verdict.startswith("faster"):
        return f"is faster to {target}"
    if verdict.startswith("slower"):
        return f"is slower to {target}"
    unresolved = f"its time to {target} is not resolved with {seeds} seed{'s' if seeds != 1 else ''}"
    if verdict == "indistinguishable" and paired < CI_MIN_SEEDS:   # the table prints no interval over 2 seeds
        return f"{unresolved} ({words}; {paired} paired seeds: too few for an interval)"
    if verdict.startswith("indistinguishable"):
        return f"{unresolved} ({words}; the interval includes 1)"
    return f"{unresolved} ({words})"


def _resolved_faster(r) -> bool:
    """The headline speedup per update is above 1 with an interval that excludes 1."""
    s = _num(r.get("speedup_headline"))
    lo, hi = _num(r.get("speedup_headline_lo")), _num(r.get("speedup_headline_hi"))
    if s is None:
        s, lo, hi = (_num(r.get("speedup_seed_mean")) or _num(r.get("speedup")), _num(r.get("speedup_ci_lo")),
                     _num(r.get("speedup_ci_hi")))
    n = int(_num(r.get("speedup_seeds")) or 0)
    return s is not None and lo is not None and hi is not None and lo > 1 and not 1 < n < CI_MIN_SEEDS


def _disagree(r, base_name: str) -> str:
    """A sentence when the two halves' resolved results point different ways: faster per update
    (its interval above 1), yet resolved worse in held-out quality or resolved slower to quality. An
    unresolved half (an interval that includes 1 or 0, too few seeds) disagrees with nothing."""
    if not _resolved_faster(r):
        return ""
    n = int(_num(r.get("heldout_diff_n")) or 0)
    behind = []
    if n >= CI_MIN_SEEDS and r.get("heldout_verdict") == "worse" and baseline_learned(r):   # else both at noise level
        behind.append(f"worse in held-out {r.get('heldout_name') or 'quality'}")
    pct = headline_fraction(r)[0]
    v = r.get(f"ttq{pct}_verdict") if pct is not None and baseline_learned(r) else None
    if isinstance(v, str) and v.startswith("slower"):
        behind.append(f"slower to {pct} % of `{base_name}`'s quality")
    return (f" Speed and quality point different ways: faster per update, but {' and '.join(behind)}."
            if behind else "")


def method_block(r, base_name: str, where: str, dp_pairs: pd.DataFrame | None = None) -> list[str]:
    s_line, s_clause = speed(r)
    q_line, q_clause = (_num(r.get("heldout_mean")) is None and dp_quality(r, dp_pairs, base_name)) \
        or quality_(r, base_name)
    t_line, t_clause = ttq(r, base_name)
    if is_data_parallel(str(r["method"])):   # beside HiLo runs its row carries their time-to-quality columns too
        t_clause = ""
        t_line = ("time to quality: not measured: a data-parallel cell evaluates held-out perplexity once, after its "
                  "last step (the training batch's loss per step is in the data-parallel figures)")
    clauses = [c for c in (s_clause, q_clause, t_clause) if c]
    summary = f"`{r['variant']}`{where} " + (", ".join(clauses[:-1]) + " and " + clauses[-1] if len(clauses) > 1
                                             else clauses[0]) + "."
    return [f"- **{summary}**{_disagree(r, base_name)}",
            f"  - speed: {s_line}",
            *([f"  - quality: {q_line}"] if q_line else []),
            *([f"  - {t_line}"] if t_line else [])]


def alone_block(r, where: str) -> list[str]:
    """A method run without a baseline (`--baseline none`): nothing to compare, its own figures only. No
    speedup, share of a gain or time to quality is stated, and no method is named as a baseline."""
    spu, name = _num(r.get("s_per_update_median")), r.get("heldout_name") or "quality"
    n = int(_num(r.get("heldout_seeds")) or 0)
    own = [f"{spu:.3f} s per update (median)" if spu is not None else "",
           f"held-out {name} {_fig(_num(r.get('heldout_mean')))} at its last evaluation"
           + (f" ({n} seed{'s' if n != 1 else ''})" if n else "") if _num(r.get("heldout_mean")) is not None else ""]
    return [f"- **`{r['variant']}`{where} ran without a baseline (`--baseline none`): no speedup, kept quality or "
            "time to quality to state.**",
            *([f"  - its own figures: {'; '.join(x for x in own if x)}"] if any(own) else [])]


def incomplete(runs: list[tables.Run]) -> str:
    """The verdict's first line for runs that stopped before finishing (meta.json's status: interrupted,
    failed, running), "" when every run completed: the figures after it cover only what was recorded."""
    bad = [r for r in runs if not r.meta.get("complete")]
    if not bad:
        return ""
    items = ", ".join(f"`{run_name(r.dir, [x.dir for x in runs])}` ({r.meta.get('status', 'unknown')}"
                      + (f": {r.meta['status_note']}" if r.meta.get("status_note") else "") + ")" for r in bad)
    return (f"**INCOMPLETE**: {items} stopped before finishing; what follows covers only the cells and updates "
            "recorded before it stopped (the Cells section says which).")


def quorum(cells: pd.DataFrame | None) -> str:
    """A line for cells run with `--quorum K` below their worker count: each update went on with the
    first K contributions, so the figures are not those of every worker contributing; per variant, how
    many contributions its updates went without and how many arrived late and were dropped stale."""
    if cells is None or cells.empty or not {"quorum", "workers"} <= set(cells):
        return ""
    q, w = pd.to_numeric(cells["quorum"], errors="coerce"), pd.to_numeric(cells["workers"], errors="coerce")
    part = cells.assign(q=q, w=w)[(q > 0) & (q < w)]
    if part.empty:
        return ""
    groups = []
    for (k, n), g in part.groupby(["q", "w"], sort=True):
        each = []
        for variant, gv in g.groupby("variant", sort=False):
            total = int((pd.to_numeric(gv["updates_done"], errors="coerce").fillna(0) * n).sum())
            left = int(pd.to_numeric(gv.get("left_out", pd.Series(dtype=float)), errors="coerce").fillna(0).sum())
            stale = int(pd.to_numeric(gv.get("stale_dropped", pd.Series(dtype=float)), errors="coerce").fillna(0).sum())
            share = f" ({100 * left / total:.0f} %)" if total else ""
            each.append(f"`{variant}` went without {left} of {total} contributions{share}, {stale} dropped stale")
        groups.append(f"each update went on with the first {int(k)} of {int(n)} workers' contributions "
                      f"(--quorum {int(k)}), not every worker's: " + "; ".join(each))
    return "**Quorum**: " + "; ".join(groups) + "."


def beyond_link(r, comp: pd.DataFrame, keys: list[str]) -> list[str]:
    """The coordinates that tell this row's block apart and that its link's words leave out (the
    workers of two runs at one link, a swept run parameter), each where it varies and this row has
    it (a run without --straggler beside one with it is not 'straggler nan')."""
    out = []
    method = str(r.get("method"))
    family, unread = spec.method_family(method), spec.params_unread_by(method)
    kin = comp[comp["method"].astype(str).map(spec.method_family) == family]   # its own family's rows tell it apart
    for k in keys:
        if k in LINK_WORDS or kin[k].nunique(dropna=False) < 2 or _none(r[k]) or k in unread:
            continue   # a parameter of the other family's methods (Param.family) says nothing about this row
        out.append(f"{int(r[k])} worker{'s' if int(r[k]) != 1 else ''}" if k == "workers" else f"{k} {r[k]}")
    return out


def _dp_regime(runs: list[tables.Run]) -> str:
    off = all(r.meta.get("emulation") is False for r in runs)
    return DP_REGIME + ("emulation off: localhost, unshaped, so a speedup per step measures compute only." if off else
                        "the links ran at the rates given (the data-parallel section has the bytes per optimizer step).")


def _stopped_regime(runs: list[tables.Run], comp: pd.DataFrame) -> str:
    """Why a run that stopped early has no regime: no prediction.json at all, or one written from
    updates that hold no full-sync row (the ratio is full sync's own link time over its compute)."""
    if not any((Path(r.dir) / ledger.PREDICTION_FILE).is_file() for r in runs):
        return "**Regime**: not recorded: the run stopped before its prediction was written."
    base = ", ".join(f"`{b}`" for b in comp["baseline"].astype(str).unique() if b != NO_BASELINE) or "full sync"
    return (f"**Regime**: not placed: the run stopped before recording any update of full sync ({base}), whose own "
            "link time over its compute the regime is measured from.")


def verdict(comp: pd.DataFrame, runs: list[tables.Run], cells: pd.DataFrame | None = None,
            dp_pairs: pd.DataFrame | None = None) -> list[str]:
    """The verdict block: whether the run finished, the regime, the quorum (when updates went on
    without some workers), then one block per method (and link) against its baseline. `dp_pairs`: the
    data-parallel rows' held-out perplexity paired against their baseline (dataparallel_report.baseline_pairs)."""
    status = incomplete(runs)
    head = ["## Verdict", "", status, ""] if status else ["## Verdict", ""]
    if comp.empty or "baseline" not in comp:
        return head if status else []
    keys = [k for k in compare.coords(comp) if k in comp]
    links = comp[keys].astype(str).drop_duplicates() if keys else comp.iloc[:1]
    blocks = []
    alone = comp["baseline"].astype(str).eq(NO_BASELINE)
    for _, r in comp[comp["method"] != comp["baseline"]].iterrows():
        where = f" ({', '.join([link(r), *beyond_link(r, comp, keys)])})" if len(links) > 1 else ""
        blocks += alone_block(r, where) if str(r["baseline"]) == NO_BASELINE else \
            method_block(r, str(r["baseline"]), where, dp_pairs)
    if not blocks:
        return head if status else []
    regime = regime_report.headline(runs) or (
        NO_FULL_SYNC if alone.all() else _dp_regime(runs) if comp["method"].map(is_data_parallel).all() else
        _stopped_regime(runs, comp) if status else NO_REGIME)
    partial = quorum(cells)
    return [*head, regime, "", *([partial, ""] if partial else []), *blocks, ""]
