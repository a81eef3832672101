"""The regime a run measured: how much of full sync's update its link carried, against the paper's.

Reads each run's prediction.json `regime` block (harness/projection/commratio.py `achieved`: full
sync's link time at the run's links over its CPU compute per update, both measured in the run; the
target it was placed at, from config.json's `regime`; the rate `--comm-ratio paper` would use). A
speedup means little without it: at a ratio of 0.03 no method can be much faster per update, at the
paper's 1.34 a method that ships 1/8 of the bytes can be ~2x faster.
"""
from __future__ import annotations

from harness.results import ledger, tables
from harness.results.wording import markdown_table

COMPUTE_BOUND = 0.25    # below this ratio the link is under a fifth of full sync's update: little to save


def regime_of(run: tables.Run) -> dict:
    doc = ledger.read_prediction(run).get("regime")
    return doc if isinstance(doc, dict) else {}


def _mbit(bit_s) -> str:
    return "unshaped" if not bit_s else f"{bit_s / 1e6:.3g} Mbit/s"


def _links(doc: dict) -> str | None:
    """The worker links in words where one rate would misstate them (a trace, unequal workers:
    commratio.link_words); None for one flat rate, and in runs recorded before the words."""
    return doc["links"] if isinstance(doc.get("links"), str) and doc["links"] else None


def _seen(doc: dict) -> str | None:
    """The traced links over the part of the trace full sync's measured updates ran over, where that is not
    the whole trace (commratio.achieved `seen`: the ratio is at that part's rate); None otherwise."""
    return doc["seen"] if isinstance(doc.get("seen"), str) and doc["seen"] else None


_SEEN = "the part of its trace full sync's measured updates ran over, "


def _factor(doc: dict) -> float | None:
    """The factor that places full sync at the paper's ratio (None where no factor reaches it)."""
    f = doc.get("paper_factor")
    return float(f) if isinstance(f, (int, float)) and not isinstance(f, bool) and f > 0 else None


# `--comm-ratio paper` cannot be combined with --trace or --bw (both set the rate: the CLI refuses the pair), so
# the sentence names what the flag does rather than offering it as a change to this run's command
_HOW_PAPER = " (`--comm-ratio paper` does so from the profile's own rates; a --trace or --bw run keeps its literal rates)"


def words(doc: dict) -> str:
    """One sentence: the achieved ratio and share, the target or the paper's, and how the rate was chosen."""
    if not doc:
        return ""
    paper = f"{doc['paper_ratio']:.2f}"
    if doc.get("ratio") is None:
        return ("localhost, unshaped: full sync's link time is next to nothing, so a speedup per update measures "
                f"codec compute only (in the paper the link carries {doc['paper_share']:.0%} of full sync's update; "
                "`--comm-ratio paper` on an emulated run places it there)")
    ratio, share = doc["ratio"], doc["share"]
    text = (f"full sync's link carries {share:.0%} of its update here (link/compute {ratio:.2f}: "
            f"{doc['link_s']:.3g} s on the links per {doc['compute_s']:.3g} s of CPU compute)")
    placed, target = doc.get("placed") or {}, doc.get("target_ratio")
    links, seen = _links(doc), _seen(doc)
    if target is not None:
        name = "the paper's" if placed.get("target") == "paper" else "`--comm-ratio`"
        rates = (f"{links}, the profile's rates x{placed.get('factor', 1):.3g}" if links else
                 f"worker links at {_mbit(placed.get('rate_bit_s'))}, the profile's "
                 f"{_mbit(placed.get('literal_rate_bit_s'))} x{placed.get('factor', 1):.3g}")
        return (text + f", placed at {name} {target:.2f} ({(ratio - target) / target:+.0%} off): {rates}, from full "
                "sync's compute measured " + ("earlier on this machine" if placed.get("cached") else
                                              "by a pilot before the cells")
                + (f"; the ratio is at {_SEEN}{seen}" if seen else ""))
    text += (f" at {_SEEN}{seen}" if seen else f" at {links}" if links else
             f" at a literal {_mbit(doc.get('rate_bit_s'))}")
    text += f"; in the paper it carries {doc['paper_share']:.0%} ({paper})"
    if links and _factor(doc):
        text += f": placing full sync at the paper's ratio would scale these links x{_factor(doc):.3g}{_HOW_PAPER}"
    elif doc.get("paper_rate_bit_s"):
        text += f": placing full sync at the paper's ratio would take {_mbit(doc['paper_rate_bit_s'])}{_HOW_PAPER}"
    if ratio < COMPUTE_BOUND:
        text += ". Compute-bound: whatever a method saves on the link is a small part of an update"
    return text


