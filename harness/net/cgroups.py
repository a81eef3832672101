"""Uneven compute: a CPU share per worker, one cgroup per service process under a run-owned parent.

Mininet's ``CPULimitedHost`` is the model: a CFS bandwidth quota per node. A share is a fraction of
one CPU (the services compute on one thread): 0.25 lets the process run 25 ms of every
:data:`PERIOD_US` (100 ms), 1 a whole core, 2 two cores' worth. Written as cgroup v2 ``cpu.max``
("QUOTA PERIOD") where the cpu controller sits on the unified hierarchy, else as cgroup v1
``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (a hybrid host, where cpu is bound to a v1 mount: the
same CFS bandwidth control under its older names).

Layout (``<root>``: the cpu hierarchy's mount, ``/sys/fs/cgroup`` on v2, ``/sys/fs/cgroup/cpu`` on v1)::

    <root>/wan-harness/o<pid>-<start time>-<token>/w<N>

The parent's name carries its owner (pid + /proc start time, :mod:`harness.owner`), so a sweep needs
no state file to tell a dead run's groups from a live one's. A group is created when its cell starts,
the worker's pid written to its ``cgroup.procs`` right after it is spawned (its threads and any child
follow it), and removed when the cell's processes are stopped. What a SIGKILLed harness leaves is
removed by :func:`sweep`: at the next run's start (dead owners only) and by `harness clean`
(:mod:`harness.net.clean`).
"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from harness.owner import owner_alive, owner_record

PERIOD_US = 100_000                  # CFS period (the kernel's default): a share's quota is share x this
CGROUP_FS = Path("/sys/fs/cgroup")
TOP = "wan-harness"
PARENT = re.compile(r"^o([0-9]+)-([0-9]+)-([0-9a-f]{6})$")


class CgroupError(RuntimeError):
    """CPU shares cannot be applied here (no cpu controller, not root); one line saying what is missing."""


@dataclass(frozen=True)
class Hierarchy:
    """Where the cpu controller is and how a quota is written there."""
    root: Path
    version: int          # 2: cpu.max; 1: cpu.cfs_quota_us + cpu.cfs_period_us

    def limit_files(self, share: float) -> dict[str, str]:
        quota = max(1000, round(share * PERIOD_US))
        if self.version == 2:
            return {"cpu.max": f"{quota} {PERIOD_US}"}
        return {"cpu.cfs_period_us": str(PERIOD_US), "cpu.cfs_quota_us": str(quota)}

    def read_limit(self, group: Path) -> float | None:
        """The share a group is limited to (None: unlimited)."""
        if self.version == 2:
            quota, period = (group / "cpu.max").read_text().split()
            return None if quota == "max" else int(quota) / int(period)
        quota = int((group / "cpu.cfs_quota_us").read_text())
        return None if quota < 0 else quota / int((group / "cpu.cfs_period_us").read_text())


def hierarchy() -> Hierarchy | None:
    """The cpu controller's hierarchy on this host, or None (no cgroup fs with a cpu controller)."""
    unified = CGROUP_FS / "cgroup.controllers"
    if unified.exists() and "cpu" in unified.read_text().split():
        return Hierarchy(CGROUP_FS, 2)
    v1 = CGROUP_FS / "cpu"
    if (v1 / "cpu.cfs_quota_us").exists():
        return Hierarchy(v1, 1)
    return None


def problem() -> str | None:
    """Why CPU shares cannot be applied here (one line), or None."""
    if hierarchy() is None:
        return ("--worker-cpu / a profile's cpu key: no cgroup cpu controller here (cgroup v2 with cpu in "
                f"{CGROUP_FS}/cgroup.controllers, or a v1 {CGROUP_FS}/cpu mount)")
    if os.geteuid() != 0:
        return "--worker-cpu / a profile's cpu key: creating cgroups needs root"
    return None


