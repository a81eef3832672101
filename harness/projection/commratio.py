"""The comm ratio: full synchronisation's link time per update over its compute time per update.

It places a run in a regime. The HiLo paper's full sync (Qwen2.5-1.5B, a rank-64 LoRA on all seven
projections: 73.9 M parameters, 147.7 MB in bf16) crosses a 62.5 Mbit/s worker link in
147.7e6 x 8 / 62.5e6 = 18.9 s of its 33 s update, so its compute is 33 - 18.9 = 14.1 s and its ratio
18.9 / 14.1 = 1.34: the link carries 57 % of an update. A tiny CPU model at the same 62.5 Mbit/s has a
ratio of 0.03-0.13 (compute-bound: no method can be faster per update), so a run that wants the
paper's answer keeps its RATIO, not its rate: `--comm-ratio paper` sets every link's rate so that full
sync's ratio on this machine, model, task and worker count is 1.34 (docs/DESIGN.md "Regime").

Definitions (units: seconds per update, bytes per worker per update):
- compute = full sync's CPU seconds per update: the learner's train + encode + decode_replay and the
  median worker's rollout, CPU time (robust to a busy machine; each worker has its own processor in
  the paper, so one worker's rollout counts, not all of them);
- link = the cost model's time for full sync's update (frame) to reach every worker plus a worker's
  rollouts to reach the learner (costmodel.fan_out / fan_in: TCP goodput, slow start after the link
  sat idle for the compute), at the profile's links;
- ratio = link / compute; the link's share of an update = ratio / (1 + ratio).
Pure arithmetic on the cost model; imports no torch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.net import profiles
from harness.projection import costmodel as cm
from harness.projection.inputs import host_cc   # torch-free at import: only its adapter sizing loads torch
from trainers import events

PAPER_ADAPTER_BYTES = 147.7e6     # Qwen2.5-1.5B, rank-64 LoRA on all seven projections, bf16 (ALGORITHMS.md)
PAPER_RATE_BIT_S = 62.5e6         # the paper's per-worker link
PAPER_FULL_SYNC_S = 33.0          # the paper's full-sync seconds per update (1 learner + 8 workers)
PAPER_LINK_S = PAPER_ADAPTER_BYTES * 8 / PAPER_RATE_BIT_S     # 18.9 s
PAPER_COMPUTE_S = PAPER_FULL_SYNC_S - PAPER_LINK_S            # 14.1 s
PAPER_RATIO = PAPER_LINK_S / PAPER_COMPUTE_S                  # 1.34
PAPER_WORDS = (f"the HiLo paper's full sync: {PAPER_ADAPTER_BYTES / 1e6:.1f} MB over {PAPER_RATE_BIT_S / 1e6:g} "
               f"Mbit/s = {PAPER_LINK_S:.1f} s of its {PAPER_FULL_SYNC_S:g} s update, compute {PAPER_COMPUTE_S:.1f} s")
# The paper's two speed points (full sync s / HiLo s per update): synchronous and one-step pipelined.
PAPER_POINTS = ({"pipeline": 0, "full_s": 33.0, "method_s": 16.0}, {"pipeline": 1, "full_s": 18.0, "method_s": 8.0})
RATIO_BOUNDS = (1e-3, 1e3)        # a ratio outside these is a typo, not a regime
OFF = "off"
FULL_SYNC = "full-bf16"           # the method the ratio is of: the paper's full sync ships the adapter in bf16


class RatioError(ValueError):
    """A --comm-ratio that is not `paper`, `off` or a number within RATIO_BOUNDS."""


def parse(text: str | float | None) -> float | None:
    """'paper' -> PAPER_RATIO, 'off' -> None, '1.5' -> 1.5 (RatioError outside RATIO_BOUNDS)."""
    if text is None or str(text).strip().lower() == OFF:
        return None
    word = str(text).strip().lower()
    if word == "paper":
        return PAPER_RATIO
    try:
        value = float(word)
    except ValueError:
        raise RatioError(f"--comm-ratio: {str(text)!r} is not 'paper', 'off' or a number "
                         "(full sync's link seconds per compute second, e.g. 1.34)") from None
    lo, hi = RATIO_BOUNDS
    if not lo <= value <= hi or math.isnan(value):
        raise RatioError(f"--comm-ratio: {str(text)!r} is outside [{lo:g}, {hi:g}]")
    return value


def share(ratio: float) -> float:
    """The link's share of a synchronous update at this ratio (the paper: 0.57)."""
    return ratio / (1 + ratio)


