"""The data-parallel family's "claimed vs measured bytes" section of report.md (torch-free).

Per variant (link coordinates, workers, every run parameter that differs between the runs, e.g. lordo_k
in a sweep over --lordo-k: `group_keys`; method), over each seed's optimizer steps: bytes per
optimizer step per worker, each direction, as the method's analytic formula claims (tensor data,
4 bytes per fp32 element) and as measured where written (payload = the SYNC tensor-table body;
wire = + the 44-byte frame header), the framing overhead (measured payload / claimed), and the
ratio of the measured payload (up + down) to each baseline's under the same coordinates and
number of steps (REFERENCES: `lowrank-ddp-dense`, the LoRDO review's low-rank DDP, dense gradients
every step; `lowrank-ddp-projected`, Q^T G on the wire, named `lowrank-ddp` in older results; `ddp`); seconds per optimizer step and held-out perplexity (mean and 95 %
CI over seeds). Then, per variant whose workers refresh a projection (lordo-*, lowrank-ddp-*), the
subspace overlap mean(sigma^2(Q_{t+1}^T Q_t)) per sync (results.py's `overlap` column): the mean over
each seed's syncs (mean and 95 % CI over seeds) and the lowest sync of any seed (1 = Q did not move).
When the run's --baseline is a data-parallel method (presets/lordo-stagnation.yaml: lordo-global-none),
every other variant's held-out perplexity minus the baseline's, seed by seed, mean and 95 % CI.
"""
from __future__ import annotations

import pandas as pd

from harness.results import compare
from harness.results.quality import ci95
from harness.results.windows import no_window, tail_steps
from trainers import spec

KEYS = ["profile", "rate_bit_s", "delay_s", "loss_frac", "workers"]   # within one run (a sweep: group_keys)
# Every column a grouping may key on: the comparison's coordinates, any run parameter (a sweep over
# --lordo-k makes lordo_k one) and the run (when two runs repeat a variant: compare.coords).
_COORD_NAMES = {*compare.COORDS, *(p.name for p in spec.PARAMS), "run_id"}
# The baselines each ratio is against: column suffix -> (the methods that are it, what it sends).
REFERENCES = {
    "lowrank-ddp-dense": (("lowrank-ddp-dense",), "the review's low-rank DDP: dense gradients every step"),
    "lowrank-ddp-projected": (("lowrank-ddp-projected", "lowrank-ddp"), "Q^T G every step (GaLore-style)"),
    "ddp": (("ddp",), "dense gradients every step, plain Adam"),
}


# The columns the section reads from the updates table beyond the coordinates.
MEASURED = ("claimed_bytes_up", "claimed_bytes_down", "payload_bytes_up", "wire_bytes_up", "payload_bytes_down",
            "wire_bytes_down", "seconds_per_update", "heldout_ppl")


def group_keys(updates: pd.DataFrame) -> list[str]:
    """The coordinates the data-parallel rows of `updates` are grouped on (besides method and seed): the
    comparison's (compare.coords: the link, the workers, and every run parameter that differs between the
    runs, e.g. lordo_k in a sweep over --lordo-k), so two sweep points never merge into one row."""
    df = updates[updates["method"].map(spec.is_data_parallel)] if "method" in updates else updates
    return [k for k in compare.coords(df) if k in df and k not in ("method", "seed")]


def present_keys(df: pd.DataFrame) -> list[str]:
    """The coordinate columns of a table grouped by `keys` (per_seed's, table's, baseline_pairs'), in order."""
    return [c for c in df.columns if c in _COORD_NAMES and c not in ("method", "seed")]


def varying(updates: pd.DataFrame, exclude: tuple[str, ...] = ()) -> list[str]:
    """The coordinates that differ between the data-parallel rows of `updates` (what a label must name, in
    every table and figure alike, even one that shows some of the rows)."""
    df = updates[updates["method"].map(spec.is_data_parallel)] if "method" in updates else updates
    return [k for k in group_keys(updates) if k not in exclude and df[k].nunique(dropna=False) > 1]


