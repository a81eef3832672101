"""What a run of N workers needs from this machine's limits, and the one the harness raises itself.

Per worker a run holds: a veth pair and two neighbour entries (the node's gateway in its namespace,
the node in the router's), a service process of a few threads, and about two descriptors in the
learner or aggregator (its socket; the fork server passes a log file and a namespace per start). So:

- open files (RLIMIT_NOFILE): the centre holds one socket per worker, the harness a netlink socket per
  namespace while it shapes; `raise_open_files` lifts this process's soft limit toward the hard one
  before anything starts (every service inherits it). A hard limit below the need is a problem line.
- neighbour entries (net.ipv4.neigh.default.gc_thresh3): the kernel's IPv4 neighbour table is one
  for every namespace; past gc_thresh3 entries new ones fail ("neighbour table overflow") and links
  lose packets. A run needs 2 per node plus what the box already holds.
- tasks (kernel.pid_max, kernel.threads-max, the cgroup's pids.max): every service's threads.
Nothing in a run uses inotify (no file watching), so its limits do not apply.
"""
from __future__ import annotations

import resource
from pathlib import Path

FILES_PER_WORKER = 4      # the centre's socket, a log file and a namespace in flight, the shaper's netlink socket
FILES_BASE = 1024         # the harness's and the centre's own (event files, libraries, pipes)
NEIGHBOURS_PER_NODE = 2   # the node's gateway entry, the router's entry for the node
TASKS_PER_WORKER = 16     # a service's threads (the main one, heartbeat, torch's pools) with room to spare
TASKS_BASE = 512


def open_files_needed(workers: int) -> int:
    return FILES_BASE + FILES_PER_WORKER * workers


def raise_open_files(workers: int) -> int:
    """Lift the soft RLIMIT_NOFILE of this process (and so of every service it starts) to what
    `workers` need, within the hard limit; returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = open_files_needed(workers) if hard == resource.RLIM_INFINITY else min(hard, open_files_needed(workers))
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        return want
    return soft


def _read_int(path: str) -> int | None:
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return None if text == "max" else int(text) if text.isdigit() else None


def _cgroup_pids_max() -> tuple[int | None, str]:
    """The pids.max of this process's cgroup (v2), and the cgroup's path."""
    try:
        line = next(x for x in Path("/proc/self/cgroup").read_text().splitlines() if x.startswith("0::"))
    except (OSError, StopIteration):
        return None, ""
    group = line[3:]
    return _read_int(f"/sys/fs/cgroup{group}/pids.max"), group


def problems(workers: int) -> list[str]:
    """One line per limit of this machine that a run of `workers` workers would exceed."""
    out = []
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < open_files_needed(workers):
        out.append(f"open files: the hard limit is {hard}, {workers} workers need {open_files_needed(workers)}: "
                   f"raise it (ulimit -Hn, LimitNOFILE= in systemd, --ulimit nofile= in docker)")
    neighbours = NEIGHBOURS_PER_NODE * (workers + 1)
    thresh = _read_int("/proc/sys/net/ipv4/neigh/default/gc_thresh3")
    if thresh is not None and thresh < neighbours:
        out.append(f"neighbour table: net.ipv4.neigh.default.gc_thresh3 is {thresh}, {workers} workers need "
                   f"{neighbours} entries: sysctl -w net.ipv4.neigh.default.gc_thresh3={2 * neighbours}")
    tasks = TASKS_BASE + TASKS_PER_WORKER * workers
    for key in ("kernel/pid_max", "kernel/threads-max"):
        limit = _read_int(f"/proc/sys/{key}")
        if limit is not None and limit < tasks:
            name = key.replace("/", ".")
            out.append(f"tasks: {name} is {limit}, {workers} workers need about {tasks}: sysctl -w {name}={2 * tasks}")
    pids, group = _cgroup_pids_max()
    if pids is not None and pids < tasks:
        out.append(f"tasks: the cgroup {group} allows {pids} (pids.max), {workers} workers need about {tasks}: "
                   f"raise it (TasksMax= in systemd, --pids-limit in docker)")
    return out
