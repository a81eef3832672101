"""`harness power PILOT`: how many seeds a run needs to resolve a quality gap, from a pilot run.

    harness power results/pilot                     # the paper's gap (0.016) and 0.03
    harness power results/pilot --gap 0.01,0.05 --json

Reads the pilot's results folder alone (like `harness report`): per method, the paired sd of the
final held-out difference from the baseline over the pilot's seeds (harness/results/quality.py),
the resolution the pilot had (80 % power, 5 % level), and the fewest seeds whose resolution is at or
below each gap at that sd. A pilot of 2-3 seeds estimates the sd roughly (its own CI is wide): size
with a margin.
"""
from __future__ import annotations

import json

from harness.results import compare, quality, tables

PAPER_GAP = 0.016  # the HiLo paper's K&K pass@4 gap, 83.2 vs 81.6


def parse_gaps(text: str) -> list[float]:
    """'0.016,0.03' -> [0.016, 0.03]; raises ValueError naming --gap."""
    try:
        gaps = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--gap: {text!r} is not a comma list of numbers") from None
    if not gaps or any(not 0 < g < 1e6 for g in gaps):
        raise ValueError(f"--gap: {text!r}: give positive differences, e.g. 0.016,0.03")
    return gaps


def rows(paths: list[str], gaps: list[float]) -> list[dict]:
    """The power rows of the runs at `paths`; ValueError when they hold no paired evaluations."""
    t = tables.read(paths)
    if t.evals is None or t.evals.empty:
        raise ValueError(f"{', '.join(paths)}: no held-out evaluations to size from (a run with --eval-problems > 0)")
    out = quality.power_rows(compare.comparison(t.updates, t.cells, t.evals), gaps)
    if not out:
        raise ValueError(f"{', '.join(paths)}: no method with 2+ seeds paired with its baseline")
    return out


def lines(out: list[dict], as_json: bool) -> list[str]:
    if as_json:
        return [json.dumps(r) for r in out]
    text = []
    for r in out:
        if r["paired_sd"] < 1e-12:
            text.append(f"{r['variant']}: {r['metric']} difference {r['diff']:+.3f} on every one of {r['seeds']} pilot "
                        "seeds (paired sd 0): no spread to size a run from")
            continue
        need = ", ".join(f"{g:g}: {n if n else '>1000'} seeds" for g, n in r["seeds_needed"].items())
        text.append(f"{r['variant']}: {r['metric']} difference {r['diff']:+.3f}, paired sd {r['paired_sd']:.4f} over "
                    f"{r['seeds']} seeds (resolution {r['resolution']:.3f}); to resolve a gap of {need}")
    return text
