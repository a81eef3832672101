"""Comparison report: every method against `full` under the same link, from the results folders alone.

    harness report results/<run-id>          -> results/<run-id>/report.md (+ report.html)
    harness report results/<sweep-id>        -> one table over every grid point of the sweep

Per (link coordinates, method): seconds per update (median and IQR over every update of every
seed), speedup (full's median / the method's median, same coordinates), payload and wire bytes
per update (learner -> workers, and workers -> learner), payload as a fraction of the `full`
update, bytes the worker links carried (link counters: IP headers and retransmissions
included), quality (the objective's metric over the last updates, mean and spread over seeds),
consistency (every replica's final hash equal to the learner's), completeness.
"""
from __future__ import annotations

import html
from pathlib import Path
from typing import Iterable

import pandas as pd

from harness import results

COORDS = ["profile", "backend", "emulated", "rate_bit_s", "delay_s", "loss_frac", "workers", "pipeline"]
QUALITY_LAST = 3   # quality of a seed = mean of its last 3 updates' metric


def _coords(df: pd.DataFrame) -> list[str]:
    return [c for c in COORDS if c in df.columns]


def _seed_quality(g: pd.DataFrame) -> pd.Series:
    return g.sort_values("update").groupby("seed")["quality"].apply(lambda s: s.tail(QUALITY_LAST).mean())


def _method_row(g: pd.DataFrame, cells: pd.DataFrame) -> dict:
    spu = g["seconds_per_update"]
    q = _seed_quality(g)
    done = cells["updates_done"].sum() if len(cells) else 0
    return {"method": g["method"].iloc[0], "budget": g["budget"].iloc[0],
            "seeds": int(g["seed"].nunique()), "updates": int(len(g)),
            "s_per_update_median": spu.median(), "s_per_update_q1": spu.quantile(0.25),
            "s_per_update_q3": spu.quantile(0.75), "s_per_update_iqr": spu.quantile(0.75) - spu.quantile(0.25),
            "payload_bytes_down": g["payload_bytes_down"].median(), "wire_bytes_down": g["wire_bytes_down"].median(),
            "payload_bytes_up": g["payload_bytes_up"].median(), "wire_bytes_up": g["wire_bytes_up"].median(),
            "link_bytes_down_per_update": _per_update(cells, "link_bytes_down", done),
            "link_bytes_up_per_update": _per_update(cells, "link_bytes_up", done),
            "quality_metric": g["quality_metric"].iloc[0], "quality_mean": q.mean(),
            "quality_std": q.std(ddof=1) if len(q) > 1 else 0.0, "lag_median": g["lag"].median(),
            "consistent": bool(len(cells) and cells["consistent"].all()),
            "complete": bool(len(cells) and cells["complete"].all())}


def _per_update(cells: pd.DataFrame, col: str, done: int) -> float | None:
    if col not in cells or cells[col].isna().all() or not done:
        return None
    return float(cells[col].sum()) / done


