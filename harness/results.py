"""Results store: run folders -> tidy pandas tables, rebuilt from the files alone (no torch).

A run folder (`harness run`) holds `config.json`, `meta.json` and one folder per cell
(`cells/<method>-s<seed>/`) with the services' event files (`events-<process>.jsonl`), the
learner's `summary.json` and, on the emulated network, the link counters (`links.csv`).
A sweep folder holds `sweep.json` and one run folder per grid point under `runs/`.

    from harness import results
    df = results.load("results/20261130-...")         # updates: one row per method x seed x update
    df = results.load(["results/a", "results/sweep1"])  # many runs or sweeps at once
    tables = results.tables(run_dir)                    # {"updates", "phases", "links"}

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
from pathlib import Path
from typing import Iterable

import pandas as pd

LEARNER_PHASES = ("idle", "train", "encode", "decode_replay", "hash", "send_update")
WORKER_PHASES = ("rollout", "send_rollouts", "receive", "decode_replay")
BASELINE = "full"


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


def read_events(path: Path) -> list[dict]:
    """Rows of an event file; a torn last line (a killed process) is skipped."""
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


# ---- one run ---------------------------------------------------------------------------------

def run_coords(run_dir: Path) -> dict:
    """The coordinates every row of this run shares (what a sweep varies)."""
    cfg, meta = read_json(run_dir / "config.json", {}), read_json(run_dir / "meta.json", {})
    defaults = (cfg.get("profile") or {}).get("defaults") or {}
    from harness import units  # pure parsing, no kernel

    def get(key, parse):
        value = defaults.get(key)
        return parse(value) if value is not None else (None if key == "rate" else 0.0)

    return {"run_id": run_dir.name, "profile": cfg.get("profile_name"), "backend": meta.get("backend"),
            "emulated": bool(meta.get("emulation", cfg.get("emulation"))),
            "rate_bit_s": get("rate", units.parse_rate) if cfg.get("emulation", True) else None,
            "delay_s": get("delay", units.parse_time), "loss_frac": get("loss", units.parse_percent),
            "workers": cfg.get("workers"), "pipeline": cfg.get("depth"), "run_complete": bool(meta.get("complete"))}


def cell_dirs(run_dir: Path) -> list[Path]:
    cfg = read_json(run_dir / "config.json", {})
    order = [f"{_slug(v['label'])}-s{s}" for s in cfg.get("seeds", []) for v in cfg.get("variants", [])]
    dirs = [d for d in sorted((run_dir / "cells").iterdir()) if d.is_dir()]
    return sorted(dirs, key=lambda d: order.index(d.name) if d.name in order else len(order))


def _slug(label: str) -> str:
    return label.replace("@", "-").replace("%", "pct")


def cell_info(cell: Path, cfg: dict) -> dict:
    """method, budget, variant, seed of a cell, from its learner's start row (or the folder name)."""
    start = next((r for r in _events(cell, "learner") if r.get("kind") == "start"), None)
    params = (start or {}).get("params") or (read_json(cell / "summary.json", {}) or {}).get("params") or {}
    variant = next((v for v in cfg.get("variants", []) if cell.name.startswith(_slug(v["label"]) + "-s")), None)
    method = params.get("method") or (variant or {}).get("method") or cell.name.rsplit("-s", 1)[0]
    budget = params.get("budget") if params else (variant or {}).get("budget")
    seed = params.get("seed", int(cell.name.rsplit("-s", 1)[1]) if "-s" in cell.name else None)
    return {"method": method, "budget": budget, "variant": method if budget is None else f"{method}@{budget}",
            "seed": seed, "objective": params.get("objective", cfg.get("objective"))}


def _events(cell: Path, process: str) -> list[dict]:
    path = cell / f"events-{process}.jsonl"
    return read_events(path) if path.exists() else []


def _worker_events(cell: Path) -> dict[str, list[dict]]:
    return {p.stem[len("events-"):]: read_events(p) for p in sorted(cell.glob("events-w*.jsonl"))}


def cell_t0(cell: Path) -> float:
    """The cell's time origin: its learner's first event (monotonic seconds, shared by the host)."""
    rows = _events(cell, "learner")
    return rows[0]["t"] if rows else 0.0


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def update_rows(cell: Path, info: dict) -> list[dict]:
    learner = [r for r in _events(cell, "learner") if r.get("kind") == "update"]
    workers = _worker_events(cell)
    summary = read_json(cell / "summary.json", {}) or {}
    t0 = cell_t0(cell)
    metric = "distill_loss" if info.get("objective") == "distill" else "reward_mean"
    rows = []
    for r in learner:
        v, batch, d = r["version"], r.get("batch", r["version"] - 1), r.get("durations_s", {})
        rolls = [w for rows_ in workers.values() for w in rows_ if w.get("kind") == "rollouts" and w.get("batch") == batch]
        applies = [w for rows_ in workers.values() for w in rows_ if w.get("kind") == "update" and w.get("version") == v]
        row = {**info, "update": v, "complete": bool(summary.get("complete")),
               "consistent": bool(summary.get("consistent")), "seconds_per_update": r["seconds_per_update"],
               "t_end_s": r["t"] - t0, "t_start_s": r["t"] - t0 - r["seconds_per_update"]}
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


