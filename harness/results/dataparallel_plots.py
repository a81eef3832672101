"""Figures of the data-parallel family (torch-free).

The falsifier figure: subspace overlap per sync and the loss per step, mean and 95 % CI over
seeds, for LoRDO-Global with QHM none vs full-rank, from `falsifier.csv` (the in-process runs of
trainers/dataparallel/falsifier.py):

    python -m harness.results.dataparallel_plots results/falsifier     # -> results/falsifier/figures/falsifier.pdf + .png
                                                                        #    and paired.md (dataparallel_report.paired_lines)

From a `harness run` folder's tables (called by `plots.render`, same style and colours): `dp_overlap`,
the overlap per sync of every variant that has one (mean over seeds, shaded 95 % CI); held-out
perplexity against bytes per optimizer step is equal_bytes.py's `dp_equal_bytes` (its left panel).
Nothing is drawn for runs without data-parallel cells.
"""
from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from harness.results import dataparallel_report  # noqa: E402
from harness.results.style import save, style  # noqa: E402
from harness.results.quality import ci95  # noqa: E402
from trainers import spec  # noqa: E402

LABELS = {"lordo-global-none": "global, QHM none", "lordo-global-fullrank": "global, full-rank QHM",
          "lordo-global-fullrank-reapplied": "full-rank QHM on G + E, E kept (before the fix)",
          "lordo-global-fullrank-gradient": "full-rank QHM on G (the fix)",
          "lordo-global-fullrank-reduced": "full-rank QHM on G + E, E reduced"}


def band(df: pd.DataFrame) -> pd.DataFrame:
    """Per index: mean and 95 % CI half-width over seeds."""
    rows = [{"index": i, **dict(zip(("mean", "ci"), ci95(g["value"])))} for i, g in df.groupby("index")]
    out = pd.DataFrame(rows)
    out["ci"] = out["ci"].fillna(0.0)
    return out


def figure(folder: str | Path) -> list[Path]:
    folder = Path(folder)
    data = pd.read_csv(folder / "falsifier.csv")
    plt.rcParams.update({"pdf.fonttype": 42, "ps.fonttype": 42})
    fig, (ax_o, ax_l) = plt.subplots(1, 2, figsize=(9, 3.4), dpi=150)  # style.save writes at the figure's dpi
    for variant, g in data.groupby("variant"):
        seeds = g["seed"].nunique()
        for ax, kind in ((ax_o, "overlap"), (ax_l, "loss")):
            b = band(g[g["kind"] == kind])
            ax.plot(b["index"], b["mean"], label=f"{LABELS.get(variant, variant)} ({seeds} seeds)")
            ax.fill_between(b["index"], b["mean"] - b["ci"], b["mean"] + b["ci"], alpha=0.25)
    ax_o.set(xlabel="sync", ylabel="overlap  mean $\\sigma^2(Q_{t+1}^T Q_t)$", title="subspace overlap per sync")
    ax_l.set(xlabel="optimizer step", ylabel="train loss (nats/token)", title="loss (mean, 95% CI)")
    ax_o.legend(fontsize=8)
    fig.tight_layout()
    return save(fig, folder / "figures", "falsifier")


def _label(key: tuple, keys: list[str], vary: list[str]) -> str:
    """The method, plus the coordinates that differ between the runs plotted (a sweep point)."""
    return dataparallel_report.label(dict(zip(keys, key)), vary)


def ppl_points(updates: pd.DataFrame) -> pd.DataFrame:
    """One row per (coordinates, method): wire bytes (up + down) per optimizer step per worker, mean
    over seeds, and held-out perplexity: mean and 95 % CI half-width over seeds."""
    seeds = dataparallel_report.per_seed(updates) if "method" in updates else pd.DataFrame()
    if seeds.empty:
        return pd.DataFrame()
    seeds = seeds.assign(bytes=seeds["wire_up"] + seeds["wire_down"])
    keys = dataparallel_report.present_keys(seeds) + ["method"]
    rows = []
    for key, g in seeds.groupby(keys, dropna=False, sort=False):
        mean, ci = ci95(g["heldout_ppl"])
        rows.append({**dict(zip(keys, key)), "seeds": len(g), "bytes": g["bytes"].mean(), "ppl_mean": mean,
                     "ppl_ci95": ci})   # bytes: NaN where no seed ran a whole sync window
    return pd.DataFrame(rows)


def overlap_bands(updates: pd.DataFrame) -> pd.DataFrame:
    """Per (coordinates, method, optimizer step of a sync): overlap mean and 95 % CI over seeds."""
    if "overlap" not in updates or "method" not in updates:
        return pd.DataFrame()
    df = updates[updates["method"].map(spec.is_data_parallel) & updates["overlap"].notna()]
    keys = dataparallel_report.group_keys(updates) + ["method", "update_index"]
    rows = []
    for key, g in df.groupby(keys, dropna=False, sort=False):
        mean, ci = ci95(g["overlap"])
        rows.append({**dict(zip(keys, key)), "seeds": g["seed"].nunique(), "mean": mean,
                     "ci95": 0.0 if ci is None else ci})
    return pd.DataFrame(rows)


def draw_dp_overlap(updates: pd.DataFrame) -> tuple[str, Figure, str] | None:
    """(name, figure, caption) of the overlap per sync; None where no variant has one."""
    b = overlap_bands(updates)
    if b.empty:
        return None
    keys, vary = dataparallel_report.present_keys(b) + ["method"], dataparallel_report.varying(updates)
    fig, ax = plt.subplots(figsize=(4.2, 3))
    for key, g in b.groupby(keys, dropna=False, sort=False):
        g = g.sort_values("update_index")
        colour, marker = style(key[-1])
        ax.plot(g["update_index"], g["mean"], color=colour, marker=marker, markersize=3,
                label=f"{_label(key, keys, vary)}, {g['seeds'].max()} seeds")
        ax.fill_between(g["update_index"], g["mean"] - g["ci95"], g["mean"] + g["ci95"], color=colour, alpha=0.2,
                        linewidth=0)
    ax.set_xlabel("optimizer step of the sync")
    ax.set_ylabel("overlap  mean $\\sigma^2(Q_{t+1}^T Q_t)$")
    ax.set_title("subspace overlap per sync (mean, 95% CI over seeds)", fontsize=8)
    ax.legend(fontsize=6)
    return ("dp_overlap", fig,
            "Subspace overlap mean(σ²(Q_{t+1}ᵀ Q_t)) at each sync that refreshed the projection (mean over workers), "
            "against the optimizer step of the sync: 1 = the new subspace is the old one (the stagnation without "
            "full-rank QHM), lower = Q moves. Line: mean over seeds (n in the legend); shaded: 95 % CI over seeds "
            "(Student's t; none with one seed).")


def figures(updates: pd.DataFrame) -> list[tuple[str, Figure, str]]:
    """The data-parallel figures of a run folder's updates table beside the equal-bytes one (its left panel is
    held-out perplexity against bytes per step): the overlap per sync; [] without one."""
    return [p for p in (draw_dp_overlap(updates),) if p is not None]


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m harness.results.dataparallel_plots FOLDER (holding falsifier.csv)", file=sys.stderr)
        raise SystemExit(2)
    for p in figure(sys.argv[1]):
        print(p)
    folder = Path(sys.argv[1])
    md = dataparallel_report.paired_lines(pd.read_csv(folder / "falsifier.csv"), pd.read_csv(folder / "heldout.csv"))
    (folder / "paired.md").write_text("\n".join(md))
    print(folder / "paired.md")
