"""Shaper: profile + topology -> plan (plain data) -> kernel state through pyroute2.

Build, then run. :func:`build_plan` is pure: it turns a :class:`~harness.profiles.Profile` and a
:class:`~harness.topology.Topology` into a :class:`Plan`, a list of operations as plain dicts
(``--dry-run`` prints it; ``tests/golden/`` holds the expected plans). :class:`Shaper` applies a
plan (replace semantics, so applying twice or applying a scheduled change is safe) and tears it
down again (idempotent).

Where each direction of node ``i``'s access link (node ``eth0`` <-> router ``p<i>``) is shaped:

* ``up`` (node -> network): HTB rate on the node's ``eth0`` egress.
* ``down`` (network -> node): HTB rate on the router's ``p<i>`` egress.

Backends (chosen by :func:`probe_backend`, can be forced, recorded in the plan):

* ``netem`` (kernels with sch_netem): HTB class for the rate with burst = 2 ms x rate, and a
  netem child for delay / jitter / loss with ``limit`` sized to the bandwidth-delay product.
  Gilbert-Elliott loss is planned but pyroute2 0.9 does not wrap netem loss models, so
  applying such a plan raises :class:`ShaperError` (documented gap).
* ``fallback`` (this machine: no sch_netem): HTB for the rate (pfifo leaf with the profile's
  queue limit); random loss with the iptables ``statistic`` match; delay and jitter (and
  Gilbert-Elliott loss) in a userspace NFQUEUE delay line (:mod:`harness.delayline`), one
  process per node link, always on a *receive* path (DESIGN.md: on the sender's OUTPUT chain
  TCP collapses) and always *after* the rate limiter (a delay line in front of HTB releases
  bursts that overflow the HTB queue: 48 % goodput at 1 Gbit/s + 10 ms, measured)::

      router mangle PREROUTING  -i p<i>  statistic DROP         (up loss of node i)
      router mangle FORWARD     -i p<i>  NFQUEUE 2i   bypass    (up delay: after HTB on node eth0)
      router filter FORWARD     -o p<i>  statistic DROP         (down loss of node i)
      node   filter INPUT       -i eth0  NFQUEUE 2i+1 bypass    (down delay: after HTB on p<i>)

  The kernel here has NFQUEUE only as the xtables target (no nft ``queue`` expression) and
  pyroute2 0.9 cannot write xtables rules, so netfilter rules are loaded with
  ``iptables-restore`` inside the router namespace (the only subprocess; tc state is pyroute2).

API::

    topo = Topology.create(run_id, n_workers)
    plan = build_plan(profiles.load("transatlantic"), topo, backend=probe_backend())
    with Shaper(plan) as shaper:          # apply() on enter, teardown() on exit and on SIGTERM
        ...
        shaper.update(build_plan(profile, topo, backend, at_s=30))   # a scheduled change
"""
from __future__ import annotations

import gzip
import json
import os
import math
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator
import contextlib

from pyroute2 import IPRoute, netns
from pyroute2.netlink.exceptions import NetlinkError

from harness import profiles, topology, units
from harness.profiles import LinkDir, Profile
from harness.topology import Topology

BACKENDS = ("netem", "fallback")
MTU_BYTES = 1500
MSS_BYTES = 1448
GSO_BURST_S = 0.001          # a GSO skb may hold at most ~1 ms of the link rate
DEFAULT_GSO_SEGS = 65535     # the kernel's default gso_max_segs, restored on teardown
BURST_S = 0.002              # HTB burst/cburst = 2 ms of the rate (DESIGN: 1-5 ms x rate)
MIN_BURST_BYTES = 2 * 1514
HTB_QUANTUM = 60000          # one class per device: quantum only matters to silence r2q warnings
DEFAULT_LEAF_LIMIT = 1000    # packets, the veth txqueuelen a plain HTB leaf would get
SIZING_RATE_BIT_S = 1e9      # what an unlimited direction is assumed to carry when sizing queues
MAX_QUEUE_PKTS = 65536
DELAYLINE_SLACK_S = 0.05     # scheduling lag a delay line's kernel queue absorbs (busy 2-core box)
READY_TIMEOUT_S = 10.0


