"""A result folder, read and checked: where its runs are, and every file of a cell read once, streamed
row by row and checked against the schema (schema.py) before any table is built from it (tables.py).

A run folder (`harness run`) holds `config.json`, `meta.json` and one folder per cell
(`cells/<method>-s<seed>/`) with the services' event files (`events-<process>.jsonl`), the
learner's `summary.json` and, on the emulated network, the link counters (`links.csv`).
A sweep folder holds `sweep.json` and one run folder per grid point under `runs/`.

Every file is opened without blocking and must be a regular file (a FIFO, a device such as a link to
/dev/zero, a folder: refused in one line, never read); documents are capped in size and JSON depth,
event lines in length and depth. The learner's event file is streamed: its update rows go one at a
time to the caller (`read_cell(on_update=...)`, which turns each into table rows at once) and only a
small mark of each is kept, so memory follows the tables, not the file. Malformed files (a document
that is not a JSON object, an event row without its time, a value out of its range, ...) raise
ResultsError, whose one line names the file, the row (its line number) and the field: `harness
report`/`plot` exit 2 with it. A run whose meta.json still says "running" while its owner process
(meta.json "owner": pid and /proc start time) is gone is read as "interrupted". No torch.
"""
from __future__ import annotations

import io
import json
import os
import platform
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, NamedTuple

import pandas as pd

from harness.owner import owner_alive as owner_record_alive, process_start_time  # stdlib only
# ResultsError and is_number are schema's; readers of a folder take them from here with the rest
from harness.results.schema import ResultsError, check_doc, check_row, is_number, json_depth_ok

MAX_DOC_BYTES = 64 * 2**20      # config.json, meta.json, summary.json, links.csv: a few kB to a few MB
MAX_LINE_BYTES = 4 * 2**20      # one event row: the learner's start row (all run parameters) is ~3 kB


# ---- finding folders -------------------------------------------------------------------------

def is_run(path: Path) -> bool:
    return (path / "config.json").is_file() and (path / "cells").is_dir()


def hidden_under(path: Path, top: Path) -> bool:
    """Whether `path` lies in a hidden folder (a name starting with '.') below `top`: such a folder is the
    harness's own (`results/.cache/regime/<hash>`, the regime pilot's run), never a run to report."""
    return any(part.startswith(".") for part in path.relative_to(top).parts)


COMBINED_MARKER = "combined.json"   # a `harness report A B` folder: the runs it combined (no run of its own)


def find_runs(paths: Iterable[str | Path]) -> list[Path]:
    """Every run folder at or under the given paths (a run, a sweep, or a folder of them); a run in a
    hidden folder under a path given (the regime pilot's, under `.cache/`) is not one of them."""
    runs: list[Path] = []
    for p in map(Path, paths):
        if not p.is_dir():
            raise FileNotFoundError(f"{p}: no such results folder")
        found = [p] if is_run(p) else sorted(d.parent for d in p.rglob("config.json")
                                             if is_run(d.parent) and not hidden_under(d.parent, p))
        if not found and (p / COMBINED_MARKER).is_file():
            continue   # `harness report results/*` meets the combined reports it wrote there before: no run inside
        if not found:
            raise FileNotFoundError(f"{p}: not a run or sweep folder (no config.json with cells/)")
        runs += [r for r in found if r not in runs]
    if not runs:
        raise FileNotFoundError(f"{', '.join(map(str, paths))}: only combined reports, no run folder")
    return runs


def sweep_gaps(folder: Path) -> tuple[list[str], int] | None:
    """A sweep folder's planned grid points (sweep.json "runs") that have no run folder with cells under
    runs/, and how many it planned; None when `folder` holds no sweep.json. ResultsError when sweep.json
    is not a sweep's plan."""
    path = folder / "sweep.json"
    if not path.exists():
        return None
    planned = read_doc(path).get("runs")
    if not isinstance(planned, list) or not all(isinstance(r, str) and r for r in planned):
        raise ResultsError(f"{path}: \"runs\" is not a list of run ids")
    return [r for r in planned if not is_run(folder / "runs" / r)], len(planned)


def sweep_extras(folder: Path) -> list[str]:
    """A sweep folder's run folders under runs/ that its sweep.json does not plan (points of an earlier grid
    run into the same folder); [] without a sweep.json."""
    path = folder / "sweep.json"
    if not path.exists() or not (folder / "runs").is_dir():
        return []
    planned = set(read_doc(path).get("runs") or [])
    return sorted(d.name for d in (folder / "runs").iterdir() if d.name not in planned and is_run(d))


# ---- opening and reading files ------------------------------------------------------------------

def open_regular(path: Path) -> io.BufferedReader:
    """`path` opened for reading if it is a regular file. Opened non-blocking, so that a FIFO (or a
    device) is seen for what it is without waiting for a writer; FileNotFoundError passes through."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as err:
        raise ResultsError(f"{path}: not readable ({err.strerror or type(err).__name__})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else
                "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else
                "not a file")
        raise ResultsError(f"{path}: not a regular file ({kind})")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_bytes(path: Path, limit: int = MAX_DOC_BYTES) -> bytes:
    """A regular file's bytes, at most `limit` of them (more is a ResultsError)."""
    with open_regular(path) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ResultsError(f"{path}: larger than {limit // 2**20} MiB, not a results document")
    return data