@dataclass(frozen=True)
class Measured:
    """Full sync on this machine: CPU seconds of compute per update and bytes per worker per update."""
    compute_s: float
    down_bytes: float        # one worker's update frame (payload + frame header)
    up_bytes: float          # one worker's rollout frame


WARM_UP = 1     # full sync's first update is left out of what it measured (its start-up: caches, slow start)


def measure(updates, skip_first: int = WARM_UP) -> Measured | None:
    """Measured of one variant's rows of an `updates` table (harness/results/tables.py), medians over
    the updates after the first `skip_first` (warm-up); None without the CPU columns."""
    df = updates[updates["update_index"] > skip_first] if "update_index" in updates else updates
    need = ("train_cpu_s", "worker_rollout_cpu_s", "payload_bytes_down", "payload_bytes_up", "workers")
    if df.empty or any(c not in df for c in need):
        return None
    parts = [c for c in ("train_cpu_s", "encode_cpu_s", "decode_replay_cpu_s", "worker_rollout_cpu_s") if c in df]
    compute = events.median(df[parts].fillna(0.0).sum(axis=1))
    down = events.median(df["payload_bytes_down"])
    up = events.median(df["payload_bytes_up"] / df["workers"])
    if not compute or compute <= 0 or down is None:
        return None
    return Measured(compute, down + cm.FRAME_HEADER_BYTES, (up or 0.0) + cm.FRAME_HEADER_BYTES)


def link_s(net: cm.Network, m: Measured) -> float:
    """Full sync's link seconds per update on `net`: the update to every worker, rollouts back, each
    direction idle for the compute in between (so slow start restarts, as in predict())."""
    return cm.fan_out(int(m.down_bytes), net, m.compute_s).seconds + cm.fan_in(int(m.up_bytes), net, m.compute_s).seconds


def ratio_at(net: cm.Network, m: Measured) -> float:
    return link_s(net, m) / m.compute_s


def scale_for(target: float, m: Measured, network_at, lo: float = 1e-6, hi: float = 1e3) -> float:
    """The factor f on every link rate such that ratio_at(network_at(f), m) == target, by bisection
    on a log scale (the ratio falls as the rate grows). `network_at(f)`: the run's network with its
    rates scaled by f. ValueError when no factor in [lo, hi] reaches the target (e.g. a delay alone
    already costs more than the target's link time)."""
    def r(f: float) -> float:
        return ratio_at(network_at(f), m)

    if not r(hi) <= target <= r(lo):
        raise ValueError(f"no link rate gives a comm ratio of {target:.3g}: between {r(hi):.3g} (rates x{hi:g}) "
                         f"and {r(lo):.3g} (rates x{lo:g}) on this profile's delay and loss")
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if r(mid) > target else (lo, mid)
    return math.sqrt(lo * hi)


def factor_bounds(profile: profiles.Profile, workers: int) -> tuple[float, float]:
    """The factors a profile's rates can be scaled by and stay rates (units.py: 1 kbit/s - 100 Gbit/s;
    a trace's scale: 1e-6 - 1e6)."""
    flat = [d.rate_bit_s for node in ("learner", *(f"w{i}" for i in range(1, workers + 1)))
            for d in (profile.link(node).up, profile.link(node).down) if d.trace is None and d.rate_bit_s]
    lo, hi = 1e-6, 1e6
    if flat:
        lo, hi = max(lo, 1.001e3 / min(flat)), min(hi, 0.999e11 / max(flat))
    return lo, hi


