"""Results tables: a result folder's checked files (files.py) -> tidy pandas tables (no torch).

    from harness.results import tables
    t = tables.read("results/20261130-...")             # RunTables: .updates .phases .links .cells .runs
    df = tables.load(["results/a", "results/sweep1"])   # one table over many runs or sweeps

Every file of a run is read once per `read` (files.read_cell); the comparison (compare.py), the report
and the figures take the RunTables instead of reading again. The learner's update rows become table
rows as its event file streams in, gathered as columns every CHUNK_ROWS rows (`Chunked`), so memory
follows the tables, not the file. String columns of `updates` and `phases` are pandas Categoricals
(one byte a row: most are the cell's coordinates, the same on every row of a cell), but `method`,
which consumers map through functions; ==, groupby, unique, the CSV text are as for strings. A
table of several runs (`read`) joins runs with different categories as plain strings.
This module imports only files.py and wording.py of the results
side (compare, report, plots import it).

Columns of `updates` (units in names: seconds, bytes, bit/s):
    run_id, profile, backend, emulated, rate_bit_s, links (the worker links in words where one rate
    would misstate them: a trace, unequal workers), delay_s, loss_frac, workers, pipeline,
    method, budget_frac (the budget as a fraction: 0.016 for 1.6 %; NaN without one; the label stays
    in `variant`), variant, seed, update_index (the policy version the update produced; not `update`,
    which is DataFrame.update), complete, consistent,
    seconds_per_update, t_start_s, t_end_s (from the cell's first event),
    <phase>_s for the learner's phases (idle, train, encode, decode_replay, hash, send_update),
    worker_<phase>_s (median over workers) for rollout, send_rollouts, receive, decode_replay,
    <phase>_cpu_s (the learner thread's CPU seconds in train, encode, decode_replay), worker_rollout_cpu_s,
    process_cpu_s, busy_frac / steal_frac (of all cores' time over the update), load1, cores,
    payload_bytes_down (update body, to one worker), wire_bytes_down (frame bytes, all workers),
    payload_bytes_up / wire_bytes_up (rollout bodies / frames, all workers),
    the byte ledger (ledger_columns): socket_bytes_down|up (TCP data bytes sent, retransmissions included),
    socket_retrans_bytes_down|up, socket_retrans_segs_down|up, link_bytes_down|up (worker links' interface
    counters over the update's window: headers, ACKs, retransmissions included),
    lag (policy versions), train_loss (the training batch's loss; not `loss`, the link's loss
    parameter), reward_mean, train_metric + train_metric_name (the training batch's own figure:
    train_loss for distill, reward_mean for grpo, lm_loss for data-parallel; never held-out quality),
    contributors (workers whose rollouts the update trained on), delta_changed / delta_density (`delta`: the
    shipped adapter's changed elements and their fraction; METHOD_FIELDS);
    data-parallel cells also: claimed_bytes_up / claimed_bytes_down, sync, heldout_ppl (DP_FIELDS) and
    overlap = mean(sigma^2(Q_{t+1}^T Q_t)) at a sync that refreshed the projection (mean over the
    workers' rows, trainers/dataparallel/worker.py; absent elsewhere).

Columns of `evals` (one row per cell x held-out evaluation): the cell's coordinates, version,
    pass_at_1, pass_at_k (k, n samples per problem, problems), mean_reward, reverse_kl (distill), gold_prob
    (P(one sample is the gold answer), exact: trainers/hilo/evaluate.py; absent in runs before it),
    objective_value + objective_metric (its name: reverse_kl or mean_reward; the column is not
    `objective`, which is the run parameter: distill or grpo), eval_s (not training time), wall_s
    (training seconds up to that version: the sum of its updates' seconds per update). cpu_s, the
    same sum with each update charged at its CPU seconds (compare.cpu_charged), is added where the
    comparison is computed (compare._with_quality -> quality.with_cpu_seconds): this module imports
    no other results-side module, and compare imports it.

Columns of `cells` (one row per cell): status (complete | degraded | failed | interrupted |
running | the learner's own words), complete, degraded (a worker was lost and never came back:
the learner dropped it, or it never joined), consistent, hash_mismatches (the learner's hash events
that disagreed), updates_done (the learner's update
events when its summary is missing or stale), updates_planned, hash_checks, workers_min (fewest
contributors of an update), join_s (seconds from the learner listening to the last worker joining
before the first update), drops / restarts (lists of dicts, see `membership`), left_out (contributions
its updates went on without, summed over updates: --quorum), stale_dropped (rollouts that came after
their update had gone on, dropped: the learner's stale_rollouts events), note (one line
saying what happened to the cell's workers), link byte totals.

Malformed files: files.py (ResultsError, one line naming the file, row and field).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import json
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from harness import units  # pure parsing, no kernel
from harness.results.files import CellFiles, ResultsError, effective_meta, find_runs, is_number, read_cell, read_doc
from harness.results.wording import cell_note
from trainers import cards, events, spec  # objective cards; the event files' own reader; the run spec (torch-free)

LEARNER_PHASES = ("idle", "train", "encode", "decode_replay", "hash", "send_update")
WORKER_PHASES = ("rollout", "send_rollouts", "receive", "decode_replay")
TABLES = ("updates", "phases", "links", "cells", "evals")
# The data-parallel aggregator counts uploads at its own socket and states each step's formula.
DP_FIELDS = ("payload_bytes_up", "wire_bytes_up", "claimed_bytes_up", "claimed_bytes_down", "sync", "heldout_ppl")
# A method's own learner fields: delta's changed elements and density (changed / total) per update.
METHOD_FIELDS = ("delta_changed", "delta_density")


# ---- one run ---------------------------------------------------------------------------------

def run_coords(run_dir: Path, cfg: dict, meta: dict) -> dict:
    """The coordinates every row of this run shares (what a sweep varies)."""
    doc = cfg.get("profile_doc") or {}
    defaults = doc.get("defaults") or {}

    def get(key, parse):
        value = defaults.get(key)
        return parse(value) if value is not None else (None if key == "rate" else 0.0)

    return {"run_id": run_dir.name, "profile": cfg.get("profile_name"), "backend": meta.get("backend"),
            "emulated": bool(meta.get("emulation", cfg.get("emulation"))),
            "rate_bit_s": get("rate", units.parse_rate) if cfg.get("emulation", True) else None,
            "links": link_words(run_dir, defaults) if cfg.get("emulation", True) else None,
            "delay_s": get("delay", units.parse_time), "loss_frac": get("loss", units.parse_percent),
            "workers": cfg.get("workers"), "pipeline": cfg.get("pipeline"),
            "cpu_limited": cpu_limited(cfg), "run_complete": bool(meta.get("complete")), **spec_columns(cfg)}


def link_words(run_dir: Path, defaults: dict) -> str | None:
    """The worker links in words where one rate would misstate them: prediction.json's regime words
    (harness/projection/commratio.py link_words: a trace with its mean and range, unequal workers'
    rates), else the trace the profile plays ('trace t.csv', before a prediction is written); None
    for one flat rate."""
    try:
        regime = json.loads((run_dir / "prediction.json").read_text()).get("regime")
    except (OSError, ValueError, AttributeError):
        regime = None
    if isinstance(regime, dict) and isinstance(regime.get("links"), str) and regime["links"]:
        return regime["links"]
    trace = defaults.get("trace")
    trace = trace.get("file") if isinstance(trace, dict) else trace
    return f"trace {Path(trace).name}" if isinstance(trace, str) and trace else None


def cpu_limited(cfg: dict) -> bool:
    """Did the run give a worker a CPU share (--worker-cpu, or a profile's cpu key)?"""
    doc = cfg.get("profile_doc") or {}
    nodes = [doc.get("defaults") or {}, *(w or {} for w in (doc.get("workers") or {}).values())]
    return bool(cfg.get("worker_cpu")) or any(isinstance(n, dict) and n.get("cpu") is not None for n in nodes)


def spec_columns(cfg: dict) -> dict:
    """Every single-valued run-spec parameter that is not a link flag, as a column (lora_rank, lr,
    compressor options, ...): a parameter added to trainers/spec.py shows up here by itself.
    (Link flags are resolved into the coordinates above; method, budget and seed are per cell.)"""
    out = {p.name: cfg.get(p.name) for p in spec.PARAMS if not p.many and p.where != "link"}
    return out


def planned_cells(cfg: dict, meta: dict) -> dict[str, tuple[dict, int]]:
    """Cell folder name -> (variant as in config.json, seed), in run order (meta.json's `cells`, which
    `--schedule interleaved` reorders within a seed). Matched by name (the variant's slug + seed),
    never by position: zipping the run order with seeds x variants mislabelled interleaved cells."""
    plan = {}
    for s in cfg.get("seeds", []):
        for v in cfg.get("variants", []):
            label = v.get("label") or spec.variant_label(v.get("method"), v.get("budget"))
            plan[f"{spec.variant_slug(label)}-s{s}"] = (v, s)
    names = [n for n in (meta.get("cells") or []) if n in plan]
    return {n: plan[n] for n in names + [n for n in plan if n not in names]}


def cell_dirs(run_dir: Path, planned: dict[str, tuple[dict, int]]) -> list[Path]:
    order = list(planned)
    dirs = [d for d in sorted((run_dir / "cells").iterdir()) if d.is_dir()]
    return sorted(dirs, key=lambda d: order.index(d.name) if d.name in order else len(order))


def cell_info(cell: CellFiles, cfg: dict, planned: dict[str, tuple[dict, int]]) -> dict:
    """method, budget, variant, seed of a cell: as planned (config.json + meta.json), else from its
    learner's start row or summary (a folder the harness did not plan keeps its name as variant)."""
    start = next((r for r in cell.learner if r.get("kind") == "start"), None)
    params = (start or {}).get("params") or cell.summary.get("params") or {}
    variant, seed = planned.get(cell.dir.name, ({}, None))
    stem, tail = cell.dir.name.rsplit("-s", 1) if "-s" in cell.dir.name else (cell.dir.name, "")
    method = params.get("method") or variant.get("method") or stem
    if seed is None:
        seed = params.get("seed", int(tail) if tail.isdigit() else None)
    return {"method": method, "budget_frac": budget_frac(variant.get("budget", params.get("budget"))),
            "variant": variant.get("label") or stem, "seed": seed,
            "objective": params.get("objective", cfg.get("objective"))}


def budget_frac(label) -> float | None:
    """A variant's budget label ('1.6%') as a fraction (0.016); None without one."""
    return spec.parse_budget(label) if isinstance(label, str) and label else None


CPU_PHASES = ("train", "encode", "decode_replay")   # the learner's compute phases (one thread each)
MACHINE_FIELDS = ("busy_frac", "steal_frac", "load1", "cores")


def worker_link_totals(links: pd.DataFrame | None) -> dict[str, pd.Series]:
    """direction -> bytes the worker links carried so far (summed over workers), indexed by the
    counters' monotonic sample time; {} off the emulated network."""
    if links is None or links.empty:
        return {}
    df = links[links["node"] != "learner"]
    return {d: g.groupby("t_s")["bytes"].sum().sort_index() for d, g in df.groupby("direction")}


def _bytes_between(series: pd.Series, t0: float, t1: float) -> float | None:
    """Counter bytes between two monotonic times, linear between samples (0.5 s apart); None
    outside the sampled span."""
    if series.empty or t0 < series.index[0] or t1 > series.index[-1]:
        return None
    xs, ys = series.index.to_numpy(dtype=float), series.to_numpy(dtype=float)
    return float(np.interp(t1, xs, ys) - np.interp(t0, xs, ys))


def ledger_columns(r: dict, rolls: list[dict], link_totals: dict[str, pd.Series]) -> dict:
    """The byte ledger of one update (bytes): what the sockets sent (TCP_INFO deltas, trainers/protocol/
    wire.py tcp_info: data incl. retransmissions, retransmitted bytes and segments) down (the learner's
    sockets, since its previous update row) and up (the workers' sockets, each since its previous rollouts
    row, so up is shifted by up to one update: it sums exactly over a cell); and what the worker links
    carried over the update's window (interface counters: headers, ACKs, retransmissions included)."""
    down, up = r.get("tcp") or {}, [w.get("tcp") or {} for w in rolls]
    out = {"socket_bytes_down": down.get("bytes_sent"), "socket_retrans_bytes_down": down.get("bytes_retrans"),
           "socket_retrans_segs_down": down.get("total_retrans"),
           "socket_bytes_up": sum(w.get("bytes_sent", 0) for w in up) if any(up) else None,
           "socket_retrans_bytes_up": sum(w.get("bytes_retrans", 0) for w in up) if any(up) else None,
           "socket_retrans_segs_up": sum(w.get("total_retrans", 0) for w in up) if any(up) else None}
    t1 = r["t"]
    for direction in ("up", "down"):
        series = link_totals.get(direction)
        out[f"link_bytes_{direction}"] = None if series is None else _bytes_between(series, t1 - r["seconds_per_update"], t1)
    return out


def load_columns(r: dict, rolls: list[dict]) -> dict:
    """CPU and machine-load columns of one learner update row (trainers/events.PhaseTimer): <phase>_cpu_s,
    worker_rollout_cpu_s (median over workers), process_cpu_s and the machine's busy/steal fractions,
    load1 and cores over the update; None where the row predates them."""
    cpu = r.get("cpu_s") or {}
    out = {f"{p}_cpu_s": cpu.get(p) for p in CPU_PHASES}
    out["worker_rollout_cpu_s"] = events.median((w.get("cpu_s") or {}).get("rollout") for w in rolls)
    out["process_cpu_s"] = r.get("process_cpu_s")
    machine = r.get("machine") or {}
    out.update({k: machine.get(k) for k in MACHINE_FIELDS})
    return out


def train_metric_name(info: dict) -> str:
    """The training batch's own figure: the data-parallel family trains a language model (the LM
    loss); a HiLo cell its objective's (its card's `train_metric`: distill its loss, grpo its mean reward)."""
    return ("lm_loss" if spec.is_data_parallel(str(info.get("method"))) else
            cards.objective(str(info.get("objective"))).train_metric)


@dataclass(frozen=True)
class WorkerRows:
    """A cell's worker rows, indexed once: rollouts by batch, applied updates by version (file order)."""
    rolls: dict
    applies: dict

    @classmethod
    def of(cls, cell: CellFiles) -> "WorkerRows":
        rolls, applies = defaultdict(list), defaultdict(list)
        for rows in cell.workers.values():
            for w in rows:
                if w.get("kind") == "rollouts":
                    rolls[w.get("batch")].append(w)
                elif w.get("kind") == "update":
                    applies[w.get("version")].append(w)
        return cls(rolls, applies)


def update_row(cell: CellFiles, info: dict, r: dict, workers: WorkerRows, link_totals: dict[str, pd.Series],
               metric: str) -> dict:
    """The `updates` row of one learner update row (columns: the module docstring); `info`, the
    cell's coordinates, is added by the caller (Chunked) except `cell`, which names them."""
    v, batch, d = r["version"], r.get("batch", r["version"] - 1), r.get("durations_s", {})
    rolls, applies = workers.rolls.get(batch, []), workers.applies.get(v, [])
    row = {"cell": info["cell"], "update_index": v, "complete": bool(cell.summary.get("complete")),
           "contributors": len(r["rollout_arrival"]) if r.get("rollout_arrival") else None,
           "consistent": bool(cell.summary.get("consistent")), "seconds_per_update": r["seconds_per_update"],
           "t_end_s": r["t"] - cell.t0, "t_start_s": r["t"] - cell.t0 - r["seconds_per_update"]}
    row.update({f"{p}_s": d.get(p, 0.0) for p in LEARNER_PHASES})
    row.update({f"worker_{p}_s": events.median(w.get("durations_s", {}).get(p) for w in rolls + applies
                                         if p in w.get("durations_s", {})) for p in WORKER_PHASES})
    row.update(load_columns(r, rolls))
    row.update(ledger_columns(r, rolls, link_totals))
    frames = r.get("update_frame_bytes") or {}
    row.update(payload_bytes_down=r.get("update_payload_bytes"), wire_bytes_down=sum(frames.values()),
               payload_bytes_up=sum(w.get("payload_bytes", 0) for w in rolls),
               wire_bytes_up=sum(sum(w.get("bytes", {}).get("sent", {}).values()) for w in rolls),
               lag=r.get("lag"), train_loss=r.get("loss"), reward_mean=r.get("reward_mean"))
    row.update(train_metric=row["reward_mean"] if metric == "reward_mean" else row["train_loss"],
               train_metric_name=metric)
    row.update({k: r[k] for k in DP_FIELDS if k in r})  # data-parallel aggregator rows (trainers/dataparallel/aggregator.py)
    row.update({k: r[k] for k in METHOD_FIELDS if k in r})  # trainers/hilo/learner.py encode_adapter
    overlaps = [w["overlap"] for w in applies if is_number(w.get("overlap"))]  # dp workers' rows at a sync
    if overlaps:
        row["overlap"] = sum(overlaps) / len(overlaps)
    return row


# event key -> column: the eval event's "objective" is the objective's value, renamed so that it
# does not overwrite the run parameter `objective` (distill | grpo) every row carries.
EVAL_FIELDS = {**{k: k for k in ("pass_at_1", "pass_at_k", "k", "n", "problems", "mean_reward", "reverse_kl",
                                 "gold_prob", "objective_metric", "eval_s")}, "objective": "objective_value"}


def eval_rows(cell: CellFiles, info: dict) -> list[dict]:
    """One row per held-out evaluation of the learner's policy at a version (trainers/tasks/heldout.py).
    `wall_s` = the training seconds up to that version: the sum of its updates' seconds per update
    (evaluation ran after the loop, so no evaluation time is in it)."""
    spu = {m.version: m.seconds_per_update for m in cell.updates}
    out = []
    for r in cell.learner:
        if r.get("kind") != "eval":
            continue
        v = r["version"]
        out.append({**info, "version": v, **{col: r.get(k) for k, col in EVAL_FIELDS.items()},
                    "wall_s": sum(s for u, s in spu.items() if u <= v)})
    return out


# The columns a phase row carries besides its span: the cell's names, not every run parameter (a phase
# table has about six rows per update and process; join the cells or updates table on run_id + cell).
PHASE_COORDS = ("run_id", "method", "budget_frac", "variant", "seed", "cell")


def phase_rows(process: str, r: dict, info: dict, t0: float) -> list[dict]:
    """One row per phase span of one event row (a learner's or worker's update, a worker's
    rollouts): what the Gantt timeline draws. `info`: the cell's PHASE_COORDS (added by Chunked but
    for `cell`)."""
    if r.get("kind") not in ("update", "rollouts"):
        return []
    update = r.get("version") if r["kind"] == "update" else r.get("batch", 0) + 1
    return [{"cell": info["cell"], "process": sys.intern(process), "update_index": update, "phase": sys.intern(str(phase)),
             "start_s": a - t0, "end_s": b - t0} for phase, (a, b) in (r.get("phases") or {}).items()]


def link_rows(cell: CellFiles, info: dict) -> list[dict]:
    """Link counters as throughput per node and direction between consecutive samples."""
    if cell.links is None or cell.links.empty:
        return []
    out = []
    for (node, direction), g in cell.links.sort_values("t_s").groupby(["node", "direction"]):
        g = g.drop_duplicates("t_s")
        dt, db = g["t_s"].diff(), g["bytes"].diff()
        for t, seconds, nbytes, total in zip(g["t_s"], dt, db, g["bytes"] - g["bytes"].iloc[0]):
            if seconds and seconds > 0:
                out.append({**info, "node": node, "direction": direction, "t_s": t - cell.t0,
                            "bytes": int(total), "throughput_bit_s": 8 * nbytes / seconds})
    return out


def membership(cell: CellFiles) -> dict:
    """Who took part, from the learner's events (and the harness's, for restarts):
    drops: [{worker, version, disconnected_version, reason, remaining (members left), rejoined_version}],
    restarts: [{worker, version, after (how it ended), rejoined_version}], lost: workers dropped
    (or never joined) and not back, workers_min: fewest contributors of an update."""
    members: set = set()
    drops: list[dict] = []
    lost: dict = {}
    disconnected: dict = {}
    for r in cell.learner:
        kind, w = r.get("kind"), r.get("worker")
        if kind == "joined":
            members.add(w)
            for d in drops:
                if d["worker"] == w and d.get("rejoined_version") is None:
                    d["rejoined_version"] = r.get("version")
            lost.pop(w, None)
        elif kind == "disconnected":
            disconnected.setdefault(w, r.get("version"))
        elif kind == "dropped":
            members.discard(w)
            drops.append({"worker": w, "version": r.get("version"), "disconnected_version": disconnected.pop(w, None),
                          "reason": r.get("reason"), "remaining": len(members), "rejoined_version": None})
            lost[w] = drops[-1]
        elif kind == "join_timeout":
            for m in r.get("missing") or []:
                drops.append({"worker": m, "version": 0, "disconnected_version": None, "reason": "never joined",
                              "remaining": len(members), "rejoined_version": None})
                lost[m] = drops[-1]
    if not any(r.get("kind") == "dropped" for r in cell.learner):  # no event file: the summary's list
        for d in cell.summary.get("dropped") or []:
            if isinstance(d, dict) and d.get("worker") not in lost:
                drops.append({"worker": d.get("worker"), "version": d.get("version"), "disconnected_version": None,
                              "reason": d.get("reason"), "remaining": None, "rejoined_version": None})
                lost[d.get("worker")] = drops[-1]
    restarts = []
    for h in cell.harness:
        if h.get("kind") == "restart":
            back = next((r.get("version") for r in cell.learner if r.get("kind") == "joined"
                         and r.get("worker") == h.get("worker") and r.get("t", 0) > h["t"]), None)
            restarts.append({"worker": h.get("worker"), "version": h.get("version"), "after": h.get("after"),
                             "rejoined_version": back})
    counts = [m.contributors for m in cell.updates if m.contributors]
    return {"drops": drops, "restarts": restarts, "lost": sorted(lost, key=str), "workers_min": min(counts, default=None)}


def join_seconds(cell: CellFiles) -> float | None:
    """A cell's join time: seconds from the learner's `start` event (listening) to the last `joined`
    before its first update; None without those events (the data-parallel aggregator's, an old run)."""
    start, joined = (_event_times(cell.learner, kind) for kind in ("start", "joined"))
    first = cell.updates[0].t if cell.updates else None
    joined = [t for t in joined if first is None or t <= first]
    return max(joined) - start[0] if start and joined else None


def _event_times(rows: list[dict], kind: str) -> list[float]:
    return [r["t"] for r in rows if r.get("kind") == kind and isinstance(r.get("t"), (int, float))]


def cell_row(cell: CellFiles, info: dict, run_live: bool = False) -> dict:
    """The learner's summary (consistency, completeness), what happened to the workers, and the
    link byte totals of one cell. `run_live`: the run is still going (a "running" summary is news)."""
    s, link_bytes = cell.summary, _link_totals(cell.links)
    m = membership(cell)
    failure = next((h.get("reason") for h in cell.harness if h.get("kind") == "cell_failed"), None)
    learner_exit = next((h.get("how") for h in cell.harness if h.get("kind") == "learner_exit"), None)
    logged = max((m.version for m in cell.updates), default=0)
    claimed = s.get("updates") if type(s.get("updates")) is int else 0
    if claimed and not cell.updates and (cell.dir / "events-learner.jsonl").exists():
        raise ResultsError(f"{cell.dir / 'events-learner.jsonl'}: no update row, but summary.json says "
                           f"{claimed} updates were done")
    done = max(logged, claimed)
    planned = s.get("updates_planned")
    if planned is None:
        start = next((r for r in cell.learner if r.get("kind") == "start"), {})
        planned = (start.get("params") or {}).get("updates") if isinstance(start.get("params"), dict) else None
    status = str(s.get("status", "no summary"))
    complete = bool(s.get("complete"))
    degraded = bool(m["lost"]) or bool(s.get("stalls"))  # a member lost, or one that stalled (dropped, kept out)
    if failure:
        status, complete = "failed", False
    elif complete and degraded:
        status = "degraded"
    elif status in ("running", "no summary") and not run_live:  # the learner never wrote its last summary
        status = f"learner {learner_exit}" if learner_exit else "interrupted"
    workers = info.get("workers") or (s.get("workers") if type(s.get("workers")) is int else None)
    return {**info, "complete": complete, "status": status, "degraded": degraded,
            "consistent": bool(s.get("consistent")), "updates_done": done,
            "updates_planned": planned, "hash_checks": s.get("hash_checks", 0),
            "hash_mismatches": sum(1 for r in cell.learner if r.get("kind") == "hash" and r.get("equal") is False),
            "workers_min": m["workers_min"], "join_s": join_seconds(cell),
            "drops": m["drops"], "restarts": m["restarts"],
            "left_out": sum(u.left_out for u in cell.updates),
            "stale_dropped": sum(1 for r in cell.learner if r.get("kind") == "stale_rollouts"),
            "note": cell_note(m, workers, failure, learner_exit),
            "link_bytes_down": link_bytes.get("down"), "link_bytes_up": link_bytes.get("up")}


def _link_totals(links: pd.DataFrame | None) -> dict[str, int]:
    """Bytes the worker links carried during the cell (IP packets: headers and retransmissions included)."""
    if links is None or links.empty:
        return {}
    df = links[links["node"] != "learner"]
    if df.empty:
        return {}
    span = df.groupby(["node", "direction"])["bytes"].agg(lambda s: int(s.max() - s.min()))
    return {d: int(span.xs(d, level="direction").sum()) for d in ("down", "up") if d in span.index.get_level_values(1)}


# ---- runs -> tables --------------------------------------------------------------------------

@dataclass(frozen=True)
class Run:
    """A run folder's run-level documents."""
    dir: Path
    config: dict
    meta: dict
    calibration: dict = field(default_factory=dict)  # calibration.json: links measured before the cells (containers)


@dataclass(frozen=True)
class RunTables:
    """Every table of one or more runs, parsed once: what the comparison, report and figures read."""
    runs: list[Run]
    updates: pd.DataFrame   # one row per cell x update (columns: see the module docstring)
    phases: pd.DataFrame    # one row per process x update x phase span: PHASE_COORDS, process, update_index, phase, start_s, end_s
    links: pd.DataFrame     # one row per link counter sample: node, direction, t_s, bytes, throughput_bit_s
    cells: pd.DataFrame     # one row per cell: status, consistent, updates done/planned, link byte totals
    evals: pd.DataFrame = field(default_factory=pd.DataFrame)  # one row per cell x evaluated version (held out)


CHUNK_ROWS = 2048   # table rows held as dicts before they become columns
# String columns of `updates` kept as strings, not categories: consumers map them through functions
# (spec.is_data_parallel, spec.takes_budget), which on a Categorical would return a Categorical.
STRING_COLUMNS = ("method",)


def _libc_malloc_trim():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):   # not glibc: nothing to hand back
        return None


