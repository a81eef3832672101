"""Per-process event files (JSON lines, written as the run goes) and the learner's summary.json.

Every process of a run appends to its own `events-<process>.jsonl` in the run folder: one
`"kind": "update"` row per update it took part in, and a row for anything else worth knowing
(a worker joined, was dropped, a frame was rejected, hashes were compared). Each row is
flushed as soon as it is written, so an interrupted run leaves readable files.

Row kinds:
- learner `update` (one per version): version, batch, lag, policy_versions, phases
  {name: [start, end]} and durations_s (idle = waiting for rollouts, train, encode,
  decode_replay = the learner's own step, hash, send_update), seconds_per_update (end of the
  previous update to end of this one), update_payload_bytes (the method's body),
  update_frame_bytes {worker: bytes written}, bytes {direction: {message type: frame bytes}}
  for this update, loss, reward_mean, objective metrics, hash (when computed), harness_s.
- worker `update` (one per version applied): version, type (UPDATE/SNAPSHOT), phases idle /
  receive / decode_replay / hash, bytes received, hash (when reported).
- worker `rollouts` (one per batch; batch t feeds update t + 1): batch, policy_version, seed,
  phases rollout / send_rollouts, bytes sent, reward_mean.
- events: start, joined, disconnected, dropped, replaced, rejected (a refused connection or
  frame, with its reason), stale_rollouts, hash (a comparison), join_timeout, interrupted, error.

Timestamps are `time.monotonic()` seconds (CLOCK_MONOTONIC, shared by the processes of one
host), so phases of different processes line up; durations are in seconds, bytes are bytes.

The one reader of these files (torch-free, so the harness's results side imports it):
`read_events` (a whole file) and `tail_events` (new complete lines from a byte offset, for
live progress). `atomic_write_json` / `atomic_write_text` write any file another process may
be polling (temp file + rename).
"""
from __future__ import annotations

import json
import os
import statistics
import threading
import time
from contextlib import contextmanager
from pathlib import Path

# Phase names, the same strings in every process's rows and in the results columns.
PHASES = ("rollout", "send_rollouts", "receive", "train", "encode", "send_update", "decode_replay",
          "hash", "idle")


class EventLog:
    """Append-only JSON-lines file; one row per call, flushed immediately."""

    def __init__(self, run_dir: str | os.PathLike, process: str):
        self.path = Path(run_dir) / f"events-{process}.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.process = process
        self._lock = threading.Lock()
        self._file = open(self.path, "a", buffering=1)
        self.seconds = 0.0  # time spent writing rows: part of the harness's own overhead

    def write(self, kind: str, **fields) -> dict:
        t0 = time.perf_counter()
        row = {"kind": kind, "process": self.process, "t": time.monotonic(), **fields}
        line = json.dumps(row, sort_keys=True, default=str)
        with self._lock:
            if not self._file.closed:
                self._file.write(line + "\n")
                self._file.flush()
            self.seconds += time.perf_counter() - t0
        return row

    def close(self) -> None:
        with self._lock:
            self._file.close()


class PhaseTimer:
    """Records [start, end] monotonic timestamps of the named phases of one update."""

    def __init__(self):
        self.spans: dict[str, list[float]] = {}
        self.durations: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str):
        assert name in PHASES, name
        start = time.monotonic()
        try:
            yield
        finally:
            self.add(name, start, time.monotonic())

    def add(self, name: str, start: float, end: float) -> None:
        # A phase entered twice in one update (e.g. two receives) keeps its first start and last end,
        # and its duration is the sum of the pieces.
        self.spans.setdefault(name, [start, end])[1] = end
        self.durations[name] = self.durations.get(name, 0.0) + (end - start)

    def row(self) -> dict:
        return {"phases": {k: [round(a, 6), round(b, 6)] for k, (a, b) in self.spans.items()},
                "durations_s": {k: round(v, 6) for k, v in self.durations.items()}}


def read_events(path: str | os.PathLike) -> list[dict]:
    """Every row of an event file; a torn last line (the process was killed mid-write) is skipped."""
    with open(path, "rb") as fh:
        return _complete_rows(fh.read())[0]


def tail_events(path: str | os.PathLike, offset: int = 0) -> tuple[list[dict], int]:
    """(rows of the complete lines after byte `offset`, the offset to read on from next time):
    a half-written last line is left for the next call; a file not created yet has no rows."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            rows, used = _complete_rows(fh.read())
    except FileNotFoundError:
        return [], offset
    return rows, offset + used


def _complete_rows(data: bytes) -> tuple[list[dict], int]:
    """Rows of the newline-terminated lines of `data` (a line that is not JSON is skipped), bytes used."""
    end = data.rfind(b"\n") + 1
    rows = []
    for line in data[:end].splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows, end


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` to `path` through a temp file + rename: a reader sees the old file or the new one."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def atomic_write_json(path: str | os.PathLike, doc: dict) -> Path:
    """`doc` as indented, key-sorted JSON, written atomically (see atomic_write_text)."""
    return atomic_write_text(path, json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")


def write_summary(run_dir: str | os.PathLike, summary: dict) -> Path:
    """The learner's summary.json, written atomically."""
    return atomic_write_json(Path(run_dir) / "summary.json", summary)


def median(values) -> float | None:
    values = list(values)
    return statistics.median(values) if values else None
