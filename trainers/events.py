"""Per-process event files (JSON lines, written as the run goes) and the learner's summary.json.

Every process of a run appends to its own `events-<process>.jsonl` in the run folder: one
`"kind": "update"` row per update it took part in, and a row for anything else worth knowing
(a worker joined, was dropped, a frame was rejected, hashes were compared). Each row is
flushed as soon as it is written, so an interrupted run leaves readable files.

Row kinds:
- learner `update` (one per version): version, batch, lag, policy_versions, phases
  {name: [start, end]} and durations_s (idle = waiting for rollouts, train, encode,
  decode_replay = the learner's own step, hash, send_update), cpu_s {name: the thread's CPU seconds
  in it}, process_cpu_s, machine {busy_frac, steal_frac, load1, cores} over the update (PhaseTimer),
  seconds_per_update (end of the
  previous update to end of this one), update_payload_bytes (the method's body),
  update_frame_bytes {worker: bytes written}, bytes {direction: {message type: frame bytes}}
  for this update, loss, reward_mean, objective metrics, hash (when computed), harness_s.
- worker `update` (one per version applied): version, type (UPDATE/SNAPSHOT), phases idle /
  receive / decode_replay / hash (+ cpu_s, process_cpu_s, machine), bytes received, hash (when reported).
- worker `rollouts` (one per batch; batch t feeds update t + 1): batch, policy_version, seed,
  phases rollout / send_rollouts, bytes sent, reward_mean.
- events: start, joined, disconnected, dropped, replaced, rejected (refused connections or
  frames of one source: its reason and `count`, at most one row per source per interval: `Tally`), stale_rollouts, hash (a comparison), join_timeout, interrupted, error.

Timestamps are `time.monotonic()` seconds (CLOCK_MONOTONIC, shared by the processes of one
host), so phases of different processes line up; durations are in seconds, bytes are bytes.

The one reader of these files (torch-free, so the harness's results side imports it):
`read_events` (a whole file) and `tail_events` (new complete lines from a byte offset, for
live progress). `atomic_write_json` / `atomic_write_text` write any file another process may
be polling (temp file + rename).
"""
from __future__ import annotations

import contextlib
import json
import os
import statistics
import threading
import time
from contextlib import contextmanager
from pathlib import Path

# Phase names, the same strings in every process's rows and in the results columns.
PHASES = ("rollout", "send_rollouts", "receive", "train", "encode", "send_update", "decode_replay",
          "hash", "idle", "straggle")   # straggle: a delay injected by --straggler (trainers/spec.py Straggle)


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


class Tally:
    """Rows of one kind that a peer can provoke at will (a refused connection, an unchecked hash),
    bounded: counted per source and written as at most one row per source per `interval_s`. The
    first occurrence from a source is written at once (count 1); the ones after it within the
    interval are counted and written as one row when the next one arrives after the interval, or
    at `flush` (call it now and then, and at the end): `count`, the latest fields, and `reasons`
    {reason: count} for up to MAX_REASONS distinct reasons (the rest under "other").
    Thread-safe. The file then grows with the number of sources and intervals, never with the rate."""

    MAX_REASONS = 16

    def __init__(self, events: EventLog, kind: str, interval_s: float = 10.0):
        self.events, self.kind, self.interval_s = events, kind, interval_s
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}  # source -> when its last row was written
        self._held: dict[str, dict] = {}  # source -> {"count", "reasons", "fields"} not yet written
        self.total = 0  # occurrences counted, written or not

    def add(self, source: str, reason: str = "", **fields) -> None:
        now = time.monotonic()
        with self._lock:
            self.total += 1
            held = self._held.setdefault(source, {"count": 0, "reasons": {}, "fields": {}})
            held["count"] += 1
            key = reason if reason in held["reasons"] or len(held["reasons"]) < self.MAX_REASONS else "other"
            held["reasons"][key] = held["reasons"].get(key, 0) + 1
            held["fields"] = {**fields, "reason": reason}
            if now - self._last.get(source, -float("inf")) < self.interval_s:
                return
            self._last[source] = now
            del self._held[source]
        self._write(source, held)

    def flush(self, due_only: bool = True) -> None:
        """Write the held counts (only those whose interval has passed, unless `due_only` is False)."""
        now, rows = time.monotonic(), []
        with self._lock:
            for source in list(self._held):
                if not due_only or now - self._last.get(source, -float("inf")) >= self.interval_s:
                    rows.append((source, self._held.pop(source)))
                    self._last[source] = now
        for source, held in rows:
            self._write(source, held)

    def _write(self, source: str, held: dict) -> None:
        self.events.write(self.kind, source=source, count=held["count"], reasons=held["reasons"], **held["fields"])


