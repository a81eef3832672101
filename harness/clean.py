"""`harness clean`: remove whatever any harness run left behind. Safe to run twice.

What is the harness's: network namespaces named ``wh<hex run id>-<rt|probe|learner|wN>``
(:data:`harness.topology.NS_PATTERN`) and everything inside them (veths, qdiscs, netfilter
rules die with the namespace), the processes running inside them (delay lines, probes,
learner/worker services), and delay-line processes (``python -m harness.delayline``) whose
namespace is already gone. Nothing else is looked at: the host namespace's links, qdiscs and
rules are never modified.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
from dataclasses import dataclass, field

from pyroute2 import netns

from harness import topology


@dataclass
class Removed:
    namespaces: list[str] = field(default_factory=list)
    processes: list[int] = field(default_factory=list)

    def lines(self) -> list[str]:
        if not self.namespaces and not self.processes:
            return ["nothing to clean"]
        return ([f"removed namespace {n}" for n in self.namespaces]
                + [f"killed process {p}" for p in self.processes])


def leftovers(run_id: str | None = None) -> list[str]:
    """Harness namespaces present now (of one run, or of every run)."""
    found = []
    for name in netns.listnetns():
        m = topology.NS_PATTERN.match(name)
        if m and (run_id is None or m.group(1) == run_id):
            found.append(name)
    return sorted(found)


def orphan_delaylines(run_id: str | None = None) -> list[int]:
    """Delay-line processes (of one run, or of every run) left in a namespace nobody can name."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        if b"-m" in argv and b"harness.delayline" in argv:
            config = argv[argv.index(b"harness.delayline") + 1] if len(argv) > argv.index(b"harness.delayline") + 1 else b"{}"
            with contextlib.suppress(ValueError):
                if run_id is None or json.loads(config).get("run_id") == run_id:
                    pids.append(int(entry))
    return pids


def clean(run_id: str | None = None) -> Removed:
    removed = Removed()
    for name in leftovers(run_id):
        removed.processes += topology.ns_pids(name)
        topology.kill_ns_processes(name)
        with contextlib.suppress(FileNotFoundError):
            netns.remove(name)
        removed.namespaces.append(name)
    for pid in orphan_delaylines(run_id):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            removed.processes.append(pid)
    return removed