class ShaperError(RuntimeError):
    """The plan cannot be applied here; the message names the operation and the reason."""


@dataclass
class Plan:
    run_id: str
    profile: str
    backend: str
    at_s: float
    ops: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> str:
        """One operation per line (readable golden diffs); ``json.loads`` gives the plan back."""
        head = json.dumps({"run_id": self.run_id, "profile": self.profile, "backend": self.backend,
                           "at_s": self.at_s}, sort_keys=True)[:-1]
        ops = ",\n  ".join(json.dumps(op, sort_keys=True) for op in self.ops)
        return f'{head}, "ops": [\n  {ops}\n]}}\n' if self.ops else f'{head}, "ops": []}}\n'

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        doc = json.loads(text)
        return cls(run_id=doc["run_id"], profile=doc["profile"], backend=doc["backend"], at_s=doc["at_s"], ops=doc["ops"])

    def devices(self) -> set[tuple[str, str]]:
        return {(op["ns"], op["dev"]) for op in self.ops if "dev" in op}


# ---- planning (pure) --------------------------------------------------------------------------

def bdp_packets(link: LinkDir, factor: float = 1.5) -> int:
    """Packets in flight over ``rate x (delay + jitter)``, with headroom, at least 1000."""
    rate = link.rate_bit_s or SIZING_RATE_BIT_S
    pkts = rate * (link.delay_s + link.jitter_s) / (8 * MTU_BYTES)
    return int(min(MAX_QUEUE_PKTS, max(DEFAULT_LEAF_LIMIT, math.ceil(pkts * factor))))


def delay_queue_packets(link: LinkDir) -> int:
    """Kernel queue for a delay line: what arrives at the link rate during delay + jitter, plus
    DELAYLINE_SLACK_S of scheduling lag (the process may wait for a CPU), twice over."""
    rate = link.rate_bit_s or SIZING_RATE_BIT_S
    pkts = rate * (link.delay_s + link.jitter_s + DELAYLINE_SLACK_S) / (8 * MTU_BYTES)
    return int(min(MAX_QUEUE_PKTS, max(DEFAULT_LEAF_LIMIT, math.ceil(2 * pkts))))


def gso_segments(rate_bit_s: float) -> int:
    """Largest GSO skb (in segments) worth ~GSO_BURST_S at the rate, 1 .. 64. Local TCP builds
    GSO super-packets even with device GSO off (software GSO splits them only after the qdisc),
    so HTB would release a 64 KB skb at once: 0.5 s of a 1 Mbit/s link. One segment per skb
    at every rate would cost CPU at 1 Gbit/s, hence the cap scales with the rate."""
    return max(1, min(64, int(rate_bit_s / 8 * GSO_BURST_S / MSS_BYTES)))


def _htb_ops(ns: str, dev: str, link: LinkDir) -> list[dict[str, Any]]:
    rate = link.rate_bit_s
    burst = max(MIN_BURST_BYTES, int(rate / 8 * BURST_S))
    return [{"op": "gso_max_segs", "ns": ns, "dev": dev, "segs": gso_segments(rate)},
            {"op": "htb_root", "ns": ns, "dev": dev, "handle": "1:", "default": "1:1"},
            {"op": "htb_class", "ns": ns, "dev": dev, "classid": "1:1", "parent": "1:",
             "rate_bit_s": rate, "burst_bytes": burst, "cburst_bytes": burst, "quantum": HTB_QUANTUM}]


