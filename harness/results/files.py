"""A result folder, read and checked: where its runs are, and every file of a cell read once and
validated against the schema (schema.py) before any table is built from it (tables.py).

A run folder (`harness run`) holds `config.json`, `meta.json` and one folder per cell
(`cells/<method>-s<seed>/`) with the services' event files (`events-<process>.jsonl`), the
learner's `summary.json` and, on the emulated network, the link counters (`links.csv`).
A sweep folder holds `sweep.json` and one run folder per grid point under `runs/`.

Malformed files (a document that is not a JSON object, an event row without its time, a value out of
its range, ...) raise ResultsError, whose one line names the file (and the row and field): `harness
report`/`plot` exit 2 with it. A run whose meta.json still says "running" while its owner process
(meta.json "owner": pid and /proc start time) is gone is read as "interrupted". No torch.
"""
from __future__ import annotations

import json
import math
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import pandas as pd

from harness.owner import owner_alive as owner_record_alive, process_start_time  # stdlib only
from trainers import events, spec  # the event files' own reader; the run spec (both torch-free)


# ---- finding folders -------------------------------------------------------------------------

def is_run(path: Path) -> bool:
    return (path / "config.json").is_file() and (path / "cells").is_dir()


COMBINED_MARKER = "combined.json"   # a `harness report A B` folder: the runs it combined (no run of its own)


def find_runs(paths: Iterable[str | Path]) -> list[Path]:
    """Every run folder at or under the given paths (a run, a sweep, or a folder of them)."""
    runs: list[Path] = []
    for p in map(Path, paths):
        if not p.is_dir():
            raise FileNotFoundError(f"{p}: no such results folder")
        found = [p] if is_run(p) else sorted(d.parent for d in p.rglob("config.json") if is_run(d.parent))
        if not found and (p / COMBINED_MARKER).is_file():
            continue   # `harness report results/*` meets the combined reports it wrote there before: no run inside
        if not found:
            raise FileNotFoundError(f"{p}: not a run or sweep folder (no config.json with cells/)")
        runs += [r for r in found if r not in runs]
    if not runs:
        raise FileNotFoundError(f"{', '.join(map(str, paths))}: only combined reports, no run folder")
    return runs


class ResultsError(ValueError):
    """A results file that cannot be used; the message is one line naming the file."""


def read_json(path: Path, default=None):
    """A JSON file (`default` when it does not exist); ResultsError when it is not JSON."""
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return default
    except (OSError, ValueError) as err:  # ValueError: JSONDecodeError, UnicodeDecodeError
        why = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ResultsError(f"{path}: not readable as JSON ({why})") from None


def read_doc(path: Path) -> dict:
    """A JSON object document (config.json, meta.json, summary.json); {} when absent."""
    doc = read_json(path, {})
    if not isinstance(doc, dict):
        raise ResultsError(f"{path}: expected a JSON object, found a {type(doc).__name__}")
    return check_doc(Path(path), doc)


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def check_rows(path: Path, rows: list) -> list[dict]:
    """Event rows as the tables use them: objects with a numeric time `t`; update rows with an
    integer version (learner: and seconds_per_update); the mappings they carry are mappings."""
    for i, r in enumerate(rows, 1):
        if not isinstance(r, dict):
            raise ResultsError(f"{path}: row {i} is not a JSON object")
        kind = r.get("kind")
        if not isinstance(kind, str):
            raise ResultsError(f"{path}: row {i}: 'kind' is {json.dumps(kind, default=str)[:40]}, not a string")
        if not is_number(r.get("t")):
            raise ResultsError(f"{path}: row {i} ({kind}) has no numeric time 't'")
        if kind == "update":
            if type(r.get("version")) is not int:
                raise ResultsError(f"{path}: update row {i} has no integer 'version'")
            if r.get("process") == "learner" and not is_number(r.get("seconds_per_update")):
                raise ResultsError(f"{path}: update row {i} has no numeric 'seconds_per_update'")
        for key in ("durations_s", "phases", "update_frame_bytes", "bytes", "rollout_arrival", "cpu_s", "machine"):
            if r.get(key) is not None and not isinstance(r[key], dict):
                raise ResultsError(f"{path}: row {i} ({kind}): {key!r} is not a JSON object")
        check_fields(path, i, r)
    return rows


