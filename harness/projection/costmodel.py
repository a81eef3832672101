"""The cost model: seconds per update of a method at any scale, from first principles (pure, torch-free).

    seconds per update = rollout + train + encode + transfer + decode/replay (+ the harness's own work)

composed serially (pipelining depth 0) or overlapped (depth 1), where

- **bytes** come from the adapter's factor shapes (read by `trainers.model.models.lora_shapes` from the
  model instantiated on the meta device; this module only takes the list) and each method's real
  byte layout, re-derived here without torch and checked against the real encoders by the tests:
  `full`/`full-bf16`/`rank-R` ship a wire tensor table (`trainers/protocol/wire.py pack_tensors`), every
  compressor ships one `HLOC` container (`trainers/compress/container.py`: prefix, name, zlib'd JSON
  table, segments); every message is one frame of `FRAME_HEADER_BYTES`; and every TCP segment
  carries IP/TCP/Ethernet headers (`goodput_ratio`: 95.6 % of the line rate at a 1500-byte MTU,
  what HTB gave on a veth here);
- **transfer** is the time of a TCP stream over each learner-worker path: bytes / goodput, the
  path's one-way delay, the slow-start ramp after an idle period longer than the RTO (Linux
  `tcp_slow_start_after_idle`: the window halves per RTO of idle), and for lossy links a loss ceiling: Reno's
  rate <= MSS / RTT * sqrt(3/2) / sqrt(p) (Mathis et al. 1997), CUBIC's response function
  (Ha, Rhee, Xu 2008) where it is higher, none for BBR; a shared learner link (a profile's
  `learner: {rate: ...}`) carries every worker's copy (star fan-out), or a relay tree forwards it;
  the update takes the slowest worker's transfer (max over links);
- **compute** terms (rollout, train, encode, replay, overheads) are given (`--compute-s`) or fitted
  from a measured run's update table (`fit`).

The model and every assumption in it are written down in docs/COSTMODEL.md.
"""
from __future__ import annotations

import json
import math
import zlib
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping

from harness.results import compare
from trainers import events, spec

# ---- constants (each named once; tests check the ones that mirror another module) ----------------

FRAME_HEADER_BYTES = 44        # trainers/protocol/wire.py HEADER_BYTES (torch-importing module: duplicated, tested)
CONTAINER_PREFIX_BYTES = 6     # trainers/compress/container.py _PREFIX: magic "HLOC", version, name length
CONTAINER_TABLE_LEN_BYTES = 4  # ... then the u32 table length
TABLE_ZLIB_LEVEL = 6           # ... the JSON table is zlib-compressed at this level
TOPK_INDEX_BYTES = 4           # trainers/compress/topk.py _INDEX_BYTES
DELTA_HEADER_BYTES = 48        # trainers/compress/delta.py HEADER
DELTA_INDEX_BYTES = 4          # trainers/compress/delta.py GAP: one uint32 gap per changed element
# delta's bytes depend on the training run, so they are parameters (--opt delta_density=...,
# delta_compression=...): the fraction of the shipped adapter's elements that change per update and
# the codec's compressed / raw ratio. Defaults: the worst case (every element changes, no codec gain);
# harness run's updates table measures both (delta_density; payload_bytes_down / the raw pairs).
MODEL_OPTIONS = {"delta_density": 1.0, "delta_compression": 1.0}
SPAR_SIGMA_BYTES = 4           # trainers/compress/spar.py _SIGMA_BYTES
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "int8": 1, "int16": 2, "int32": 4, "int64": 8}  # trainers/protocol/dtypes.py

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
# A version number in the full methods' tensor-table meta ({"version": v}): its digits count, so
# one typical width stands in for every update.
TYPICAL_VERSION = 100


def goodput_ratio(mtu: int = MTU_BYTES) -> float:
    """Payload bytes per byte on the link at this MTU: (MTU - 52) / (MTU + 14) = 95.6 % at 1500."""
    return (mtu - IP_TCP_HEADER_BYTES) / (mtu + ETHERNET_HEADER_BYTES)


