"""WAN profiles: YAML files in ``netem_profiles/`` parsed into frozen, validated value objects.

A profile describes every node's *access link* to the emulated WAN, per direction:
``up`` is node -> network, ``down`` is network -> node. Delays are one-way per direction, so
the RTT between a worker and the learner is ``worker.up.delay + learner.down.delay +
learner.up.delay + worker.down.delay``. YAML layout::

    name: transatlantic            # must equal the file stem
    description: one line
    source: where the figures come from
    defaults:                      # every worker link (flat keys = both directions)
      rate: 100mbit
      delay: 35ms
      up: {rate: 20mbit}           # per-direction keys override the flat ones
    learner: {rate: 1gbit}         # the learner's own link (unshaped when absent)
    workers:                       # per-worker overrides merged over `defaults`
      w3: {rate: 10mbit}
    schedule:                      # optional changes over time
      - {at: 30s, target: workers, up: {rate: 10mbit}}

Schedule changes merge over the target's current keys the way a worker override does: a flat
key in a change does not replace a per-direction key the target already sets (in
heterogeneous-edge, ``w3`` keeps its 5 Mbit/s uplink at 30 s; only its downlink drops to 20 Mbit/s).

Link keys: ``rate`` (tc rate, absent = unlimited), ``trace`` (a recorded or generated link played
over time, :mod:`harness.net.traces`: a file name or path, or ``{file: F, interval: 1s}``; its rate,
and its delay and loss where the file has them, replace the static keys step by step; the steps
restart at every cell's start), ``delay`` and ``jitter`` (tc time; jitter
<= delay, uniform in [-jitter, +jitter] around the delay, never reordering), ``loss`` (percent,
independent random), ``burst_loss`` (Gilbert-Elliott: ``{p, r, bad_loss, good_loss}``, the
transition probabilities good->bad ``p`` and bad->good ``r`` and the loss in each state; all
percentages), ``limit`` (queue limit in packets; default sized to the bandwidth-delay product).
Ranges (checked at load, :mod:`harness.units`): rate 1 kbit/s - 100 Gbit/s, delay and jitter
0 - 10 s, loss 0 - <100 %, limit 1 - 2^31-1 packets.

A profile file is read by :mod:`harness.readers` (a regular file of at most ``MAX_PROFILE_BYTES``,
YAML nested at most 32 levels, no key given twice in one mapping: the last one used to win in silence).

API: ``load(name_or_path) -> Profile``; ``Profile.link(node) -> LinkSpec`` (``"learner"``,
``"w1"``...); ``list_profiles()``. Any malformed value raises :class:`ProfileError` whose one
line names the field and the value.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import heapq
import itertools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from harness import readers, units
from harness.net import traces
from trainers import spec

PROFILE_DIR = Path(__file__).resolve().parents[2] / "netem_profiles"
_LINK_KEYS = {"rate", "delay", "jitter", "loss", "burst_loss", "limit", "trace"}
_TRACE_KEYS = {"file", "interval", "scale"}
_COMPUTE_KEYS = {"cpu"}   # a worker's compute, not its link: its CPU share (defaults and workers.wN only)
DEFAULT_TRACE_INTERVAL_S = 1.0   # one rate change per second: HTB's change is in place, ~1 ms of netlink
_TOP_KEYS = {"name", "description", "source", "defaults", "learner", "workers", "schedule"}
_GE_KEYS = {"p", "r", "bad_loss", "good_loss"}
_WORKER = re.compile(r"^w[1-9][0-9]*$")


class ProfileError(ValueError):
    """A profile that cannot be used; str() is one line naming the field and the value."""


@dataclass(frozen=True)
class GilbertElliott:
    """Two-state burst loss: per-packet transition probabilities and per-state loss (fractions)."""
    p_frac: float          # good -> bad
    r_frac: float          # bad -> good
    bad_loss_frac: float = 1.0
    good_loss_frac: float = 0.0

    def mean_loss(self) -> float:
        """Stationary loss rate: pi_bad = p / (p + r)."""
        if self.p_frac + self.r_frac == 0:
            return self.good_loss_frac
        bad = self.p_frac / (self.p_frac + self.r_frac)
        return bad * self.bad_loss_frac + (1 - bad) * self.good_loss_frac


@dataclass(frozen=True)
class TraceRef:
    """A trace played on one link direction: the file as written in the profile, one step per ``interval_s``,
    its rates multiplied by ``scale`` (`--comm-ratio` scales a traced link like a flat one: same shape)."""
    file: str
    interval_s: float = DEFAULT_TRACE_INTERVAL_S
    scale: float = 1.0

    def load(self) -> traces.Trace:
        trace = _load_trace(self.file)
        return trace if self.scale == 1.0 else dataclasses.replace(
            trace, rate_bit_s=tuple(r * self.scale for r in trace.rate_bit_s))

    def step(self, at_s: float) -> dict:
        """The step in force ``at_s`` seconds after the start (steps begin at multiples of the interval)."""
        return self.load().step(math.floor(at_s / self.interval_s + 1e-9) * self.interval_s, self.interval_s)

    def to_doc(self) -> Any:
        if self.interval_s == DEFAULT_TRACE_INTERVAL_S and self.scale == 1.0:
            return self.file
        doc: dict[str, Any] = {"file": self.file, "interval": units.format_time(self.interval_s)}
        return doc if self.scale == 1.0 else {**doc, "scale": self.scale}


@functools.lru_cache(maxsize=64)
def _load_trace(file: str) -> traces.Trace:
    return traces.load(file)


@dataclass(frozen=True)
class LinkDir:
    """One direction of one access link. ``rate_bit_s=None`` means unlimited. With a ``trace``,
    rate (and delay, loss where the trace has them) are those of the trace's step at the time."""
    rate_bit_s: float | None = None
    delay_s: float = 0.0
    jitter_s: float = 0.0
    loss_frac: float = 0.0
    burst_loss: GilbertElliott | None = None
    limit_pkts: int | None = None
    trace: TraceRef | None = None

    def at(self, at_s: float) -> "LinkDir":
        """This direction ``at_s`` seconds into its trace (itself when it has none)."""
        if self.trace is None:
            return self
        step = self.trace.step(at_s)
        return dataclasses.replace(self, rate_bit_s=step["rate_bit_s"], delay_s=step.get("delay_s", self.delay_s),
                                   loss_frac=step.get("loss_frac", self.loss_frac))

    @property
    def impaired(self) -> bool:
        """Anything beyond a rate: delay, jitter, loss or burst loss (on the fallback backend each is a
        netfilter rule, harness/net/plan.py; a rate alone is an HTB class)."""
        return self.delay_s > 0 or self.jitter_s > 0 or self.loss_frac > 0 or self.burst_loss is not None

    @property
    def shaped(self) -> bool:
        return self.rate_bit_s is not None or self.impaired

    def to_doc(self) -> dict[str, Any]:
        """Back to the YAML form (what `show` prints and `load` accepts)."""
        doc: dict[str, Any] = {}
        if self.rate_bit_s is not None:
            doc["rate"] = units.format_rate(self.rate_bit_s)
        if self.delay_s:
            doc["delay"] = units.format_time(self.delay_s)
        if self.jitter_s:
            doc["jitter"] = units.format_time(self.jitter_s)
        if self.loss_frac:
            doc["loss"] = units.format_percent(self.loss_frac)
        if self.burst_loss is not None:
            ge = self.burst_loss
            doc["burst_loss"] = {"p": units.format_percent(ge.p_frac), "r": units.format_percent(ge.r_frac),
                                 "bad_loss": units.format_percent(ge.bad_loss_frac),
                                 "good_loss": units.format_percent(ge.good_loss_frac)}
        if self.limit_pkts is not None:
            doc["limit"] = self.limit_pkts
        if self.trace is not None:
            doc = {k: v for k, v in doc.items() if k not in ("rate", "delay", "loss") or k not in self._traced()}
            doc["trace"] = self.trace.to_doc()
        return doc

    def _traced(self) -> set[str]:
        """The keys the trace sets (they are the trace's, not the profile's, in to_doc)."""
        t = self.trace.load()
        return {"rate"} | ({"delay"} if t.delay_s is not None else set()) | ({"loss"} if t.loss_frac is not None else set())


