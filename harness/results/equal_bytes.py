"""Equal-bytes views: quality against the bytes a method has communicated, per update and
cumulative, so that a method that sends more is not read as better. One figure per family, two
panels each, drawn by `plots.render` like every other figure (name, Figure, caption):

- `equal_bytes` (HiLo family; runs with held-out evaluations): left, the final held-out quality vs the
  framed bytes the learner sent per update (median over updates and seeds, all workers); right, the
  held-out quality at every evaluated version vs the cumulative framed bytes sent up to that version
  (mean over seeds). Version 0 (nothing sent yet, the same policy for every method) has no place on
  the log axis and is left out.
- `dp_equal_bytes` (data-parallel family): left, held-out perplexity after the last step vs wire bytes
  per optimizer step per worker (up + down, whole sync windows: dataparallel_report.per_seed); right,
  the loss of each step's training batch vs the cumulative wire bytes per worker up to that step.
  Each batch is drawn fresh for its worker and step (trainers/dataparallel/corpus.py), so its loss
  before the step is measured on text the replica has not trained on; the held-out perplexity exists
  only after the last step. Steps before the first sync (no byte yet) are left out of the log axis.

Error bars and bands: mean and 95 % CI over seeds (Student's t), drawn only with >= CI_MIN_SEEDS seeds.
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from harness.results import compare, dataparallel_plots, dataparallel_report, quality  # noqa: E402
from harness.results.compare import CI_MIN_SEEDS  # noqa: E402
from harness.results.style import bytes_axis, style  # noqa: E402
from trainers import spec  # noqa: E402

BARS = (f"Error bars and shaded bands: 95 % CI over seeds (Student's t), drawn only with >= {CI_MIN_SEEDS} seeds "
        "(n in the legend)")


def _label(name: str, row: pd.Series | dict, vary: list[str]) -> str:
    """The variant, plus the coordinates that differ between the runs plotted (a sweep point)."""
    extra = [f"{k}={row[k]}" for k in vary if k in row and not pd.isna(row[k])]
    return name + (f" ({', '.join(extra)})" if extra else "")


def _varying(df: pd.DataFrame, keys: list[str]) -> list[str]:
    return [k for k in keys if k in df and df[k].nunique(dropna=False) > 1]


def _band(ax, x, mean, ci, seeds: int, colour: str) -> None:
    if seeds >= CI_MIN_SEEDS:
        ax.fill_between(x, mean - ci, mean + ci, color=colour, alpha=0.15, linewidth=0)


# ---- HiLo family --------------------------------------------------------------------------------

def cumulative_points(updates: pd.DataFrame, evals: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per (coordinates, variant, evaluated version > 0): the held-out quality's mean and 95 % CI over
    seeds, and the cumulative framed bytes the learner sent up to that version (mean over seeds)."""
    c = quality.curves(evals, keys)
    if c.empty:
        return c
    u = updates[[not spec.is_data_parallel(str(m)) for m in updates["method"]]].sort_values("update_index")
    u = u.assign(cum_bytes=u.groupby(keys + ["variant", "seed"], dropna=False)["wire_bytes_down"].cumsum())
    per_seed = u.rename(columns={"update_index": "version"})[keys + ["variant", "seed", "version", "cum_bytes"]]
    at = evals[keys + ["variant", "seed", "version"]].merge(per_seed, on=keys + ["variant", "seed", "version"])
    mean = at.groupby(keys + ["variant", "version"], dropna=False)["cum_bytes"].mean().rename("cum_bytes").reset_index()
    return c.merge(mean, on=keys + ["variant", "version"])


