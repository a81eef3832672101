"""The shaping plan: profile + topology -> a list of operations as plain data (pure).

Build, then run: :func:`build_plan` turns a :class:`~harness.net.profiles.Profile` and a
:class:`~harness.net.topology.Topology` into a :class:`Plan` without touching the kernel (``--dry-run``
prints it; ``tests/golden/`` holds the expected plans); :class:`harness.net.shaper.Shaper` applies it.
This module imports neither pyroute2 nor torch (a test checks), so plans build anywhere.

Where each direction of node ``i``'s access link (node ``eth0`` <-> router ``p<i>``) is shaped:

* ``up`` (node -> network): HTB rate on the node's ``eth0`` egress.
* ``down`` (network -> node): HTB rate on the router's ``p<i>`` egress.

Backends (chosen by :func:`harness.net.backend.decide`, recorded in the plan):

* ``netem`` (kernels with sch_netem): HTB class for the rate with burst = 2 ms x rate, and a
  netem child for delay / jitter / loss with ``limit`` sized to the bandwidth-delay product.
  Gilbert-Elliott loss is planned but pyroute2 0.9 does not wrap netem loss models, so
  applying such a plan fails (documented gap).
* ``fallback`` (this machine: no sch_netem): HTB for the rate (pfifo leaf with the profile's
  queue limit); random loss with the iptables ``statistic`` match; delay and jitter (and
  Gilbert-Elliott loss) in a userspace NFQUEUE delay line (:mod:`harness.net.delayline`), one
  process per node link, always on a *receive* path (DESIGN.md: on the sender's OUTPUT chain
  TCP collapses) and always *after* the rate limiter (a delay line in front of HTB releases
  bursts that overflow the HTB queue: 48 % goodput at 1 Gbit/s + 10 ms, measured)::

      router mangle PREROUTING  -i p<i>  statistic DROP         (up loss of node i)
      router mangle FORWARD     -i p<i>  NFQUEUE 2i   bypass    (up delay: after HTB on node eth0)
      router filter FORWARD     -o p<i>  statistic DROP         (down loss of node i)
      node   filter INPUT       -i eth0  NFQUEUE 2i+1 bypass    (down delay: after HTB on p<i>)

  Each delay-line queue carries a ``seed`` derived from the run id and the queue number, so a
  run's jitter and burst-loss draws are reproducible. A direction has netfilter rules exactly when
  it is impaired beyond its rate (``LinkDir.impaired``; ``Profile.impaired`` over a run's links and
  schedule is what the preflight, harness/net/doctor.py, reads to require iptables).

Traces (:mod:`harness.net.traces`) are part of the plan: ``traces`` lists, per traced link
direction, the trace, its step interval, its loop period and every step of one period
(``[at_s, rate_bit_s, delay_s|null, loss_frac|null]``). The operations are the state at ``at_s``;
the shaper moves between steps by changing the HTB class in place (``replace-class``: the same
class gets the new rate, no gap where traffic would pass unshaped).
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.net.backend import validate
from harness.net.profiles import LinkDir, LinkSpec, Profile, TraceRef

if TYPE_CHECKING:   # topology imports pyroute2; a plan only reads names off it
    from harness.net.topology import Node, Topology

MTU_BYTES = 1500
MSS_BYTES = 1448
GSO_BURST_S = 0.001          # a GSO skb may hold at most ~1 ms of the link rate
BURST_S = 0.002              # HTB burst/cburst = 2 ms of the rate (DESIGN: 1-5 ms x rate)
MIN_BURST_BYTES = 2 * 1514
HTB_QUANTUM = 60000          # one class per device: quantum only matters to silence r2q warnings
DEFAULT_LEAF_LIMIT = 1000    # packets, the veth txqueuelen a plain HTB leaf would get
SIZING_RATE_BIT_S = 1e9      # what an unlimited direction is assumed to carry when sizing queues
MAX_QUEUE_PKTS = 65536
DELAYLINE_SLACK_S = 0.05     # scheduling lag a delay line's kernel queue absorbs (busy 2-core box)


@dataclass
class Plan:
    run_id: str
    profile: str
    backend: str
    at_s: float
    ops: list[dict[str, Any]] = field(default_factory=list)
    traces: list[dict[str, Any]] = field(default_factory=list)   # the schedule of each traced link direction

    def to_json(self) -> str:
        """One operation per line (readable golden diffs); ``json.loads`` gives the plan back."""
        head = json.dumps({"run_id": self.run_id, "profile": self.profile, "backend": self.backend,
                           "at_s": self.at_s}, sort_keys=True)[:-1]
        ops = ",\n  ".join(json.dumps(op, sort_keys=True) for op in self.ops)
        text = f'{head}, "ops": [\n  {ops}\n]' if self.ops else f'{head}, "ops": []'
        if self.traces:     # absent without traces: the golden plans of static profiles stay as they were
            text += ', "traces": [\n  ' + ",\n  ".join(json.dumps(t, sort_keys=True) for t in self.traces) + "\n]"
        return text + "}\n"

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        doc = json.loads(text)
        return cls(run_id=doc["run_id"], profile=doc["profile"], backend=doc["backend"], at_s=doc["at_s"], ops=doc["ops"],
                   traces=doc.get("traces", []))

    def devices(self) -> set[tuple[str, str]]:
        return {(op["ns"], op["dev"]) for op in self.ops if "dev" in op}


def sizing(link: LinkDir) -> LinkDir:
    """The link that sizes queues: a traced one at its trace's peak rate and delay, so that queue
    sizes (and the delay line's configuration) stay put while the trace steps (a new delay-line
    configuration restarts the process; a rate step must only change the HTB class)."""
    if link.trace is None:
        return link
    t = link.trace.load()
    return LinkDir(rate_bit_s=max(t.rate_bit_s), delay_s=max(t.delay_s) if t.delay_s else link.delay_s,
                   jitter_s=link.jitter_s)


def bdp_packets(link: LinkDir, factor: float = 1.5) -> int:
    """Packets in flight over ``rate x (delay + jitter)``, with headroom, at least 1000."""
    link = sizing(link)
    rate = link.rate_bit_s or SIZING_RATE_BIT_S
    pkts = rate * (link.delay_s + link.jitter_s) / (8 * MTU_BYTES)
    return int(min(MAX_QUEUE_PKTS, max(DEFAULT_LEAF_LIMIT, math.ceil(pkts * factor))))


def delay_queue_packets(link: LinkDir) -> int:
    """Kernel queue for a delay line: what arrives at the link rate during delay + jitter, plus
    DELAYLINE_SLACK_S of scheduling lag (the process may wait for a CPU), twice over."""
    link = sizing(link)
    rate = link.rate_bit_s or SIZING_RATE_BIT_S
    pkts = rate * (link.delay_s + link.jitter_s + DELAYLINE_SLACK_S) / (8 * MTU_BYTES)
    return int(min(MAX_QUEUE_PKTS, max(DEFAULT_LEAF_LIMIT, math.ceil(2 * pkts))))


def gso_segments(rate_bit_s: float) -> int:
    """Largest GSO skb (in segments) worth ~GSO_BURST_S at the rate, 1 .. 64. Local TCP builds
    GSO super-packets even with device GSO off (software GSO splits them only after the qdisc),
    so HTB would release a 64 KB skb at once: 0.5 s of a 1 Mbit/s link. One segment per skb
    at every rate would cost CPU at 1 Gbit/s, hence the cap scales with the rate."""
    return max(1, min(64, int(rate_bit_s / 8 * GSO_BURST_S / MSS_BYTES)))


def delayline_seed(run_id: str, queue_num: int) -> int:
    """The random seed of one delay-line queue: fixed by the run id and the queue (32 bits)."""
    return int.from_bytes(hashlib.sha256(f"{run_id}/{queue_num}".encode()).digest()[:4], "big")


def _htb_ops(ns: str, dev: str, link: LinkDir) -> list[dict[str, Any]]:
    rate = link.rate_bit_s
    burst = max(MIN_BURST_BYTES, int(rate / 8 * BURST_S))
    return [{"op": "gso_max_segs", "ns": ns, "dev": dev, "segs": gso_segments(rate)},
            {"op": "htb_root", "ns": ns, "dev": dev, "handle": "1:", "default": "1:1"},
            {"op": "htb_class", "ns": ns, "dev": dev, "classid": "1:1", "parent": "1:",
             "rate_bit_s": rate, "burst_bytes": burst, "cburst_bytes": burst, "quantum": HTB_QUANTUM}]


def _netem_dir(ns: str, dev: str, link: LinkDir) -> list[dict[str, Any]]:
    ops = _htb_ops(ns, dev, link) if link.rate_bit_s else []
    if link.impaired:   # anything beyond a rate is a netem qdisc here (a netfilter rule on the fallback)
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


def _delay_queue(run_id: str, num: int, direction: str, link: LinkDir, ns: str) -> dict[str, Any] | None:
    if not (link.delay_s or link.jitter_s or link.burst_loss):
        return None
    ge = link.burst_loss
    return {"num": num, "dir": direction, "netns": ns, "delay_us": round(link.delay_s * 1e6),
            "jitter_us": round(link.jitter_s * 1e6), "maxlen": delay_queue_packets(link),
            "ge": None if ge is None else [ge.p_frac, ge.r_frac, ge.bad_loss_frac, ge.good_loss_frac],
            "seed": delayline_seed(run_id, num)}


def _fallback_node(topo: Topology, node: Node, spec: LinkSpec) -> list[dict[str, Any]]:
    rt = topo.router_ns
    ops = _fallback_rate(node.netns, node.ifname, spec.up) + _fallback_rate(rt, node.port, spec.down)
    ops += _loss_rule(rt, "mangle", "PREROUTING", ["-i", node.port], spec.up)
    ops += _loss_rule(rt, "filter", "FORWARD", ["-o", node.port], spec.down)
    queues = [q for q in (_delay_queue(topo.run_id, 2 * node.index, "up", spec.up, rt),
                          _delay_queue(topo.run_id, 2 * node.index + 1, "down", spec.down, node.netns)) if q]
    for q in queues:
        where = (["mangle", "FORWARD", "-i", node.port] if q["dir"] == "up"
                 else ["filter", "INPUT", "-i", node.ifname])
        ops.append({"op": "iptables", "ns": q["netns"], "table": where[0], "chain": where[1],
                    "rule": where[2:] + ["-j", "NFQUEUE", "--queue-num", str(q["num"]), "--queue-bypass"]})
    if queues:
        ops.append({"op": "delayline", "ns": rt, "node": node.name, "queues": queues})
    return ops


def trace_schedule(node: str, direction: str, link: LinkDir) -> dict[str, Any]:
    """One traced link direction's steps over one loop period of its trace."""
    ref = link.trace
    return {"node": node, "dir": direction, "trace": ref.file, "interval_s": ref.interval_s,
            "period_s": ref.load().period_s, "steps": [list(s) for s in _steps(ref)]}