MALLOC_TRIM = _libc_malloc_trim()


def release_freed_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc malloc_trim): a chunk's row dicts, once
    freed, leave holes between the column arrays that live on, which the process would otherwise keep
    as resident memory (a 100,000-update file: 4.0 kB of RSS per update row without, 3.3 kB with)."""
    if MALLOC_TRIM is not None:
        MALLOC_TRIM(0)


class Chunked:
    """A table's rows turned into columns every CHUNK_ROWS rows, so that memory follows the table, not
    a list of row dicts; the cell's coordinates (`info_of[cell]`, constant over a cell) are added as
    columns once, at the end. A table of at most one chunk is exactly
    pd.DataFrame([{**info, **row}, ...]) (string columns made categories when `categorical`, but
    `strings`); a longer one has the same columns, values and dtypes."""

    def __init__(self, info_of: dict[str, dict], categorical: bool = False, strings: tuple[str, ...] = ()):
        self.info_of = info_of
        self.categorical, self.strings = categorical, strings
        self.rows: list[dict] = []
        self.parts: dict[str, list[pd.Series]] = {}
        self.lengths: list[int] = []

    def add(self, rows: list[dict]) -> None:
        self.rows += rows
        if len(self.rows) >= CHUNK_ROWS:
            self._flush()

    def _flush(self) -> None:
        df, self.rows = pd.DataFrame(self.rows), []
        release_freed_memory()
        if self.categorical:
            df = as_categories(df, self.strings)
        for c in df.columns:
            if c not in self.parts:   # a column new in this chunk: missing (NaN) in the earlier ones
                self.parts[c] = [pd.Series(np.nan, index=range(n)) for n in self.lengths]
            self.parts[c].append(df[c].copy())
        for c in set(self.parts) - set(df.columns):
            self.parts[c].append(pd.Series(np.nan, index=range(len(df))))
        self.lengths.append(len(df))

    def drop_after(self, cell: str, version: int, process: str | None = None) -> None:
        """Drop this cell's rows past `version` (of `process` only, when given): a resumed learner's
        superseded updates."""
        def gone(r) -> bool:
            return r["cell"] == cell and r["update_index"] > version and process in (None, r.get("process"))
        self.rows = [r for r in self.rows if not gone(r)]
        for i in range(len(self.lengths)):
            mask = (self.parts["cell"][i] == cell) & (self.parts["update_index"][i] > version)
            if process is not None:
                mask &= self.parts["process"][i] == process
            for c in self.parts:
                self.parts[c][i] = self.parts[c][i][~mask].reset_index(drop=True)
            self.lengths[i] = int((~mask).sum())

    def frame(self) -> pd.DataFrame:
        if not self.parts:
            df = pd.DataFrame([{**self.info_of[r["cell"]], **r} for r in self.rows])
            return as_categories(df, self.strings) if self.categorical else df
        if self.rows:
            self._flush()
        cells = _joined(self.parts.pop("cell"))
        keys = list(dict.fromkeys(k for info in self.info_of.values() for k in info))
        out = {k: cells if k == "cell" else self._constant(cells, k) for k in keys}
        for c in list(self.parts):   # one column at a time: its chunks freed as it is joined
            out[c] = _joined(self.parts.pop(c))
        columns = [v.infer_objects() if v.dtype == object else v for v in out.values()]
        return pd.concat(columns, axis=1, keys=list(out))   # one block per column: no consolidating copy

    def _constant(self, cells: pd.Series, key: str) -> pd.Series:
        """A cell coordinate as a column: each row takes its cell's value (a category when the table
        is categorical and every value is a string: one byte a row, not the string's)."""
        values = {c: info.get(key) for c, info in self.info_of.items()}
        if self.categorical and key not in self.strings and isinstance(cells.dtype, pd.CategoricalDtype) and \
                all(isinstance(values.get(c), str) for c in cells.cat.categories):
            names = sorted({values[c] for c in cells.cat.categories})
            code_of = np.array([names.index(values[c]) for c in cells.cat.categories], dtype=np.int32)
            codes = np.where(cells.cat.codes.to_numpy() < 0, -1, code_of[cells.cat.codes.to_numpy()])
            return pd.Series(pd.Categorical.from_codes(codes, pd.Index(names, dtype=cells.cat.categories.dtype)))
        return cells.astype(object).map(values) if isinstance(cells.dtype, pd.CategoricalDtype) else cells.map(values)


