"""Per-worker times of runs with uneven compute (`--worker-cpu`, a profile's `cpu` key) or an injected
straggler (`--straggler`): where each worker's seconds per update went, and who held the others up.

From each cell's own files: the workers' event rows (``events-wN.jsonl``: the phases of trainers/events.py
PHASES, wall and thread CPU seconds) and ``launch.json`` (the CPU shares the harness applied). Per worker,
per update (totals over the cell / the updates it applied):

- compute: rollout, train, encode, decode_replay, hash (wall), and the thread CPU seconds in them (a worker
  held to 25 % of a core shows wall ~4x its CPU); beside its CPU share, the seconds its quota throttled it
  (launch.json ``cpu_throttled``, the kernel's cpu.stat);
- straggle: the delay `--straggler` injected (the `straggle` phase);
- idle: waiting for the learner's next update (the learner waits on the slowest worker: the others idle);
- wait: sending and receiving (send_rollouts, send_update, receive): the link.

The straggler of a cell is the worker with the most compute + straggle per update: the one the others idle for,
unless `--quorum K` below the worker count let each update go on without the slowest contributions.
Nothing is written for runs that limit no worker and inject no delay.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from harness.results.tables import cpu_limited
from harness.results.wording import markdown_table
from trainers import spec
from trainers.events import read_events

COMPUTE = ("rollout", "train", "encode", "decode_replay", "hash")
WAIT = ("send_rollouts", "send_update", "receive")


def worker_times(cell_dir: Path) -> list[dict]:
    """One row per worker of a cell: updates applied and seconds per update in each group (see the module)."""
    launch = _doc(cell_dir / "launch.json")
    shares = launch.get("cpu_shares") or {}
    throttled = launch.get("cpu_throttled") or {}
    out = []
    for path in sorted(cell_dir.glob("events-w*.jsonl"), key=lambda p: int(p.stem.split("-w")[1])):
        name = path.stem.split("-", 1)[1]
        rows = read_events(path)
        dur: dict[str, float] = {}
        cpu = 0.0
        for r in rows:
            for phase, s in (r.get("durations_s") or {}).items():
                dur[phase] = dur.get(phase, 0.0) + float(s)
            cpu += sum(float(s) for p, s in (r.get("cpu_s") or {}).items() if p in COMPUTE)
        updates = sum(1 for r in rows if r.get("kind") == "update") or 1
        held = (throttled.get(name) or {}).get("throttled_s")
        out.append({"worker": name, "cpu_share": shares.get(name), "updates": updates,
                    "throttled_s": None if held is None else held / updates,
                    "compute_s": sum(dur.get(p, 0.0) for p in COMPUTE) / updates, "compute_cpu_s": cpu / updates,
                    "straggle_s": dur.get("straggle", 0.0) / updates, "idle_s": dur.get("idle", 0.0) / updates,
                    "wait_s": sum(dur.get(p, 0.0) for p in WAIT) / updates})
    if out:
        slowest = max(out, key=lambda w: w["compute_s"] + w["straggle_s"])
        for w in out:
            w["straggler"] = w is slowest
    return out


def _doc(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _uneven(config: dict) -> bool:
    return bool(config.get("straggler")) or cpu_limited(config)


def section(runs) -> list[str]:
    """The report's "Workers" section (markdown lines); [] when no run has uneven compute or a straggler."""
    head = ["run", "cell", "worker", "CPU share (throttled s/update)", "injected delay", "compute s/update (CPU s)", "straggle s/update",
            "idle s/update", "wait s/update (send + receive)", "slowest"]
    rows, notes = [], []
    for run in runs:
        if not _uneven(run.config):
            continue
        try:
            injected = spec.parse_straggler(run.config.get("straggler"))
        except spec.SpecError:
            injected = {}
        quorum, workers = run.config.get("quorum"), run.config.get("workers")
        partial = type(quorum) is int and type(workers) is int and 0 < quorum < workers
        for cell_dir in sorted((run.dir / "cells").glob("*")):
            times = worker_times(cell_dir)
            for w in times:
                late = injected.get(int(w["worker"][1:]))
                rows.append([run.dir.name, cell_dir.name, w["worker"],
                             "-" if w["cpu_share"] is None else f"{w['cpu_share']:g}" + (
                                 "" if w["throttled_s"] is None else f" ({w['throttled_s']:.3f})"),
                             f"{late.kind} {late.seconds:g} s" if late else "-",
                             f"{w['compute_s']:.3f} ({w['compute_cpu_s']:.3f})", f"{w['straggle_s']:.3f}",
                             f"{w['idle_s']:.3f}", f"{w['wait_s']:.3f}", "straggler" if w["straggler"] else ""])
            slow = [w for w in times if w["straggler"]]
            others = [w["compute_s"] + w["straggle_s"] for w in times if not w["straggler"]]
            if slow and others:
                s = slow[0]
                notes.append(f"- {cell_dir.name}: the straggler was {s['worker']} ({s['compute_s'] + s['straggle_s']:.3f} "
                             f"s/update of compute + injected delay vs {statistics.median(others):.3f} median of the "
                             "others); " + (f"the learner did not wait for it: each update went on with the first "
                                            f"{quorum} of {workers} workers' contributions (--quorum)"
                                            if partial else "the others idled for it"))
    if not rows:
        return []
    return ["## Workers: uneven compute and stragglers", "",
            "Per worker, seconds per update (totals over the cell / the updates it applied): compute (rollout, "
            "train, encode, replay, hash; wall, and the thread's CPU seconds in brackets: a worker held to a "
            "CPU share shows wall well above CPU), the delay --straggler injected, idle (waiting for the "
            "learner's next update) and wait (sending and receiving). CPU share: the CFS quota its cgroup "
            "held it to (harness/net/cgroups.py), in CPUs, and in brackets the seconds per update the kernel "
            "throttled it (cpu.stat): 0 means the quota never bound (on a busy machine a share is a ceiling, "
            "and the worker got less than it anyway).", "", markdown_table(head, rows), "", *notes, ""]
