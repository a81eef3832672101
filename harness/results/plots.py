"""Paper figures from results folders alone (results.RunTables, compare.comparison): PDF
(Type-42 TrueType fonts embedded) + PNG.

    harness plot results/<run-id> [more runs or sweeps]    -> <first path>/figures/*.pdf|png

Figures: seconds per update vs bandwidth (log x); stacked phase breakdown per method; quality
vs bytes communicated (log x) with the Pareto front; held-out quality vs training seconds (the
time-to-quality figure, shaded 95 % CI over seeds); a Gantt timeline of learner and worker
phases over the first updates (pipelining shows as rollouts overlapping training); per-link
throughput over time; for data-parallel runs (harness/results/dataparallel_plots.py) held-out perplexity vs bytes per
optimizer step and the subspace overlap per sync. Every method keeps one colour (Okabe-Ito,
colour-blind safe) and one marker across all figures.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from harness.results import compare, dataparallel_plots as dpplots, quality, tables as results  # noqa: E402
from harness.results.style import OKABE_ITO, PHASE_COLOURS, STYLE, save, style  # noqa: E402
from trainers import spec  # noqa: E402  (torch-free vocabularies)

GANTT_UPDATES = 4


def seconds_vs_bandwidth(comp: pd.DataFrame, out: Path) -> list[Path]:
    fig, ax = plt.subplots(figsize=(4.2, 3))
    df = comp[comp["rate_bit_s"].notna()] if "rate_bit_s" in comp else comp.iloc[0:0]
    for variant, g in df.groupby("variant", sort=False):
        g = g.sort_values("rate_bit_s")
        colour, marker = style(g["method"].iloc[0])
        err = [g["s_per_update_median"] - g["s_per_update_q1"], g["s_per_update_q3"] - g["s_per_update_median"]]
        ax.errorbar(g["rate_bit_s"] / 1e6, g["s_per_update_median"], yerr=err, color=colour, marker=marker,
                    capsize=2, label=variant)
    ax.set_xscale("log")
    ax.set_xlabel("worker link bandwidth (Mbit/s)")
    dp = len(df) > 0 and df["method"].map(spec.is_data_parallel).all()  # an update is an optimizer step there
    ax.set_ylabel(f"seconds per {'optimizer step' if dp else 'update'} (median, IQR)")
    if df.empty:
        ax.text(0.5, 0.5, "no shaped link (localhost run)", transform=ax.transAxes, ha="center")
    else:
        ax.legend()
    return save(fig, out, "seconds_vs_bandwidth")


def phase_breakdown(updates: pd.DataFrame, out: Path) -> list[Path]:
    """The learner's median time per phase per update, stacked; the stack is its share of s/update."""
    phases = [p for p in results.LEARNER_PHASES if f"{p}_s" in updates]
    updates = updates.assign(bar=_bar_labels(updates))
    med = updates.groupby("bar", sort=False)[[f"{p}_s" for p in phases]].median()
    fig, ax = plt.subplots(figsize=(4.2, 3))
    bottom = pd.Series(0.0, index=med.index)
    for p in phases:
        ax.bar(med.index, med[f"{p}_s"], bottom=bottom, color=PHASE_COLOURS[p], label=p.replace("_", " "),
               edgecolor="white", linewidth=0.4)
        bottom += med[f"{p}_s"]
    spu = updates.groupby("bar", sort=False)["seconds_per_update"].median()
    ax.scatter(spu.index, spu.values, marker="_", s=400, color="black", zorder=3, label="s/update (median)")
    ax.set_ylabel("learner seconds per update (median)")
    ax.tick_params(axis="x", rotation=20)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return save(fig, out, "phase_breakdown")


def _bar_labels(updates: pd.DataFrame) -> pd.Series:
    """The variant, plus the coordinates that differ between the runs plotted (a sweep)."""
    label = updates["variant"].astype(str)
    for col, fmt in (("rate_bit_s", lambda v: f"{v / 1e6:g} Mbit/s"), ("delay_s", lambda v: f"{v * 1e3:g} ms"),
                     ("loss_frac", lambda v: f"{v * 100:g}% loss"), ("workers", lambda v: f"{v} workers")):
        if col in updates and updates[col].nunique(dropna=False) > 1:
            label = label + "\n" + updates[col].map(lambda v: "-" if pd.isna(v) else fmt(v))
    return label