def as_categories(df: pd.DataFrame, strings: tuple[str, ...] = ()) -> pd.DataFrame:
    """Every string column of `df` but `strings` as a pandas Categorical (its values, ==, groupby,
    unique and the CSV text unchanged; one byte a row for a few distinct strings, not the string's
    bytes and offset)."""
    for c in df.columns:
        if c not in strings and isinstance(df[c].dtype, pd.StringDtype):
            df[c] = df[c].astype("category")
    return df


def _joined(parts: list[pd.Series]) -> pd.Series:
    """A column's chunks as one column; categorical chunks keep one sorted set of categories."""
    if parts and all(isinstance(p.dtype, pd.CategoricalDtype) for p in parts):
        return pd.Series(union_categoricals(parts, sort_categories=True))
    return pd.concat(parts, ignore_index=True)


class CellTables:
    """One cell's update and learner phase rows, made as files.read_cell streams its learner's event
    file (`update` for each update row, `resumed` at a resumed learner's row)."""

    def __init__(self, coords: dict, cfg: dict, planned: dict, updates: Chunked, phases: Chunked):
        self.coords, self.cfg, self.planned, self.updates, self.phases = coords, cfg, planned, updates, phases
        self.info: dict | None = None

    def start(self, cell: CellFiles) -> dict:
        """The cell's coordinates (from the rows before its first update: the learner's start row)."""
        if self.info is None:
            self.info = {**self.coords, **cell_info(cell, self.cfg, self.planned), "cell": cell.dir.name}
            self.phase_info = {k: self.info[k] for k in PHASE_COORDS if k in self.info}
            self.updates.info_of[cell.dir.name] = self.info
            self.phases.info_of[cell.dir.name] = self.phase_info
            self.workers, self.link_totals = WorkerRows.of(cell), worker_link_totals(cell.links)
            self.metric = train_metric_name(self.info)
        return self.info

    def update(self, cell: CellFiles, r: dict) -> None:
        self.start(cell)
        self.updates.add([update_row(cell, self.info, r, self.workers, self.link_totals, self.metric)])
        self.phases.add(phase_rows("learner", r, self.phase_info, cell.t0))

    def resumed(self, version: int) -> None:
        if self.info is not None:
            self.updates.drop_after(self.info["cell"], version)
            self.phases.drop_after(self.info["cell"], version, process="learner")


