"""The falsifier figure (torch-free): subspace overlap per sync and the loss per step, mean and 95 %
CI over seeds, for LoRDO-Global with QHM none vs full-rank, from `falsifier.csv`
(trainers/dataparallel/falsifier.py).

    python -m harness.dpplots results/falsifier     # -> results/falsifier/figures/falsifier.pdf + .png
"""
from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from harness.quality import ci95  # noqa: E402

LABELS = {"lordo-global-none": "global, QHM none", "lordo-global-fullrank": "global, full-rank QHM"}


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
    fig, (ax_o, ax_l) = plt.subplots(1, 2, figsize=(9, 3.4))
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
    out = folder / "figures"
    out.mkdir(exist_ok=True)
    paths = [out / "falsifier.pdf", out / "falsifier.png"]
    for p in paths:
        fig.savefig(p, dpi=150)
    plt.close(fig)
    return paths


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m harness.dpplots FOLDER (holding falsifier.csv)", file=sys.stderr)
        raise SystemExit(2)
    for p in figure(sys.argv[1]):
        print(p)
