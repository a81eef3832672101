"""The cost model's prediction: seconds per update of a method at any scale (pure).

    seconds per update = rollout + train + encode + transfer + decode/replay (+ the harness's own work)

composed serially (pipelining depth 0) or overlapped (depth 1); bytes from harness/projection/bytes.py,
transfers from harness/projection/network.py, compute terms given (`--compute-s`) or fitted
(harness/projection/fit.py). docs/COSTMODEL.md writes the model and its assumptions down.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterable, Mapping

from harness.projection.bytes import Adapter, payload_bytes
from harness.projection.network import (ETHERNET_HEADER_BYTES, IP_TCP_HEADER_BYTES, SEND_MODES, Network, Transfer,
                                        fan_in, fan_out)
from trainers import spec
from trainers.cards.sizes import FRAME_HEADER_BYTES


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