def read_run(run_dir: str | Path) -> RunTables:
    """The tables of one run folder, every file of it read once (the learner's event files streamed)."""
    run_dir = Path(run_dir)
    calibration = run_dir / "calibration.json"
    run = Run(run_dir, read_doc(run_dir / "config.json"), effective_meta(read_doc(run_dir / "meta.json")),
              read_doc(calibration) if calibration.exists() else {})
    try:
        coords = run_coords(run_dir, run.config, run.meta)
        planned = planned_cells(run.config, run.meta)
    except (AttributeError, KeyError, TypeError, ValueError) as err:  # config.json's profile, seeds, variants
        raise ResultsError(f"{run_dir / 'config.json'}: malformed ({type(err).__name__}: {err})") from None
    live = run.meta.get("status") == "running"
    workers = coords.get("workers") if type(coords.get("workers")) is int else None
    updates, phases, links, cells, evals = Chunked({}, True, STRING_COLUMNS), Chunked({}, True), [], [], []
    for cell_dir in cell_dirs(run_dir, planned):
        builder = CellTables(coords, run.config, planned, updates, phases)
        try:
            cell = read_cell(cell_dir, on_update=builder.update, on_resumed=builder.resumed, workers=workers)
            info = builder.start(cell)
            for name, rows in cell.workers.items():
                for r in rows:
                    phases.add(phase_rows(name, r, builder.phase_info, cell.t0))
            links += link_rows(cell, info)
            cells.append(cell_row(cell, info, run_live=live))
            evals += eval_rows(cell, info)
        except ResultsError:
            raise
        except (AttributeError, KeyError, TypeError, ValueError, IndexError) as err:  # a shape the schema lets through
            raise ResultsError(f"{cell_dir}: malformed results ({type(err).__name__}: {err})") from None
    frame = pd.DataFrame
    return RunTables([run], updates.frame(), phases.frame(), frame(links), frame(cells), frame(evals))