@functools.lru_cache(maxsize=64)
def _steps(ref: TraceRef) -> tuple[tuple, ...]:
    """Computed once per trace and interval: every plan of a run lists them (a step's plan too)."""
    trace = ref.load()
    return tuple((s["at_s"], s["rate_bit_s"], s.get("delay_s"), s.get("loss_frac"))
                 for s in trace.steps(ref.interval_s, trace.period_s))


def build_plan(profile: Profile, topo: Topology, backend: str, at_s: float = 0.0) -> Plan:
    """The operations that make ``topo``'s links behave like ``profile`` at time ``at_s``.
    An unknown backend raises ValueError naming the valid ones."""
    validate(backend)
    plan = Plan(run_id=topo.run_id, profile=profile.name, backend=backend, at_s=at_s)
    for node in topo.nodes.values():
        spec = profile.link(node.name, at_s)
        plan.traces += [trace_schedule(node.name, d, link) for d, link in (("up", spec.up), ("down", spec.down))
                        if link.trace is not None]
        if backend == "netem":
            plan.ops += _netem_dir(node.netns, node.ifname, spec.up) + _netem_dir(topo.router_ns, node.port, spec.down)
        else:
            plan.ops += _fallback_node(topo, node, spec)
    # loss rules before queue rules inside a chain: a dropped packet never occupies a delay slot
    plan.ops.sort(key=lambda op: (op["op"] != "iptables", "NFQUEUE" in op.get("rule", [])))
    plan.ops.sort(key=lambda op: op["op"] == "delayline")
    return plan


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


