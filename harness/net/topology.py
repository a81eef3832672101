"""Topology: one network namespace per node, joined through a router namespace.

Layout for run id ``RID`` (6 hex digits) and N workers::

    wh<RID>-learner  eth0 10.88.0.2/30 --veth-- p0 10.88.0.1/30 \\
    wh<RID>-w1       eth0 10.88.0.6/30 --veth-- p1 10.88.0.5/30  >  wh<RID>-rt (IPv4 forwarding)
    ...                                                          /
    wh<RID>-wN       eth0 10.88.x.y/30 --veth-- pN 10.88.x.y-1/30

Node i's link is the i-th /30 of 10.88.0.0/16 (`link_addresses`: its gateway at 4i + 1, the node at
4i + 2): a point-to-point link needs two addresses, so the /16 holds 16384 links, where one /24 per
node capped a run at 250 workers.

Every node reaches every other through the router, so each node has exactly one access link
(``eth0`` <-> ``p<i>``) that the shaper shapes per direction. Everything the harness creates
lives inside namespaces whose names start with ``wh<RID>-`` (interface names inside them are
short and need no prefix), so deleting those namespaces removes every link, qdisc and
netfilter rule, and `harness clean` finds leftovers by the prefix alone; the host's own
namespace is never modified.

API (used by `harness run`, calibration and tests)::

    with Topology.create(new_run_id(), n_workers=8) as topo:   # destroy() on exit
        topo.nodes["w1"].address                                 # '10.88.0.6'
        proc = topo.run_in("learner", ["python", "-m", "..."])   # subprocess.Popen in the netns
    # or topo = Topology.create(...); ...; topo.destroy()   (idempotent)

Namespaces are opened with ``flags=0``: a missing namespace is an error, never silently created.

Ownership: before creating its namespaces, a topology writes ``/run/wan-harness/<RID>.json``
(:data:`STATE_DIR`; tmpfs, like ``/run/netns``) naming its owner, the creating process, by pid and
start time (``/proc/<pid>/stat`` field 22, so a recycled pid is not mistaken for it); ``destroy``
removes it after the namespaces. `harness clean` finds a run's owner from the namespace name
alone and, without ``--all`` or ``--run-id``, removes only runs whose owner is dead.
"""
from __future__ import annotations

import contextlib
import ctypes
import datetime as dt
import json
import os
import re
import secrets
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import ClassVar, Iterator, Sequence

from pyroute2 import IPRoute, netns
from pyroute2.ethtool import Ethtool

from harness.owner import owner_record, process_start_time

PREFIX = "wh"
NETNS_DIR = "/run/netns"
STATE_DIR = "/run/wan-harness"   # <run id>.json per topology: its owner (harness clean reads it)
RUN_ID = re.compile(r"[0-9a-f]{4,8}")   # new_run_id's hex (older runs: 4 digits)
NS_PATTERN = re.compile(rf"^{PREFIX}({RUN_ID.pattern})-(rt|probe|learner|w[0-9]+)$")
SUBNET = "10.88"            # the harness's /16: every node's link is a /30 in it (`link_addresses`)
LINK_PREFIX_LEN = 30        # gateway, node, network and broadcast addresses per link
MAX_WORKERS = 1024          # the /16 holds 16383 worker links; a run meets process and memory limits first
_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
# Offloads that turn one "packet" into a 30-60 KB super-packet and defeat per-packet loss/delay.
# Every feature whose name matches is switched off (the list of names differs between kernels).
OFFLOAD_PATTERN = re.compile(r"segmentation|gro|receive-offload")
# Per-namespace TCP buffers large enough for 1 Gbit/s x 300 ms (the default 6 MB max caps goodput).
TCP_SYSCTLS = {"net/ipv4/tcp_rmem": "4096 131072 67108864", "net/ipv4/tcp_wmem": "4096 65536 67108864"}


def link_addresses(index: int) -> tuple[str, str]:
    """(node address, gateway address) of node `index`'s link (learner 0, worker i at i): the index-th
    /30 of SUBNET's /16."""
    base = 4 * index
    if not 0 <= base < 1 << 16:
        raise ValueError(f"node index {index} is outside the {SUBNET}.0.0/16 address plan")
    def at(offset: int) -> str:
        return f"{SUBNET}.{(base + offset) >> 8}.{(base + offset) & 0xFF}"
    return at(2), at(1)