def draw_equal_bytes(updates: pd.DataFrame, evals: pd.DataFrame, comp: pd.DataFrame) -> tuple[str, Figure, str] | None:
    """The HiLo family's equal-bytes figure (module docstring); None without held-out evaluations."""
    if evals.empty or comp.empty or "heldout_mean" not in comp or comp["heldout_mean"].isna().all():
        return None
    keys = [k for k in compare.coords(evals) if k in evals]
    comp = comp[[not spec.is_data_parallel(str(m)) for m in comp["method"]]]
    pts = comp.dropna(subset=["wire_bytes_down", "heldout_mean"])
    pts = pts[pts["wire_bytes_down"] > 0]
    cum = cumulative_points(updates, evals, keys)
    cum = cum[cum["version"] > 0] if len(cum) else cum
    vary = _varying(pts, keys)
    fig, (ax_u, ax_c) = plt.subplots(1, 2, figsize=(8.4, 3.1), sharey=True)
    for _, r in pts.iterrows():
        colour, marker = style(str(r["method"]))
        n = int(r["heldout_seeds"])
        bar = r["heldout_ci95"] if n >= CI_MIN_SEEDS and not pd.isna(r["heldout_ci95"]) else 0
        ax_u.errorbar(r["wire_bytes_down"], r["heldout_mean"], yerr=bar, color=colour, marker=marker, capsize=2,
                      label=_label(f"{r['variant']} (n={n})", r, vary))
    for key, g in (cum.groupby(keys + ["variant"], dropna=False, sort=False) if len(cum) else []):
        g = g.sort_values("version")
        variant = key[-1]
        method = str(comp.loc[comp["variant"] == variant, "method"].iloc[0]) if (comp["variant"] == variant).any() \
            else variant.split("@")[0]
        colour, marker = style(method)
        n = int(g["seeds"].min())
        ax_c.plot(g["cum_bytes"], g["quality"], color=colour, marker=marker, markersize=3,
                  label=_label(f"{variant} (n={n})", g.iloc[0], vary))
        _band(ax_c, g["cum_bytes"], g["quality"], g["ci95"], n, colour)
    name = cum["heldout_name"].iloc[0] if len(cum) else (pts["heldout_name"].iloc[0] if len(pts) else "quality")
    ax_u.set_ylabel(f"held-out {name}".replace("_", " "))
    ax_u.set_xlabel("bytes per update, learner → workers")
    ax_c.set_xlabel("cumulative bytes sent, learner → workers")
    ax_u.set_title("per update (final quality)", fontsize=8, loc="left")
    ax_c.set_title("cumulative (every evaluated version)", fontsize=8, loc="left")
    _say_empty(ax_u, "no point: no final held-out figure with bytes sent")
    _say_empty(ax_c, "no point: no version evaluated after the first update")
    _log_bytes_axes(fig, (ax_u, ax_c))
    return ("equal_bytes", fig,
            f"Held-out {name} (problems never trained on) against the framed bytes the learner sent (all workers). "
            "Left (per update): the final evaluation's mean over seeds against the median bytes per update. Right (cumulative): every "
            "evaluated version's mean over seeds against the bytes sent up to that version (mean over seeds; "
            f"version 0, before any byte, is left out of the log axis). Read at equal x, not equal updates. {BARS}.")


def _log_bytes_axes(fig: Figure, axes) -> None:
    """Both figures' byte axes (style.bytes_axis), a legend each."""
    for ax in axes:
        bytes_axis(ax)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
    fig.tight_layout()


def _say_empty(ax, words: str) -> bool:
    """Write `words` across an axis that got no point (its empty frame would read as a figure of nothing);
    True when it was empty."""
    if ax.get_legend_handles_labels()[0]:
        return False
    ax.text(0.5, 0.5, words, ha="center", va="center", transform=ax.transAxes, fontsize=7, wrap=True)
    ax.set_yticks([])
    return True


# ---- data-parallel family -----------------------------------------------------------------------

def dp_cumulative(updates: pd.DataFrame) -> pd.DataFrame:
    """Per (coordinates, method, optimizer step): the training batch's loss, mean and 95 % CI over seeds,
    and the cumulative wire bytes per worker (up + down) up to that step, mean over seeds."""
    if "method" not in updates or "train_loss" not in updates:
        return pd.DataFrame()
    df = updates[updates["method"].map(spec.is_data_parallel)].sort_values("update_index")
    if df.empty:
        return pd.DataFrame()
    keys = dataparallel_report.group_keys(updates) + ["method"]
    per_worker = (df["wire_bytes_up"].fillna(0) + df["wire_bytes_down"].fillna(0)) / df["workers"].astype(float)
    df = df.assign(cum_bytes=per_worker.groupby([df[k] for k in keys + ["seed"]], dropna=False).cumsum())
    rows = []
    for key, g in df.groupby(keys + ["update_index"], dropna=False, sort=False):
        mean, ci = quality.ci95(g["train_loss"])
        rows.append({**dict(zip(keys + ["update_index"], key)), "seeds": int(g["seed"].nunique()),
                     "cum_bytes": float(g["cum_bytes"].mean()), "loss": mean, "ci95": 0.0 if ci is None else ci})
    return pd.DataFrame(rows)