@dataclass(frozen=True)
class LinkSpec:
    up: LinkDir = LinkDir()
    down: LinkDir = LinkDir()

    def at(self, at_s: float) -> "LinkSpec":
        return LinkSpec(self.up.at(at_s), self.down.at(at_s))

    def to_doc(self) -> dict[str, Any]:
        return {"up": self.up.to_doc(), "down": self.down.to_doc()}


@dataclass(frozen=True)
class Change:
    """At ``at_s`` seconds after apply, links of ``target`` (learner | workers | wN) change."""
    at_s: float
    target: str
    raw: Mapping[str, Any]  # link keys to merge over the target's current raw spec


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    source: str
    default: Mapping[str, Any] = field(default_factory=dict)   # raw, validated
    learner: Mapping[str, Any] = field(default_factory=dict)
    workers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    schedule: tuple[Change, ...] = ()

    def __post_init__(self):
        # Resolved when the profile loads: the links in force at the start (the learner's, each named
        # worker's, every other worker's) and the document; config, doctor, plan and shaper read them.
        named = set(self.workers) | {c.target for c in self.schedule if _WORKER.match(c.target)}
        self.__dict__.update(_links={}, _named=frozenset(named))
        default = next(f"w{i}" for i in itertools.count(1) if f"w{i}" not in named)
        for node in ("learner", *sorted(named), default):
            self.link(node)
        # each worker's CPU share (CPUs; None: not limited), parsed once: every other worker has the default's
        self.__dict__["_cpus"] = {("workers" if n == default else n): self._parse_cpu(n)
                                  for n in (*sorted(named), default)}
        self.__dict__["_doc"] = self._build_doc()

    def link(self, node: str, at_s: float = 0.0) -> LinkSpec:
        """The link of ``node`` ("learner" or "wN") in force ``at_s`` seconds after apply; each
        (node, time) is built through units once per profile (plan, timeline and shaper ask again).
        A worker the profile does not name (workers.wN, a schedule target) has the default link."""
        shared = node != "learner" and node not in self._named and _WORKER.match(node)
        key = ("workers" if shared else node, at_s)
        cache = self._links
        if key not in cache:
            cache[key] = self._build_link(node, at_s)
        return cache[key]

    def _build_link(self, node: str, at_s: float) -> LinkSpec:
        raw = _raw_for(self, node)
        for change in self.schedule:
            if change.at_s <= at_s and _targets(change.target, node):
                raw = _merge(raw, change.raw)
        return build_link(raw, f"{self.name}.{node}").at(at_s)

    def cpu(self, node: str) -> float | None:
        """The CPU share of worker ``node`` (CPUs, harness/net/cgroups.py), None: not limited."""
        if not _WORKER.match(node):
            raise ProfileError(f"node: {node!r}: expected 'w<N>' (only workers take a CPU share)")
        return self._cpus[node if node in self._named else "workers"]

    def cpu_shares(self, workers: int, given: tuple[float, ...] = ()) -> dict[str, float]:
        """Worker name -> CPU share (CPUs) for a run of ``workers``: ``given`` (``--worker-cpu``, one per
        worker, trainers/spec.py ``parse_worker_cpu``) over this profile's per-worker ``cpu`` keys; a
        worker neither limits is absent (it runs unlimited; harness/net/cgroups.py applies the rest)."""
        out = {}
        for w in range(1, workers + 1):
            share = given[w - 1] if given else self.cpu(f"w{w}")
            if share is not None:
                out[f"w{w}"] = share
        return out

    def _parse_cpu(self, node: str) -> float | None:
        raw = _raw_for(self, node).get("cpu")
        return None if raw is None else spec.parse_cpu_share(raw, f"{self.name}.{node}.cpu")

    def impaired(self, workers: int) -> bool:
        """Whether a link of the learner or of w1..w<workers> is impaired beyond its rate (delay, jitter,
        loss, burst loss: ``LinkDir.impaired``) at some time of the schedule: what the fallback backend
        shapes with netfilter rules (harness/net/plan.py), so the preflight requires iptables then."""
        nodes = ("learner", *(f"w{i}" for i in range(1, workers + 1)))
        links = (self.link(node, at_s) for at_s in (0.0, *self.change_times()) for node in nodes)
        return any(link.up.impaired or link.down.impaired for link in links)

    def change_times(self) -> list[float]:
        return sorted({c.at_s for c in self.schedule})

    def trace_intervals(self, nodes: list[str]) -> list[float]:
        """The step intervals of every trace the links of ``nodes`` play (at any scheduled time)."""
        out = set()
        for node in nodes:
            for at_s in [0.0, *self.change_times()]:
                spec = self.link(node, at_s)
                out |= {d.trace.interval_s for d in (spec.up, spec.down) if d.trace is not None}
        return sorted(out)

    def timeline(self, nodes: list[str]) -> Iterator[float]:
        """Every time after 0 at which a link of ``nodes`` may change: the schedule's changes and
        each trace's steps, in order; endless when a trace plays (traces loop)."""
        streams = [iter(self.change_times())] + [itertools.count(i, i) for i in self.trace_intervals(nodes)]
        last = 0.0
        for at_s in heapq.merge(*streams):
            at_s = round(at_s, 6)        # k x 0.1 s steps: float sums must not make two times of one
            if at_s > last:
                last = at_s
                yield at_s

    def to_doc(self) -> dict[str, Any]:
        """The profile as a YAML/JSON document (config.json's profile_doc): built once, a copy each time."""
        return copy.deepcopy(self._doc)

    def _build_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"name": self.name, "description": self.description, "source": self.source,
                               "defaults": _plain(self.default)}
        if self.learner:
            doc["learner"] = _plain(self.learner)
        if self.workers:
            doc["workers"] = {k: _plain(v) for k, v in self.workers.items()}
        if self.schedule:
            doc["schedule"] = [{"at": units.format_time(c.at_s), "target": c.target, **_plain(c.raw)}
                               for c in self.schedule]
        return doc


