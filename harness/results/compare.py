"""The comparison: every method against the `full` baseline under the same link coordinates.

Owns the names the comparison keys on (the baseline, the coordinate columns, a variant's label
and its folder slug) and the numbers: per (coordinates, variant) seconds per update (median,
IQR over every update of every seed), speedup (full's median / the method's; also per seed, paired,
with a 95 % CI over seeds, and on seconds with compute charged at CPU time, `cpu_charged`, with its own
CI), how busy the machine was (`contended` and why: load, steal, CPU/wall of a single-threaded phase;
`run_contended` for every variant under the same coordinates), the headline speedup (`speedup_headline`:
on CPU time where the run was contended, else on the wall clock), payload and wire
bytes per update, payload as a fraction of `full`'s, link bytes per update, quality (the
objective's metric over a seed's last updates, mean ± sd over seeds), policy lag (median, max;
the pipelining depth is a coordinate), consistency, completeness, degraded cells (a worker lost).

    results (parse run folders) -> compare (this) -> report (markdown/html), plots (figures)

Works on DataFrames only: it reads no file (results does) and formats nothing (report does).
Importing it is cheap (no pandas until a comparison is computed). A variant's label and folder
slug are the spec's (`spec.variant_label`, `spec.variant_slug`).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from harness.results import quality
from harness.results.wording import CI_MIN_SEEDS  # noqa: F401  (re-exported: the report's sections read it here)
from trainers import spec
from trainers.events import atomic_write_json

if TYPE_CHECKING:  # pandas is imported where it is used: config.py imports the names below, and
    import pandas as pd  # every `harness` command imports config (pandas costs ~1 s on a busy 2-core box)

    from harness.results.tables import RunTables

BASELINE = spec.get("baseline").default   # a run's own --baseline wins (cells carry it)
COORDS = ["profile", "backend", "emulated", "rate_bit_s", "links", "delay_s", "loss_frac", "workers", "pipeline"]
QUALITY_LAST = 3   # the training-batch metric of a seed = mean of its last 3 updates' (never held-out quality)


def coords(df: pd.DataFrame) -> list[str]:
    """The coordinate columns present in `df`: rows compare only when all of these are equal. Any
    run-spec parameter that differs between the runs in `df` (a sweep over --lora-rank, say) is a
    coordinate too."""
    varying = [p.name for p in spec.PARAMS if not p.many and p.where != "link"  # results.spec_columns
               and p.name in df.columns and p.name not in COORDS and df[p.name].nunique(dropna=False) > 1]
    keys = [c for c in COORDS if c in df.columns] + varying
    return keys + ["run_id"] if _runs_repeat(df, keys) else keys


def _runs_repeat(df: pd.DataFrame, keys: list[str]) -> bool:
    """Two runs (a combined report) hold the same variant (and seed) under the same coordinates:
    their cells are repeats, not more seeds of one experiment, so each run is compared within
    itself (pooled, run A's spar met runs A's and B's full-bf16 as one baseline "seed" with twice
    the updates, and a verdict could flip). Runs with disjoint seeds still pool."""
    if "run_id" not in df.columns or df["run_id"].nunique() < 2:
        return False
    group = [k for k in keys + ["variant", "seed"] if k in df.columns]
    return bool((df.groupby(group, dropna=False)["run_id"].nunique() > 1).any())


def _seed_quality(g: pd.DataFrame) -> pd.Series:
    return g.sort_values("update_index").groupby("seed")["train_metric"].apply(lambda s: s.tail(QUALITY_LAST).mean())


def _method_row(g: pd.DataFrame, cells: pd.DataFrame) -> dict:
    spu = g["seconds_per_update"]
    q = _seed_quality(g)
    done = cells["updates_done"].sum() if len(cells) else 0
    # Bytes per update: the median (every HiLo update ships one message). A data-parallel method
    # that syncs every K steps ships nothing on most steps: its median would read 0, so it gets
    # the mean per optimizer step over whole sync windows (windows.py: a last partial window, or a
    # run shorter than K, would spread a sync over fewer steps), as the claimed-vs-measured table counts.
    windows = _sync_windows(g) if spec.is_data_parallel(str(g["method"].iloc[0])) else None
    per = (lambda c: g[c].median()) if windows is None else (lambda c: g.loc[windows["whole"], c].mean())
    return {"method": g["method"].iloc[0], "budget_frac": g["budget_frac"].iloc[0],
            "seeds": int(g["seed"].nunique()), "update_rows": int(len(g)),
            "updates_least": int(g.groupby("seed").size().min()), "updates_most": int(g.groupby("seed").size().max()),
            "s_per_update_median": spu.median(), "s_per_update_q1": spu.quantile(0.25),
            "s_per_update_q3": spu.quantile(0.75), "s_per_update_iqr": spu.quantile(0.75) - spu.quantile(0.25),
            "payload_bytes_down": per("payload_bytes_down"), "wire_bytes_down": per("wire_bytes_down"),
            "payload_bytes_up": per("payload_bytes_up"), "wire_bytes_up": per("wire_bytes_up"),
            "link_bytes_down_per_update": _per_update(cells, "link_bytes_down", done),
            "link_bytes_up_per_update": _per_update(cells, "link_bytes_up", done),
            "train_metric_name": g["train_metric_name"].iloc[0], "train_metric_mean": q.mean(),
            "train_metric_sd": q.std(ddof=1) if len(q) > 1 else 0.0, "lag_median": g["lag"].median(),
            "lag_max": g["lag"].max(),
            "consistent": bool(len(cells) and cells["consistent"].all()),
            "hash_mismatches": int(cells["hash_mismatches"].sum()) if "hash_mismatches" in cells else 0,
            "complete": bool(len(cells) and cells["complete"].all()),
            "degraded": bool(len(cells) and "degraded" in cells and cells["degraded"].any()),
            **(windows or {}).get("columns", {}),
            **_cpu_quartiles(cpu_charged(g)), **_contention(g), "slowed": slowed_on_purpose(g),
            "_seed_spu": _seed_medians(g, spu), "_seed_spu_cpu": _seed_medians(g, cpu_charged(g))}


def _sync_windows(g: pd.DataFrame) -> dict:
    """The rows of a data-parallel variant its bytes per step are counted over (`whole`: a boolean mask,
    every seed's whole sync windows) and what the report says about the rest (`columns`):
    `window_tail_steps`, the most steps of one seed's last partial window left out; `no_whole_window`,
    True where no seed ran one (its bytes per step then blank); `window_k`, the run's --lordo-k, for those words."""
    from harness.results import windows   # pandas and the method cards: only where a comparison is made

    tail = windows.tail_steps(g, [k for k in ("run_id", "seed") if k in g])
    per_seed = tail.groupby([g[k] for k in ("run_id", "seed") if k in g]).sum() if len(g) else tail
    k = g["lordo_k"].iloc[0] if "lordo_k" in g else None
    return {"whole": ~tail, "columns": {"window_tail_steps": int(per_seed.max()) if len(per_seed) else 0,
                                        "no_whole_window": bool(tail.all()) and len(g) > 0,
                                        "window_k": None if k is None or k != k else float(k)}}


def slowed_on_purpose(g: pd.DataFrame) -> bool:
    """Were workers of these rows slowed on purpose (a CPU share, --straggler)? Then CPU time would
    erase the slowness the run set out to measure (a throttled or sleeping worker's wall exceeds its
    CPU just as a contended one's does), so its speed is read on the wall clock."""
    straggler = g["straggler"].notna().any() if "straggler" in g else False
    return bool(straggler or ("cpu_limited" in g and g["cpu_limited"].fillna(False).astype(bool).any()))


def _cpu_quartiles(cpu) -> dict:
    """Median and quartiles of the cpu_charged seconds per update."""
    return {"s_per_update_cpu_median": cpu.median(), "s_per_update_cpu_q1": cpu.quantile(0.25),
            "s_per_update_cpu_q3": cpu.quantile(0.75)}


CONTENDED_LOAD = 1.0      # load1 / cores above this: more runnable tasks than cores
CONTENDED_STEAL = 0.05    # the hypervisor gave > 5 % of our cores' time to other guests
CONTENDED_CPU_WALL = 0.8  # the learner's single-threaded train phase got < 80 % of a core


def _col(g: pd.DataFrame, col: str) -> pd.Series:
    """g[col] as floats (absent: all NaN, for runs recorded before the column existed)."""
    import pandas as pd

    return pd.to_numeric(g[col], errors="coerce") if col in g else pd.Series(float("nan"), index=g.index)


FRAME_HEADER_BYTES = 44     # trainers/protocol/wire.py HEADER_BYTES: one frame header per message
GOODPUT = (1500 - 52) / (1500 + 14)   # costmodel.goodput_ratio(): payload bytes per byte HTB counts (MTU 1500)
COMPUTE_PHASES = ("train", "encode", "decode_replay")   # the learner's phases with a CPU column
WORKER_STAGE = ("decode_replay", "rollout", "send_rollouts")   # a worker's serial work per update (worker_<p>_s)


def cpu_charged(g: pd.DataFrame) -> pd.Series:
    """Seconds per update with the compute phases charged at their CPU seconds, not their wall time:
    what the update would take had no other process competed for the cores (seconds, one per row).

    Waits (s): a = the learner's train + encode + decode_replay wall - CPU; b = the median worker's
    rollout wall - CPU. Only the waits on the critical path come out:
    - depth 0 (serial: the learner's idle holds the download, the worker's replay and rollout and the
      upload): seconds_per_update - a - min(b, idle_s);
    - depth >= 1 (the learner trains on batch t while the update crosses the link and the workers
      sample batch t+1): seconds_per_update - (P(wall) - P(cpu)), where P is the steady state of the
      overlapped loop, the largest of: the learner's stage L = seconds_per_update - idle_s, a worker's
      stage W = worker decode_replay + rollout + send_rollouts, each direction's transfer, and half the
      loop (L + down + delay + W + up + delay) / 2 (costmodel.predict's stages); P(cpu) has L - a and
      W - b. So a learner that waited for a core while the link or the workers set the pace is
      charged nothing less for it, and a wait counts once where both sides waited.
    Either way the result is never below what the link itself needed for the update (link_seconds)
    nor above seconds_per_update. Equals seconds_per_update for rows without CPU columns."""
    import numpy as np

    spu = g["seconds_per_update"]
    a = sum(_wait(g, p) for p in COMPUTE_PHASES)
    b = _wait(g, "worker_rollout")
    idle = _col(g, "idle_s").fillna(0.0)
    serial = spu - a - b.clip(upper=idle)
    learner = spu - idle
    worker = sum(_col(g, f"worker_{p}_s").fillna(0.0) for p in WORKER_STAGE)
    overlapped = spu - (_loop(g, learner, worker) - _loop(g, learner - a, worker - b))
    charged = serial.where(~_overlapped(g), overlapped)
    return np.minimum(spu, np.maximum(charged, link_seconds(g)))


def _wait(g: pd.DataFrame, phase: str) -> pd.Series:
    """Seconds a phase waited for a core: wall - CPU, >= 0; 0 where the row has no CPU column."""
    return (_col(g, f"{phase}_s") - _col(g, f"{phase}_cpu_s")).clip(lower=0).fillna(0.0)


def _overlapped(g: pd.DataFrame) -> pd.Series:
    """Rows of a pipelined run (depth >= 1); a row without the column is synchronous."""
    return _col(g, "pipeline").fillna(0) > 0


def _loop(g: pd.DataFrame, learner: pd.Series, worker: pd.Series) -> pd.Series:
    """The steady-state seconds per update of the overlapped loop (cpu_charged's P) from its two
    compute stages and the link's transfers."""
    import pandas as pd

    down, up, delay = _transfers(g)
    half = (learner + down + worker + up + 2 * delay) / 2
    return pd.concat([learner, worker, down, up, half], axis=1).max(axis=1)


def _transfers(g: pd.DataFrame) -> tuple[pd.Series, pd.Series, pd.Series]:
    """(down, up, delay) seconds per update on one worker link: the update's frame and one worker's
    rollout frames at the shaped rate (rate_bit_s) times the TCP/IP goodput, and the one-way delay.
    0 on an unshaped link (no rate): the link needs next to nothing there."""
    rate = _col(g, "rate_bit_s") * GOODPUT / 8          # payload bytes/s
    copies = _col(g, "contributors").fillna(_col(g, "workers")).fillna(1.0).clip(lower=1)
    down = (_col(g, "payload_bytes_down") + FRAME_HEADER_BYTES) / rate
    up = _col(g, "wire_bytes_up") / copies / rate
    return down.fillna(0.0), up.fillna(0.0), _col(g, "delay_s").fillna(0.0)


def link_seconds(g: pd.DataFrame) -> pd.Series:
    """The seconds the worker link itself needed per update (a floor, from the bytes and the shaped
    rate, so no load on the machine moves it): at depth 0 the update down and the rollouts up, each
    with the one-way delay, one after the other; at depth >= 1 each direction carries one message per
    update and the loop (update down, rollouts up) spans two updates: max(down, up, (down + up) / 2 +
    delay). A shaped learner link (not in the rows) or loss only lengthens what the link needs."""
    import pandas as pd

    down, up, delay = _transfers(g)
    overlapped = pd.concat([down, up, (down + up) / 2 + delay], axis=1).max(axis=1)
    return (down + up + 2 * delay).where(~_overlapped(g), overlapped)


def _seed_medians(g: pd.DataFrame, values: pd.Series) -> dict:
    """{seed: median of `values` over that seed's updates}."""
    return {int(s): float(v) for s, v in values.groupby(g["seed"]).median().items() if v == v}


def _contention(g: pd.DataFrame) -> dict:
    """How busy the machine was over a variant's updates (trainers/events.machine_load): median load1
    per core, mean steal, median CPU/wall of the learner's train phase, and `contended` with the
    reasons (CONTENDED_*); None for rows recorded without them."""
    per_core = (_col(g, "load1") / _col(g, "cores")).median()
    steal = _col(g, "steal_frac").mean()
    train = _col(g, "train_s")
    ratio = (_col(g, "train_cpu_s") / train.where(train > 0)).median()
    why = [f"load {per_core:.2f}/core" if per_core > CONTENDED_LOAD else "",
           f"steal {steal:.0%}" if steal > CONTENDED_STEAL else "",
           f"train CPU/wall {ratio:.2f}" if ratio < CONTENDED_CPU_WALL else ""]
    known = any(v == v for v in (per_core, steal, ratio))
    return {"load_per_core": _plain(per_core), "steal_frac": _plain(steal), "train_cpu_wall": _plain(ratio),
            "contended": bool(any(why)) if known else None, "contention": "; ".join(w for w in why if w) or None}


def contended(updates: pd.DataFrame) -> bool | None:
    """Was the machine contended over any variant of these rows (one run: `_contention` per variant)?
    None where no row recorded its load."""
    flags = [_contention(g)["contended"] for _, g in updates.groupby("variant", sort=False)] if "variant" in updates \
        else [_contention(updates)["contended"]]
    return True if any(f is True for f in flags) else False if any(f is False for f in flags) else None


def _speedup_ci(base: dict, row: dict) -> tuple:
    """(geometric mean, 95 % CI low, high, seeds) of the per-seed speedups base/row, paired on seed
    (interleaved cells of one seed run next to each other): a t interval on the log ratios."""
    logs = [math.log(base[s] / row[s]) for s in row if s in base and row[s] > 0 and base[s] > 0]
    return (*quality.geo_ci(logs), len(logs))


def _with_speedup_ci(df: pd.DataFrame, base: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """speedup_seed_mean [speedup_ci_lo, speedup_ci_hi] over `speedup_seeds` paired seeds, and
    speedup_cpu [speedup_cpu_lo, speedup_cpu_hi] (the same on cpu_charged seconds); the private
    per-seed columns are dropped."""
    out = {c: [] for c in ("speedup_seed_mean", "speedup_ci_lo", "speedup_ci_hi", "speedup_seeds", "speedup_cpu",
                           "speedup_cpu_lo", "speedup_cpu_hi")}
    for _, r in df.iterrows():
        hit = _same(base, keys, [r[k] for k in keys])
        b = hit.iloc[0] if not hit.empty else None
        mean, lo, hi, n = _speedup_ci(b["_seed_spu"], r["_seed_spu"]) if b is not None else (None, None, None, 0)
        cpu, cpu_lo, cpu_hi, _ = (_speedup_ci(b["_seed_spu_cpu"], r["_seed_spu_cpu"]) if b is not None
                                  else (None, None, None, 0))
        for c, v in zip(out, (mean, lo, hi, n, cpu, cpu_lo, cpu_hi)):
            out[c].append(v)
    for c, v in out.items():
        df[c] = v
    return df.drop(columns=["_seed_spu", "_seed_spu_cpu"])


def _run_contended(df: pd.DataFrame, keys: list[str]) -> list:
    """Per row: was the machine contended over any variant under the same coordinates (a run, or one
    grid point of a sweep)? True if any was flagged, False if all that recorded their load were quiet,
    None where none did. One flag per group, so both sides of a ratio are read on the same clock."""
    out = []
    for _, r in df.iterrows():
        flags = _same(df, keys, [r[k] for k in keys])["contended"].tolist()
        out.append(True if any(f is True for f in flags) else False if any(f is False for f in flags) else None)
    return out


HEADLINE = {"cpu": ("speedup_cpu", "speedup_cpu_lo", "speedup_cpu_hi", "s_per_update_cpu_median"),
            "wall": ("speedup_seed_mean", "speedup_ci_lo", "speedup_ci_hi", "s_per_update_median")}


def _run_slowed(df: pd.DataFrame, keys: list[str]) -> list[bool]:
    """Per row: were workers slowed on purpose in any variant under the same coordinates?"""
    return [bool(_same(df, keys, [r[k] for k in keys])["slowed"].any()) if "slowed" in df else False
            for _, r in df.iterrows()]


def _with_headline(df: pd.DataFrame, base: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The speedup to lead with: `speedup_headline` [speedup_headline_lo, speedup_headline_hi] on the
    clock `speedup_headline_basis` names, "cpu" where the run was contended (`run_contended`) and no
    worker was slowed on purpose (`run_slowed`: a CPU share or a straggler, which CPU time would not
    count), else "wall": the geometric mean over paired seeds of the per-seed speedups and its t interval
    (speedup_cpu [speedup_cpu_lo, speedup_cpu_hi], or speedup_seed_mean [speedup_ci_lo, speedup_ci_hi]),
    so the point is the centre of its own interval; without a paired seed, the ratio of the two
    medians on that clock and no interval. The wall figures stay beside it."""
    df["run_contended"] = _run_contended(df, keys)
    df["run_slowed"] = _run_slowed(df, keys)
    df["speedup_headline_basis"] = ["cpu" if f is True and not slow else "wall"
                                    for f, slow in zip(df["run_contended"], df["run_slowed"])]
    heads = []
    for _, r in df.iterrows():
        mean, lo, hi, median = HEADLINE[r["speedup_headline_basis"]]
        point = _plain(r[mean])
        heads.append((point if point is not None else _ratio(base, r, keys, median, inverse=True), r[lo], r[hi]))
    for i, col in enumerate(("speedup_headline", "speedup_headline_lo", "speedup_headline_hi")):
        df[col] = [h[i] for h in heads]
    return df


def _per_update(cells: pd.DataFrame, col: str, done: int) -> float | None:
    if col not in cells or cells[col].isna().all() or not done:
        return None
    return float(cells[col].sum()) / done


def _same(df: pd.DataFrame, keys: list[str], values) -> pd.DataFrame:
    """Rows of `df` equal to `values` on `keys` (NaN equals NaN: an unshaped run has no rate)."""
    import pandas as pd

    for k, v in zip(keys, values):
        if k in df:
            df = df[(df[k] == v) | (df[k].isna() & pd.isna(v))]
    return df


def comparison(updates: pd.DataFrame, cells: pd.DataFrame, evals: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (coordinates, variant), with speedup and byte fraction against the baseline and,
    given the held-out `evals`, quality with CIs and time to quality (harness/results/quality.py)."""
    import pandas as pd

    if updates.empty:
        return pd.DataFrame()
    keys = coords(updates)
    rows = []
    for key, g in updates.groupby(keys + ["variant"], dropna=False, sort=False):
        rows.append({**dict(zip(keys + ["variant"], key)), **_method_row(g, _same(cells, keys + ["variant"], key)),
                     "baseline": g["baseline"].iloc[0] if "baseline" in g else BASELINE})
    df = pd.DataFrame(rows)
    base = df[df["method"] == df["baseline"]]  # each run's own --baseline (full unless said otherwise)
    df["speedup"] = [_ratio(base, r, keys, "s_per_update_median", inverse=True) for _, r in df.iterrows()]
    df["fraction_of_full"] = [_ratio(base, r, keys, "payload_bytes_down") for _, r in df.iterrows()]
    df = _with_headline(_with_speedup_ci(df, base, keys), base, keys)
    df = _equal_bytes(df, base, keys, updates)
    return _with_quality(df, evals, keys, updates)


def _with_quality(df: pd.DataFrame, evals: pd.DataFrame | None, keys: list[str],
                  updates: pd.DataFrame | None = None) -> pd.DataFrame:
    """The held-out columns (quality.quality_table) joined on coordinates + variant; runs without
    evaluations keep only the training-batch figure. Given the `updates`, the evals gain `cpu_s`
    (cpu_charged seconds up to each version) and time to quality is on CPU time wherever a variant
    under the same coordinates ran contended."""
    if evals is None or evals.empty:
        return df
    on = [k for k in keys if k in evals]
    if updates is not None and not updates.empty:
        evals = quality.with_cpu_seconds(evals, updates, cpu_charged)
    busy = df[df["contended"] == True] if "contended" in df else df.iloc[0:0]  # noqa: E712 (None: unknown)
    busy = busy[~busy["slowed"].astype(bool)] if "slowed" in busy else busy   # slowed on purpose: wall clock
    basis = {quality.coord_key([r[k] for k in on]): "cpu" for _, r in busy.iterrows()}
    q = quality.quality_table(evals, on, basis)
    on = [k for k in keys if k in q] + ["variant"]
    q = q.drop(columns=[c for c in q.columns if c in df.columns and c not in on])
    for k in on:  # NaN coordinates (an unshaped run's rate) must join too
        df[k], q[k] = df[k].astype(object), q[k].astype(object)
    # pandas' merge gives each of the ~140 joined columns a block of its own; a frame of over 100 blocks
    # warns (PerformanceWarning) at every column a caller adds (plots' assign): one copy consolidates them
    return df.merge(q, on=on, how="left").copy()


def _ratio(base: pd.DataFrame, row: pd.Series, keys: list[str], col: str, inverse: bool = False):
    """row[col] / full[col] (or full / row) under the same coordinates; None without a full baseline."""
    hit = _same(base, keys, [row[k] for k in keys])
    if hit.empty or not row[col] or not hit[col].iloc[0]:
        return None
    full = float(hit[col].iloc[0])
    return full / float(row[col]) if inverse else float(row[col]) / full


EQUAL_BYTES_TOL = 0.10    # a comparison whose payload bytes differ by more than this is flagged
_DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


def _whole_adapter_dtype(method: str) -> str | None:
    """The dtype a full baseline ships the run's whole adapter in (its card's `ship_dtype`: full, full-bf16),
    None for any other method (rank-R ships an adapter of another rank)."""
    found = spec.method_card(method)
    return found[1]["ship_dtype"] if found and "ship_dtype" in found[1] and "lora_rank" not in found[1] else None


def _equal_bytes(df: pd.DataFrame, base: pd.DataFrame, keys: list[str], updates: pd.DataFrame) -> pd.DataFrame:
    """Equal-bytes check of every budgeted row: `budget_target_bytes` (--budget-bytes, else the budget
    fraction of the adapter in --reference-dtype, estimated from the full baseline's payload, whose
    tensor table makes it a slight over-estimate), `bytes_vs_budget` (payload / target),
    `bytes_spread` (largest / smallest payload among the methods at the same coordinates and budget)
    and `unequal_bytes`: either differs from 1 by more than EQUAL_BYTES_TOL."""
    import pandas as pd

    first = lambda col, default: updates[col].iloc[0] if col in updates and len(updates) else default  # noqa: E731
    target, spread = [], []
    for _, r in df.iterrows():
        budget = r.get("budget_frac")
        if budget is None or pd.isna(budget) or not spec.takes_budget(r["method"]):
            target.append(None)
            spread.append(None)
            continue
        fixed = r.get("budget_bytes", first("budget_bytes", None))
        hit = _same(base, keys, [r[k] for k in keys])
        if fixed is not None and pd.notna(fixed):
            target.append(float(fixed))
        elif not hit.empty and (shipped := _whole_adapter_dtype(str(hit["method"].iloc[0]))) is not None:
            ref = _DTYPE_BYTES.get(r.get("reference_dtype", first("reference_dtype", "bf16")), 2)
            adapter = float(hit["payload_bytes_down"].iloc[0]) / _DTYPE_BYTES[shipped]
            target.append(float(budget) * adapter * ref)
        else:
            target.append(None)
        peers = _same(df[(df["budget_frac"] == budget) & df["method"].map(spec.takes_budget)], keys,
                      [r[k] for k in keys])["payload_bytes_down"]
        spread.append(float(peers.max() / peers.min()) if len(peers) > 1 and peers.min() else None)
    df["budget_target_bytes"] = target
    df["bytes_vs_budget"] = [p / t if t else None for p, t in zip(df["payload_bytes_down"], target)]
    df["bytes_spread"] = spread
    df["unequal_bytes"] = [bool((v is not None and abs(v - 1) > EQUAL_BYTES_TOL)
                                or (s is not None and s - 1 > EQUAL_BYTES_TOL))
                           for v, s in zip(df["bytes_vs_budget"], spread)]
    return df


CELL_FIELDS = ("cell", "variant", "seed", "status", "complete", "degraded", "consistent", "updates_done",
               "updates_planned", "workers_min", "join_s", "drops", "restarts", "note")


def _plain(v):
    """numpy scalars -> Python, NaN -> None (for JSON)."""
    if hasattr(v, "item") and not isinstance(v, (list, dict)):
        v = v.item()
    return None if isinstance(v, float) and v != v else v


def run_summary(tables: RunTables) -> dict:
    """summary.json of one run: its status, the comparison (one record per variant) and the cells
    (status, updates, lost workers and restarts); `degraded` lists cells that lost a worker."""
    run = tables.runs[0]
    comp = comparison(tables.updates, tables.cells, tables.evals)
    cells = [{k: _plain(c.get(k)) for k in CELL_FIELDS} for c in tables.cells.to_dict(orient="records")]
    for c in cells:
        c["degraded_note"] = c.get("note") if c.get("degraded") else None
    return {"run_id": run.dir.name, "status": run.meta.get("status"), "complete": bool(run.meta.get("complete")),
            "profile": run.meta.get("profile"), "backend": run.meta.get("backend"),
            "emulation": run.meta.get("emulation"), "errors": run.meta.get("errors") or [],
            "degraded": [c["cell"] for c in cells if c.get("degraded")], "cells": cells,
            "methods": comp.astype(object).where(comp.notna(), None).to_dict(orient="records")}


def write_summary(run_dir: str | Path, tables: RunTables) -> Path:
    """The run-level summary.json (what `harness run` checks for its exit code and `--json` prints)."""
    return atomic_write_json(Path(run_dir) / "summary.json", run_summary(tables))