# Fields the tables compute with, per row kind: a number (or null) or the file is malformed.
NUMERIC_FIELDS = {
    "update": ("seconds_per_update", "update_payload_bytes", "loss", "lag", "harness_s", "reward_mean", "rows",
               "batch", "payload_bytes_up", "wire_bytes_up", "claimed_bytes_up", "claimed_bytes_down",
               "heldout_ppl", "payload_bytes", "payload_bytes_down", "process_cpu_s"),
    "eval": ("version", "pass_at_1", "pass_at_k", "k", "n", "problems", "mean_reward", "reverse_kl", "objective",
             "eval_s", "gold_prob"),
    "heldout": ("version", "heldout_ppl"),
    "joined": ("version", "worker"), "dropped": ("version", "worker"), "disconnected": ("version", "worker"),
}
# Of those, the durations and byte counts: finite and >= 0, or the file is malformed (a -5 s update
# would read as a negative speed-up, NaN as a median that means nothing).
NONNEGATIVE_FIELDS = frozenset({
    "seconds_per_update", "harness_s", "eval_s", "process_cpu_s", "update_payload_bytes", "payload_bytes_up",
    "wire_bytes_up", "claimed_bytes_up", "claimed_bytes_down", "payload_bytes", "payload_bytes_down", "rows"})
DOC_TYPES = {  # per document: key -> the types its value may have (None always allowed)
    "summary.json": {"updates": int, "updates_planned": int, "workers": int, "complete": bool, "consistent": bool,
                     "status": str, "dropped": list, "state_hashes": dict, "eval": dict},
    "meta.json": {"run_id": str, "status": str, "backend": str, "profile": str, "complete": bool, "emulation": bool,
                  "cells": list, "cells_complete": list, "errors": list, "owner": dict, "netns_run_id": str},
    "config.json": {"overrides": dict, "profile_doc": dict, "variants": list, "profile_name": str, "run_id": str},
}


def check_fields(path: Path, i: int, r: dict) -> None:
    """The numeric fields of row `i` (NUMERIC_FIELDS) are numbers or null; durations and byte counts
    (NONNEGATIVE_FIELDS) finite and >= 0."""
    for key in NUMERIC_FIELDS.get(r.get("kind"), ()):
        v = r.get(key)
        if v is not None and not is_number(v):
            raise ResultsError(f"{path}: row {i} ({r.get('kind')}): {key!r} is {json.dumps(v)[:40]}, not a number")
        if v is not None and key in NONNEGATIVE_FIELDS and not _finite_nonnegative(v):
            raise ResultsError(f"{path}: row {i} ({r.get('kind')}): {key!r} is {v}, not a finite number >= 0")


def _finite_nonnegative(v) -> bool:
    try:
        return math.isfinite(v) and v >= 0
    except OverflowError:  # an integer beyond any float: no duration or byte count is that large
        return False


def check_doc(path: Path, doc: dict) -> dict:
    """A run or cell document's fields have the types the tables use (DOC_TYPES; config.json: every
    run-spec parameter its spec type, a list of them where it is a comma-list parameter);
    ResultsError naming the file and field."""
    types = DOC_TYPES.get(path.name, {})
    for key, v in doc.items():
        if v is None:
            continue
        if key in types:
            ok, want = _is_a(v, (types[key],)), _type_names((types[key],))
        elif path.name == "config.json" and key in PARAM_NAMES:
            ok, want = _param_ok(spec.get(key), v)
        else:
            continue
        if not ok:
            raise ResultsError(f"{path}: {key!r} is {json.dumps(v, default=str)[:40]}, not {want}")
    return doc


PARAM_NAMES = frozenset(p.name for p in spec.PARAMS)