_FORMAT = {"rate_bit_s": lambda v: f"{v / 1e6:g} Mbit/s", "delay_s": lambda v: f"{v * 1e3:g} ms",
           "loss_frac": lambda v: f"{v * 100:g}% loss", "workers": lambda v: f"{v:g} workers",
           "run_id": lambda v: f"run {v}"}


def label(row, vary: list[str]) -> str:
    """The method, plus the coordinates that differ between the rows shown: "lordo-global (lordo_k 2)"."""
    def fmt(k, v):
        if k in _FORMAT:
            return _FORMAT[k](v)
        return f"{k} {v:g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else f"{k} {v}"
    extra = [fmt(k, row[k]) for k in vary if k in row and not pd.isna(row[k])]
    return str(row["method"]) + (f" ({', '.join(extra)})" if extra else "")


def per_seed(updates: pd.DataFrame) -> pd.DataFrame:
    """One row per (coordinates, method, seed): byte totals per worker and per optimizer step, over
    whole sync windows (`tail` = the steps of a last partial window, left out of the bytes; `steps` = 0
    and the bytes blank where the seed ran no whole window, `total_steps` its steps, `k` its --lordo-k),
    and its seconds per step (over every step) and held-out perplexity (of its last step), whatever the window;
    `planned`: the steps the run planned per cell (--updates), where the table has them."""
    df = updates[updates["method"].map(spec.is_data_parallel) & updates.get("claimed_bytes_up", pd.Series(dtype=float)).notna()]
    if df.empty:
        return df
    # A cell cut short (its aggregator or a worker killed) never wrote its held-out row, and may lack the
    # down-link columns: what it did write is still reported, the missing figures as blanks.
    df = df.reindex(columns=[*df.columns, *(c for c in MEASURED if c not in df.columns)])
    df = df.sort_values("update_index", kind="stable")
    keys = [*group_keys(updates), "method", "seed"]
    tail = tail_steps(df, keys)
    every = df.groupby(keys, dropna=False).agg(tail=("update_index", lambda s: int(tail[s.index].sum())),
                                               total_steps=("update_index", "count"),
                                               s_per_step=("seconds_per_update", "mean"),
                                               heldout_ppl=("heldout_ppl", "last"))
    if "lordo_k" in df:
        every = every.join(df.groupby(keys, dropna=False)["lordo_k"].first().rename("k"))
    if "updates" in df:   # the steps the run planned per cell (--updates): a seed with fewer was cut short
        every = every.join(df.groupby(keys, dropna=False)["updates"].first().rename("planned"))
    g = df[~tail].groupby(keys, dropna=False)
    whole = g.agg(steps=("update_index", "count"), claimed_up=("claimed_bytes_up", "sum"), claimed_down=("claimed_bytes_down", "sum"),
                  payload_up_all=("payload_bytes_up", "sum"), wire_up_all=("wire_bytes_up", "sum"),
                  payload_down=("payload_bytes_down", "sum"), wire_down_all=("wire_bytes_down", "sum"))
    # a seed with no whole window keeps its row (its seconds per step and held-out perplexity, over every
    # step: only the bytes per step are counted over whole windows), its bytes blank
    out = every.join(whole).reset_index()
    out["steps"] = out["steps"].fillna(0)
    workers = out["workers"].astype(float)
    for col in ("payload_up", "wire_up", "wire_down"):
        out[col] = out[f"{col}_all"] / workers
    for col in ("claimed_up", "claimed_down", "payload_up", "payload_down", "wire_up", "wire_down"):
        out[col] = out[col] / out["steps"]
    out["measured"] = out["payload_up"] + out["payload_down"]
    return out


def cut_short(g: pd.DataFrame) -> pd.Series:
    """True on the seeds (per_seed rows of one variant) that ran fewer steps than the run planned (an
    interrupted or failed cell), or, without the plan, fewer than the variant's longest seed."""
    most = g["total_steps"].max()
    planned = g["planned"].fillna(most) if "planned" in g else pd.Series(most, index=g.index)
    return g["total_steps"] < planned