def read(paths: str | Path | Iterable[str | Path]) -> RunTables:
    """The tables of every run at or under `paths` (runs, sweeps, folders of them), concatenated."""
    parts = [read_run(r) for r in find_runs([paths] if isinstance(paths, (str, Path)) else paths)]
    return RunTables([run for p in parts for run in p.runs],
                     *(_concat([getattr(p, name) for p in parts]) for name in TABLES))


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def load(paths: str | Path | Iterable[str | Path], table: str = "updates") -> pd.DataFrame:
    """One table (updates, phases, links or cells) over every run at or under `paths` (for notebooks)."""
    if table not in TABLES:
        raise ValueError(f"unknown table {table!r}; valid tables: {', '.join(TABLES)}")
    return getattr(read(paths), table)


def load_cells(paths: str | Path | Iterable[str | Path]) -> pd.DataFrame:
    return load(paths, "cells")


# ---- writing ---------------------------------------------------------------------------------

def write_tables(run_dir: str | Path, tables: RunTables | None = None) -> RunTables:
    """updates/phases/links of one run as parquet + CSV in its folder (parsed here unless given)."""
    run_dir = Path(run_dir)
    tables = tables if tables is not None else read_run(run_dir)
    for name in ("updates", "phases", "links", "evals"):
        df = getattr(tables, name)
        df.to_parquet(run_dir / f"{name}.parquet", index=False)
        df.to_csv(run_dir / f"{name}.csv", index=False)
    return tables