def _netem_dir(ns: str, dev: str, link: LinkDir) -> list[dict[str, Any]]:
    ops = _htb_ops(ns, dev, link) if link.rate_bit_s else []
    if link.delay_s or link.jitter_s or link.loss_frac or link.burst_loss:
        ge = link.burst_loss
        ops.append({"op": "netem", "ns": ns, "dev": dev, "parent": "1:1" if ops else "root", "handle": "10:",
                    "delay_us": round(link.delay_s * 1e6), "jitter_us": round(link.jitter_s * 1e6),
                    "loss_pct": link.loss_frac * 100, "limit_pkts": link.limit_pkts or bdp_packets(link),
                    "gemodel": None if ge is None else [ge.p_frac, ge.r_frac, ge.bad_loss_frac, ge.good_loss_frac]})
    elif ops:
        ops.append({"op": "pfifo", "ns": ns, "dev": dev, "parent": "1:1", "handle": "10:",
                    "limit_pkts": link.limit_pkts or DEFAULT_LEAF_LIMIT})
    return ops


def _fallback_rate(ns: str, dev: str, link: LinkDir) -> list[dict[str, Any]]:
    if not link.rate_bit_s:
        return []
    return _htb_ops(ns, dev, link) + [{"op": "pfifo", "ns": ns, "dev": dev, "parent": "1:1", "handle": "10:",
                                       "limit_pkts": link.limit_pkts or DEFAULT_LEAF_LIMIT}]


def _loss_rule(rt: str, table: str, chain: str, match: list[str], link: LinkDir) -> list[dict[str, Any]]:
    if not link.loss_frac:
        return []
    return [{"op": "iptables", "ns": rt, "table": table, "chain": chain,
             "rule": match + ["-m", "statistic", "--mode", "random", "--probability", f"{link.loss_frac:.10f}",
                              "-j", "DROP"]}]


def _delay_queue(num: int, direction: str, link: LinkDir, ns: str) -> dict[str, Any] | None:
    if not (link.delay_s or link.jitter_s or link.burst_loss):
        return None
    ge = link.burst_loss
    return {"num": num, "dir": direction, "netns": ns, "delay_us": round(link.delay_s * 1e6),
            "jitter_us": round(link.jitter_s * 1e6), "maxlen": delay_queue_packets(link),
            "ge": None if ge is None else [ge.p_frac, ge.r_frac, ge.bad_loss_frac, ge.good_loss_frac]}


def _fallback_node(topo: Topology, node: topology.Node, spec: profiles.LinkSpec) -> list[dict[str, Any]]:
    rt = topo.router_ns
    ops = _fallback_rate(node.netns, node.ifname, spec.up) + _fallback_rate(rt, node.port, spec.down)
    ops += _loss_rule(rt, "mangle", "PREROUTING", ["-i", node.port], spec.up)
    ops += _loss_rule(rt, "filter", "FORWARD", ["-o", node.port], spec.down)
    queues = [q for q in (_delay_queue(2 * node.index, "up", spec.up, rt),
                          _delay_queue(2 * node.index + 1, "down", spec.down, node.netns)) if q]
    for q in queues:
        where = (["mangle", "FORWARD", "-i", node.port] if q["dir"] == "up"
                 else ["filter", "INPUT", "-i", node.ifname])
        ops.append({"op": "iptables", "ns": q["netns"], "table": where[0], "chain": where[1],
                    "rule": where[2:] + ["-j", "NFQUEUE", "--queue-num", str(q["num"]), "--queue-bypass"]})
    if queues:
        ops.append({"op": "delayline", "ns": rt, "node": node.name, "queues": queues})
    return ops


def build_plan(profile: Profile, topo: Topology, backend: str, at_s: float = 0.0) -> Plan:
    """The operations that make ``topo``'s links behave like ``profile`` at time ``at_s``."""
    if backend not in BACKENDS:
        raise ShaperError(f"backend: {backend!r} is unknown (valid: {', '.join(BACKENDS)})")
    plan = Plan(run_id=topo.run_id, profile=profile.name, backend=backend, at_s=at_s)
    for node in topo.nodes.values():
        spec = profile.link(node.name, at_s)
        if backend == "netem":
            plan.ops += _netem_dir(node.netns, node.ifname, spec.up) + _netem_dir(topo.router_ns, node.port, spec.down)
        else:
            plan.ops += _fallback_node(topo, node, spec)
    # loss rules before queue rules inside a chain: a dropped packet never occupies a delay slot
    plan.ops.sort(key=lambda op: (op["op"] != "iptables", "NFQUEUE" in op.get("rule", [])))
    plan.ops.sort(key=lambda op: op["op"] == "delayline")
    return plan