def table(updates: pd.DataFrame) -> pd.DataFrame:
    """One row per variant: per-step bytes (mean over seeds), ratios, seconds, perplexity. A seed cut
    short is left out of every figure of its row while another seed ran whole (its bytes per step would
    weigh its first, dense sync more, its perplexity is of fewer steps, if it has one), and named:
    `cut` = 'seed 2 at 24' per such seed, `planned` = the steps they fell short of; where every seed was
    cut short, the row is over all of them (`all_cut`) and `steps_least` - `steps_most` is their range."""
    seeds = per_seed(updates)
    if seeds.empty:
        return seeds
    link = present_keys(seeds)
    keys = link + ["method"]
    cols = ["steps", "claimed_up", "payload_up", "wire_up", "claimed_down", "payload_down", "wire_down",
            "measured"]
    rows = []
    for key, g in seeds.groupby(keys, dropna=False, sort=False):
        cut = cut_short(g)
        all_cut = bool(cut.all())
        named = g[cut].sort_values("seed") if not all_cut else g.iloc[:0]
        planned = g["planned"].max() if "planned" in g else g["total_steps"].max()
        g = g if all_cut else g[~cut]   # the seeds the row's figures are over
        w = g[g["steps"] > 0]   # the seeds with a whole sync window: the bytes are theirs
        row = dict(zip(keys, key), seeds=len(g), tail=int(g["tail"].max()), **{c: w[c].mean() for c in cols},
                   s_per_step=g["s_per_step"].mean(),
                   no_window=len(g) - len(w), total_steps=g["total_steps"].max(),
                   k=g["k"].iloc[0] if "k" in g else None,
                   steps_least=w["steps"].min() if len(w) else 0, steps_most=w["steps"].max() if len(w) else 0,
                   all_cut=all_cut, planned=planned,
                   cut=[f"seed {s:g} at {n:.0f}" for s, n in zip(named["seed"], named["total_steps"])])
        row["steps"] = row["steps"] if len(w) else 0
        row["ppl_mean"], row["ppl_ci95"] = ci95(g["heldout_ppl"])
        row["ppl_seeds"] = int(g["heldout_ppl"].notna().sum())
        rows.append(row)
    out = pd.DataFrame(rows)
    for ref, (names, _) in REFERENCES.items():
        base = out[out["method"].isin(names)].drop_duplicates(link)[link + ["measured", "steps"]].rename(
            columns={"measured": f"{ref}_measured", "steps": f"{ref}_steps"})
        out = out.merge(base, on=link, how="left")
        same = out[f"{ref}_steps"] == out["steps"]   # ratios only over the same number of optimizer steps
        out[f"vs_{ref}"] = (out["measured"] / out[f"{ref}_measured"]).where(same)
    return out


def overlap_table(updates: pd.DataFrame) -> pd.DataFrame:
    """One row per variant with overlap rows: seeds, syncs per seed, mean over each seed's syncs
    (mean and 95 % CI over seeds), min and max over every sync of every seed."""
    if "overlap" not in updates or "method" not in updates:
        return pd.DataFrame()
    df = updates[updates["method"].map(spec.is_data_parallel) & updates["overlap"].notna()]
    if df.empty:
        return pd.DataFrame()
    keys = [*group_keys(updates), "method"]
    rows = []
    for key, g in df.groupby(keys, dropna=False, sort=False):
        seeds = g.groupby("seed")["overlap"]
        mean, ci = ci95(seeds.mean())
        rows.append(dict(zip(keys, key), seeds=seeds.ngroups, syncs=seeds.size().mean(), overlap_mean=mean,
                         overlap_ci95=ci, overlap_min=g["overlap"].min(), overlap_max=g["overlap"].max()))
    return pd.DataFrame(rows)


