"""`harness clean`: remove what crashed harness runs left behind. Safe to run twice.

What is the harness's: network namespaces named ``wh<hex run id>-<rt|probe|learner|wN>``
(:data:`harness.net.topology.NS_PATTERN`) and everything inside them (veths, qdiscs, netfilter
rules die with the namespace), the processes running inside them (delay lines, probes,
learner/worker services), delay-line processes (``python -m harness.net.delayline``) whose
namespace is already gone, the runs' state files (``/run/wan-harness/<run id>.json``), and the
containers of docker-compose.yml (label ``wan-harness.role``) whose controller no longer runs
(their namespaces, and the qdiscs and rules in them, go with them; see docs/CONTAINERS.md), and the
CPU-share cgroups of runs whose owner is dead (``<cpu hierarchy>/wan-harness/o<pid>-<start>-<hex>``,
:mod:`harness.net.cgroups`: the owner is in the name).
Nothing else is looked at: the host namespace's links, qdiscs and rules are never modified.

Whose: every topology records its owner process (pid + start time) in its state file when it
is created (:mod:`harness.net.topology`). ``clean()`` with no run id removes only runs whose owner
is dead; a run with a live owner is kept, and so is one without a state file (made before owners
were recorded, or a backend probe namespace): nothing says it is dead. ``run_id=`` removes that
run whoever owns it; ``everything=True`` (`harness clean --all`) removes every run, live ones
included.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
from dataclasses import dataclass, field

from pyroute2 import netns

from harness.net import cgroups, topology
from harness.owner import owner_alive

# The delay line's module, and its name before the rooms (harness/delayline.py): a line left by a
# crashed run of the older layout is still found.
DELAYLINE_MODULES = (b"harness.net.delayline", b"harness.delayline")


@dataclass
class Removed:
    namespaces: list[str] = field(default_factory=list)
    processes: list[int] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)        # one line per run left alone, and why
    containers: list[str] = field(default_factory=list)  # docker-compose.yml's, whose controller is gone
    cgroups: list[str] = field(default_factory=list)     # CPU-share cgroups of runs whose owner is dead

    def lines(self) -> list[str]:
        done = ([f"removed namespace {n}" for n in self.namespaces]
                + [f"killed process {p}" for p in self.processes]
                + [f"removed container {c}" for c in self.containers]
                + [f"removed cgroup {g}" for g in self.cgroups])
        return (done or ["nothing to clean"]) + self.kept


def leftovers(run_id: str | None = None) -> list[str]:
    """Harness namespaces present now (of one run, or of every run)."""
    found = []
    for name in netns.listnetns():
        m = topology.NS_PATTERN.match(name)
        if m and (run_id is None or m.group(1) == run_id):
            found.append(name)
    return sorted(found)


def runs(run_id: str | None = None) -> dict[str, list[str]]:
    """Run id -> its namespaces present now (of one run, or of every run)."""
    out: dict[str, list[str]] = {}
    for name in leftovers(run_id):
        out.setdefault(topology.NS_PATTERN.match(name).group(1), []).append(name)
    return out


def owner_status(run_id: str) -> tuple[str, bool | None]:
    """('owner pid N, alive' | '... dead' | 'owner unknown', alive?) of a run, from its state file."""
    state = topology.read_state(run_id)
    owner = state.get("owner") if state else None
    if not isinstance(owner, dict):
        return "owner unknown (no state file)", None
    alive = owner_alive(owner)
    return f"owner pid {owner.get('pid')}, {'alive' if alive else 'dead'}", alive


def delaylines() -> dict[int, str | None]:
    """Pid -> run id of every delay-line process on the machine."""
    found: dict[int, str | None] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        module = next((m for m in DELAYLINE_MODULES if m in argv), None)
        if b"-m" in argv and module is not None:
            at = argv.index(module)
            config = argv[at + 1] if len(argv) > at + 1 else b"{}"
            with contextlib.suppress(ValueError, AttributeError):
                found[int(entry)] = json.loads(config).get("run_id")
    return found


def orphan_delaylines(run_id: str | None = None) -> list[int]:
    """Delay-line processes (of one run, or of every run) left in a namespace nobody can name."""
    return sorted(pid for pid, rid in delaylines().items() if run_id is None or rid == run_id)


def stale_containers(everything: bool = False) -> list:
    """Containers of docker-compose.yml (label ``wan-harness.role``) left behind: of every stack
    whose controller does not run (its learner and workers would idle forever, its shaping is
    gone with it), or of every stack (``everything``). [] where no docker engine answers."""
    if not os.path.exists("/var/run/docker.sock"):
        return []
    try:
        import docker

        found = docker.from_env(timeout=10).containers.list(all=True, filters={"label": "wan-harness.role"})
    except Exception:   # no engine, or not ours to reach: nothing to say about containers
        return []
    stacks: dict[str, list] = {}
    for c in found:
        labels = c.labels
        stack = labels.get("com.docker.compose.project") or labels.get("com.docker.stack.namespace") or c.name
        stacks.setdefault(stack, []).append(c)
    stale = []
    for members in stacks.values():
        live = any(c.labels.get("wan-harness.role") != "service" and c.status == "running" for c in members)
        if everything or not live:   # a swarm task is the swarm's to replace: `docker stack rm` removes it
            stale += [c for c in members if "com.docker.swarm.task.id" not in c.labels]
    return stale


def remove_containers(everything: bool = False) -> list[str]:
    """Remove :func:`stale_containers` (their namespaces, qdiscs and rules go with them); their names."""
    names = []
    for c in stale_containers(everything):
        with contextlib.suppress(Exception):   # already gone, or removed by compose meanwhile
            c.remove(force=True)
            names.append(c.name)
    return names


def _remove_run(names: list[str], removed: Removed) -> None:
    for name in names:
        removed.processes += topology.ns_pids(name)
        topology.kill_ns_processes(name)
        with contextlib.suppress(FileNotFoundError):
            netns.remove(name)
        removed.namespaces.append(name)


def clean(run_id: str | None = None, everything: bool = False) -> Removed:
    """Remove leftovers: of ``run_id`` (whoever owns it), of every run (``everything``), or by
    default of every run whose owner process is dead. Returns what was removed and kept."""
    removed = Removed()
    dead_only = run_id is None and not everything
    live: set[str] = set()
    for rid, names in runs(run_id).items():
        if dead_only:
            status, alive = owner_status(rid)
            if alive is not False:
                live.add(rid)
                hint = "" if alive else f"; `harness clean --run-id {rid}` or --all removes it"
                removed.kept.append(f"kept run {rid} ({len(names)} namespaces): {status}{hint}")
                continue
        _remove_run(names, removed)
        topology.remove_state(rid)
    for pid, rid in sorted(delaylines().items()):
        if run_id is not None and rid != run_id:
            continue
        if dead_only and (rid in live or owner_status(str(rid))[1]):
            continue                 # a delay line of a run that is kept, or whose owner is alive
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            removed.processes.append(pid)
    if run_id is None:                     # containers are per stack, cgroups per owner process, not per run
        removed.containers += remove_containers(everything)
        removed.cgroups += cgroups.sweep(everything=everything)
    for rid in topology.state_run_ids():   # state files whose namespaces are gone
        if (run_id is None or rid == run_id) and not leftovers(rid) and (not dead_only or owner_status(rid)[1] is False):
            topology.remove_state(rid)
    return removed
