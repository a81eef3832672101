"""The cost model's network: the time of a TCP stream over each learner-worker path (pure).

Bytes / goodput (`goodput_ratio`: 95.6 % of the line rate at a 1500-byte MTU, what HTB gave on a
veth), the path's one-way delay, the slow-start ramp after an idle period longer than the RTO
(Linux `tcp_slow_start_after_idle`: the window halves per RTO of idle), and for lossy links a loss
ceiling: Reno's rate <= MSS / RTT * sqrt(3/2) / sqrt(p) (Mathis et al. 1997), CUBIC's response
function (Ha, Rhee, Xu 2008) where it is higher, none for BBR. A shared learner link (a profile's
`learner: {rate: ...}`) carries every worker's copy (star fan-out), or a relay tree forwards it; the
update takes the slowest worker's transfer (max over links).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

MTU_BYTES = 1500
IP_TCP_HEADER_BYTES = 52       # IPv4 20 + TCP 20 + the timestamp option 12 (Linux default): MSS 1448
ETHERNET_HEADER_BYTES = 14     # what HTB counts on a veth besides the IP packet
INITIAL_WINDOW_SEGMENTS = 10   # Linux initcwnd (RFC 6928)
RTO_MIN_S = 0.2                # Linux TCP_RTO_MIN: a connection idle longer than RTO restarts slow start
SEND_BUFFER_BYTES = 4 << 20    # Linux tcp_wmem max (default): a blocking send returns this much early
MIN_RTT_S = 1e-3               # a "0 ms" link still queues: the RTT floor under the loss ceiling
MATHIS_C = math.sqrt(1.5)      # Mathis et al. 1997, periodic loss, no delayed ACKs
CUBIC_C, CUBIC_BETA = 0.4, 0.7 # Linux CUBIC (RFC 9438): window growth constant, multiplicative decrease
CONGESTION_CONTROLS = ("cubic", "reno", "bbr")
SEND_MODES = ("blocking", "background")


def goodput_ratio(mtu: int = MTU_BYTES) -> float:
    """Payload bytes per byte on the link at this MTU: (MTU - 52) / (MTU + 14) = 95.6 % at 1500."""
    return (mtu - IP_TCP_HEADER_BYTES) / (mtu + ETHERNET_HEADER_BYTES)



@dataclass(frozen=True)
class Access:
    """One direction of one node's access link (as in a WAN profile). rate None: unshaped."""
    rate_bit_s: float | None = None
    delay_s: float = 0.0
    loss_frac: float = 0.0


@dataclass(frozen=True)
class Node:
    up: Access = Access()      # node -> network
    down: Access = Access()    # network -> node


@dataclass(frozen=True)
class Path:
    """A one-way TCP path between two nodes: its bottleneck rate (not shared), one-way delay, RTT, loss."""
    rate_bit_s: float | None
    delay_s: float
    rtt_s: float
    loss_frac: float


def path(src: Node, dst: Node, rate_share: float = 1.0) -> Path:
    rates = [r for r in ((src.up.rate_bit_s or 0) * rate_share if src.up.rate_bit_s else None,
                         dst.down.rate_bit_s) if r]
    loss = 1 - (1 - src.up.loss_frac) * (1 - dst.down.loss_frac)
    return Path(min(rates) if rates else None, src.up.delay_s + dst.down.delay_s,
                src.up.delay_s + dst.down.delay_s + dst.up.delay_s + src.down.delay_s, loss)