# ---- the plan as shell commands (`harness profiles NAME --plan --tc`) --------------------------------

def _num(x: float) -> str:
    return f"{x:.10g}"


def _tc_op(op: dict[str, Any]) -> list[str]:
    """One operation as the ip/tc/iptables command(s) that would do the same (the shaper does it over
    netlink and iptables-restore); units as tc(8) prints them: bit (bit/s), b (bytes), us, %."""
    ns, dev = op.get("ns"), op.get("dev")
    kind = op["op"]
    if kind == "gso_max_segs":
        return [f"ip -n {ns} link set dev {dev} gso_max_segs {op['segs']}"]
    if kind == "htb_root":
        return [f"tc -n {ns} qdisc replace dev {dev} root handle {op['handle']} htb default {op['default'].split(':')[1]}"]
    if kind in ("htb_class", "replace-class"):
        return [f"tc -n {ns} class replace dev {dev} parent {op['parent']} classid {op['classid']} htb "
                f"rate {_num(op['rate_bit_s'])}bit burst {op['burst_bytes']}b cburst {op['cburst_bytes']}b "
                f"quantum {op['quantum']}"]
    where = "root" if op.get("parent") == "root" else f"parent {op.get('parent')}"
    if kind == "pfifo":
        return [f"tc -n {ns} qdisc replace dev {dev} {where} handle {op['handle']} pfifo limit {op['limit_pkts']}"]
    if kind == "netem":
        line = f"tc -n {ns} qdisc replace dev {dev} {where} handle {op['handle']} netem limit {op['limit_pkts']}"
        if op["delay_us"] or op["jitter_us"]:
            line += f" delay {op['delay_us']}us" + (f" {op['jitter_us']}us" if op["jitter_us"] else "")
        if op.get("gemodel"):   # [p, r, loss in bad (1-h), loss in good (1-k)], fractions
            line += " loss gemodel " + " ".join(f"{_num(f * 100)}%" for f in op["gemodel"])
        elif op["loss_pct"]:
            line += f" loss {_num(op['loss_pct'])}%"
        return [line]
    if kind == "iptables":
        return [f"ip netns exec {ns} iptables -t {op['table']} -A {op['chain']} {' '.join(op['rule'])}"]
    if kind == "delayline":
        # no tc command: the fallback's delay is a userspace process (harness/net/delayline.py) on the NFQUEUE
        return [f"# {op['node']} {q['dir']}: delay line on NFQUEUE {q['num']} in {q['netns']}: delay {q['delay_us']}us "
                f"jitter {q['jitter_us']}us" + (f" gemodel {q['ge']}" if q.get("ge") else "")
                + f", kernel queue {q['maxlen']} packets (python -m harness.net.delayline, run in {op['ns']})"
                for q in op["queues"]]
    raise ValueError(f"plan: no command for operation {kind!r}")


def tc_commands(plan: Plan) -> str:
    """The plan as the commands a tc user would type, one a line, in the plan's order (the
    namespaces and veths are the topology's: harness/net/topology.py builds them before)."""
    lines = [f"# {plan.profile} on the {plan.backend} backend, run {plan.run_id}, state at {_num(plan.at_s)} s: "
             "the namespaces and veths exist (harness/net/topology.py)"]
    for op in plan.ops:
        lines += _tc_op(op)
    for t in plan.traces:
        lines.append(f"# {t['node']} {t['dir']}: trace {t['trace']}, every {_num(t['interval_s'])} s the shaper "
                     f"replaces class 1:1's rate (and the delay, the loss) in place: {len(t['steps'])} steps per "
                     f"{_num(t['period_s'])} s loop")
    return "\n".join(lines) + "\n"