def draw_dp_equal_bytes(updates: pd.DataFrame) -> tuple[str, Figure, str] | None:
    """The data-parallel family's equal-bytes figure (module docstring); None without data-parallel cells."""
    pts = dataparallel_plots.ppl_points(updates)
    cum = dp_cumulative(updates)
    if pts.empty and cum.empty:
        return None
    keys = dataparallel_report.group_keys(updates)
    vary = dataparallel_report.varying(updates)
    fig, (ax_u, ax_c) = plt.subplots(1, 2, figsize=(8.4, 3.1))
    # a method whose seeds ran no whole sync window has a perplexity but no bytes per step: named in the caption
    unplaced = [dataparallel_report.label(r, vary) for _, r in pts.iterrows()
                if pd.isna(r["bytes"]) and not pd.isna(r["ppl_mean"])] if len(pts) else []
    for _, r in (pts.dropna(subset=["ppl_mean", "bytes"]).iterrows() if len(pts) else []):
        colour, marker = style(str(r["method"]))
        n = int(r["seeds"])
        bar = r["ppl_ci95"] if n >= CI_MIN_SEEDS and r["ppl_ci95"] is not None and not pd.isna(r["ppl_ci95"]) else 0
        ax_u.errorbar(r["bytes"], r["ppl_mean"], yerr=bar, color=colour, marker=marker, capsize=2,
                      label=f"{dataparallel_report.label(r, vary)} (n={n})")
    cum = cum[cum["cum_bytes"] > 0] if len(cum) else cum
    for key, g in (cum.groupby([k for k in keys if k in cum] + ["method"], dropna=False, sort=False) if len(cum) else []):
        g = g.sort_values("update_index")
        method = key[-1] if isinstance(key, tuple) else key
        colour, marker = style(str(method))
        n = int(g["seeds"].min())
        ax_c.plot(g["cum_bytes"], g["loss"], color=colour, marker=marker, markersize=2, linewidth=0.8,
                  label=f"{dataparallel_report.label(g.iloc[0], vary)} (n={n})")
        _band(ax_c, g["cum_bytes"], g["loss"], g["ci95"], n, colour)
    ax_u.set(xlabel="bytes per optimizer step per worker (wire, up + down)", ylabel="held-out perplexity")
    ax_c.set(xlabel="cumulative bytes per worker (wire, up + down)", ylabel="training-batch loss (nats/token)")
    ax_u.set_title("per step (held-out, after the last step)", fontsize=8, loc="left")
    ax_c.set_title("cumulative (every step)", fontsize=8, loc="left")
    if not ax_u.get_lines() and not ax_c.get_lines():
        plt.close(fig)
        return None                 # no sync yet and no whole window: nothing at any byte count
    # why the left panel is empty: no whole sync window to count bytes over, or no held-out perplexity (it is
    # evaluated after the last step: a run that stopped first has none)
    no_ppl = len(pts) == 0 or pts["ppl_mean"].isna().all()
    no_window = len(pts) == 0 or pts["bytes"].isna().all()
    why = "; ".join([*(["no seed ran a whole sync window"] if no_window else []),
                     *(["no seed recorded a held-out perplexity (evaluated after the last step: the run stopped "
                        "first)"] if no_ppl else [])])
    empty = _say_empty(ax_u, f"no point: {why}" + ("\n(bytes per step are counted over whole windows)"
                                                   if no_window and not no_ppl else ""))
    _log_bytes_axes(fig, (ax_u, ax_c))
    return ("dp_equal_bytes", fig,
            "Data-parallel methods at equal bytes. Left (per step): held-out perplexity after the last step (mean over seeds) "
            "against the wire bytes per optimizer step per worker, up + down, counted over whole sync windows. "
            "Right (cumulative): the loss of each step's training batch (fresh text for that worker and step, measured before "
            "the step; mean over workers, then over seeds) against the wire bytes per worker sent up to that step "
            "(mean over seeds); local steps send nothing, so a K-step method's curve falls at constant x between "
            f"syncs; steps before the first sync are left out of the log axis. {BARS}."
            + (f" Left is empty: {why}." if empty else "")
            + (f" Left leaves out {', '.join(unplaced)}: no seed ran a whole sync window (held-out perplexity in the "
               "report's data-parallel table)." if unplaced and not empty else ""))


def figures(updates: pd.DataFrame, evals: pd.DataFrame, comp: pd.DataFrame) -> list[tuple[str, Figure, str]]:
    """Both families' equal-bytes figures, where their runs have what they draw."""
    hilo = draw_equal_bytes(updates, evals, comp)
    dp = draw_dp_equal_bytes(updates)
    return [p for p in (hilo, dp) if p is not None]