@dataclass(frozen=True)
class Network:
    """The learner, its workers, and how an update reaches them.

    `learner.up.rate_bit_s` set: the learner's own link is shaped and every copy of an update
    shares it (one uplink for N workers); unset: each worker's own link is the bottleneck (the
    paper's testbed: 62.5 Mbit/s per worker link). `relay_fanout` k: the learner sends to k
    workers, each forwards to k more (in chunks, cut-through), instead of a star."""
    learner: Node
    workers: tuple[Node, ...]
    relay_fanout: int | None = None
    relay_chunk_bytes: int = 1 << 20
    mtu: int = MTU_BYTES
    cc: str = "cubic"
    window_bytes: int | None = None    # the receive window's cap on rate x RTT (None: autotuning keeps up)
    send_buffer_bytes: int = SEND_BUFFER_BYTES   # a blocking send returns once the rest fits in here

    def __post_init__(self):
        if not self.workers:
            raise ValueError("a network needs at least one worker")
        if self.cc not in CONGESTION_CONTROLS:
            raise ValueError(f"congestion control {self.cc!r} is not one of {', '.join(CONGESTION_CONTROLS)}")
        if self.relay_fanout is not None and self.relay_fanout < 1:
            raise ValueError(f"relay fan-out must be >= 1, got {self.relay_fanout}")

    @classmethod
    def uniform(cls, workers: int, rate_bit_s: float | None, delay_s: float = 0.0, loss_frac: float = 0.0,
                learner_rate_bit_s: float | None = None, **kw) -> "Network":
        """N identical worker links (rate, one-way delay and loss each way); the learner's link
        unshaped unless `learner_rate_bit_s`."""
        w = Access(rate_bit_s, delay_s, loss_frac)
        learner = Access(learner_rate_bit_s)
        return cls(Node(learner, learner), (Node(w, w),) * workers, **kw)

    @classmethod
    def from_profile(cls, profile, workers: int, window: tuple[float, float] | None = None, **kw) -> "Network":
        """A `harness.net.profiles.Profile` at time 0 (burst loss counts as its mean loss, a traced
        direction as its trace's mean rate: over `window`, (start, end) seconds into the trace, where
        given, e.g. the part of it a run's updates ran over; else over the whole loop)."""
        def rate(d) -> float | None:
            if d.trace is None:
                return d.rate_bit_s
            trace = d.trace.load()
            return trace.mean_rate(*window) if window else trace.stats()["mean_bit_s"]

        def node(name: str) -> Node:
            link = profile.link(name)
            return Node(*(Access(rate(d), d.delay_s, d.burst_loss.mean_loss() if d.burst_loss else d.loss_frac)
                          for d in (link.up, link.down)))
        return cls(node("learner"), tuple(node(f"w{i}") for i in range(1, workers + 1)), **kw)

    def scaled(self, factor: float) -> "Network":
        """The same network with every link rate times ``factor`` (an unshaped direction stays
        unshaped; delay, loss and the rest stay): what `profiles.scaled` does to a profile's links."""
        def node(n: Node) -> Node:
            return Node(*(replace(a, rate_bit_s=None if a.rate_bit_s is None else a.rate_bit_s * factor)
                          for a in (n.up, n.down)))
        return replace(self, learner=node(self.learner), workers=tuple(node(w) for w in self.workers))

    @property
    def n(self) -> int:
        return len(self.workers)

    @property
    def shared_uplink(self) -> bool:
        return self.learner.up.rate_bit_s is not None


def loss_ceiling_Bps(p: Path, cc: str, mtu: int = MTU_BYTES) -> float:
    """Goodput ceiling of one TCP flow on a lossy path, bytes/s (inf without loss, or under BBR)."""
    if p.loss_frac <= 0 or cc == "bbr":
        return math.inf
    mss, rtt = mtu - IP_TCP_HEADER_BYTES, max(p.rtt_s, MIN_RTT_S)
    reno = mss / rtt * MATHIS_C / math.sqrt(p.loss_frac)
    if cc == "reno":
        return reno
    # CUBIC's average window in segments: (C (3 + b) / (4 (1 - b)))^(1/4) (RTT / p)^(3/4), b = 1 - beta
    b = 1 - CUBIC_BETA
    window = (CUBIC_C * (3 + b) / (4 * (1 - b))) ** 0.25 * (rtt / p.loss_frac) ** 0.75
    return max(reno, window * mss / rtt)


def flow_rate_Bps(p: Path, net: Network, share_bit_s: float | None = None) -> float:
    """Payload bytes/s of one TCP flow on `p` (optionally capped by a share of a shared link)."""
    line = min(r for r in (p.rate_bit_s, share_bit_s, math.inf) if r is not None)
    rate = line / 8 * goodput_ratio(net.mtu) * (1 - p.loss_frac)   # lost segments are sent twice
    rate = min(rate, loss_ceiling_Bps(p, net.cc, net.mtu))
    if net.window_bytes:
        rate = min(rate, net.window_bytes / max(p.rtt_s, MIN_RTT_S))
    return rate


def restart_window(bdp: float, idle_s: float, rtt_s: float, mtu: int = MTU_BYTES) -> float:
    """The congestion window (bytes) a flow restarts with after `idle_s` of silence (Linux
    `tcp_cwnd_restart`, `tcp_slow_start_after_idle` on): halved once per RTO of idle beyond the
    first (RTO ~ RTT + 200 ms), never below the initial window; a window covering the path's
    bandwidth-delay product before the pause."""
    iw = INITIAL_WINDOW_SEGMENTS * (mtu - IP_TCP_HEADER_BYTES)
    rto = RTO_MIN_S + rtt_s
    if idle_s <= rto:
        return max(iw, bdp)
    return max(iw, bdp / 2 ** min(64, math.ceil(idle_s / rto) - 1))