def _kind(value: Any) -> str:
    """What a YAML value is, in the words of a profile's author: 'a list', 'the text 'fast'', 'the number 3'."""
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f"the text {value!r}"
    if isinstance(value, bool) or value is None:
        return f"the value {str(value).lower() if value is not None else 'null'}"
    if isinstance(value, (int, float)):
        return f"the number {value:g}"
    return f"a {type(value).__name__}"


def _plain(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {k: _plain(v) for k, v in obj.items()}
    return obj


def _targets(target: str, node: str) -> bool:
    return target == node or (target == "workers" and node != "learner")


def _raw_for(profile: Profile, node: str) -> dict[str, Any]:
    if node == "learner":
        return dict(profile.learner)
    if not _WORKER.match(node):
        raise ProfileError(f"node: {node!r}: expected 'learner' or 'w<N>'")
    return _merge(profile.default, profile.workers.get(node, {}))


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in base.items()}
    for key, value in over.items():
        if key in ("up", "down") and isinstance(out.get(key), dict) and isinstance(value, Mapping):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def _dir(raw: Mapping[str, Any], where: str, shared: Mapping[str, str] = {}) -> LinkDir:
    """One direction's link; `shared`: key -> where it was written, for keys given once for both directions
    (an error names the key as the user wrote it: defaults.rate, not defaults.up.rate)."""
    def at(key: str) -> str:
        return shared.get(key, where)

    def get(key, parse):
        if key not in raw:
            return None
        try:
            return parse(raw[key])
        except units.UnitError as err:
            raise ProfileError(f"{at(key)}.{key}: {err}") from None

    ge = None
    if "burst_loss" in raw:
        ge = _ge(raw["burst_loss"], f"{at('burst_loss')}.burst_loss")
    trace = _trace(raw, at("trace")) if "trace" in raw else None
    # every number within its physical range (units.py): rate 1 kbit/s-100 Gbit/s, delay and
    # jitter 0-10 s, loss 0-<100 %, limit 1-2^31-1 packets; jitter <= delay below
    link = LinkDir(rate_bit_s=get("rate", units.parse_rate),
                   delay_s=get("delay", units.parse_delay) or 0.0,
                   jitter_s=get("jitter", units.parse_delay) or 0.0,
                   loss_frac=get("loss", units.parse_loss) or 0.0,
                   burst_loss=ge, limit_pkts=get("limit", units.parse_count), trace=trace)
    link = link.at(0.0)
    if link.jitter_s > link.delay_s:
        raise ProfileError(f"{at('jitter')}.jitter: {units.quote(raw.get('jitter'))} is larger than delay "
                           f"{units.quote(raw.get('delay', 0))} (the delay would go negative)")
    return link