def network_at(profile: profiles.Profile, workers: int, cc: str | None = None,
               window: tuple[float, float] | None = None) -> Callable[[float], cm.Network]:
    """f -> the cost model's network of `profile` with every rate scaled by f (a trace at its mean rate:
    over `window`, seconds into the trace, where given); `cc`: the congestion control (default: this host's)."""
    return cm.Network.from_profile(profile, workers, window, cc=cc or host_cc()).scaled   # the links read once


def _direction(d, window: tuple[float, float] | None = None) -> tuple:
    """One link direction for the words: ("trace", file name, mean, lowest, highest step, span) or ("rate",
    bit/s). Over `window` (seconds into the trace): the mean and lowest and highest 1 s means there, and
    span = (start, end, the loop's seconds, the whole loop's mean, lowest, highest); else span None."""
    if d.trace is None:
        return ("rate", d.rate_bit_s)
    t = d.trace.load()
    whole = ("trace", Path(d.trace.file).name, t.stats()["mean_bit_s"], min(t.rate_bit_s), max(t.rate_bit_s))
    if window is None:
        return (*whole, None)
    part = t.stats(*window)
    return (*whole[:2], part["mean_bit_s"], part["min_bit_s"], part["max_bit_s"], (*window, t.period_s, *whole[2:]))


def _mbit(bit_s) -> str:
    return "unshaped" if not bit_s else f"{bit_s / 1e6:.3g}"


def _said(x: tuple, short: bool = False) -> str:
    if x[0] == "rate":
        return _mbit(x[1]) + ("" if short or not x[1] else " Mbit/s")
    span = x[5]
    if span is None:
        return (f"trace {x[1]} (mean {_mbit(x[2])})" if short else
                f"trace {x[1]}, mean {_mbit(x[2])} Mbit/s ({_mbit(x[3])}-{_mbit(x[4])})")
    start, end, period, whole, lo, hi = span
    seconds = f"{start:.3g}-{end:.3g} s of its {period:.3g} s"
    if short:
        return f"trace {x[1]} (mean {_mbit(x[2])} over {seconds})"
    spread = "" if _mbit(x[3]) == _mbit(x[4]) else f"{_mbit(x[3])}-{_mbit(x[4])}; "
    return (f"trace {x[1]} over {seconds}, mean {_mbit(x[2])} Mbit/s there ({spread}the whole trace: mean "
            f"{_mbit(whole)} Mbit/s, {_mbit(lo)}-{_mbit(hi)})")


PER_WORKER_WORDS = 4    # up to this many workers are named one by one; more are said as ranges


def link_words(profile: profiles.Profile, workers: int, window: tuple[float, float] | None = None) -> str | None:
    """The worker links at the start, in a few words, where one rate would not say them: None for
    one flat rate on every worker link both ways; 'trace t.csv, mean 9 Mbit/s (2-20)' for one trace
    on all of them; else each worker's ('worker links w1 40.3, w2 8, w3 40.3/4 up Mbit/s': down, and up where it
    differs), or for more than PER_WORKER_WORDS workers the ranges ('worker links 8-40.3 Mbit/s down,
    4-40.3 up', a trace at its mean). `window`: (start, end) seconds into the trace; a trace is said at
    its mean over them beside the whole trace's ('trace t.csv over 0.4-2.9 s of its 120 s, mean 31 Mbit/s
    there (25-35; the whole trace: mean 24 Mbit/s, 3.6-42)')."""
    links = [(_direction(profile.link(f"w{i}").down, window), _direction(profile.link(f"w{i}").up, window))
             for i in range(1, workers + 1)]
    kinds = {d for pair in links for d in pair}
    if len(kinds) == 1:
        (only,) = kinds
        return None if only[0] == "rate" else _said(only)
    if workers > PER_WORKER_WORDS:
        def span(ds) -> str:
            mbit = sorted((d[2] if d[0] == "trace" else d[1]) or math.inf for d in ds)
            lo, hi = (_mbit(v if v != math.inf else None) for v in (mbit[0], mbit[-1]))
            return lo if lo == hi else f"{lo}-{hi}"
        traced = ("" if not any(d[0] == "trace" for d in kinds) else " (traces at their mean)" if window is None
                  else f" (traces at their mean over {window[0]:.3g}-{window[1]:.3g} s of them)")
        return f"worker links {span(p[0] for p in links)} Mbit/s down, {span(p[1] for p in links)} up{traced}"
    each = [f"w{i} {_said(down, True)}" + ("" if up == down else f"/{_said(up, True)} up")
            for i, (down, up) in enumerate(links, 1)]
    return "worker links " + ", ".join(each) + " Mbit/s"