def stream_s(nbytes: float, rate_Bps: float, p: Path, mtu: int = MTU_BYTES, idle_s: float = 0.0) -> float:
    """Seconds from the first byte sent to the last byte received: nbytes / rate + the one-way
    delay, plus, after `idle_s` of silence, the slow start from the restart window back up to the
    path's bandwidth-delay product (the window doubles every RTT)."""
    if nbytes <= 0:
        return 0.0
    if math.isinf(rate_Bps):
        return p.delay_s
    t = nbytes / rate_Bps + p.delay_s
    if idle_s > 0 and p.rtt_s > 0:
        bdp = rate_Bps * p.rtt_s
        w = restart_window(bdp, idle_s, p.rtt_s, mtu)
        if bdp > w:
            rounds = math.ceil(math.log2(bdp / w))
            ramp_bytes = w * (2 ** rounds - 1)
            if nbytes <= ramp_bytes:     # every flight but the last waits one RTT for its ACKs
                return (math.ceil(math.log2(nbytes / w + 1)) - 1) * p.rtt_s + nbytes / rate_Bps + p.delay_s
            t = rounds * p.rtt_s + (nbytes - ramp_bytes) / rate_Bps + p.delay_s
    return t


@dataclass(frozen=True)
class Transfer:
    seconds: float
    bottleneck: str        # which link set the time
    bytes_out: int         # bytes the sender side (learner) wrote, all copies, frames included


def fan_out(nbytes: int, net: Network, idle_s: float = 0.0) -> Transfer:
    """One message of `nbytes` (frame included) from the learner to every worker: the slowest
    worker's arrival (star, max over links; a shared learner uplink is split fairly), or the
    deepest leaf of a relay tree."""
    if net.relay_fanout:
        return _relay(nbytes, net, idle_s)
    n = net.n
    share = net.learner.up.rate_bit_s / n if net.shared_uplink else None
    times = []
    for i, w in enumerate(net.workers):
        p = path(net.learner, w)
        times.append((stream_s(nbytes, flow_rate_Bps(p, net, share), p, net.mtu, idle_s), f"w{i + 1}"))
    seconds, slowest = max(times)
    own = path(net.learner, net.workers[0])
    where = ("learner uplink (shared by %d)" % n if share is not None and (own.rate_bit_s is None or share < own.rate_bit_s)
             else f"{slowest} link")
    return Transfer(seconds, where, nbytes * n)


def fan_in(nbytes: int, net: Network, idle_s: float = 0.0) -> Transfer:
    """One message of `nbytes` from every worker to the learner (rollouts): the slowest arrival."""
    if nbytes <= 0:
        return Transfer(0.0, "-", 0)
    share = net.learner.down.rate_bit_s / net.n if net.learner.down.rate_bit_s is not None else None
    times = []
    for i, w in enumerate(net.workers):
        p = path(w, net.learner)
        times.append((stream_s(nbytes, flow_rate_Bps(p, net, share), p, net.mtu, idle_s), f"w{i + 1}"))
    seconds, slowest = max(times)
    return Transfer(seconds, "learner downlink (shared)" if share is not None else f"{slowest} uplink", nbytes * net.n)


def tree_depth(n: int, k: int) -> int:
    """Levels of a k-ary relay tree under the learner holding n workers."""
    depth, reach, level = 0, 0, 1
    while reach < n:
        level *= k
        reach += level
        depth += 1
    return depth


def _relay(nbytes: int, net: Network, idle_s: float) -> Transfer:
    """Relay tree, fan-out k: the learner sends k copies, every inner worker forwards k copies over
    its own uplink, chunk by chunk. Time = the slowest hop's stream + the pipeline's fill (one chunk
    per extra level) + every level's one-way delay. Homogeneous workers (w1's links) assumed."""
    k, n = net.relay_fanout, net.n
    w = net.workers[0]
    first = path(net.learner, w)
    hop = path(w, w)   # worker -> worker: one's uplink, the other's downlink
    first_rate = flow_rate_Bps(first, net, net.learner.up.rate_bit_s / min(k, n) if net.shared_uplink else None)
    depth = tree_depth(n, k)
    relay_rate = flow_rate_Bps(hop, net, w.up.rate_bit_s / k if w.up.rate_bit_s else None) if depth > 1 else math.inf
    rate = min(first_rate, relay_rate)
    slowest = first if first_rate <= relay_rate else hop
    body = stream_s(nbytes, rate, replace(slowest, delay_s=0.0), net.mtu, idle_s)
    fill = (depth - 1) * min(nbytes, net.relay_chunk_bytes) / rate if not math.isinf(rate) else 0.0
    delay = first.delay_s + (depth - 1) * hop.delay_s
    where = "learner uplink" if first_rate <= relay_rate else "relay uplinks"
    return Transfer(body + fill + delay, f"{where} (tree k={k}, depth {depth})", nbytes * min(k, n))