def read_json(path: Path, default=None):
    """A JSON file (`default` when it does not exist); ResultsError when it is not JSON, too large or
    too deeply nested."""
    try:
        data = read_bytes(Path(path))
    except FileNotFoundError:
        return default
    if not json_depth_ok(data):
        raise ResultsError(f"{path}: not readable as JSON (nested deeper than the results documents go)")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as err:  # ValueError: JSONDecodeError, UnicodeDecodeError
        why = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ResultsError(f"{path}: not readable as JSON ({why})") from None


def read_doc(path: Path) -> dict:
    """A JSON object document (config.json, meta.json, summary.json); {} when absent."""
    doc = read_json(path, {})
    if not isinstance(doc, dict):
        raise ResultsError(f"{path}: expected a JSON object, found a {type(doc).__name__}")
    return check_doc(Path(path), doc)


def iter_rows(path: Path, workers: int | None = None) -> Iterator[dict]:
    """The rows of an event file, one at a time, each checked (schema.check_row; `workers`: the
    run's, for worker ids). As trainers/events.py reads them: a torn last line (the process was killed
    mid-write) and a line that is not JSON are skipped; a line longer than MAX_LINE_BYTES or nested
    deeper than the schema allows is a ResultsError naming its row."""
    with open_regular(path) as fh:
        n = 0
        while True:
            line = fh.readline(MAX_LINE_BYTES + 1)
            if not line:
                return
            n += 1
            if not line.endswith(b"\n"):
                if len(line) > MAX_LINE_BYTES:
                    raise ResultsError(f"{path}: row {n} is longer than {MAX_LINE_BYTES // 2**20} MiB")
                return   # the torn last line
            if not json_depth_ok(line):
                raise ResultsError(f"{path}: row {n} is nested deeper than event rows go")
            try:
                row = json.loads(line)
            except ValueError:
                continue
            yield check_row(path, n, row, workers)


LINK_COLUMNS = ("t_s", "node", "direction", "bytes")


def read_links(path: Path) -> pd.DataFrame:
    try:
        df = pd.read_csv(io.BytesIO(read_bytes(path)))
    except (OSError, ValueError) as err:  # pandas' EmptyDataError / ParserError are ValueErrors
        if isinstance(err, ResultsError):
            raise
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

class UpdateMark(NamedTuple):
    """What is kept of each learner update row once the tables have taken it (tables.py: membership,
    the cell's updates done, join time, the evaluations' training seconds)."""
    version: int
    t: float
    seconds_per_update: float | None
    contributors: int | None     # workers whose rollouts it trained on (len(rollout_arrival)), None if unsaid
    left_out: int = 0            # members whose contributions it went on without (--quorum: len(left_out))


@dataclass(frozen=True)
class CellFiles:
    """The files of one cell folder, each read once. The learner's update rows are not kept (the
    caller's `on_update` took each as it was read): `updates` holds a mark of each."""
    dir: Path
    learner: list[dict]              # events-learner.jsonl rows other than updates (start, joined, eval, ...)
    workers: dict[str, list[dict]]   # worker name -> events-w<i>.jsonl rows
    summary: dict                    # the learner's summary.json ({} if absent)
    links: pd.DataFrame | None       # links.csv (link counters), None off the emulated network
    harness: list[dict] = ()         # events-harness.jsonl: what the harness did (lost workers, restarts)
    updates: list[UpdateMark] = field(default_factory=list)   # the learner's update rows, in file order
    t0: float = 0.0                  # the learner's first event (monotonic seconds, shared by the host)


def _events(path: Path, workers: int | None = None) -> list[dict]:
    return list(iter_rows(path, workers)) if os.path.lexists(path) else []


UpdateSink = Callable[[CellFiles, dict], None]


def read_cell(cell: Path, on_update: UpdateSink | None = None, on_resumed: Callable[[int], None] | None = None,
              workers: int | None = None) -> CellFiles:
    """The files of one cell; the learner's event file streamed: each update row goes to
    `on_update(cell files so far, row)` as it is read (the cell files hold the summary, links, worker
    and harness rows and the learner's rows before it) and leaves a mark. A resumed learner's file
    holds the versions after its snapshot twice: at its `resumed` row the marks past the snapshot are
    dropped and `on_resumed(version)` tells the caller to drop its rows too (the later life's count).
    `workers`: the run's worker count, the bound on worker ids in the rows."""
    links = cell / "links.csv"
    worker_rows = {p.stem[len("events-"):]: _events(p, workers) for p in sorted(cell.glob("events-w*.jsonl"))}
    summary = read_doc(cell / "summary.json")
    link_df = read_links(links) if links.exists() else None
    harness = _events(cell / "events-harness.jsonl", workers)
    rows: list[dict] = []
    marks: list[UpdateMark] = []
    so_far = None
    path = cell / "events-learner.jsonl"
    for r in iter_rows(path, workers) if os.path.lexists(path) else ():
        if so_far is None:
            so_far = CellFiles(cell, rows, worker_rows, summary, link_df, harness, marks, float(r["t"]))
        if r["kind"] == "update":
            arrivals = r.get("rollout_arrival")
            left = r.get("left_out")
            marks.append(UpdateMark(r["version"], r["t"], r.get("seconds_per_update"),
                                    len(arrivals) if arrivals else None, len(left) if isinstance(left, list) else 0))
            if on_update is not None:
                on_update(so_far, r)
            continue
        if r["kind"] == "resumed" and type(r.get("version")) is int:
            marks[:] = [m for m in marks if m.version <= r["version"]]
            if on_resumed is not None:
                on_resumed(r["version"])
        rows.append(r)
    return so_far or CellFiles(cell, rows, worker_rows, summary, link_df, harness, marks, 0.0)