def full_sync(updates, baseline: str) -> str:
    """The method whose ratio is the run's: FULL_SYNC where the run has it, else its baseline."""
    return FULL_SYNC if "method" in updates and (updates["method"] == FULL_SYNC).any() else baseline


def achieved(updates, baseline: str, profile: profiles.Profile | None, workers: int, cc: str,
             placed: dict | None = None, window: tuple[float, float] | None = None) -> dict:
    """prediction.json's `regime`: the ratio this run's full sync (`full_sync`) achieved (its own compute
    and bytes measured in the run, at its links), the target it was placed at (config.json `regime`, or
    none: a literal rate), and the rate `--comm-ratio paper` would have used; {} without baseline rows.
    `window`: (start, end) seconds of the trace full sync's measured updates ran over (a short run meets
    only its first seconds): a traced link's rate is its mean there, said in `seen` beside `links` (the
    whole trace's words, which name the run's links in the tables)."""
    method = full_sync(updates, baseline)
    rows = updates[updates["method"] == method] if "method" in updates else updates.iloc[:0]
    m = measure(rows)
    if m is None:
        return {}
    out = {"method": method, "compute_s": m.compute_s, "down_bytes": m.down_bytes, "up_bytes": m.up_bytes,
           "paper_ratio": PAPER_RATIO, "paper_share": share(PAPER_RATIO), "paper_points": list(PAPER_POINTS),
           "target_ratio": (placed or {}).get("target_ratio"), "placed": dict(placed or {})}
    if profile is None:     # localhost, unshaped: no link to speak of
        return {**out, "ratio": None, "share": None, "link_s": None}
    at = network_at(profile, workers, cc, window)
    ratio = ratio_at(at(1.0), m)
    out.update(ratio=ratio, share=share(ratio), link_s=ratio * m.compute_s,
               rate_bit_s=profile.link("w1").down.rate_bit_s)
    words = link_words(profile, workers)
    if words:   # a trace or unequal worker links: w1's rate alone would misstate them
        out["links"] = words
        seen = link_words(profile, workers, window) if window else None
        if seen and seen != words:
            out["seen"], out["window_s"] = seen, list(window)
    try:
        f = scale_for(PAPER_RATIO, m, at, *factor_bounds(profile, workers))
        out["paper_rate_bit_s"] = profiles.scaled(profile, f).link("w1").down.rate_bit_s
        out["paper_factor"] = f
    except ValueError:
        out["paper_rate_bit_s"] = None
    return out


CURVE_RATIOS = tuple(round(0.05 * 2 ** (k / 2), 4) for k in range(15))   # 0.05 ... 6.4, two points per octave


def curve(m: Measured, at: Callable[[float], cm.Network], bounds: tuple[float, float],
          speedups: Callable[[cm.Network], dict[str, float]], ratios=CURVE_RATIOS) -> list[dict]:
    """The cost model's speedup of each variant against the comm ratio: for each ratio the network scaled
    to it (as `--comm-ratio` would) and `speedups(net)` there; ratios no rate reaches are left out."""
    out = []
    for x in ratios:
        try:
            f = scale_for(x, m, at, *bounds)
        except ValueError:
            continue
        out.append({"ratio": x, "factor": f, "speedup": speedups(at(f))})
    return out
