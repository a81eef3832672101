"""Who owns a run: a process named by its pid AND its start time, so that a recycled pid is never
mistaken for the owner. Stdlib only: the network side (topology, clean, launch) and the results
side (a meta.json left "running" by a dead owner) share it without importing each other."""
from __future__ import annotations

import os


def process_start_time(pid: int) -> int | None:
    """When `pid` started (/proc/<pid>/stat field 22, clock ticks after boot); None if there is no
    such process, or it has ended and awaits reaping (a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return None if fields[0] in ("Z", "X") else int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def owner_record(pid: int | None = None) -> dict:
    """{"pid", "start_time"} of `pid` (default: this process), as meta.json and state files hold it."""
    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "start_time": process_start_time(pid)}


def owner_alive(owner: object) -> bool:
    """Whether the process an owner record names still runs (same pid, same start time, not a zombie)."""
    if not isinstance(owner, dict) or type(owner.get("pid")) is not int or owner["pid"] <= 0:
        return False
    start = process_start_time(owner["pid"])
    return start is not None and start == owner.get("start_time")
