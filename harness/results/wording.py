"""How the report writes a number, an interval, a link and a table: one wording for every section
(report.py, quality_report.py, verdict.py, regime_report.py), so a figure reads the same wherever it
appears. Pure formatting; imports no other results module, and pandas only when a cell is formatted."""
from __future__ import annotations

import math
from pathlib import Path

CI_MIN_SEEDS = 3   # a 95 % CI over fewer seeds (t = 12.7 at n = 2) is printed as n, not as an interval


def none(v) -> bool:
    """None, NaN or pandas' NA (a missing figure)."""
    import pandas as pd   # here, not at the top: compare.py (imported by every command) reads CI_MIN_SEEDS

    return v is None or (isinstance(v, float) and math.isnan(v)) or (not isinstance(v, (str, bool)) and pd.isna(v))


def num(v) -> float | None:
    return None if none(v) else float(v)


def figure(v: float, sign: str = "") -> str:
    """A held-out figure or difference: 3 decimals, or 2 significant digits where 3 decimals would
    print 0.000 for a figure that is not 0 (a tiny model's P(gold) moves by 1e-6)."""
    return f"{v:{sign}.3f}" if v == 0 or abs(v) >= 5e-4 else f"{v:{sign}.2g}"


def rate(bit_s: float) -> str:
    """62.5e6 -> '62.5mbit' (units.format_rate's wording)."""
    for unit, div in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bit_s >= div:
            return f"{bit_s / div:g}{unit}"
    return f"{bit_s:g}bit"


def fmt(v, kind: str = "") -> str:
    """A table cell: s (3 decimals), bytes (thousands), x (a speedup), % (a fraction), rate; '-' if missing."""
    if none(v):
        return "-"
    if kind == "s":
        return f"{v:.3f}"
    if kind == "bytes":
        return f"{v:,.0f}"
    if kind == "x":
        return f"{v:.2f}x"
    if kind == "%":
        return f"{100 * v:.2f}%"
    if kind == "rate":
        return rate(v)
    return str(v)


def count(v) -> str:
    return "-" if none(v) else format(v, "g") if isinstance(v, float) and not v.is_integer() else str(int(v))


def pm(mean, half, digits: str = ".3f", n=None) -> str:
    """`mean ± half` (a 95 % CI); with n < CI_MIN_SEEDS samples `mean (n=2)` instead: an interval
    over 2 seeds (t = 12.7) says nothing a reader can use. Three decimals go through `figure`, so a tiny
    figure keeps its significant digits."""
    def written(v, digits: str) -> str:
        return figure(v, digits[:-4]) if digits.endswith(".3f") else f"{v:{digits}}"

    if none(mean):
        return "-"
    if n is not None and not none(n) and int(n) < CI_MIN_SEEDS:
        return f"{written(mean, digits)} (n={int(n)})"
    return written(mean, digits) + ("" if none(half) else f" ± {written(half, digits.lstrip('+'))}")


def interval(lo, hi, digits: str = ".2f") -> str:
    """' [lo, hi]', or '' without both ends."""
    return "" if none(lo) or none(hi) else f" [{lo:{digits}}, {hi:{digits}}]"


LINK_WORDS = {"profile", "backend", "emulated", "rate_bit_s", "links", "delay_s", "loss_frac", "run_id"}   # what `link` says


def link(r) -> str:
    """A comparison row's link in words; a combined report that compares each run within itself
    (its runs repeat a variant and seed: compare.coords) names the run first."""
    run = f"run {r['run_id']}: " if isinstance(r.get("run_id"), str) else ""
    if not r.get("emulated", True):
        return run + "localhost (unshaped)"
    links = r.get("links") if isinstance(r.get("links"), str) else None   # a trace, unequal workers: in words
    rate = links or (fmt(r.get("rate_bit_s"), "rate") if r.get("rate_bit_s") else "no cap")
    return run + (f"{r['profile']}: {rate}"
                  f"{', ' + format(r['delay_s'] * 1e3, 'g') + 'ms' if r.get('delay_s') else ''}"
                  f"{', loss ' + fmt(r['loss_frac'], '%') if r.get('loss_frac') else ''} [{r.get('backend')}]")


def consistency(r) -> str:
    """A cell's (or a comparison row's) consistent column: NO only for a recorded hash mismatch or a
    finished cell whose final hashes disagree; a cell cut short never ran its final check, so it
    reads 'not checked (interrupted)' (or running, cut short) rather than a mismatch."""
    if not none(r.get("hash_mismatches")) and r.get("hash_mismatches"):
        return "NO"
    if r.get("consistent"):
        return "yes"
    if r.get("complete"):
        return "NO"
    status = str(r.get("status") or "")
    why = ("interrupted" if status.startswith("interrupted") else "running" if status == "running"
           else "incomplete" if not status else "cut short")
    return f"not checked ({why})"


def markdown_table(head: list[str], rows: list[list[str]]) -> str:
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(map(esc, head)) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return "\n".join(lines + ["| " + " | ".join(map(esc, r)) + " |" for r in rows])


def cell_note(m: dict, workers: int | None, failure: str | None, learner_exit: str | None) -> str:
    """One line on what happened to a cell's processes ("" when nothing did)."""
    bits = []
    for d in m["drops"]:
        where = "never joined" if d["reason"] == "never joined" else (
            f"dropped at version {d['version']}"
            + (f" (lost at version {d['disconnected_version']})"
               if d.get("disconnected_version") not in (None, d["version"]) else "")
            + (f": {d['reason']}" if d.get("reason") else ""))
        left = (f"; {d['remaining']} of {workers} workers remained"
                + (f" from update {d['version'] + 1}" if isinstance(d.get("version"), int) else "")
                if d.get("remaining") is not None and workers else "")
        back = f"; rejoined at version {d['rejoined_version']}" if d.get("rejoined_version") is not None else ""
        bits.append(f"w{d['worker']} {where}{left}{back}")
    for r in m["restarts"]:
        back = (f", rejoined at version {r['rejoined_version']}" if r.get("rejoined_version") is not None
                else ", did not rejoin")
        bits.append(f"w{r['worker']} restarted at version {r['version']} ({r.get('after')}){back}")
    if learner_exit:
        bits.append(f"learner {learner_exit}")
    if failure:
        bits.append(f"cell stopped (--on-drop fail): {failure}")
    return "; ".join(bits)


def seconds_by_part(parts: dict) -> str:
    """{'figures': 1.23, 'tables': 0.4} -> 'figures 1.2 s; tables 0.4 s': a run's fixed cost by part,
    largest first, the parts that round to 0.0 s left out (meta.json's overhead.parts). Semicolons: a
    part's own name may hold a comma."""
    ranked = sorted(((str(k), float(v)) for k, v in parts.items() if isinstance(v, (int, float)) and v >= 0.05),
                    key=lambda kv: -kv[1])
    return "; ".join(f"{k} {v:.1f} s" for k, v in ranked)


def run_name(run_dir, run_dirs) -> str:
    """A run folder's name as a report shows it: its own name, or as many parent folders as tell it apart
    from the other runs shown with the same name (two sweeps' `default` points: `a/runs/default`)."""
    parts = Path(run_dir).parts
    others = [Path(d).parts for d in run_dirs if Path(d) != Path(run_dir)]
    for k in range(1, len(parts) + 1):
        if all(o[-k:] != parts[-k:] for o in others):
            return "/".join(parts[-k:])
    return str(run_dir)