def pareto(points: pd.DataFrame, higher_is_better: bool) -> pd.DataFrame:
    """Points not dominated in (fewer bytes, better quality), sorted by bytes."""
    pts = points.sort_values(["bytes", "quality"], ascending=[True, not higher_is_better])
    front, best = [], None
    for _, r in pts.iterrows():
        if best is None or (r["quality"] > best if higher_is_better else r["quality"] < best):
            front.append(r)
            best = r["quality"]
    return pd.DataFrame(front)


def quality_vs_bytes(comp: pd.DataFrame, out: Path) -> list[Path]:
    """Quality (held out where the runs evaluated it, mean ± 95 % CI; else the training-batch metric,
    ± sd) vs bytes per update, with the Pareto front. Data-parallel methods have their own figure
    (dpplots: perplexity vs bytes per optimizer step)."""

    fig, ax = plt.subplots(figsize=(4.2, 3))
    comp = comp[[not spec.is_data_parallel(str(m)) for m in comp["method"]]] if len(comp) else comp
    heldout = "heldout_mean" in comp and comp["heldout_mean"].notna().any()
    quality, err = ("heldout_mean", "heldout_ci95") if heldout else ("train_metric_mean", "train_metric_sd")
    pts = comp.assign(bytes=comp["wire_bytes_down"], quality=comp[quality]).dropna(subset=["bytes", "quality"])
    pts = pts[pts["bytes"] > 0]
    for _, r in pts.iterrows():
        colour, marker = style(r["method"])
        ax.errorbar(r["bytes"], r["quality"], yerr=0 if pd.isna(r[err]) else r[err], color=colour, marker=marker,
                    capsize=2, label=r["variant"])
    if heldout and len(pts):
        metric, higher = f"held-out {pts['heldout_name'].iloc[0]}", not bool(pts["heldout_lower_is_better"].iloc[0])
    else:
        metric = f"training-batch {pts['train_metric_name'].iloc[0]}" if len(pts) else "quality"
        higher = "loss" not in metric
    if len(pts):
        front = pareto(pts, higher_is_better=higher)
        ax.step(front["bytes"], front["quality"], where="post", color="grey", linestyle="--", linewidth=0.8,
                label="Pareto front")
    ax.set_xscale("log")
    ax.set_xlabel("bytes communicated per update, learner → workers")
    ax.set_ylabel(metric.replace("_", " "))
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    ax.legend(uniq.values(), uniq.keys(), fontsize=7)
    return save(fig, out, "quality_vs_bytes")


def timeline(phases: pd.DataFrame, out: Path, max_updates: int = GANTT_UPDATES) -> list[Path]:
    """Gantt chart of the first seed's first updates after start-up, one panel per method, one row per process."""
    variants = list(dict.fromkeys(phases["variant"])) if len(phases) else []
    fig, axes = plt.subplots(max(1, len(variants)), 1, figsize=(6.5, 1.1 + 0.9 * max(1, len(variants))),
                             squeeze=False)
    for ax, variant in zip(axes[:, 0], variants):
        g = phases[(phases["variant"] == variant)]
        # Updates 2..max_updates+1: the first one also holds the workers' start-up (model building).
        g = g[(g["seed"] == g["seed"].min()) & (g["update_index"] <= max_updates + 1) & (g["update_index"] >= 2)]
        procs = sorted(g["process"].unique(), key=lambda p: (p != "learner", len(p), p))
        for i, proc in enumerate(procs):
            for _, r in g[g["process"] == proc].iterrows():
                ax.barh(i, r["end_s"] - r["start_s"], left=r["start_s"], height=0.7,
                        color=PHASE_COLOURS.get(r["phase"], "grey"), linewidth=0)
        ax.set_yticks(range(len(procs)), procs)
        ax.invert_yaxis()
        ax.set_title(variant, fontsize=8, loc="left", color=style(g["method"].iloc[0] if len(g) else variant)[0])
    axes[-1, 0].set_xlabel("seconds since the learner started")
    fig.subplots_adjust(hspace=0.7)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in PHASE_COLOURS.values()]
    fig.legend(handles, [p.replace("_", " ") for p in PHASE_COLOURS], ncol=5, fontsize=7, loc="lower center",
               bbox_to_anchor=(0.5, 1.0))
    return save(fig, out, "timeline")