def _trace(raw: Mapping[str, Any], where: str) -> TraceRef:
    """``trace: FILE`` or ``{file: FILE, interval: 1s}``; the file must load now (errors at load, not
    at apply), and no static key may say what the trace says."""
    value = raw["trace"]
    spec = value if isinstance(value, Mapping) else {"file": value}
    _check_keys(spec, _TRACE_KEYS, f"{where}.trace")
    if not isinstance(spec.get("file"), str) or not spec["file"]:
        raise ProfileError(f"{where}.trace: {value!r} must be a file name or {{file: F, interval: 1s, scale: 1}}")
    try:
        interval = units.parse_time(spec["interval"]) if "interval" in spec else DEFAULT_TRACE_INTERVAL_S
        scale = spec.get("scale", 1.0)
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 1e-6 <= scale <= 1e6:
            raise ProfileError(f"{where}.trace.scale: {scale!r} must be a number within 1e-06 and 1e+06 "
                               "(the factor on the trace's rates)")
        ref = TraceRef(spec["file"], interval, float(scale))
        loaded = ref.load()
    except (units.UnitError, traces.TraceError) as err:
        raise ProfileError(f"{where}.trace: {err}") from None
    if not traces.MIN_INTERVAL_S <= interval <= traces.MAX_INTERVAL_S:
        raise ProfileError(f"{where}.trace.interval: {units.quote(spec.get('interval'))} must be within "
                           f"{units.format_time(traces.MIN_INTERVAL_S)} and {units.format_time(traces.MAX_INTERVAL_S)}")
    try:   # the plan lists every step of a loop: their count stays bounded whatever the file says
        traces.check_interval(interval, loaded.period_s, spec["file"])
    except traces.TraceError as err:
        raise ProfileError(f"{where}.trace.interval: {err}") from None
    peak = max(loaded.rate_bit_s)
    if peak > units.RATE_MAX_BIT_S:
        raise ProfileError(f"{where}.trace.scale: {scale!r} takes trace {spec['file']!r} to "
                           f"{units.format_rate(peak)}, above {units.format_rate(units.RATE_MAX_BIT_S)} (the fastest "
                           "link the shaper sets)")
    clash = {"rate"} | ({"delay"} if loaded.delay_s is not None else set()) | ({"loss"} if loaded.loss_frac is not None else set())
    for key in sorted(clash & set(raw)):
        raise ProfileError(f"{where}.{key}: {units.quote(raw[key])} contradicts trace {spec['file']!r}, which sets the {key}")
    return ref