# ---- the adapter and what each method ships -----------------------------------------------------

Tensors = tuple[tuple[str, tuple[int, ...]], ...]
# A plugin compressor's own statement of its payload bytes for a layout at a budget (label or None):
# the cost model has no byte rule of its own for a compressor it has never seen, so it asks the
# compressor (`Compressor.stated_bytes`, wired in by harness/projection/inputs.py; this module stays pure).
StatedBytes = Callable[[Tensors, "str | None"], int]


@dataclass(frozen=True)
class Adapter:
    """A LoRA adapter's factors as (PEFT parameter name, shape), in registration order; A factors
    are (rank, d_in), B factors (d_out, rank). `stated`: plugin compressor name -> its StatedBytes."""
    tensors: Tensors
    rank: int
    model: str = ""
    stated: Mapping[str, StatedBytes] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_shapes(cls, shapes: Iterable[tuple[str, Iterable[int]]], rank: int, model: str = "",
                    stated: Mapping[str, StatedBytes] | None = None) -> "Adapter":
        return cls(tuple((n, tuple(int(d) for d in s)) for n, s in shapes), int(rank), model, dict(stated or {}))

    @property
    def n_params(self) -> int:
        return sum(math.prod(s) for _, s in self.tensors)

    def nbytes(self, dtype: str) -> int:
        return self.n_params * DTYPE_BYTES[dtype]

    def at_rank(self, rank: int) -> "Adapter":
        """The same adapter trained at another rank (the `rank-R` methods)."""
        def is_a(name: str, shape: tuple[int, ...]) -> bool:    # A: (rank, d_in); B: (d_out, rank)
            return ".lora_A." in name or ".lora_B." not in name and shape[0] == self.rank

        return Adapter(tuple((n, (rank, s[1]) if is_a(n, s) else (s[0], rank)) for n, s in self.tensors),
                       rank, self.model, self.stated)


def _json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def tensor_table_bytes(tensors: Tensors, dtype: str, meta: Mapping[str, Any] | None = None) -> int:
    """Bytes of `trainers/protocol/wire.py pack_tensors`: u32 table length, the JSON table, the raw tensors."""
    table = _json({"meta": dict(meta or {}), "tensors": [{"name": n, "dtype": dtype, "shape": list(s)}
                                                          for n, s in tensors]})
    return 4 + len(table) + sum(math.prod(s) for _, s in tensors) * DTYPE_BYTES[dtype]


def container_header_bytes(name: str, tensors: Tensors, segments: list[tuple[str, str, int]],
                           meta: Mapping[str, Any] | None = None) -> int:
    """Bytes of an `HLOC` payload before its body (`trainers/compress/container.py header_bytes`)."""
    table = {"tensors": [[n, list(s)] for n, s in tensors], "segments": [list(x) for x in segments],
             "meta": dict(meta or {})}
    return (CONTAINER_PREFIX_BYTES + len(name.encode("ascii")) + CONTAINER_TABLE_LEN_BYTES
            + len(zlib.compress(_json(table), TABLE_ZLIB_LEVEL)))


def container_bytes(name: str, tensors: Tensors, segments: list[tuple[str, str, int]],
                    meta: Mapping[str, Any] | None = None) -> int:
    return container_header_bytes(name, tensors, segments, meta) + sum(c * DTYPE_BYTES[d] for _, d, c in segments)


