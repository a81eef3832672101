"""The baselines a practitioner would pick instead of a HiLo compressor, side by side.

Two rivals ship the adapter itself, not a gradient: `delta` (full sync, only the elements of the
bf16 adapter that changed since the last shipped version: what RL frameworks ship) and `rank-R`
(train at a smaller LoRA rank, ship the whole small adapter). The section labels every HiLo
variant of a run with its training rank, bytes per update, share of the baseline's bytes,
held-out quality and, for delta, its measured density (changed / total elements per update), so
that the comparison the HiLo paper's reader asks for first (spar at rank R vs full sync at rank R
vs rank 1 shipped whole vs the lossless delta) is one table. Numbers come from compare.py's
table and the update rows; this module only selects and formats them.
"""
from __future__ import annotations

import pandas as pd

from harness.results.compare import coords
from trainers import spec


def training_rank(method: str, lora_rank) -> str:
    """rank-R trains at R (its name implies the rank); every other HiLo method at the run's --lora-rank."""
    found = spec.method_card(method)
    if found is not None and found[1].get("lora_rank") is not None:
        return str(found[1]["lora_rank"])
    return "-" if lora_rank is None or pd.isna(lora_rank) else str(int(lora_rank))


def density(updates: pd.DataFrame, keys: list[str], key: tuple) -> str:
    """delta's changed fraction per update: median [min, max] over every update of every seed."""
    if "delta_density" not in updates:
        return "-"
    g = updates
    for k, v in zip(keys, key):
        g = g[g[k].isna()] if pd.isna(v) else g[g[k] == v]
    d = g["delta_density"].dropna()
    if d.empty:
        return "-"
    return f"{100 * d.median():.2f}% [{100 * d.min():.2f}, {100 * d.max():.2f}] (n={len(d)})"


def bytes_to_target(r) -> str:
    """The equal-bytes view of time to quality: updates to the baseline-derived target (mean over the
    seeds that reached it) x payload bytes per update, so a method that sends more per update is not
    read as better for reaching the target in fewer updates."""
    updates, payload = r.get("ttq_updates_mean"), r.get("payload_bytes_down")
    reached, seeds = r.get("ttq_reached"), r.get("heldout_seeds")
    if updates is None or pd.isna(updates) or payload is None or pd.isna(payload):
        return "-" if reached is None or pd.isna(reached) else f"- (0 / {int(seeds)})"
    return f"{updates * payload:,.0f} ({int(reached)} / {int(seeds)})"


def _link(r, keys: list[str]) -> str:
    """The link in a few characters: the profile (or the rate), then any other coordinate that is set
    and not the profile's own (delay, loss, workers, pipeline)."""
    show = [k for k in keys if k not in ("profile", "rate_bit_s", "backend", "emulated") and not pd.isna(r[k])]
    head = r.get("profile") if isinstance(r.get("profile"), str) else (
        f"{r['rate_bit_s'] / 1e6:g} Mbit/s" if not pd.isna(r.get("rate_bit_s", float("nan"))) else "unshaped")
    return ", ".join([head] + [f"{k}={r[k]:g}" if isinstance(r[k], float) else f"{k}={r[k]}" for k in show
                               if r[k] not in (0, 0.0, False)])


def _fmt_bytes(v) -> str:
    return "-" if v is None or pd.isna(v) else f"{v:,.0f}"


def _heldout(r) -> str:
    if pd.isna(r.get("heldout_mean", float("nan"))):
        return "-"
    ci = r.get("heldout_ci95")
    return f"{r['heldout_name']} {r['heldout_mean']:.3f}" + ("" if ci is None or pd.isna(ci) else f" ± {ci:.3f}")


def rows(updates: pd.DataFrame, comp: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    keys = [k for k in coords(updates) if k in comp]
    head = ["link", "method", "training rank", "payload B/update (1 worker)", "% of baseline",
            "delta density median [min, max]", "held-out quality (final, ± 95% CI)",
            "cumulative B to the quality target (1 worker; seeds reaching it)", "s/update median"]
    out = []
    hilo = comp[~comp["method"].map(spec.is_data_parallel)]
    rank = updates.groupby("variant")["lora_rank"].first() if "lora_rank" in updates else pd.Series(dtype=object)
    for _, r in hilo.iterrows():
        key = tuple(r[k] for k in keys) + (r["variant"],)
        link = _link(r, keys)
        frac = r.get("fraction_of_full")
        out.append([link, r["variant"], training_rank(r["method"], rank.get(r["variant"])),
                    _fmt_bytes(r.get("payload_bytes_down")),
                    "-" if frac is None or pd.isna(frac) else f"{100 * frac:.2f}%",
                    density(updates, keys + ["variant"], key),   # "-" where no update recorded one
                    _heldout(r), bytes_to_target(r),
                    "-" if pd.isna(r.get("s_per_update_median")) else f"{r['s_per_update_median']:.3f}"])
    return head, out


def section(updates: pd.DataFrame, comp: pd.DataFrame) -> list[str]:
    """The report's section, only for runs holding a rival (delta or rank-R)."""
    if comp.empty or "method" not in comp:
        return []
    methods = set(comp["method"])
    if not any((found := spec.method_card(str(m))) is not None and found[0].rival for m in methods):
        return []
    head, body = rows(updates, comp)
    table = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in body]
    return ["## The baselines a user would pick instead", "",
            "Every HiLo-family variant with its training rank (rank-R trains at R and ships the whole small "
            "adapter in bf16, like full-bf16; the rest train at --lora-rank), its bytes and its held-out quality. `delta` ships the "
            "elements of the adapter in its ship dtype (bf16: the rounded adapter the workers sample with, as "
            "full-bf16 ships it) whose bit patterns changed since the previous shipped version, as indices + "
            "values through zstd or lz4; the learner's fp32 master copy is not what is compared (Adam moves "
            "nearly all of its elements every step; `--delta-dtype fp32` measures that case). Its replicas hold "
            "full-bf16's adapter bit for bit (the consistent column above). Density = changed / total elements "
            "per update.", "", *table, ""]