def read_cpu_counters() -> tuple[int, int, int]:
    """(busy, steal, total) jiffies of the machine from /proc/stat's first line (0s where unreadable).
    busy = user + nice + system + irq + softirq; steal = time a hypervisor gave our vCPUs to another guest."""
    try:
        with open("/proc/stat") as fh:
            f = [int(x) for x in fh.readline().split()[1:9]]
    except (OSError, ValueError):
        return 0, 0, 0
    f += [0] * (8 - len(f))
    user, nice, system, idle, iowait, irq, softirq, steal = f
    return user + nice + system + irq + softirq, steal, sum(f)


def read_load1() -> float | None:
    """The machine's 1-minute load average (runnable + uninterruptible tasks), None where unreadable."""
    try:
        with open("/proc/loadavg") as fh:
            return float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def machine_load(before: tuple[int, int, int], after: tuple[int, int, int]) -> dict:
    """What the machine did between two read_cpu_counters(): busy_frac and steal_frac of all cores'
    time (0-1), load1 at the end and the core count, so a reader can tell a contended window."""
    total = after[2] - before[2]
    frac = (lambda i: round((after[i] - before[i]) / total, 4)) if total > 0 else (lambda i: None)
    return {"busy_frac": frac(0), "steal_frac": frac(1), "load1": read_load1(), "cores": os.cpu_count()}


class PhaseTimer:
    """Records [start, end] monotonic timestamps of the named phases of one update, the calling
    thread's CPU seconds in each (time.thread_time: a single-threaded phase on an idle core has CPU
    ~ wall; much less means it waited for a core), the process's CPU seconds over the timer's life
    and the machine's load over it (machine_load)."""

    def __init__(self):
        self.spans: dict[str, list[float]] = {}
        self.durations: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self._process_cpu0 = time.process_time()
        self._counters0 = read_cpu_counters()

    @contextmanager
    def phase(self, name: str):
        assert name in PHASES, name
        start, cpu0 = time.monotonic(), time.thread_time()
        try:
            yield
        finally:
            self.cpu[name] = self.cpu.get(name, 0.0) + (time.thread_time() - cpu0)
            self.add(name, start, time.monotonic())

    def add(self, name: str, start: float, end: float) -> None:
        # A phase entered twice in one update (e.g. two receives) keeps its first start and last end,
        # and its duration is the sum of the pieces.
        self.spans.setdefault(name, [start, end])[1] = end
        self.durations[name] = self.durations.get(name, 0.0) + (end - start)

    def row(self) -> dict:
        """phases {name: [start, end]}, durations_s and cpu_s {name: seconds} (cpu_s only for phases
        timed by `phase`), process_cpu_s since the timer was made, machine (machine_load)."""
        return {"phases": {k: [round(a, 6), round(b, 6)] for k, (a, b) in self.spans.items()},
                "durations_s": {k: round(v, 6) for k, v in self.durations.items()},
                "cpu_s": {k: round(v, 6) for k, v in self.cpu.items()},
                "process_cpu_s": round(time.process_time() - self._process_cpu0, 6),
                "machine": machine_load(self._counters0, read_cpu_counters())}


def read_events(path: str | os.PathLike) -> list[dict]:
    """Every row of an event file; a torn last line (the process was killed mid-write) is skipped."""
    with open(path, "rb") as fh:
        return _complete_rows(fh.read())[0]


def superseded_dropped(rows: list[dict]) -> list[dict]:
    """A learner's event rows without the update rows a resumed life superseded: a learner killed
    after version n and resumed (`--resume`, a "resumed" row) from its snapshot at version v <= n
    wrote versions v+1..n twice; the later life's rows are the run's (the earlier ones are kept in
    the file, never read as the run's). Rows of a run never resumed come back as they are."""
    out: list[dict] = []
    for row in rows:
        if row.get("kind") == "resumed" and isinstance(row.get("version"), int):
            out = [r for r in out if not (r.get("kind") == "update" and isinstance(r.get("version"), int)
                                          and r["version"] > row["version"])]
        out.append(row)
    return out


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
    """Write `text` to `path` through a temp file + rename: a reader sees the old file or the new one.
    A write that fails (a full disk, a read-only folder) raises and leaves no temp file behind."""
    return atomic_write_bytes(path, text.encode())


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """`data` written to `path` atomically (see atomic_write_text): a process killed mid-write leaves
    the previous file whole (the learner's snapshot file)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return path


def atomic_write_json(path: str | os.PathLike, doc: dict) -> Path:
    """`doc` as indented, key-sorted JSON, written atomically (see atomic_write_text)."""
    return atomic_write_text(path, json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")


def write_summary(run_dir: str | os.PathLike, summary: dict) -> Path:
    """The learner's summary.json, written atomically."""
    return atomic_write_json(Path(run_dir) / "summary.json", summary)


def median(values) -> float | None:
    """The median of `values` with None and NaN left out; None when nothing is left. The project's one
    median (the learner's summary, the results tables, the cost model's fit): torch-free, so both sides import it."""
    values = [v for v in values if v is not None and v == v]   # v != v: NaN (pandas' missing value)
    return statistics.median(values) if values else None