# ---- probing ----------------------------------------------------------------------------------

def _netem_from_config() -> bool | None:
    """What the kernel says without touching anything: a loaded sch_netem module, or the
    build config; None when neither can be read."""
    if os.path.isdir("/sys/module/sch_netem"):
        return True
    try:
        with gzip.open("/proc/config.gz", "rt") as fh:
            config = fh.read()
    except OSError:
        return None
    if "CONFIG_NET_SCH_NETEM=y" in config:
        return True
    if "CONFIG_NET_SCH_NETEM=m" in config:
        return None      # a module that may or may not load: try it
    return False


def probe_backend() -> str:
    """'netem' if this kernel has sch_netem, else 'fallback'. Reads the kernel config when it
    can; otherwise tries a netem qdisc in a scratch namespace (``wh<id>-probe``, removed again)."""
    known = _netem_from_config()
    if known is not None:
        return "netem" if known else "fallback"
    return probe_by_trying()


def probe_by_trying() -> str:
    """Add a netem qdisc to ``lo`` of a scratch namespace: accepted -> 'netem'."""
    scratch = topology.ns_name(topology.new_run_id(), "probe")
    netns.create(scratch)
    try:
        with IPRoute(netns=scratch, flags=0) as ipr:
            lo = ipr.link_lookup(ifname="lo")[0]
            ipr.link("set", index=lo, state="up")
            ipr.tc("add", "netem", lo, 0x10000, delay=1000)
        return "netem"
    except NetlinkError:
        return "fallback"
    finally:
        netns.remove(scratch)


# ---- applying ---------------------------------------------------------------------------------

def _handle(text: str) -> int:
    major, _, minor = text.partition(":")
    return (int(major, 16) << 16) | int(minor or "0", 16)


def _tc(ipr: IPRoute, op: dict[str, Any]) -> None:
    idx = ipr.link_lookup(ifname=op["dev"])[0]
    kind = op["op"]
    if kind == "gso_max_segs":
        ipr.link("set", index=idx, gso_max_segs=op["segs"])
    elif kind == "htb_root":
        # HTB cannot be "replaced" by itself (EINVAL): an HTB root with our handle is kept as is
        if not any(q.get_attr("TCA_KIND") == "htb" and q["handle"] == _handle(op["handle"])
                   and q["parent"] == 0xFFFFFFFF for q in ipr.get_qdiscs(index=idx)):
            ipr.tc("replace", "htb", idx, _handle(op["handle"]), default=_handle(op["default"]) & 0xFFFF)
    elif kind == "htb_class":
        ipr.tc("replace-class", "htb", idx, _handle(op["classid"]), parent=_handle(op["parent"]),
               rate=int(op["rate_bit_s"] / 8), ceil=int(op["rate_bit_s"] / 8), burst=op["burst_bytes"],
               cburst=op["cburst_bytes"], quantum=op["quantum"])
    elif kind == "pfifo":
        ipr.tc("replace", "pfifo", idx, _handle(op["handle"]), parent=_handle(op["parent"]), limit=op["limit_pkts"])
    elif kind == "netem":
        if op["gemodel"]:
            raise ShaperError("netem: Gilbert-Elliott loss is not wrapped by pyroute2 0.9 (TCA_NETEM_LOSS)")
        parent = {} if op["parent"] == "root" else {"parent": _handle(op["parent"])}
        ipr.tc("replace", "netem", idx, _handle(op["handle"]), delay=op["delay_us"], jitter=op["jitter_us"],
               loss=op["loss_pct"], limit=op["limit_pkts"], **parent)