def comparison(updates: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """One row per (coordinates, variant), with speedup and byte fraction against `full`."""
    if updates.empty:
        return pd.DataFrame()
    keys = _coords(updates)
    rows = []
    for key, g in updates.groupby(keys + ["variant"], dropna=False, sort=False):
        match = cells
        for k, v in zip(keys + ["variant"], key):
            match = match[(match[k] == v) | (match[k].isna() & pd.isna(v))] if k in match else match
        rows.append({**dict(zip(keys + ["variant"], key)), **_method_row(g, match)})
    df = pd.DataFrame(rows)
    base = df[df["method"] == results.BASELINE].set_index(keys, drop=False) if keys else None
    df["speedup"] = [_ratio(base, r, keys, "s_per_update_median", inverse=True) for _, r in df.iterrows()]
    df["fraction_of_full"] = [_ratio(base, r, keys, "payload_bytes_down") for _, r in df.iterrows()]
    return df


def _ratio(base: pd.DataFrame | None, row: pd.Series, keys: list[str], col: str, inverse: bool = False):
    """row[col] / full[col] (or full / row) under the same coordinates; None without a full baseline."""
    if base is None or base.empty:
        return None
    hit = base
    for k in keys:
        hit = hit[(hit[k] == row[k]) | (hit[k].isna() & pd.isna(row[k]))]
    if hit.empty or not row[col] or not hit[col].iloc[0]:
        return None
    full = float(hit[col].iloc[0])
    return full / float(row[col]) if inverse else float(row[col]) / full


# ---- formatting ------------------------------------------------------------------------------

def _fmt(v, kind: str = "") -> str:
    if v is None or (isinstance(v, float) and pd.isna(v)):
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
        return "unshaped" if v is None else _rate(v)
    return str(v)


def _count(v) -> str:
    return "-" if v is None or pd.isna(v) else str(int(v))


def _rate(bit_s: float) -> str:
    for unit, div in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bit_s >= div:
            return f"{bit_s / div:g}{unit}"
    return f"{bit_s:g}bit"


def table_rows(comp: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    head = ["link", "workers", "method", "seeds x updates", "s/update median [IQR]", "speedup vs full",
            "payload B/update down (1 worker)", "wire B/update down (all)", "wire B/update up (all)",
            "link B/update down", "% of full", "quality (mean ± sd over seeds)", "consistent", "complete"]
    rows = []
    for _, r in comp.iterrows():
        link = "localhost (unshaped)" if not r.get("emulated", True) else (
            f"{r['profile']}: {_fmt(r.get('rate_bit_s'), 'rate') if r.get('rate_bit_s') else 'no cap'}"
            f"{', ' + format(r['delay_s'] * 1e3, 'g') + 'ms' if r.get('delay_s') else ''}"
            f"{', loss ' + _fmt(r['loss_frac'], '%') if r.get('loss_frac') else ''} [{r.get('backend')}]")
        rows.append([link, _fmt(r.get("workers")), r["variant"], f"{r['seeds']} x {r['updates'] // max(1, r['seeds'])}",
                     f"{_fmt(r['s_per_update_median'], 's')} [{_fmt(r['s_per_update_q1'], 's')}, {_fmt(r['s_per_update_q3'], 's')}]",
                     _fmt(r["speedup"], "x"), _fmt(r["payload_bytes_down"], "bytes"), _fmt(r["wire_bytes_down"], "bytes"),
                     _fmt(r["wire_bytes_up"], "bytes"), _fmt(r["link_bytes_down_per_update"], "bytes"),
                     _fmt(r["fraction_of_full"], "%"),
                     f"{r['quality_metric']} {r['quality_mean']:.4g} ± {r['quality_std']:.2g}",
                     "yes" if r["consistent"] else "NO", "yes" if r["complete"] else "INCOMPLETE"])
    return head, rows


def markdown_table(head: list[str], rows: list[list[str]]) -> str:
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(map(esc, head)) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return "\n".join(lines + ["| " + " | ".join(map(esc, r)) + " |" for r in rows])


def _run_header(run_dir: Path) -> list[str]:
    meta = results.read_json(run_dir / "meta.json", {}) or {}
    status = meta.get("status", "unknown")
    flag = "" if meta.get("complete") else f" — **INCOMPLETE ({status})**: partial results"
    pk = meta.get("packages") or {}
    return [f"- `{run_dir.name}`: status {status}{flag}; profile `{meta.get('profile')}`, backend "
            f"`{meta.get('backend')}`, emulation {'on' if meta.get('emulation') else 'off (localhost, unshaped)'}; "
            f"git {str(meta.get('git_sha'))[:10]}{' (dirty)' if meta.get('git_dirty') else ''}, kernel "
            f"{meta.get('kernel')}, torch {pk.get('torch')}, host {meta.get('host')}"]


def build(paths: Iterable[str | Path]) -> tuple[str, pd.DataFrame]:
    """(markdown, comparison table) over every run under `paths`."""
    runs = results.find_runs(paths)
    updates = pd.concat([results.tables(r)["updates"] for r in runs], ignore_index=True)
    cells = pd.concat([results.cell_summaries(r) for r in runs], ignore_index=True)
    comp = comparison(updates, cells)
    head, rows = table_rows(comp)
    title = runs[0].name if len(runs) == 1 else f"{len(runs)} runs"
    md = [f"# Comparison against `full`: {title}", "", "## Runs", ""]
    for r in runs:
        md += _run_header(r)
    md += ["", "## Seconds per update, bytes and quality", "",
           "Speedup = median seconds per update of `full` / that of the method, under the same link. "
           "Payload = the update message body; wire = framed bytes written to the sockets; link = bytes "
           "the worker links carried (IP packets). Quality over the last "
           f"{QUALITY_LAST} updates of each seed.", "", markdown_table(head, rows), "", "## Cells", ""]
    ch = ["run", "cell", "status", "updates done / planned", "hash checks", "consistent"]
    crow = [[c["run_id"], c["cell"], c["status"], f"{_count(c['updates_done'])} / {_count(c['updates_planned'])}",
             str(c["hash_checks"]), "yes" if c["consistent"] else "NO"] for _, c in cells.iterrows()]
    md += [markdown_table(ch, crow), ""]
    return "\n".join(md), comp


def write(path: str | Path, extra: Iterable[str | Path] = ()) -> Path:
    """report.md and report.html in `path`, covering every run under it (and `extra`)."""
    path = Path(path)
    md, comp = build([path, *extra])
    (path / "report.md").write_text(md)
    head, rows = table_rows(comp)
    body = "".join(f"<tr>{''.join(f'<td>{html.escape(c)}</td>' for c in r)}</tr>" for r in rows)
    (path / "report.html").write_text(
        "<!doctype html><meta charset=utf-8><title>report</title><style>td,th{padding:2px 8px;border:1px solid #ccc}"
        "table{border-collapse:collapse;font:13px sans-serif}</style>"
        f"<pre>{html.escape(md.split('## Seconds')[0])}</pre><table><tr>{''.join(f'<th>{html.escape(h)}</th>' for h in head)}"
        f"</tr>{body}</table>")
    return path / "report.md"
