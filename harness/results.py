"""Results store: run folders -> tidy pandas tables, rebuilt from the files alone (no torch).

A run folder (`harness run`) holds `config.json`, `meta.json` and one folder per cell
(`cells/<method>-s<seed>/`) with the services' event files (`events-<process>.jsonl`), the
learner's `summary.json` and, on the emulated network, the link counters (`links.csv`).
A sweep folder holds `sweep.json` and one run folder per grid point under `runs/`.

    from harness import results
    t = results.read("results/20261130-...")            # RunTables: .updates .phases .links .cells .runs
    df = results.load(["results/a", "results/sweep1"])  # one table over many runs or sweeps

Every file of a run is read once per `read`; the comparison (compare.py), the report and the
figures take the RunTables instead of reading again. This module imports no other results-side
module (compare, report, plots import it).

Columns of `updates` (units in names: seconds, bytes, bit/s):
    run_id, profile, backend, emulated, rate_bit_s, delay_s, loss_frac, workers, pipeline,
    method, budget, variant, seed, update, complete, consistent,
    seconds_per_update, t_start_s, t_end_s (from the cell's first event),
    <phase>_s for the learner's phases (idle, train, encode, decode_replay, hash, send_update),
    worker_<phase>_s (median over workers) for rollout, send_rollouts, receive, decode_replay,
    payload_bytes_down (update body, to one worker), wire_bytes_down (frame bytes, all workers),
    payload_bytes_up / wire_bytes_up (rollout bodies / frames, all workers),
    lag (policy versions), loss, reward_mean, quality, quality_metric.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import pandas as pd

from harness import units  # pure parsing, no kernel
from trainers import events, spec  # the event files' own reader; the run spec (both torch-free)

LEARNER_PHASES = ("idle", "train", "encode", "decode_replay", "hash", "send_update")
WORKER_PHASES = ("rollout", "send_rollouts", "receive", "decode_replay")
TABLES = ("updates", "phases", "links", "cells")


# ---- finding folders -------------------------------------------------------------------------

def is_run(path: Path) -> bool:
    return (path / "config.json").is_file() and (path / "cells").is_dir()


def find_runs(paths: Iterable[str | Path]) -> list[Path]:
    """Every run folder at or under the given paths (a run, a sweep, or a folder of them)."""
    runs: list[Path] = []
    for p in map(Path, paths):
        if not p.is_dir():
            raise FileNotFoundError(f"{p}: no such results folder")
        found = [p] if is_run(p) else sorted(d.parent for d in p.rglob("config.json") if is_run(d.parent))
        if not found:
            raise FileNotFoundError(f"{p}: not a run or sweep folder (no config.json with cells/)")
        runs += [r for r in found if r not in runs]
    return runs


def read_json(path: Path, default=None):
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return default


# ---- one cell: every file read once ------------------------------------------------------------

@dataclass(frozen=True)
class CellFiles:
    """The raw files of one cell folder, each read once."""
    dir: Path
    learner: list[dict]              # events-learner.jsonl rows
    workers: dict[str, list[dict]]   # worker name -> events-w<i>.jsonl rows
    summary: dict                    # the learner's summary.json ({} if absent)
    links: pd.DataFrame | None       # links.csv (link counters), None off the emulated network

    @property
    def t0(self) -> float:
        """The cell's time origin: its learner's first event (monotonic seconds, shared by the host)."""
        return self.learner[0]["t"] if self.learner else 0.0


def read_cell(cell: Path) -> CellFiles:
    learner, links = cell / "events-learner.jsonl", cell / "links.csv"
    workers = {p.stem[len("events-"):]: events.read_events(p) for p in sorted(cell.glob("events-w*.jsonl"))}
    return CellFiles(dir=cell, learner=events.read_events(learner) if learner.exists() else [], workers=workers,
                     summary=read_json(cell / "summary.json", {}) or {},
                     links=pd.read_csv(links) if links.exists() else None)


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
            "delay_s": get("delay", units.parse_time), "loss_frac": get("loss", units.parse_percent),
            "workers": cfg.get("workers"), "pipeline": cfg.get("pipeline"),
            "run_complete": bool(meta.get("complete")), **spec_columns(cfg)}


def spec_columns(cfg: dict) -> dict:
    """Every single-valued run-spec parameter that is not a link flag, as a column (lora_rank, lr,
    compressor options, ...): a parameter added to trainers/spec.py shows up here by itself.
    (Link flags are resolved into the coordinates above; method, budget and seed are per cell.)"""
    out = {p.name: cfg.get(p.name) for p in spec.PARAMS if not p.many and p.where != "link"}
    return out


def planned_cells(cfg: dict, meta: dict) -> dict[str, tuple[dict, int]]:
    """Cell folder name -> (variant as in config.json, seed), in run order: meta.json lists the
    planned folders for seeds x variants, in config order ({} if the two do not line up)."""
    plan = [(v, s) for s in cfg.get("seeds", []) for v in cfg.get("variants", [])]
    names = meta.get("cells") or []
    if len(names) != len(plan) or not all(n.endswith(f"-s{s}") for n, (_, s) in zip(names, plan)):
        return {}
    return dict(zip(names, plan))


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
    return {"method": method, "budget": variant.get("budget", params.get("budget")),
            "variant": variant.get("label") or stem, "seed": seed,
            "objective": params.get("objective", cfg.get("objective"))}


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def update_rows(cell: CellFiles, info: dict) -> list[dict]:
    learner = [r for r in cell.learner if r.get("kind") == "update"]
    worker_rows = [w for rows in cell.workers.values() for w in rows]
    metric = "distill_loss" if info.get("objective") == "distill" else "reward_mean"
    rows = []
    for r in learner:
        v, batch, d = r["version"], r.get("batch", r["version"] - 1), r.get("durations_s", {})
        rolls = [w for w in worker_rows if w.get("kind") == "rollouts" and w.get("batch") == batch]
        applies = [w for w in worker_rows if w.get("kind") == "update" and w.get("version") == v]
        row = {**info, "update": v, "complete": bool(cell.summary.get("complete")),
               "consistent": bool(cell.summary.get("consistent")), "seconds_per_update": r["seconds_per_update"],
               "t_end_s": r["t"] - cell.t0, "t_start_s": r["t"] - cell.t0 - r["seconds_per_update"]}
        row.update({f"{p}_s": d.get(p, 0.0) for p in LEARNER_PHASES})
        row.update({f"worker_{p}_s": _median(w.get("durations_s", {}).get(p) for w in rolls + applies
                                             if p in w.get("durations_s", {})) for p in WORKER_PHASES})
        frames = r.get("update_frame_bytes") or {}
        row.update(payload_bytes_down=r.get("update_payload_bytes"), wire_bytes_down=sum(frames.values()),
                   payload_bytes_up=sum(w.get("payload_bytes", 0) for w in rolls),
                   wire_bytes_up=sum(sum(w.get("bytes", {}).get("sent", {}).values()) for w in rolls),
                   lag=r.get("lag"), loss=r.get("loss"), reward_mean=r.get("reward_mean"))
        row.update(quality=row["loss"] if metric == "distill_loss" else row["reward_mean"], quality_metric=metric)
        rows.append(row)
    return rows


def phase_rows(cell: CellFiles, info: dict) -> list[dict]:
    """One row per (process, update, phase) span: what the Gantt timeline draws."""
    out = []
    for process, rows in {"learner": cell.learner, **cell.workers}.items():
        for r in rows:
            if r.get("kind") not in ("update", "rollouts"):
                continue
            update = r.get("version") if r["kind"] == "update" else r.get("batch", 0) + 1
            for phase, (a, b) in (r.get("phases") or {}).items():
                out.append({**info, "process": process, "update": update, "phase": phase,
                            "start_s": a - cell.t0, "end_s": b - cell.t0})
    return out


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


def cell_row(cell: CellFiles, info: dict) -> dict:
    """The learner's summary (consistency, completeness) and the link byte totals of one cell."""
    s, link_bytes = cell.summary, _link_totals(cell.links)
    return {**info, "complete": bool(s.get("complete")), "status": s.get("status", "no summary"),
            "consistent": bool(s.get("consistent")), "updates_done": s.get("updates", 0),
            "updates_planned": s.get("updates_planned"), "hash_checks": s.get("hash_checks", 0),
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


@dataclass(frozen=True)
class RunTables:
    """Every table of one or more runs, parsed once: what the comparison, report and figures read."""
    runs: list[Run]
    updates: pd.DataFrame   # one row per cell x update (columns: see the module docstring)
    phases: pd.DataFrame    # one row per process x update x phase span
    links: pd.DataFrame     # one row per link counter sample: node, direction, t_s, bytes, throughput_bit_s
    cells: pd.DataFrame     # one row per cell: status, consistent, updates done/planned, link byte totals


def read_run(run_dir: str | Path) -> RunTables:
    """The tables of one run folder, every file of it read once."""
    run_dir = Path(run_dir)
    run = Run(run_dir, read_json(run_dir / "config.json", {}) or {}, read_json(run_dir / "meta.json", {}) or {})
    coords, planned = run_coords(run_dir, run.config, run.meta), planned_cells(run.config, run.meta)
    updates, phases, links, cells = [], [], [], []
    for cell_dir in cell_dirs(run_dir, planned):
        cell = read_cell(cell_dir)
        info = {**coords, **cell_info(cell, run.config, planned), "cell": cell_dir.name}
        updates += update_rows(cell, info)
        phases += phase_rows(cell, info)
        links += link_rows(cell, info)
        cells.append(cell_row(cell, info))
    frame = pd.DataFrame
    return RunTables([run], frame(updates), frame(phases), frame(links), frame(cells))


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
    for name in ("updates", "phases", "links"):
        df = getattr(tables, name)
        df.to_parquet(run_dir / f"{name}.parquet", index=False)
        df.to_csv(run_dir / f"{name}.csv", index=False)
    return tables