def _param_ok(p: spec.Param, v) -> tuple[bool, str]:
    one = {int: (int,), float: (int, float), bool: (bool,), str: (str,)}.get(p.type, (str, int, float, bool))
    if isinstance(v, list):
        return p.many and all(_is_a(x, one) for x in v), f"a list of {_type_names(one)}"
    return _is_a(v, one), _type_names(one)


def _is_a(v, want: tuple) -> bool:
    if isinstance(v, bool):
        return bool in want
    if isinstance(v, int) and float in want:
        return True
    return type(v) in want


def _type_names(want: tuple) -> str:
    names = {"dict": "a mapping", "list": "a list", "str": "a string", "int": "an integer", "float": "a number",
             "bool": "a boolean"}
    return " or ".join(names.get(t.__name__, t.__name__) for t in want if not (t is int and float in want))


LINK_COLUMNS = ("t_s", "node", "direction", "bytes")


def read_links(path: Path) -> pd.DataFrame:
    try:
        df = pd.read_csv(path)
    except (OSError, ValueError) as err:  # pandas' EmptyDataError / ParserError are ValueErrors
        raise ResultsError(f"{path}: not readable as CSV ({str(err).splitlines()[0]})") from None
    missing = [c for c in LINK_COLUMNS if c not in df.columns]
    if missing:
        raise ResultsError(f"{path}: no column {missing[0]!r}")
    return df


# ---- is the run still going? ------------------------------------------------------------------

def owner_alive(meta: dict) -> bool | None:
    """Is the `harness run` that owns this run folder alive? meta.json "owner": {"pid", "start_time"
    (/proc/<pid>/stat field 22)}: a pid that is gone, or that now belongs to a process started at
    another time, is dead. None when it cannot be told (no owner recorded, another host)."""
    owner = meta.get("owner")
    if not isinstance(owner, dict) or type(owner.get("pid")) is not int or owner["pid"] <= 0:
        return None
    if meta.get("host") not in (None, platform.node()):
        return None
    if owner.get("start_time") is None:  # not recorded: the pid alone says
        return process_start_time(owner["pid"]) is not None
    return owner_record_alive(owner)


def effective_meta(meta: dict) -> dict:
    """meta.json as it stands now: "running" whose owner is dead reads as "interrupted"."""
    if meta.get("status") == "running" and owner_alive(meta) is False:
        pid = meta["owner"]["pid"]
        return {**meta, "status": "interrupted", "complete": False,
                "status_note": f"its harness process (pid {pid}) ended without finishing the run"}
    return meta


# ---- one cell: every file read once ------------------------------------------------------------

@dataclass(frozen=True)
class CellFiles:
    """The raw files of one cell folder, each read once."""
    dir: Path
    learner: list[dict]              # events-learner.jsonl rows
    workers: dict[str, list[dict]]   # worker name -> events-w<i>.jsonl rows
    summary: dict                    # the learner's summary.json ({} if absent)
    links: pd.DataFrame | None       # links.csv (link counters), None off the emulated network
    harness: list[dict] = ()         # events-harness.jsonl: what the harness did (lost workers, restarts)

    @property
    def t0(self) -> float:
        """The cell's time origin: its learner's first event (monotonic seconds, shared by the host)."""
        return self.learner[0]["t"] if self.learner else 0.0


def _events(path: Path) -> list[dict]:
    if not path.exists():
        return []
    try:
        return check_rows(path, events.read_events(path))
    except OSError as err:  # a directory where the file should be, an unreadable file
        raise ResultsError(f"{path}: not readable ({err.strerror or type(err).__name__})") from None


def read_cell(cell: Path) -> CellFiles:
    learner, links = cell / "events-learner.jsonl", cell / "links.csv"
    workers = {p.stem[len("events-"):]: _events(p) for p in sorted(cell.glob("events-w*.jsonl"))}
    # a resumed learner's file holds the versions after its snapshot twice: the later life's count
    return CellFiles(dir=cell, learner=events.superseded_dropped(_events(learner)), workers=workers,
                     summary=read_doc(cell / "summary.json"),
                     links=read_links(links) if links.exists() else None,
                     harness=_events(cell / "events-harness.jsonl"))