def new_run_id() -> str:
    return secrets.token_hex(3)


def ns_name(run_id: str, node: str) -> str:
    return f"{PREFIX}{run_id}-{node}"


# ---- ownership: who created a run's namespaces ------------------------------------------------

def state_path(run_id: str) -> str:
    return os.path.join(STATE_DIR, f"{run_id}.json")


def write_state(run_id: str, namespaces: Sequence[str]) -> None:
    """Record this process as the owner of run ``run_id``'s namespaces (atomic replace)."""
    os.makedirs(STATE_DIR, exist_ok=True)
    doc = {"run_id": run_id, "owner": owner_record(), "namespaces": list(namespaces),
           "created_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    tmp = f"{state_path(run_id)}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        json.dump(doc, fh)
    os.replace(tmp, state_path(run_id))


def read_state(run_id: str) -> dict | None:
    """A run's state file, or None if it has none (or it is unreadable)."""
    try:
        with open(state_path(run_id)) as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def state_run_ids() -> list[str]:
    """Run ids that have a state file."""
    try:
        names = os.listdir(STATE_DIR)
    except OSError:
        return []
    return sorted(n[:-5] for n in names if n.endswith(".json") and re.fullmatch(r"[0-9a-f]{4,8}", n[:-5]))


def remove_state(run_id: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(state_path(run_id))


@dataclass(frozen=True)
class Node:
    name: str          # "learner" | "w1".."wN"
    index: int         # 0 for the learner, N for wN
    netns: str         # wh<RID>-<name>
    ifname: str        # the node side of its access link
    address: str       # IPv4 of ifname
    port: str          # the router side of its access link (in the router namespace)
    gateway: str       # router address on that link


def setns(name_or_path: str) -> None:
    """Move the calling thread into a named netns (no creation: missing -> FileNotFoundError)."""
    path = name_or_path if name_or_path.startswith("/") else os.path.join(NETNS_DIR, name_or_path)
    fd = os.open(path, os.O_RDONLY)
    try:
        if _libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


@contextlib.contextmanager
def in_netns(name: str) -> Iterator[None]:
    """Run a block (sysctl writes, ethtool ioctls) in a netns, then return to the original one."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        setns(name)
        yield
    finally:
        _libc.setns(home, _CLONE_NEWNET)
        os.close(home)


def write_sysctl(netns_name: str, values: dict[str, str]) -> None:
    with in_netns(netns_name):
        for key, value in values.items():
            with open(f"/proc/sys/{key}", "w") as fh:
                fh.write(value)


def disable_offloads(netns_name: str, ifname: str) -> None:
    """GSO/TSO/GRO off, so qdiscs, loss and delay see wire-sized packets."""
    with in_netns(netns_name), Ethtool() as eth:
        features = eth.get_features(ifname)
        for name, feature in features.features.items():
            if OFFLOAD_PATTERN.search(name) and feature.available:
                feature.enable = False
        eth.set_features(ifname, features)


def popen_in(netns_name: str, argv: Sequence[str], **kwargs) -> subprocess.Popen:
    """Start ``argv`` inside a namespace (setns between fork and exec; no `ip netns exec`)."""
    path = os.path.join(NETNS_DIR, netns_name)
    if not os.path.exists(path):
        raise FileNotFoundError(2, f"network namespace {netns_name!r} does not exist", path)
    return subprocess.Popen(list(argv), preexec_fn=lambda: setns(netns_name), **kwargs)


@dataclass
class Topology:
    run_id: str
    nodes: dict[str, Node]
    router_ns: str
    _destroyed: bool = field(default=False, repr=False)
    # the node side's name and the route through the router (harness/run/containers.py: a container
    # may already have an eth0 and a default route, e.g. on a swarm overlay network)
    IFNAME: ClassVar[str] = "eth0"
    ROUTE_DST: ClassVar[str] = "0.0.0.0/0"

    # ---- construction -------------------------------------------------------------------------
    @classmethod
    def plan(cls, run_id: str, n_workers: int) -> "Topology":
        """The names and addresses, without touching the kernel (what --dry-run and plans use)."""
        if not re.fullmatch(r"[0-9a-f]{4,8}", run_id):
            raise ValueError(f"run_id: {run_id!r} must be 4-8 lowercase hex digits")
        if not 1 <= n_workers <= MAX_WORKERS:
            raise ValueError(f"workers: {n_workers!r} must be within 1 and {MAX_WORKERS}")
        names = ["learner"] + [f"w{i}" for i in range(1, n_workers + 1)]
        nodes = {name: Node(name=name, index=i, netns=ns_name(run_id, name), ifname=cls.IFNAME,
                            address=link_addresses(i)[0], port=f"p{i}", gateway=link_addresses(i)[1])
                 for i, name in enumerate(names)}
        return cls(run_id=run_id, nodes=nodes, router_ns=ns_name(run_id, "rt"))

    @classmethod
    def create(cls, run_id: str, n_workers: int) -> "Topology":
        """Build namespaces, veths, addresses and routes; on any failure remove what was built."""
        return cls.plan(run_id, n_workers).built()

    def built(self) -> "Topology":
        """This topology, built (`_build`); on any failure what was built is removed and the error raised."""
        try:
            self._build()
        except BaseException:
            self.destroy()
            raise
        return self

    def _build(self) -> None:
        write_state(self.run_id, self.namespaces())   # the owner first: clean can attribute any partial build
        for ns in self.namespaces():
            netns.create(ns)
        write_sysctl(self.router_ns, {"net/ipv4/ip_forward": "1"})
        with IPRoute(netns=self.router_ns, flags=0) as rt:
            rt.link("set", index=rt.link_lookup(ifname="lo")[0], state="up")
            for node in self.nodes.values():
                self._link_node(rt, node)

    def _link_node(self, rt: IPRoute, node: Node) -> None:
        rt.link("add", ifname=node.port, kind="veth", peer={"ifname": node.ifname, "net_ns_fd": node.netns})
        port = rt.link("get", ifname=node.port)[0]["index"]  # one link, not a dump of the router's N ports
        rt.addr("add", index=port, address=node.gateway, prefixlen=LINK_PREFIX_LEN)
        rt.link("set", index=port, state="up")
        disable_offloads(self.router_ns, node.port)
        with IPRoute(netns=node.netns, flags=0) as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
            idx = ipr.link_lookup(ifname=node.ifname)[0]
            ipr.addr("add", index=idx, address=node.address, prefixlen=LINK_PREFIX_LEN)
            ipr.link("set", index=idx, state="up")
            ipr.route("add", dst=self.ROUTE_DST, gateway=node.gateway)
        disable_offloads(node.netns, node.ifname)
        write_sysctl(node.netns, TCP_SYSCTLS)

    # ---- use ----------------------------------------------------------------------------------
    @property
    def workers(self) -> list[str]:
        return [n for n in self.nodes if n != "learner"]

    def run_in(self, node: str, argv: Sequence[str], **kwargs) -> subprocess.Popen:
        """Start a process inside ``node``'s namespace (``"rt"`` is the router)."""
        return popen_in(self.router_ns if node == "rt" else self.nodes[node].netns, argv, **kwargs)

    def namespaces(self) -> list[str]:
        return [self.router_ns] + [n.netns for n in self.nodes.values()]

    # ---- teardown -----------------------------------------------------------------------------
    def destroy(self) -> list[str]:
        """Kill processes in our namespaces, then delete them. Idempotent; returns what was removed."""
        removed = []
        existing = set(netns.listnetns())
        for ns in self.namespaces():
            if ns in existing:
                kill_ns_processes(ns)
                with contextlib.suppress(FileNotFoundError):
                    netns.remove(ns)
                removed.append(ns)
        remove_state(self.run_id)
        self._destroyed = True
        return removed

    def __enter__(self) -> "Topology":
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()


def _ns_inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def ns_pids(netns_name: str) -> list[int]:
    """Pids whose network namespace is ``netns_name`` (excluding this process)."""
    target = _ns_inode(os.path.join(NETNS_DIR, netns_name))
    if target is None:
        return []
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid() and _ns_inode(f"/proc/{entry}/ns/net") == target:
            pids.append(int(entry))
    return pids


def kill_ns_processes(netns_name: str, grace_s: float = 2.0) -> list[int]:
    """SIGTERM every process in the namespace, SIGKILL what is left after ``grace_s``."""
    pids = ns_pids(netns_name)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.02)
        pids = [p for p in pids if _alive(p)]
        if not pids:
            break
    return pids


def _alive(pid: int) -> bool:
    return process_start_time(pid) is not None  # gone, or a zombie: it has ended