def _ge(raw: Any, where: str) -> GilbertElliott:
    if not isinstance(raw, Mapping):
        raise ProfileError(f"{where}: {_kind(raw)} here; it must be a mapping with keys p, r, bad_loss, good_loss")
    _check_keys(raw, _GE_KEYS, where)
    if "p" not in raw or "r" not in raw:
        raise ProfileError(f"{where}: {dict(raw)!r} needs both 'p' and 'r'")
    vals = {}
    for key in _GE_KEYS:
        if key in raw:
            try:
                vals[key] = units.parse_percent(raw[key])
            except units.UnitError as err:
                raise ProfileError(f"{where}.{key}: {err}") from None
    return GilbertElliott(vals["p"], vals["r"], vals.get("bad_loss", 1.0), vals.get("good_loss", 0.0))


def _key(key: Any) -> str:
    """A key as a message names it: bare when it is a plain name, quoted otherwise (one line whatever it holds)."""
    return key if isinstance(key, str) and key.isidentifier() else units.quote(key)


def _check_keys(raw: Mapping[str, Any], allowed: set[str], where: str) -> None:
    for key in raw:
        if key not in allowed:
            raise ProfileError(f"{where}.{_key(key)}: unknown key (valid: {', '.join(sorted(allowed))})")


def _check_link_raw(raw: Any, where: str) -> None:
    if not isinstance(raw, Mapping):
        raise ProfileError(f"{where}: {_kind(raw)} here; it must be a mapping of link keys (rate, delay, ...)")
    raw = _without_compute(raw, where)
    _check_keys(raw, _LINK_KEYS | {"up", "down"}, where)
    for direction in ("up", "down"):
        if direction in raw:
            if not isinstance(raw[direction], Mapping):
                raise ProfileError(f"{where}.{direction}: {_kind(raw[direction])} here; it must be a mapping of link keys")
            _check_keys(raw[direction], _LINK_KEYS, f"{where}.{direction}")
    build_link(raw, where)  # parse every value now: errors surface at load, not at apply