def phase_rows(cell: Path, info: dict) -> list[dict]:
    """One row per (process, update, phase) span: what the Gantt timeline draws."""
    t0, out = cell_t0(cell), []
    for process, rows in {"learner": _events(cell, "learner"), **_worker_events(cell)}.items():
        for r in rows:
            if r.get("kind") not in ("update", "rollouts"):
                continue
            update = r.get("version") if r["kind"] == "update" else r.get("batch", 0) + 1
            for phase, (a, b) in (r.get("phases") or {}).items():
                out.append({**info, "process": process, "update": update, "phase": phase,
                            "start_s": a - t0, "end_s": b - t0})
    return out


def link_rows(cell: Path, info: dict) -> list[dict]:
    """Link counters as throughput per node and direction between consecutive samples."""
    path = cell / "links.csv"
    if not path.exists():
        return []
    df = pd.read_csv(path)
    if df.empty:
        return []
    t0 = cell_t0(cell)
    out = []
    for (node, direction), g in df.sort_values("t_s").groupby(["node", "direction"]):
        g = g.drop_duplicates("t_s")
        dt, db = g["t_s"].diff(), g["bytes"].diff()
        for t, seconds, nbytes, total in zip(g["t_s"], dt, db, g["bytes"] - g["bytes"].iloc[0]):
            if seconds and seconds > 0:
                out.append({**info, "node": node, "direction": direction, "t_s": t - t0,
                            "bytes": int(total), "throughput_bit_s": 8 * nbytes / seconds})
    return out


def tables(run_dir: str | Path) -> dict[str, pd.DataFrame]:
    """{"updates", "phases", "links"} for one run folder, rebuilt from its files."""
    run_dir = Path(run_dir)
    cfg, coords = read_json(run_dir / "config.json", {}), run_coords(run_dir)
    updates, phases, links = [], [], []
    for cell in cell_dirs(run_dir):
        info = {**coords, **cell_info(cell, cfg), "cell": cell.name}
        updates += update_rows(cell, info)
        phases += phase_rows(cell, info)
        links += link_rows(cell, info)
    return {"updates": pd.DataFrame(updates), "phases": pd.DataFrame(phases), "links": pd.DataFrame(links)}


def cell_summaries(run_dir: str | Path) -> pd.DataFrame:
    """One row per cell: the learner's summary (consistency, completeness) and link byte totals."""
    run_dir = Path(run_dir)
    cfg, coords, rows = read_json(run_dir / "config.json", {}), run_coords(run_dir), []
    for cell in cell_dirs(run_dir):
        s = read_json(cell / "summary.json", {}) or {}
        link_bytes = _link_totals(cell)
        rows.append({**coords, **cell_info(cell, cfg), "cell": cell.name, "complete": bool(s.get("complete")),
                     "status": s.get("status", "no summary"), "consistent": bool(s.get("consistent")),
                     "updates_done": s.get("updates", 0), "updates_planned": s.get("updates_planned"),
                     "hash_checks": s.get("hash_checks", 0), "link_bytes_down": link_bytes.get("down"),
                     "link_bytes_up": link_bytes.get("up")})
    return pd.DataFrame(rows)


def _link_totals(cell: Path) -> dict[str, int]:
    """Bytes the worker links carried during the cell (IP packets: headers and retransmissions included)."""
    path = cell / "links.csv"
    if not path.exists():
        return {}
    df = pd.read_csv(path)
    df = df[df["node"] != "learner"]
    if df.empty:
        return {}
    span = df.groupby(["node", "direction"])["bytes"].agg(lambda s: int(s.max() - s.min()))
    return {d: int(span.xs(d, level="direction").sum()) for d in ("down", "up") if d in span.index.get_level_values(1)}


def load(paths: str | Path | Iterable[str | Path], table: str = "updates") -> pd.DataFrame:
    """One DataFrame over every run at or under `paths` (the notebook entry point)."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    frames = [tables(r)[table] for r in find_runs(paths)]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def load_cells(paths: str | Path | Iterable[str | Path]) -> pd.DataFrame:
    if isinstance(paths, (str, Path)):
        paths = [paths]
    frames = [cell_summaries(r) for r in find_runs(paths)]
    return pd.concat([f for f in frames if not f.empty], ignore_index=True) if any(not f.empty for f in frames) else pd.DataFrame()


# ---- writing ---------------------------------------------------------------------------------

def write_tables(run_dir: str | Path) -> dict[str, pd.DataFrame]:
    """updates/phases/links as parquet + CSV, and the run-level summary.json."""
    run_dir = Path(run_dir)
    t = tables(run_dir)
    for name, df in t.items():
        df.to_parquet(run_dir / f"{name}.parquet", index=False)
        df.to_csv(run_dir / f"{name}.csv", index=False)
    summary = run_summary(run_dir, t["updates"], cell_summaries(run_dir))
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n")
    return t


def run_summary(run_dir: Path, updates: pd.DataFrame, cells: pd.DataFrame) -> dict:
    from harness import report  # the comparison lives with the report

    meta = read_json(run_dir / "meta.json", {}) or {}
    comp = report.comparison(updates, cells)
    return {"run_id": run_dir.name, "status": meta.get("status"), "complete": bool(meta.get("complete")),
            "profile": meta.get("profile"), "backend": meta.get("backend"), "emulation": meta.get("emulation"),
            "methods": comp.astype(object).where(comp.notna(), None).to_dict(orient="records")}