def link_throughput(links: pd.DataFrame, out: Path) -> list[Path]:
    """Throughput of every worker link over time (first seed), one panel per method."""
    variants = list(dict.fromkeys(links["variant"])) if len(links) else []
    fig, axes = plt.subplots(max(1, len(variants)), 1, figsize=(6.5, 1.2 + 1.3 * max(1, len(variants))),
                             squeeze=False)  # own y scale per panel: compressed methods move far fewer bits
    for ax, variant in zip(axes[:, 0], variants):
        g = links[(links["variant"] == variant)]
        g = g[(g["seed"] == g["seed"].min()) & (g["t_s"] >= 0)]  # samples before the learner started are idle
        for i, ((node, direction), h) in enumerate(g.groupby(["node", "direction"])):
            ax.plot(h["t_s"], h["throughput_bit_s"] / 1e6, label=f"{node} {direction}",
                    color=OKABE_ITO[i % len(OKABE_ITO)], linestyle="-" if direction == "down" else ":")
        ax.set_title(variant, fontsize=8, loc="left")
        ax.set_ylabel("Mbit/s")
        ax.legend(fontsize=6, ncol=4)
    if not variants:
        axes[0, 0].text(0.5, 0.5, "no link counters (localhost run)", transform=axes[0, 0].transAxes, ha="center")
    axes[-1, 0].set_xlabel("seconds since the learner started")
    fig.subplots_adjust(hspace=0.6)
    return save(fig, out, "link_throughput")


def quality_vs_time(evals: pd.DataFrame, comp: pd.DataFrame, out: Path) -> list[Path]:
    """Held-out quality vs training wall-clock seconds, one line per method (mean over seeds, shaded
    95 % CI), the baseline-derived target as a dashed line: the time-to-quality figure. One panel per
    link coordinate group (a sweep point); a method faster per update but slower to quality shows here."""

    keys = [k for k in compare.coords(evals) if k in evals] if len(evals) else []
    c = quality.curves(evals, keys)
    groups = [] if c.empty else list(c.groupby(keys, dropna=False, sort=False)) if keys else [((), c)]
    fig, axes = plt.subplots(1, max(1, len(groups)), figsize=(3.4 * max(1, len(groups)), 2.8), squeeze=False)
    for ax, (key, g) in zip(axes[0], groups):
        for variant, h in g.groupby("variant", sort=False):
            h = h.sort_values("version")
            method = variant.split("@")[0]
            colour, marker = style(method)
            ax.plot(h["wall_s"], h["quality"], color=colour, marker=marker, markersize=3, label=variant)
            ax.fill_between(h["wall_s"], h["quality"] - h["ci95"], h["quality"] + h["ci95"], color=colour,
                            alpha=0.15, linewidth=0)
        target = _target(comp, keys, key)
        if target is not None:
            ax.axhline(target, color="grey", linestyle="--", linewidth=0.8, label="target")
        ax.set_xlabel("training seconds (evaluation excluded)")
        ax.set_ylabel(f"held-out {g['heldout_name'].iloc[0]}" if len(g) else "held-out quality")
        ax.legend(fontsize=6)
    if c.empty:
        axes[0, 0].text(0.5, 0.5, "no held-out evaluations in these runs", transform=axes[0, 0].transAxes,
                        ha="center")
    return save(fig, out, "quality_vs_time")


def _target(comp: pd.DataFrame, keys: list[str], key) -> float | None:
    if "heldout_target" not in comp:
        return None
    rows = compare._same(comp, keys, key if isinstance(key, tuple) else (key,))
    vals = rows["heldout_target"].dropna()
    return float(vals.iloc[0]) if len(vals) else None


def write(path: str | Path, extra: Iterable[str | Path] = (), tables: results.RunTables | None = None) -> list[Path]:
    """Every figure for the runs at or under `path` (and `extra`), into `path`/figures/; the runs
    are parsed here unless `tables` (already read by the caller) is given."""
    path = Path(path)
    t = tables if tables is not None else results.read([path, *extra])
    out = path / "figures"
    if t.updates.empty:
        raise ValueError(f"{path}: no completed update to plot yet")
    comp = compare.comparison(t.updates, t.cells, t.evals)
    with plt.rc_context(STYLE):
        return (seconds_vs_bandwidth(comp, out) + phase_breakdown(t.updates, out)
                + quality_vs_bytes(comp, out) + timeline(t.phases, out) + link_throughput(t.links, out)
                + quality_vs_time(t.evals, comp, out) + dpplots.figures(t.updates, out))
