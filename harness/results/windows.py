"""Which optimizer steps a data-parallel method's bytes per step are counted over (torch-free).

A K-step method (its card's `every_k`: diloco, lordo-*) ships on one step in K. A run whose steps are
not a multiple of --lordo-k ends with a partial window whose sync is spread over fewer steps (measured
~20 % more bytes per step at 20 steps, K = 8), and a run shorter than K has no whole window at all, so
every per-step byte figure (the comparison table's bytes and % of baseline, compare.py; the
claimed-vs-measured table, dataparallel_report.py; the cost model's, harness/projection) is counted
over whole sync windows only, and names what it left out.

Kept apart from both readers: dataparallel_report imports compare, so compare cannot import it.
"""
from __future__ import annotations

import pandas as pd

from trainers import cards


def tail_steps(df: pd.DataFrame, keys: list[str]) -> pd.Series:
    """True on the steps after a K-step method's last whole window, within each group of `keys` (one
    seed's cell: the coordinates, method and seed): per-step bytes are counted over whole windows."""
    if "lordo_k" not in df:
        return pd.Series(False, index=df.index)
    k = df["lordo_k"].astype(float)
    last = df.groupby(keys, dropna=False)["update_index"].transform("max")
    methods = df["method"].astype(str)
    every_k = methods.map({m: (found := cards.match("dataparallel", m)) is not None and found[0].every_k
                           for m in methods.unique()})   # the card: syncs every --lordo-k steps
    return every_k & (df["update_index"] > (last // k) * k)


def no_window(steps, k) -> str:
    """What a bytes cell says for a seed (or every seed of a row) without one whole sync window."""
    k = "" if k is None or pd.isna(k) else f" (--lordo-k {k:g})"
    return f"no whole sync window in {steps:.0f} steps{k}"