def method_options(method: str, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A compressor's options: the run spec's defaults (spec.COMPRESSOR_OPTIONS) under `options`,
    which may name them bare (`rank`) or as run parameters (`powersgd_rank`)."""
    if method not in spec.COMPRESSOR_OPTIONS:
        return {}
    out = {**spec.COMMON_OPTIONS, **(spec.BUDGET_OPTIONS if method in spec.BUDGETED else {}),
           **spec.COMPRESSOR_OPTIONS[method]}
    for key, value in (options or {}).items():
        bare = key[len(method) + 1:] if key.startswith(method + "_") else key
        if bare in out:
            out[bare] = value
    return out


def budget_bytes(adapter: Adapter, options: Mapping[str, Any]) -> int:
    """A budgeted compressor's payload cap (`BudgetedCompressor.budget_for`)."""
    if options.get("budget_bytes") is not None:
        return int(options["budget_bytes"])
    return int(spec.parse_budget(options["budget"]) * adapter.nbytes(options["reference_dtype"]))


def payload_bytes(method: str, adapter: Adapter, budget: str | None = None,
                  options: Mapping[str, Any] | None = None) -> int:
    """The update body one worker receives per update under `method` (exact for every method but
    `spar`, whose payload is its budget: the greedy selection fills it to within one triplet)."""
    spec.check_method(method)
    if method in spec.FULL_METHODS or spec.RANK_METHOD.match(method):
        rank = spec.RANK_METHOD.match(method)
        shipped = adapter.at_rank(int(rank.group(1))) if rank else adapter
        dtype = "fp32" if method == "full" else "bf16"     # full-bf16 and rank-R ship bf16 (hilo/methods.py)
        return tensor_table_bytes(shipped.tensors, dtype, {"version": TYPICAL_VERSION})
    if method in spec.DELTA_METHODS:   # header + codec(uint32 gaps + values) of the changed elements
        opts = {**MODEL_OPTIONS, "delta_dtype": spec.get("delta_dtype").default, **(options or {})}
        changed = opts["delta_density"] * adapter.n_params
        raw = changed * (DELTA_INDEX_BYTES + DTYPE_BYTES[opts["delta_dtype"]])
        return DELTA_HEADER_BYTES + math.ceil(raw * opts["delta_compression"])
    opts = method_options(method, options)
    if budget is not None:
        opts["budget"] = budget
    t, n = adapter.tensors, adapter.n_params
    if method == "identity":
        return container_bytes(method, t, [("values", opts["dtype"], n)])
    if method == "int8":   # trainers/compress/int8.py `plan`: dense if it fits, else the top blocks
        bs, cap = int(opts["block_size"]), budget_bytes(adapter, opts)
        dense = container_bytes(method, t, [("scales", "fp32", -(-n // bs)), ("q", "int8", n)], {"block_size": bs})
        if dense <= cap:
            return dense
        while True:
            nb = -(-n // bs)
            head = container_header_bytes(method, t, [("blocks", "int32", nb), ("scales", "fp32", nb),
                                                      ("q", "int8", nb * bs)], {"block_size": bs})
            k = (cap - head) // (bs + 8)
            if k >= 16 or bs == 1:
                break
            bs //= 2
        sparse = lambda k: container_bytes(method, t, [("blocks", "int32", k), ("scales", "fp32", k),  # noqa: E731
                                                       ("q", "int8", k * bs)], {"block_size": bs})
        k = max(0, min(k, nb))
        while k > 1 and sparse(k) > cap:   # zlib: the header bound can be a byte short
            k -= 1
        return sparse(k)
    if method == "powersgd" and opts["rank"] is None:
        # Per-factor ranks picked by energy to fit the budget (powersgd.py): the budget, to within one direction.
        return budget_bytes(adapter, opts)
    if method == "powersgd":
        ranks = [min(int(opts["rank"]), *s) for _, s in t]
        p = sum(k * s[0] for k, (_, s) in zip(ranks, t))
        q = sum(k * s[1] for k, (_, s) in zip(ranks, t))
        return container_bytes(method, t, [("p", opts["dtype"], p), ("q", opts["dtype"], q)], {"ranks": ranks})
    if method == "topk":
        cap, dtype = budget_bytes(adapter, opts), opts["dtype"]
        head = container_header_bytes(method, t, [("index", "int32", n), ("values", dtype, n)])
        k = min(n, max(0, (cap - head) // (DTYPE_BYTES[dtype] + TOPK_INDEX_BYTES)))
        while k > 1 and container_bytes(method, t, [("index", "int32", k), ("values", dtype, k)]) > cap:
            k -= 1                         # topk.py `_k`: zlib's header bound can be a byte short
        return container_bytes(method, t, [("index", "int32", k), ("values", dtype, k)])
    if method == "spar":
        cap, dtype = budget_bytes(adapter, opts), opts["dtype"]
        # A budget that buys every singular triplet of every factor ships them all, and no more.
        ks = [min(s) for _, s in t]
        everything = container_bytes(method, t, [
            ("counts", "int16", len(t)), ("sigma", "fp32", sum(ks)),
            ("left", dtype, sum(k * s[0] for k, (_, s) in zip(ks, t))),
            ("right", dtype, sum(k * s[1] for k, (_, s) in zip(ks, t)))])
        return min(cap, everything)
    if method in adapter.stated:      # a plugin compressor: its own statement, at this budget
        return int(adapter.stated[method](adapter.tensors, budget))
    raise ValueError(f"no byte rule for method {method!r}")  # a compressor added without one


# ---- links and TCP ---------------------------------------------------------------------------------

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
    def from_profile(cls, profile, workers: int, **kw) -> "Network":
        """A `harness.net.profiles.Profile` at time 0 (burst loss counts as its mean loss, a traced
        direction as its trace's mean rate)."""
        def rate(d) -> float | None:
            return d.trace.load().stats()["mean_bit_s"] if d.trace is not None else d.rate_bit_s

        def node(name: str) -> Node:
            link = profile.link(name)
            return Node(*(Access(rate(d), d.delay_s, d.burst_loss.mean_loss() if d.burst_loss else d.loss_frac)
                          for d in (link.up, link.down)))
        return cls(node("learner"), tuple(node(f"w{i}") for i in range(1, workers + 1)), **kw)

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


# ---- compute terms ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Codec:
    """A method's own compute per update: the learner's encode (compress, or pack the adapter),
    the learner's decode + optimizer step, and each worker's decode + step (or adapter load)."""
    encode_s: float = 0.0
    learner_replay_s: float = 0.0
    worker_replay_s: float = 0.0

    def scaled(self, factor: float) -> "Codec":
        return Codec(self.encode_s * factor, self.learner_replay_s * factor, self.worker_replay_s * factor)


@dataclass(frozen=True)
class Compute:
    """Compute per update, whatever the method: a worker's rollouts, the learner's training (forward
    + backward on every worker's rollouts), the harness's own per-update work on each side (hashes,
    framing and checksums, event files), and a method-specific `Codec` per variant label (a method
    without an entry gets `default_codec`)."""
    rollout_s: float
    train_s: float
    learner_other_s: float = 0.0
    worker_other_s: float = 0.0
    codecs: Mapping[str, Codec] = field(default_factory=dict)
    default_codec: Codec = Codec()
    # None: every process has its own processor (the paper's testbed). k: the learner and all the
    # workers share k cores (an emulated run on one box): N parallel rollouts take max(1, N / k)
    # times as long as one.
    shared_cores: int | None = None
    rollout_bytes: int = 0        # one worker's rollout message body
    # Workers whose rollouts `train_s` was measured on: the learner trains on every worker's batch,
    # so a fitted train time scales with the number of workers. None: `train_s` holds as given.
    train_workers: int | None = None

    def codec(self, label: str, method: str) -> Codec:
        return self.codecs.get(label) or self.codecs.get(method) or self.default_codec

    def contention(self, workers: int) -> float:
        return max(1.0, workers / self.shared_cores) if self.shared_cores else 1.0

    def train_for(self, workers: int) -> float:
        return self.train_s * workers / self.train_workers if self.train_workers else self.train_s


def split_compute(total_s: float, rollout_share: float = 8 / 14, **kw) -> Compute:
    """`--compute-s`: one total per update, split into rollout and training. The default share is
    the HiLo paper's: its pipelined HiLo update (~8 s) is bound by rollouts of ~8 s out of ~14 s."""
    if not 0 <= rollout_share <= 1:
        raise ValueError(f"rollout share must be within 0 and 1, got {rollout_share}")
    return Compute(total_s * rollout_share, total_s * (1 - rollout_share), **kw)


# ---- one update --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Prediction:
    method: str
    variant: str
    pipeline: int
    seconds_per_update: float
    bound: str                    # what sets the time: "serial" (depth 0) or the busiest stage (depth 1)
    rollout_s: float
    train_s: float
    encode_s: float
    transfer_down_s: float
    transfer_up_s: float
    replay_s: float               # learner's + a worker's decode/replay, as they fall on the path
    other_s: float
    payload_bytes: int            # update body, to one worker
    bytes_down_per_worker: int    # frame bytes one worker receives (payload + frame header)
    link_bytes_down_per_worker: int   # ... on the link, TCP/IP/Ethernet headers included
    bytes_out_learner: int        # frame bytes the learner writes per update (all copies)
    bottleneck: str
    speedup: float | None = None  # vs the baseline under the same inputs

    def to_json(self) -> dict:
        return asdict(self)


def predict(method: str, adapter: Adapter, net: Network, compute: Compute, pipeline: int = 0,
            budget: str | None = None, options: Mapping[str, Any] | None = None,
            send: str = "blocking") -> Prediction:
    """Seconds per update of `method` in steady state.

    Depth 0 (synchronous): everything on one path, in order:
        rollout + upload + train + encode + learner replay + download + worker replay + overheads.
    Depth 1 (workers sample batch t+1 with policy t while the learner trains on batch t): the
    slowest of the learner's stage, a worker's stage, the downlink and the uplink, half the
    dependency loop (update v+1 needs batch v, which needs update v-1 at the worker: one loop
    holds every term once and spans two updates), and with `shared_cores` k the CPU work of the
    learner and all N workers over k cores (on one box the overlapped stages share the cores).
    `send`: "blocking" (this harness: the learner's broadcast returns when every copy is in the
    kernel's send buffer, so the download, less the last `send_buffer_bytes`, is on the learner's
    stage) or "background" (the learner trains on while its updates drain: the download is a
    stage of its own)."""
    if pipeline not in (0, 1):
        raise ValueError(f"pipelining depth must be 0 or 1, got {pipeline}")
    if send not in SEND_MODES:
        raise ValueError(f"send mode {send!r} is not one of {', '.join(SEND_MODES)}")
    label = spec.variant_label(method, budget)
    payload = payload_bytes(method, adapter, budget, options)
    frame = payload + FRAME_HEADER_BYTES
    up_frame = compute.rollout_bytes + FRAME_HEADER_BYTES if compute.rollout_bytes else 0
    codec = compute.codec(label, method)
    slow = compute.contention(net.n)
    rollout, w_replay, w_other = compute.rollout_s * slow, codec.worker_replay_s * slow, compute.worker_other_s * slow
    train = compute.train_for(net.n)
    learner = train + codec.encode_s + codec.learner_replay_s + compute.learner_other_s
    worker = rollout + w_replay + w_other

    def total(idle_down: float, idle_up: float) -> tuple[float, str, Transfer, Transfer]:
        down, up = fan_out(frame, net, idle_down), fan_in(up_frame, net, idle_up)
        if pipeline == 0:
            return learner + down.seconds + worker + up.seconds, "serial", down, up
        held = down.seconds * max(0, frame - net.send_buffer_bytes) / frame if send == "blocking" else 0.0
        stages = {"learner": learner + held,
                  "workers": worker + up.seconds, "downlink": down.seconds, "uplink": up.seconds,
                  "loop/2": (learner + down.seconds + worker + up.seconds) / 2}
        if compute.shared_cores:
            # Overlapped, the learner's training and the workers' sampling compete for the same k
            # cores: an update cannot take less than all of its CPU work spread over them.
            cpu = learner + net.n * (compute.rollout_s + codec.worker_replay_s + compute.worker_other_s)
            stages["cores"] = cpu / compute.shared_cores
        bound = max(stages, key=stages.get)
        return stages[bound], bound, down, up

    # Each direction is silent for the rest of the cycle: long enough, and TCP restarts slowly.
    # Not under BBR: Linux skips the idle restart for a congestion control with its own
    # cong_control hook (tcp_slow_start_after_idle_check), and measured runs here agree.
    seconds, bound, down, up = total(0.0, 0.0)
    if net.cc != "bbr":
        seconds, bound, down, up = total(seconds - down.seconds, seconds - up.seconds)
    link = math.ceil(frame / (net.mtu - IP_TCP_HEADER_BYTES)) * (IP_TCP_HEADER_BYTES + ETHERNET_HEADER_BYTES) + frame
    return Prediction(method=method, variant=label, pipeline=pipeline, seconds_per_update=seconds, bound=bound,
                      rollout_s=rollout, train_s=train, encode_s=codec.encode_s,
                      transfer_down_s=down.seconds, transfer_up_s=up.seconds,
                      replay_s=codec.learner_replay_s + w_replay, other_s=compute.learner_other_s + w_other,
                      payload_bytes=payload, bytes_down_per_worker=frame, link_bytes_down_per_worker=link,
                      bytes_out_learner=down.bytes_out, bottleneck=down.bottleneck)


def compare(variants: Iterable[tuple[str, str | None]], baseline: str, adapter: Adapter, net: Network,
            compute: Compute, pipeline: int = 0, options: Mapping[str, Any] | None = None,
            send: str = "blocking") -> list[Prediction]:
    """Predictions of every (method, budget) and of the baseline (last), each with its speedup
    over the baseline at the same depth."""
    base = predict(baseline, adapter, net, compute, pipeline, None, options, send)
    out = [predict(m, adapter, net, compute, pipeline, b, options, send) for m, b in variants if m != baseline]
    return [replace(p, speedup=base.seconds_per_update / p.seconds_per_update) for p in out + [base]]


def crossover_bit_s(method: str, budget: str | None, baseline: str, adapter: Adapter, compute: Compute,
                    workers: int, pipeline: int = 0, lo: float = 1e5, hi: float = 1e12, send: str = "blocking",
                    **net_kw) -> float | None:
    """The per-worker link rate above which `method` is no faster than `baseline` (speedup = 1),
    by bisection on a log scale; None where it pays (or does not) over the whole range."""
    def gain(rate: float) -> float:
        net = Network.uniform(workers, rate, **net_kw)
        a = predict(method, adapter, net, compute, pipeline, budget, send=send).seconds_per_update
        b = predict(baseline, adapter, net, compute, pipeline, send=send).seconds_per_update
        return b / a - 1

    g_lo, g_hi = gain(lo), gain(hi)
    if (g_lo > 0) == (g_hi > 0):
        return None
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        if (gain(mid) > 0) == (g_lo > 0):
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


# ---- fitting compute terms from a measured run -----------------------------------------------------

LEARNER_PHASES = ("idle", "train", "encode", "decode_replay", "hash", "send_update")   # harness/results/tables.py


@dataclass(frozen=True)
class Fitted:
    """Compute terms measured in one run (medians over updates after the first), per variant."""
    compute: Compute
    workers: int
    model: str
    lora_rank: int
    updates_used: int
    source: str


def _med(values) -> float:
    """The project's median (trainers/events.py), 0.0 where a column holds nothing (no such phase)."""
    m = events.median(values)
    return 0.0 if m is None else float(m)


CLOCKS = ("wall", "cpu")


def fit(updates, net: Network | None = None, adapter: Adapter | None = None, shared_cores: int | None = None,
        skip_first: int = 1, source: str = "", clock: str = "wall") -> Fitted:
    """Compute terms from a run's `updates` table (harness/results/tables.py: one row per cell x update).

    Per variant: encode, the learner's decode/replay and a worker's decode/replay are the phases'
    medians. Shared by all variants (medians over every variant's rows): rollout (a worker's
    sampling; with `shared_cores`, divided by the run's contention), train (per the run's worker
    count: it scales with the rollouts trained on), and the learner's own overhead (hash + what no phase covers: the loop's
    bookkeeping, event files). The first `skip_first` updates of each cell are warm-up (joins,
    first-touch allocation) and are left out.

    `clock`: "wall" (seconds as the phases took them) or "cpu": train, encode, the learner's
    decode/replay and a worker's rollout at the CPU seconds their thread used (train_cpu_s, encode_cpu_s,
    decode_replay_cpu_s, worker_rollout_cpu_s; the wall figure where a row has none), what they cost on a
    machine nobody else was using. The rest (hashes, a worker's replay, the loop's own work) has no CPU
    column and stays at wall time.

    With `net` and `adapter` (the run's own network and adapter), what the model still misses on
    a synchronous run (the workers' hashes and event files, framing and checksums, scheduling) is
    solved for as `worker_other_s`, so that the model reproduces the fitted run's median exactly
    (at clock "cpu", the median of its seconds with compute charged at CPU time, compare.cpu_charged);
    the other runs are then predictions."""
    if clock not in CLOCKS:
        raise ValueError(f"clock {clock!r} is not one of {', '.join(CLOCKS)}")
    df = updates[updates["update_index"] > skip_first] if "update_index" in updates else updates
    if df.empty:
        raise ValueError("no update rows to fit (every row is warm-up)")
    workers = int(df["workers"].iloc[0])
    pipeline = int(df["pipeline"].iloc[0])
    slow = max(1.0, workers / shared_cores) if shared_cores else 1.0
    spent = sum(df[f"{p}_s"].fillna(0) for p in LEARNER_PHASES)
    learner_other = _med(df["hash_s"]) + _med(df["seconds_per_update"] - spent)
    at = lambda g, phase: _clocked(g, phase, clock)   # noqa: E731
    codecs = {}
    for label, g in df.groupby("variant", sort=False):
        codecs[label] = Codec(_med(at(g, "encode")), _med(at(g, "decode_replay")),
                              _med(g["worker_decode_replay_s"]) / slow)
    per_worker_up = df["payload_bytes_up"] / df["workers"]
    compute = Compute(rollout_s=_med(at(df, "worker_rollout")) / slow, train_s=_med(at(df, "train")),
                      learner_other_s=learner_other, codecs=codecs, shared_cores=shared_cores,
                      rollout_bytes=int(_med(per_worker_up)), train_workers=workers)
    model = str(df["model"].iloc[0]) if "model" in df else ""
    rank = int(df["lora_rank"].iloc[0]) if "lora_rank" in df else 0
    if net is not None and adapter is not None and pipeline == 0:
        residuals = []
        for label, g in df.groupby("variant", sort=False):
            method = g["method"].iloc[0]
            budget = _budget_text(g["budget_frac"].iloc[0]) if "budget_frac" in g else None
            p = predict(method, adapter, net, compute, 0, budget)
            seconds = compare.cpu_charged(g) if clock == "cpu" else g["seconds_per_update"]
            residuals.append(_med(seconds) - p.seconds_per_update)
        compute = replace(compute, worker_other_s=max(0.0, _med(residuals)) / slow)
    return Fitted(compute, workers, model, rank, len(df), source)


def _clocked(df, phase: str, clock: str):
    """A phase's seconds per row (`<phase>_s`), at its CPU seconds (`<phase>_cpu_s`) under clock "cpu"
    wherever the row has them."""
    wall = df[f"{phase}_s"]
    cpu = f"{phase}_cpu_s"
    if clock != "cpu" or cpu not in df:
        return wall
    return df[cpu].astype(float).fillna(wall.astype(float))


def _budget_text(frac) -> str | None:
    """A results table's budget_frac (0.016) as the label predict() takes ('1.6%'); None/NaN -> None."""
    return None if frac is None or frac != frac else f"{float(frac) * 100:g}%"


def measured(updates, skip_first: int = 1) -> dict[str, float]:
    """Median seconds per update per variant (after the warm-up updates)."""
    df = updates[updates["update_index"] > skip_first]
    return {label: _med(g["seconds_per_update"]) for label, g in df.groupby("variant", sort=False)}