def headline(runs: list[tables.Run]) -> str:
    """The regime for the verdict: one run's sentence, or the range of a sweep's ratios."""
    docs = [(r.dir.name, regime_of(r)) for r in runs]
    docs = [(n, d) for n, d in docs if d]
    if not docs:
        return ""
    if len(docs) == 1:
        return "**Regime**: " + words(docs[0][1]) + "."
    ratios = sorted(d["ratio"] for _, d in docs if d.get("ratio") is not None)
    if not ratios:
        return "**Regime**: " + words(docs[0][1]) + "."
    return (f"**Regime**: {len(docs)} runs, full sync's link/compute from {ratios[0]:.2f} to {ratios[-1]:.2f} "
            f"(the paper's: {docs[0][1]['paper_ratio']:.2f}); the Regime section has each run's.")


def section(runs: list[tables.Run]) -> list[str]:
    """The "Regime" section: per run, target and achieved ratio, link share, full sync's link and compute
    seconds per update, the worker link rate and how it was chosen; [] when no run has one."""
    rows = []
    for run in runs:
        d = regime_of(run)
        if not d:
            continue
        placed = d.get("placed") or {}
        links = _links(d)
        of = "the profile's rates" if links else _mbit(placed.get("literal_rate_bit_s"))
        paper_at = f"x{_factor(d):.3g}" if links and _factor(d) else _mbit(d.get("paper_rate_bit_s"))
        how = (f"--comm-ratio {placed.get('target')} (x{placed.get('factor', 1):.3g} of "
               f"{of}{', pilot cached' if placed.get('cached') else ', pilot'})"
               if d.get("target_ratio") is not None else
               f"literal (paper's ratio at {paper_at})" if d.get("ratio") is not None else "-")
        fmt = lambda v, spec: "-" if v is None else format(v, spec)   # noqa: E731
        rows.append([run.dir.name, d.get("method", "-"), fmt(d.get("target_ratio"), ".2f"), fmt(d.get("ratio"), ".2f"),
                     fmt(d.get("share"), ".0%"), fmt(d.get("link_s"), ".3g"), fmt(d.get("compute_s"), ".3g"),
                     _seen(d) or links or _mbit(d.get("rate_bit_s")), how])
    if not rows:
        return []
    head = ["run", "full sync", "target ratio", "achieved ratio", "link share", "link s/update", "compute s/update (CPU)",
            "worker link", "rate chosen by"]
    paper = next(regime_of(r) for r in runs if regime_of(r))
    return ["## Regime", "",
            "Full sync's link time per update over its compute time per update (the comm ratio; harness/projection/"
            "commratio.py). Compute: the learner's train, encode and decode CPU seconds plus the median worker's rollout "
            "CPU seconds, measured in this run (robust to a busy machine). Link: the cost model's time for full sync's "
            "update to reach every worker and the rollouts to come back, from the bytes measured in this run at its "
            f"shaped links. The HiLo paper's full sync: {paper['paper_ratio']:.2f} (18.9 s on the link of a 33 s "
            f"update: {paper['paper_share']:.0%}).", "", markdown_table(head, rows), ""]