class CpuGroups:
    """One run-owned parent and a limited group per worker; `remove()` leaves nothing (idempotent)."""

    def __init__(self, shares: dict[str, float], hier: Hierarchy | None = None):
        self.hier = hier or hierarchy()
        if self.hier is None or os.geteuid() != 0:
            raise CgroupError(problem() or "no cgroup cpu controller")
        sweep(self.hier)   # a SIGKILLed earlier run's groups, before ours
        me = owner_record()
        self.parent = self.hier.root / TOP / f"o{me['pid']}-{me['start_time']}-{secrets.token_hex(3)}"
        self.shares = dict(shares)
        self.groups: dict[str, Path] = {}
        try:
            if self.hier.version == 2:   # children of TOP and of the parent may only use cpu if it is delegated
                _enable_cpu(self.hier.root)
            for attempt in range(3):   # another run's remove() may rmdir the shared top between our two mkdirs
                try:
                    self.parent.mkdir(parents=True)
                    break
                except FileNotFoundError:
                    if attempt == 2:
                        raise
            if self.hier.version == 2:
                _enable_cpu(self.hier.root / TOP)
                _enable_cpu(self.parent)
            for name, share in self.shares.items():
                group = self.parent / name
                group.mkdir()
                for file, value in self.hier.limit_files(share).items():
                    (group / file).write_text(value)
                self.groups[name] = group
        except OSError as err:
            self.remove()
            raise CgroupError(f"cannot create the CPU share cgroups under {self.parent}: {err.strerror or err}") from None

    def place(self, name: str, pid: int) -> None:
        """Move process ``pid`` (all its threads) into ``name``'s group; a name without a share is left alone."""
        group = self.groups.get(name)
        if group is not None:
            (group / "cgroup.procs").write_text(str(pid))

    def throttled(self) -> dict[str, dict]:
        """Per group, the kernel's CFS bandwidth counters so far: periods, periods throttled and seconds
        throttled (cpu.stat: throttled_usec on v2, throttled_time in ns on v1); a group gone is left out."""
        out = {}
        for name, group in self.groups.items():
            try:
                stat = dict(line.split()[:2] for line in (group / "cpu.stat").read_text().splitlines() if line.strip())
            except OSError:
                continue
            seconds = int(stat["throttled_usec"]) / 1e6 if "throttled_usec" in stat else int(stat.get("throttled_time", 0)) / 1e9
            out[name] = {"periods": int(stat.get("nr_periods", 0)), "throttled_periods": int(stat.get("nr_throttled", 0)),
                         "throttled_s": round(seconds, 6)}
        return out

    def remove(self) -> None:
        """Kill what is still inside (the cell's processes are stopped first: normally nothing) and
        remove the groups and the parent."""
        _remove_tree(self.parent)
        with contextlib.suppress(OSError):   # the shared top: only when no other run holds a group in it
            (self.hier.root / TOP).rmdir()

    def __enter__(self) -> "CpuGroups":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def _enable_cpu(group: Path) -> None:
    control = group / "cgroup.subtree_control"
    if "cpu" not in control.read_text().split():
        control.write_text("+cpu")


def _procs(group: Path) -> list[int]:
    try:
        return [int(x) for x in (group / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _remove_tree(group: Path, grace_s: float = 2.0) -> None:
    """rmdir ``group`` and its children, deepest first; processes still in one are SIGKILLed first
    (a group with a process in it cannot be removed: EBUSY)."""
    if not group.is_dir():
        return
    for child in sorted((p for p in group.iterdir() if p.is_dir()), reverse=True):
        _remove_tree(child, grace_s)
    end = time.monotonic() + grace_s
    while True:
        pids = _procs(group)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as err:
            if err.errno != errno.EBUSY or time.monotonic() > end:
                raise
            time.sleep(0.02)   # a killed process leaves its group when it has exited


def parents(hier: Hierarchy | None = None) -> list[tuple[Path, dict]]:
    """Every run's parent group present now, with its owner record (from the name)."""
    hier = hier or hierarchy()
    top = hier.root / TOP if hier else None
    if top is None or not top.is_dir():
        return []
    out = []
    for entry in sorted(top.iterdir()):
        m = PARENT.match(entry.name)
        if m and entry.is_dir():
            out.append((entry, {"pid": int(m.group(1)), "start_time": int(m.group(2))}))
    return out


def sweep(hier: Hierarchy | None = None, everything: bool = False) -> list[str]:
    """Remove the parent groups (and their workers' groups) of every run whose owner is dead
    (``everything``: of every run); returns the removed paths."""
    hier = hier or hierarchy()
    removed = []
    for parent, owner in parents(hier):
        if everything or not owner_alive(owner):
            with contextlib.suppress(OSError):
                _remove_tree(parent)
                removed.append(str(parent))
    if hier is not None:
        with contextlib.suppress(OSError):
            (hier.root / TOP).rmdir()
    return removed