def iptables_restore_text(ops: list[dict[str, Any]]) -> str:
    """All iptables ops as one iptables-restore document (both tables always present, so
    restoring an empty plan flushes what an earlier plan installed)."""
    lines = []
    for table in ("mangle", "filter"):
        lines.append(f"*{table}")
        for op in ops:
            if op["op"] == "iptables" and op["table"] == table:
                lines.append(" ".join(["-A", op["chain"]] + op["rule"]))
        lines.append("COMMIT")
    return "\n".join(lines) + "\n"


def _rule_namespaces(plan: Plan) -> set[str]:
    return {op["ns"] for op in plan.ops if op["op"] == "iptables"}


def _iptables_restore(ns: str, text: str) -> None:
    proc = topology.popen_in(ns, ["iptables-restore"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(text, timeout=30)
    if proc.returncode:
        raise ShaperError(f"iptables-restore in {ns}: {err.strip().splitlines()[0] if err.strip() else proc.returncode}")


class Shaper:
    """Applies a plan and guarantees teardown (context manager, idempotent, signal-safe)."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.delaylines: dict[str, subprocess.Popen] = {}
        self._configs: dict[str, str] = {}
        self._applied = False
        self._lock = threading.Lock()

    # -- apply
    def apply(self) -> "Shaper":
        try:
            self._apply(self.plan, previous=None)
        except BaseException:
            self.teardown()
            raise
        self._applied = True
        return self

    def update(self, plan: Plan) -> None:
        """Move to another plan of the same topology (a scheduled change): replace what differs."""
        with self._lock:
            old, self.plan = self.plan, plan
            self._apply(plan, previous=old)

    def _apply(self, plan: Plan, previous: Plan | None) -> None:
        by_ns: dict[str, list[dict]] = {}
        for op in plan.ops:
            if op["op"] in ("gso_max_segs", "htb_root", "htb_class", "pfifo", "netem"):
                by_ns.setdefault(op["ns"], []).append(op)
        if previous is not None:
            self._clear_qdiscs(previous.devices() - plan.devices())
        for ns, ops in by_ns.items():
            with IPRoute(netns=ns, flags=0) as ipr:
                for op in ops:
                    try:
                        _tc(ipr, op)
                    except NetlinkError as err:
                        raise ShaperError(f"{op['op']} on {ns}/{op['dev']}: {err}") from None
        self._sync_delaylines(plan)
        for ns in _rule_namespaces(plan) | (_rule_namespaces(previous) if previous else set()):
            _iptables_restore(ns, iptables_restore_text([op for op in plan.ops if op.get("ns") == ns]))

    def _sync_delaylines(self, plan: Plan) -> None:
        wanted = {op["node"]: op for op in plan.ops if op["op"] == "delayline"}
        for node in list(self.delaylines):
            if node not in wanted or self._configs[node] != json.dumps(wanted[node]["queues"]):
                self._stop_delayline(node)
        for node, op in wanted.items():
            if node not in self.delaylines:
                self._start_delayline(op)

    def _start_delayline(self, op: dict[str, Any]) -> None:
        config = json.dumps({"run_id": self.plan.run_id, "queues": op["queues"]})
        proc = topology.popen_in(op["ns"], [sys.executable, "-m", "harness.delayline", config],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.delaylines[op["node"]] = proc
        self._configs[op["node"]] = json.dumps(op["queues"])
        ready = _readline(proc, READY_TIMEOUT_S)
        if ready.strip() != "ready":
            err = proc.stderr.read() if proc.poll() is not None else ""
            raise ShaperError(f"delayline for {op['node']}: did not start ({(err.strip().splitlines() or ['timeout'])[-1]})")

    def _stop_delayline(self, node: str) -> None:
        proc = self.delaylines.pop(node)
        self._configs.pop(node, None)
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream:
                stream.close()

    def _clear_qdiscs(self, devices: set[tuple[str, str]]) -> None:
        existing = set(netns.listnetns())
        for ns, dev in devices:
            if ns not in existing:
                continue
            with IPRoute(netns=ns, flags=0) as ipr:
                idx = ipr.link_lookup(ifname=dev)
                if idx:
                    ipr.link("set", index=idx[0], gso_max_segs=DEFAULT_GSO_SEGS)
                    try:
                        ipr.tc("del", index=idx[0], handle=0, parent=0xFFFFFFFF)
                    except NetlinkError:
                        pass  # no root qdisc of ours: nothing to remove

    # -- teardown
    def teardown(self) -> None:
        """Stop delay lines, flush rules, remove qdiscs. Safe to call twice, or after the
        namespaces are already gone."""
        with self._lock:
            for node in list(self.delaylines):
                self._stop_delayline(node)
            existing = set(netns.listnetns())
            for ns in _rule_namespaces(self.plan) & existing:
                _iptables_restore(ns, iptables_restore_text([]))
            self._clear_qdiscs(self.plan.devices())
            self._applied = False

    def __enter__(self) -> "Shaper":
        return self.apply()

    def __exit__(self, *exc) -> None:
        self.teardown()

    def run_schedule(self, profile: Profile, topo: Topology, stop: threading.Event) -> threading.Thread:
        """Apply the profile's scheduled changes at their times (a daemon thread; set ``stop``)."""
        start = time.monotonic()

        def loop() -> None:
            for at_s in profile.change_times():
                if stop.wait(max(0.0, start + at_s - time.monotonic())):
                    return
                self.update(build_plan(profile, topo, self.plan.backend, at_s=at_s))
        thread = threading.Thread(target=loop, name="shaper-schedule", daemon=True)
        thread.start()
        return thread


def _readline(proc: subprocess.Popen, timeout_s: float) -> str:
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    return out[0] if out else ""


@dataclass
class signals_raise:
    """Context manager: SIGTERM (and SIGHUP) raise SystemExit so `finally` blocks and context
    managers run their teardown; SIGINT already raises KeyboardInterrupt."""
    signums: tuple = (signal.SIGTERM, signal.SIGHUP)
    _old: dict = field(default_factory=dict)

    def __enter__(self):
        owner = os.getpid()

        def handler(signum, frame):
            if os.getpid() != owner:
                # a forked child (pyroute2 opens netns sockets from short-lived forks) must not
                # unwind the parent's stack and run its teardown: just die as the default would
                os._exit(128 + signum)
            raise SystemExit(128 + signum)
        if threading.current_thread() is threading.main_thread():
            for s in self.signums:
                self._old[s] = signal.signal(s, handler)
        return self

    def __exit__(self, *exc):
        for s, old in self._old.items():
            signal.signal(s, old)


@contextlib.contextmanager
def emulate(profile: Profile, n_workers: int, run_id: str | None = None,
            backend: str | None = None) -> Iterator[tuple[Topology, Shaper]]:
    """``with emulate(profile, 8) as (topo, shaper):`` topology + shaping + schedule, all torn down on exit."""
    topo = Topology.create(run_id or topology.new_run_id(), n_workers)
    try:
        with signals_raise():
            plan = build_plan(profile, topo, backend or probe_backend())
            with Shaper(plan) as shaper:
                stop = threading.Event()
                shaper.run_schedule(profile, topo, stop)
                try:
                    yield topo, shaper
                finally:
                    stop.set()
    finally:
        topo.destroy()


# ---- show: the live kernel state as a profile document ------------------------------------------

def iptables_save(ns: str, counters: bool = False) -> str:
    argv = ["iptables-save"] + (["-c"] if counters else [])
    proc = topology.popen_in(ns, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=30)
    if proc.returncode:
        raise ShaperError(f"iptables-save in {ns}: {err.strip()}")
    return out


def _htb_rate_and_limit(ipr: IPRoute, dev: str) -> tuple[float | None, int | None]:
    idx = ipr.link_lookup(ifname=dev)
    if not idx:
        return None, None
    rate = limit = None
    for cls in ipr.get_classes(index=idx[0]):
        if cls.get_attr("TCA_KIND") == "htb":
            opts = cls.get_attr("TCA_OPTIONS")
            rate = (opts.get_attr("TCA_HTB_RATE64") or opts.get_attr("TCA_HTB_PARMS")["rate"]) * 8.0
    for qd in ipr.get_qdiscs(index=idx[0]):
        if qd.get_attr("TCA_KIND") == "pfifo":
            limit = qd.get_attr("TCA_OPTIONS")["limit"]
    return rate, limit


def _delayline_configs(rt: str) -> dict[int, dict[str, Any]]:
    """Queue number -> queue config, read from the running delay-line processes' argv."""
    queues = {}
    for pid in topology.ns_pids(rt):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().decode().split("\0")
        except OSError:
            continue
        if "harness.delayline" in argv:
            for q in json.loads(argv[argv.index("harness.delayline") + 1])["queues"]:
                queues[q["num"]] = q
    return queues


def _loss_by_port(saved: str) -> dict[tuple[str, str], float]:
    """(port, 'up'|'down') -> drop probability, from iptables-save output."""
    out = {}
    for line in saved.splitlines():
        parts = line.split()
        if "--probability" in parts and parts[-1] == "DROP":
            flag, port = parts[2], parts[3]
            out[(port, "up" if flag == "-i" else "down")] = float(parts[parts.index("--probability") + 1])
    return out


def _dir_doc(rate, limit, loss, queue) -> dict[str, Any]:
    doc = LinkDir(rate_bit_s=rate, loss_frac=loss or 0.0).to_doc()
    if queue:
        if queue["delay_us"]:
            doc["delay"] = units.format_time(queue["delay_us"] / 1e6)
        if queue["jitter_us"]:
            doc["jitter"] = units.format_time(queue["jitter_us"] / 1e6)
        if queue.get("ge"):
            doc["burst_loss"] = {k: units.format_percent(v) for k, v in zip(("p", "r", "bad_loss", "good_loss"), queue["ge"])}
    if limit is not None and limit != DEFAULT_LEAF_LIMIT:
        doc["limit"] = limit
    return doc


def show(run_id: str) -> dict[str, Any]:
    """Read a live run's shaping (fallback backend) back into a document that
    :func:`harness.profiles.from_doc` accepts (so `show` output can be applied again)."""
    rt = topology.ns_name(run_id, "rt")
    if rt not in netns.listnetns():
        raise ShaperError(f"run: {run_id!r} has no live namespaces (see `harness clean --list`)")
    nodes = sorted((m.group(2) for m in map(topology.NS_PATTERN.match, netns.listnetns())
                    if m and m.group(1) == run_id and m.group(2) not in ("rt", "probe")),
                   key=lambda n: -1 if n == "learner" else int(n[1:]))
    loss = _loss_by_port(iptables_save(rt))
    queues = _delayline_configs(rt)
    doc: dict[str, Any] = {"name": f"live-{run_id}", "description": f"kernel state of run {run_id}",
                           "source": "harness show (fallback backend readback)", "defaults": {}, "workers": {}}
    with IPRoute(netns=rt, flags=0) as rti:
        for name in nodes:
            index = 0 if name == "learner" else int(name[1:])
            port = f"p{index}"
            with IPRoute(netns=topology.ns_name(run_id, name), flags=0) as ipr:
                up = _dir_doc(*_htb_rate_and_limit(ipr, "eth0"), loss.get((port, "up")), queues.get(2 * index))
            down = _dir_doc(*_htb_rate_and_limit(rti, port), loss.get((port, "down")), queues.get(2 * index + 1))
            link = {"up": up, "down": down}
            if name == "learner":
                doc["learner"] = link
            else:
                doc["workers"][name] = link
    return doc