def overlap_lines(updates: pd.DataFrame) -> list[str]:
    t = overlap_table(updates)
    if t.empty:
        return []
    head = ["workers", "method", "seeds x syncs", "overlap mean (± 95% CI over seeds)", "min", "max"]
    vary = varying(updates, ("workers",))
    lines = ["### Subspace overlap per sync", "",
             "mean(σ²(Q_{t+1}ᵀ Q_t)) at each sync that refreshed the projection (mean over workers): 1 = the "
             "new subspace is the old one (the review's stagnation without full-rank QHM); lower = Q moves. "
             "Mean over each seed's syncs, then mean ± 95 % CI over seeds; min / max over every sync.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, r in t.iterrows():
        mean = f"{r['overlap_mean']:.4f}" + (f" ± {r['overlap_ci95']:.4f}" if r["overlap_ci95"] is not None
                                             and not pd.isna(r["overlap_ci95"]) else "")
        workers = "-" if pd.isna(r.get("workers")) else str(int(r["workers"]))
        lines.append("| " + " | ".join([workers, label(r, vary), f"{r['seeds']} x {r['syncs']:g}", mean,
                                        f"{r['overlap_min']:.4f}", f"{r['overlap_max']:.4f}"]) + " |")
    return lines + [""]


def _b(v) -> str:
    return "-" if v is None or pd.isna(v) else f"{v:,.0f}"


def _x(v) -> str:
    return "-" if v is None or pd.isna(v) else f"{v:.3f}x"


def _ratio_cell(r, ref: str) -> str:
    """A "vs <baseline>" cell: the ratio; where the baseline ran but over another number of counted steps
    (a last partial sync window left out of this row's, a seed cut short), both step counts instead."""
    theirs = r.get(f"{ref}_steps")
    if pd.isna(r[f"vs_{ref}"]) and theirs is not None and not pd.isna(theirs) and theirs != r["steps"]:
        return f"- ({r['steps']:.0f} steps, {ref} {theirs:.0f}: not comparable)"
    return _x(r[f"vs_{ref}"])


def _cut_note(r) -> str:
    """' (seed 2 at 24 of 200 steps: cut short, left out)', or where every seed was cut short, said so."""
    if r["all_cut"]:
        return f" (every seed cut short of {r['planned']:.0f} steps)"
    return f" ({', '.join(r['cut'])} of {r['planned']:.0f} steps: cut short, left out)" if r["cut"] else ""


def section(updates: pd.DataFrame) -> list[str]:
    """Markdown lines (empty when the run has no data-parallel cell)."""
    t = table(updates) if "method" in updates else pd.DataFrame()
    if t.empty:
        return []
    head = ["workers", "method", "seeds x steps", "claimed B/step up", "measured payload up", "wire up",
            "claimed B/step down", "measured payload down", "wire down", "payload / claimed",
            *(f"vs {ref}" for ref in REFERENCES), "s/step", "held-out ppl (mean ± 95% CI)"]
    lines = ["## Data-parallel bytes: claimed vs measured", "",
             "Bytes per optimizer step per worker (mean over the steps of each seed, then over seeds). Claimed = "
             "the method's formula (fp32 tensor data); payload = the SYNC tensor-table body as written; wire = "
             "+ frame header. K-step methods (diloco, lordo-*) are counted over whole sync windows: the steps of "
             "a last partial window (a run not a multiple of --lordo-k) are left out and named; a seed with no whole window "
             "has no bytes per step (said in its row) but keeps its held-out perplexity, that of its last step; s/step "
             "is over every step. A seed cut short (fewer steps than the run planned: an interrupted or failed cell) is "
             "left out of its row's figures and named in its seeds x steps cell, unless every seed was (then the "
             "row is over all of them, its steps a range). A "
             "sweep's points (any run parameter that differs between the runs) are rows of their own, named after the "
             "method. Ratios: measured payload (up + down) / that of each baseline under the same coordinates and "
             "number of counted optimizer steps (- where the run has none; both counts where they differ): "
             + "; ".join(f"`{ref}` = {text}" for ref, (_, text) in REFERENCES.items())
             + ". The LoRDO review's ~10x claim is against `lowrank-ddp-dense`.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    vary = varying(updates, ("workers",))
    for _, r in t.iterrows():
        claimed = r["claimed_up"] + r["claimed_down"]
        ppl = "-" if r["ppl_mean"] is None or pd.isna(r["ppl_mean"]) else f"{r['ppl_mean']:.3f}" + (
            f" ± {r['ppl_ci95']:.3f}" if r["ppl_ci95"] is not None and not pd.isna(r["ppl_ci95"]) else "") + (
            f" (n={r['ppl_seeds']})" if r["ppl_seeds"] < r["seeds"] else "")
        if not r["steps"]:   # no seed ran a whole sync window: no bytes per step to count, said so
            note = no_window(r["total_steps"], r["k"])
            steps = f"{r['seeds']} x {r['total_steps']:.0f}" + _cut_note(r)
            byte_cells = [note, *["-"] * (6 + len(REFERENCES))]
        else:
            least, most = r["steps_least"], r["steps_most"]
            steps = f"{r['seeds'] - r['no_window']} x {least:.0f}" + (f"-{most:.0f}" if most != least else "") + (
                f" (+{r['tail']} tail steps left out)" if r["tail"] else "") + (
                f" ({r['no_window']} seeds: {no_window(r['total_steps'], r['k'])})" if r["no_window"] else "") + _cut_note(r)
            byte_cells = [_b(r["claimed_up"]), _b(r["payload_up"]), _b(r["wire_up"]), _b(r["claimed_down"]),
                          _b(r["payload_down"]), _b(r["wire_down"]),
                          f"{r['measured'] / claimed:.4f}" if claimed else "-",
                          *(_ratio_cell(r, ref) for ref in REFERENCES)]
        s_step = "-" if pd.isna(r["s_per_step"]) else f"{r['s_per_step']:.3f}"
        cells = [str(int(r["workers"])), label(r, vary), steps, *byte_cells, s_step, ppl]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""] + overlap_lines(updates) + baseline_pair_lines(updates)


# ---- paired against the run's data-parallel --baseline (e.g. presets/lordo-stagnation.yaml) ----

def baseline_pairs(updates: pd.DataFrame) -> pd.DataFrame:
    """One row per variant other than the run's --baseline, when that baseline is a data-parallel method:
    held-out perplexity minus the baseline's, seed by seed (same seed: same data, corpus and initial
    replica), over the seeds both have a held-out figure for, mean and 95 % CI; plus the mean overlap per
    seed of each side."""
    if "baseline" not in updates:
        return pd.DataFrame()
    # the runs compared against a data-parallel baseline (a combined report may hold HiLo runs beside them)
    updates = updates[updates["baseline"].map(lambda b: isinstance(b, str) and spec.is_data_parallel(b))]
    base = updates["baseline"].astype(str).unique()
    if len(base) != 1:
        return pd.DataFrame()
    seeds = per_seed(updates)
    if seeds.empty or not (seeds["method"] == base[0]).any():
        return pd.DataFrame()
    link = present_keys(seeds)
    if "overlap" in updates:
        over = updates[updates["overlap"].notna()].groupby(link + ["method", "seed"], dropna=False)["overlap"].mean()
        seeds = seeds.merge(over.rename("overlap").reset_index(), on=link + ["method", "seed"], how="left")
    else:
        seeds = seeds.assign(overlap=float("nan"))
    ref = seeds[seeds["method"] == base[0]][link + ["seed", "heldout_ppl", "overlap"]]
    rows = []
    for key, g in seeds[seeds["method"] != base[0]].groupby(link + ["method"], dropna=False, sort=False):
        both = g.merge(ref, on=link + ["seed"], suffixes=("", "_base"))
        # a seed cut short on either side has no held-out figure: no pair (its partner's figure would
        # otherwise stay in that side's mean, and the pairs be over-counted)
        both = both.dropna(subset=["heldout_ppl", "heldout_ppl_base"])
        if both.empty:
            continue
        diff, half = ci95(both["heldout_ppl"] - both["heldout_ppl_base"])
        rows.append({**dict(zip(link + ["method"], key)), "baseline": base[0], "pairs": len(both),
                     "ppl": both["heldout_ppl"].mean(), "ppl_base": both["heldout_ppl_base"].mean(),
                     "diff": diff, "diff_ci95": half, "overlap": both["overlap"].mean(),
                     "overlap_base": both["overlap_base"].mean()})
    return pd.DataFrame(rows)


def baseline_pair_lines(updates: pd.DataFrame) -> list[str]:
    t = baseline_pairs(updates)
    if t.empty:
        return []
    base = t["baseline"].iloc[0]
    head = ["workers", "method", "seed pairs", "held-out ppl (mean)", f"{base} (mean)",
            "difference (paired, ± 95% CI)", "overlap mean", f"{base} overlap mean"]
    lines = [f"### Held-out perplexity paired against `{base}` (the run's --baseline)", "",
             "Seed by seed over the seeds both ran (a seed fixes the data, the corpus and the initial replica), then "
             "mean ± 95 % CI (Student's t) of the differences; a CI needs >= 2 pairs. Overlap: the mean over each "
             "seed's syncs, averaged over the pairs (1 = the subspace never moved).", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    vary = varying(updates, ("workers",))
    for _, r in t.iterrows():
        workers = "-" if pd.isna(r.get("workers")) else str(int(r["workers"]))
        lines.append("| " + " | ".join([workers, label(r, vary), str(r["pairs"]), f"{r['ppl']:.3f}", f"{r['ppl_base']:.3f}",
                                        _pm(r["diff"], r["diff_ci95"], "+.3f"), _pm(r["overlap"], None),
                                        _pm(r["overlap_base"], None)]) + " |")
    return lines + [""]


# ---- paired in-process comparisons (trainers/dataparallel/falsifier.py: falsifier.csv, heldout.csv) ----

def paired_table(falsifier: pd.DataFrame, heldout: pd.DataFrame) -> pd.DataFrame:
    """One row per variant: held-out perplexity and mean overlap per seed (mean ± 95 % CI over seeds),
    and their paired differences from the reference (the first variant run), seed by seed."""
    over = falsifier[falsifier["kind"] == "overlap"].groupby(["variant", "seed"])["value"].agg(["mean", "min"])
    per = heldout.set_index(["variant", "seed"]).join(over, how="left")
    ref = heldout["variant"].iloc[0]
    rows = []
    for variant in heldout["variant"].unique():
        g = per.loc[variant]
        base = per.loc[ref].reindex(g.index)
        row = {"variant": variant, "seeds": len(g), "reference": ref}
        for col, name in (("heldout_ppl", "ppl"), ("mean", "overlap")):
            row[f"{name}_mean"], row[f"{name}_ci95"] = ci95(g[col])
            row[f"{name}_diff"], row[f"{name}_diff_ci95"] = ci95(g[col] - base[col]) if variant != ref else (None, None)
        row["overlap_min"] = g["min"].min()
        rows.append(row)
    return pd.DataFrame(rows)


def _pm(mean, ci, fmt=".4f") -> str:
    if mean is None or pd.isna(mean):
        return "-"
    return f"{mean:{fmt}}" + ("" if ci is None or pd.isna(ci) else f" ± {ci:{fmt.lstrip('+')}}")


def paired_lines(falsifier: pd.DataFrame, heldout: pd.DataFrame) -> list[str]:
    t = paired_table(falsifier, heldout)
    head = ["variant", "seeds", "held-out ppl (± 95% CI)", "ppl - reference (paired, ± 95% CI)",
            "overlap mean per seed (± 95% CI)", "overlap - reference (paired)", "lowest overlap"]
    lines = [f"## Paired comparison against `{t['reference'].iloc[0]}`", "",
             "Same seeds, same data and initialisation, one variable changed (trainers/dataparallel/falsifier.py). "
             "Overlap = mean(σ²(Q_{t+1}ᵀ Q_t)) over each seed's syncs (1 = the subspace did not move); "
             "differences are taken seed by seed, then mean ± 95 % CI (Student's t) over seeds.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, r in t.iterrows():
        lines.append("| " + " | ".join([r["variant"], str(r["seeds"]), _pm(r["ppl_mean"], r["ppl_ci95"], ".3f"),
                                        _pm(r["ppl_diff"], r["ppl_diff_ci95"], "+.3f"),
                                        _pm(r["overlap_mean"], r["overlap_ci95"]),
                                        _pm(r["overlap_diff"], r["overlap_diff_ci95"], "+.4f"),
                                        _pm(r["overlap_min"], None)]) + " |")
    return lines + [""]