def _without_compute(raw: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    """``raw`` without its compute keys, each checked: only a worker's entry (defaults, workers.wN) takes one."""
    if not _COMPUTE_KEYS & set(raw):
        return raw
    if not (where.endswith(".defaults") or ".workers." in where):
        raise ProfileError(f"{where}.cpu: only a worker's entry (defaults, workers.wN) takes a CPU share")
    try:
        spec.parse_cpu_share(raw["cpu"], f"{where}.cpu")
    except spec.SpecError as err:
        raise ProfileError(str(err)) from None
    return {k: v for k, v in raw.items() if k not in _COMPUTE_KEYS}


def build_link(raw: Mapping[str, Any], where: str) -> LinkSpec:
    flat = {k: v for k, v in raw.items() if k in _LINK_KEYS}
    up, down = raw.get("up", {}), raw.get("down", {})
    return LinkSpec(up=_dir({**flat, **up}, f"{where}.up", {k: where for k in flat if k not in up}),
                    down=_dir({**flat, **down}, f"{where}.down", {k: where for k in flat if k not in down}))


SCHEDULE_MAX_S = 7 * 86400.0  # the latest schedule step, seconds after the start
SCHEDULE_MAX_STEPS = 1000     # changes in one schedule (the shipped profiles have at most a few)
MAX_PROFILE_BYTES = 1 << 20  # a profile is a few hundred bytes; traces are files of their own


def _schedule(raw: Any, name: str) -> tuple[Change, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ProfileError(f"{name}.schedule: {units.quote(raw)} must be a list")
    if len(raw) > SCHEDULE_MAX_STEPS:   # each change resolves every link it targets: cost grows with their product
        raise ProfileError(f"{name}.schedule: {len(raw)} changes, more than {SCHEDULE_MAX_STEPS} (a link that "
                           "changes that often is a trace: the `trace` key)")
    out = []
    for i, item in enumerate(raw):
        where = f"{name}.schedule[{i}]"
        if not isinstance(item, Mapping):
            raise ProfileError(f"{where}: {_kind(item)} here; it must be a mapping (at: ..., and link keys)")
        body = {k: v for k, v in item.items() if k not in ("at", "target")}
        try:
            at_s = units.parse_time(item.get("at"))
        except units.UnitError as err:
            raise ProfileError(f"{where}.at: {err}") from None
        if at_s > SCHEDULE_MAX_S:  # the shaper's thread sleeps until then: 1e300 s overflowed it mid-run
            raise ProfileError(f"{where}.at: {item.get('at')!r}: a schedule step must come within "
                               f"{SCHEDULE_MAX_S:g} s (7 days) of the start")
        target = item.get("target", "workers")
        if target not in ("learner", "workers") and not _WORKER.match(str(target)):
            raise ProfileError(f"{where}.target: {target!r}: expected learner, workers or w<N>")
        _check_link_raw(body, where)
        out.append(Change(at_s, str(target), body))
    return tuple(sorted(out, key=lambda c: c.at_s))


def from_doc(doc: Any, name: str) -> Profile:
    """Validate a parsed YAML document; raises ProfileError naming the first bad field."""
    if doc is None:
        raise ProfileError(f"{name}: the profile is empty (a YAML mapping: name, defaults, workers, ...; "
                           "netem_profiles/ has examples)")
    if not isinstance(doc, Mapping):
        raise ProfileError(f"{name}: {doc!r} is not a mapping")
    _check_keys(doc, _TOP_KEYS, name)
    if doc.get("name", name) != name:
        raise ProfileError(f"{name}.name: {doc.get('name')!r} differs from the file name {name!r}")
    for key in ("description", "source"):
        if not isinstance(doc.get(key, ""), str):
            raise ProfileError(f"{name}.{key}: {doc.get(key)!r} must be a string")
    default, learner = doc.get("defaults") or {}, doc.get("learner") or {}
    _check_link_raw(default, f"{name}.defaults")
    _check_link_raw(learner, f"{name}.learner")
    workers = doc.get("workers") or {}
    if not isinstance(workers, Mapping):
        raise ProfileError(f"{name}.workers: {_kind(workers)} here; it must be a mapping of wN -> link "
                           "(workers: {w2: {rate: 10mbit}})")
    for wname, wraw in workers.items():
        if not _WORKER.match(str(wname)):
            raise ProfileError(f"{name}.workers.{_key(wname)}: unknown worker name (expected w1, w2, ...)")
        _check_link_raw(_merge(default, wraw) if isinstance(wraw, Mapping) else wraw, f"{name}.workers.{wname}")
    return Profile(name=name, description=doc.get("description", ""), source=doc.get("source", ""),
                   default=default, learner=learner, workers=dict(workers),
                   schedule=_schedule(doc.get("schedule"), name))


def list_profiles(directory: Path = PROFILE_DIR) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.yaml"))


def load(name_or_path: str | Path, directory: Path = PROFILE_DIR) -> Profile:
    """A shipped profile by name, or a YAML file by path."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = directory / f"{name_or_path}.yaml"
        if not path.is_file():
            raise ProfileError(f"profile: {str(name_or_path)!r} is unknown (valid: {', '.join(list_profiles(directory))})")
    try:   # bounded: a regular file, its size, its depth; a repeated key is an error, not the last one
        doc = readers.load_yaml(path, "profile", MAX_PROFILE_BYTES)
    except readers.FileError as err:
        raise ProfileError(str(err)) from None
    return from_doc(doc, path.stem)


_FLAG_PARSERS = {"rate": units.parse_rate, "delay": units.parse_delay, "jitter": units.parse_delay,
                 "loss": units.parse_loss}


class OverrideError(ProfileError):
    """A link flag (``key``: rate, delay, jitter, loss, trace) that the profile cannot take."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


def resolve(name_or_path: str | Path, overrides: Mapping[str, Any] | None = None) -> Profile:
    """The profile a run uses, in one call: `load`, then the link flags over its worker defaults
    (`with_link`), its links and document resolved. ProfileError when it does not load;
    OverrideError naming the flag when a flag is malformed or ambiguous (the profile sets that key
    per link, so the flag would be overridden in silence for some link)."""
    prof = load(name_or_path)
    if not overrides:
        return prof
    for key in overrides:
        where = [f"workers.{w}" for w, raw in prof.workers.items() if _mentions(raw, key)]
        where += [f"schedule at {c.at_s:g}s" for c in prof.schedule if _mentions(c.raw, key)]
        where += ["defaults.up/down"] if any(_mentions(prof.default.get(d, {}), key) for d in ("up", "down")) else []
        if where:
            raise OverrideError(key, f"contradicts profile {prof.name!r}, which sets {key} per link "
                                     f"({', '.join(where)}); edit a copy of the profile instead")
    check_flags(overrides)
    try:
        return with_link(prof, overrides)
    except (ProfileError, units.UnitError) as err:
        raise OverrideError(next((k for k in overrides if k in str(err)), "rate"), str(err)) from None


def check_flags(overrides: Mapping[str, Any]) -> None:
    """OverrideError naming the link flag whose value does not parse, as its own value ('20' needs a
    unit), not by the profile key it would land in."""
    for key, value in overrides.items():
        if key in _FLAG_PARSERS:
            try:
                _FLAG_PARSERS[key](value)
            except units.UnitError as err:
                raise OverrideError(key, str(err)) from None


def _mentions(raw: Any, key: str) -> bool:
    if not isinstance(raw, Mapping):
        return False
    return key in raw or any(_mentions(raw.get(d), key) for d in ("up", "down"))


def with_link(profile: Profile, defaults: Mapping[str, Any]) -> Profile:
    """A copy whose worker defaults are overridden by CLI-style flags (e.g. {'rate': '10mbit'}).
    A ``trace`` flag replaces the profile's flat rate (the trace is the rate now)."""
    base = {k: v for k, v in profile.default.items() if not ("trace" in defaults and k == "rate")}
    merged = _merge(base, defaults)
    _check_link_raw(merged, f"{profile.name}.defaults")
    return dataclasses.replace(profile, default=merged)


def _scaled_raw(raw: Any, factor: float) -> Any:
    """A raw link mapping with its rate (and each direction's, and a trace's) multiplied by ``factor``."""
    if not isinstance(raw, Mapping):
        return raw
    out = dict(raw)
    if "rate" in out:
        out["rate"] = units.format_rate(units.parse_rate(out["rate"]) * factor)
    if "trace" in out:
        ref = out["trace"] if isinstance(out["trace"], Mapping) else {"file": out["trace"]}
        out["trace"] = {**ref, "scale": float(ref.get("scale", 1.0)) * factor}
    for d in ("up", "down"):
        if isinstance(out.get(d), Mapping):
            out[d] = _scaled_raw(out[d], factor)
    return out


def scaled(profile: Profile, factor: float) -> Profile:
    """The profile with every link rate it sets (defaults, learner, each worker, every schedule step and
    trace) multiplied by ``factor``; delays, jitter, loss and the schedule's times stay (`--comm-ratio`:
    the same network shape at another speed). An unshaped rate stays unshaped."""
    doc = profile.to_doc()
    for key in ("defaults", "learner"):
        if key in doc:
            doc[key] = _scaled_raw(doc[key], factor)
    if "workers" in doc:
        doc["workers"] = {w: _scaled_raw(raw, factor) for w, raw in doc["workers"].items()}
    if "schedule" in doc:
        doc["schedule"] = [_scaled_raw(item, factor) for item in doc["schedule"]]
    return from_doc(doc, profile.name)
