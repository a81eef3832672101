"""Shaper: a plan (:mod:`harness.net.plan`) -> kernel state through pyroute2, and back (``show``).

:class:`Shaper` applies a plan (replace semantics, so applying twice or applying a scheduled
change is safe) and tears it down again (idempotent). :func:`emulate` is the whole lifecycle:
topology, backend (:func:`harness.net.backend.decide`), plan, apply, schedule, teardown.
:func:`show` reads a live run's shaping back as a profile document.

The kernel here has NFQUEUE only as the xtables target (no nft ``queue`` expression) and
pyroute2 0.9 cannot write xtables rules, so netfilter rules are loaded with ``iptables-restore``
inside the harness's namespaces (the only subprocesses besides the delay lines; tc state is
pyroute2). Gilbert-Elliott netem loss is not wrapped by pyroute2 0.9: applying such a netem
plan raises :class:`ShaperError`.

API::

    topo = Topology.create(run_id, n_workers)
    plan = build_plan(profiles.load("transatlantic"), topo, backend.decide().name)
    with Shaper(plan) as shaper:          # apply() on enter, teardown() on exit and on SIGTERM
        ...
        shaper.update(build_plan(profile, topo, plan.backend, at_s=30))   # a scheduled change
"""
from __future__ import annotations

import contextlib
import csv
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from pyroute2 import IPRoute, netns
from pyroute2.netlink.exceptions import NetlinkError

from harness.net import topology
from harness.net.backend import decide

from harness import units
from harness.net.plan import DEFAULT_LEAF_LIMIT, Plan, build_plan, iptables_restore_text
from harness.net.profiles import LinkDir, Profile
from harness.signals import signals_raise
from harness.net.topology import Topology

DEFAULT_GSO_SEGS = 65535     # the kernel's default gso_max_segs, restored on teardown
READY_TIMEOUT_S = 10.0


class ShaperError(RuntimeError):
    """The plan cannot be applied here; the message names the operation and the reason."""


# ---- applying ---------------------------------------------------------------------------------

def _handle(text: str) -> int:
    major, _, minor = text.partition(":")
    return (int(major, 16) << 16) | int(minor or "0", 16)


def _htb_roots(qdiscs) -> set[tuple[int, int]]:
    """(ifindex, handle) of every HTB root qdisc in a qdisc dump."""
    return {(q["index"], q["handle"]) for q in qdiscs if q.get_attr("TCA_KIND") == "htb" and q["parent"] == 0xFFFFFFFF}


def _tc(ipr: IPRoute, op: dict[str, Any], idx: int | None = None, htb_roots: set | None = None) -> None:
    """Apply one qdisc operation. `htb_roots`: the namespace's HTB roots (`_htb_roots`) read once by the
    caller; None: read here (a qdisc dump covers every device of the namespace, N ports in the router's)."""
    idx = ipr.link_lookup(ifname=op["dev"])[0] if idx is None else idx
    kind = op["op"]
    if kind == "gso_max_segs":
        ipr.link("set", index=idx, gso_max_segs=op["segs"])
    elif kind == "htb_root":
        # HTB cannot be "replaced" by itself (EINVAL): an HTB root with our handle is kept as is
        roots = _htb_roots(ipr.get_qdiscs(index=idx)) if htb_roots is None else htb_roots
        if (idx, _handle(op["handle"])) not in roots:
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
        self._schedule: tuple[threading.Event, threading.Thread] | None = None
        self.schedule_start: float | None = None     # time.monotonic() at the schedule's time 0
        self._iprs: dict[str, IPRoute] = {}
        self._index: dict[tuple[str, str], int] = {}      # (namespace, device) -> ifindex

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
        """Move to another plan of the same topology (a scheduled change or a trace step): only the
        operations that differ are sent, each in place (an HTB class changes its rate with
        ``replace-class``; nothing is deleted and re-added, so no packet passes unshaped)."""
        with self._lock:
            old, self.plan = self.plan, plan
            self._apply(plan, previous=old)

    def _apply(self, plan: Plan, previous: Plan | None) -> None:
        by_ns: dict[str, list[dict]] = {}
        same = {json.dumps(op, sort_keys=True) for op in previous.ops} if previous is not None else set()
        for op in plan.ops:
            if op["op"] in ("gso_max_segs", "htb_root", "htb_class", "pfifo", "netem") \
                    and json.dumps(op, sort_keys=True) not in same:
                by_ns.setdefault(op["ns"], []).append(op)
        if previous is not None:
            self._clear_qdiscs(previous.devices() - plan.devices())
        for ns, ops in by_ns.items():
            ipr = self._netlink(ns)
            roots = _htb_roots(ipr.get_qdiscs()) if any(op["op"] == "htb_root" for op in ops) else set()
            for op in ops:
                try:
                    if (ns, op["dev"]) not in self._index:    # one GET per device, once (a lookup dumps every link)
                        self._index[(ns, op["dev"])] = ipr.link("get", ifname=op["dev"])[0]["index"]
                    _tc(ipr, op, self._index[(ns, op["dev"])], roots)
                except NetlinkError as err:
                    raise ShaperError(f"{op['op']} on {ns}/{op['dev']}: {err}") from None
        self._sync_delaylines(plan)
        for ns in _rule_namespaces(plan) | (_rule_namespaces(previous) if previous else set()):
            text = iptables_restore_text([op for op in plan.ops if op.get("ns") == ns])
            if previous is None or text != iptables_restore_text([op for op in previous.ops if op.get("ns") == ns]):
                _iptables_restore(ns, text)   # one atomic table swap, only where a rule changed

    def _netlink(self, ns: str) -> IPRoute:
        """One netlink socket per namespace, kept open: opening one inside a namespace costs ~100 ms
        here (pyroute2 0.9), which would be the lag of every trace step."""
        if ns not in self._iprs:
            self._iprs[ns] = IPRoute(netns=ns, flags=0)
        return self._iprs[ns]

    def _close_netlink(self) -> None:
        for ipr in self._iprs.values():
            with contextlib.suppress(Exception):
                ipr.close()
        self._iprs.clear()
        self._index.clear()

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
        proc = topology.popen_in(op["ns"], [sys.executable, "-m", "harness.net.delayline", config],
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
        by_ns: dict[str, list[str]] = {}
        for ns, dev in sorted(devices):
            if ns in existing:
                by_ns.setdefault(ns, []).append(dev)
        for ns, devs in by_ns.items():  # one netlink socket per namespace (opening one costs ~0.1 s)
            with IPRoute(netns=ns, flags=0) as ipr:
                for dev in devs:
                    try:
                        idx = ipr.link("get", ifname=dev)[0]["index"]
                    except NetlinkError:
                        continue  # the device is gone
                    ipr.link("set", index=idx, gso_max_segs=DEFAULT_GSO_SEGS)
                    try:
                        ipr.tc("del", index=idx, handle=0, parent=0xFFFFFFFF)
                    except NetlinkError:
                        pass  # no root qdisc of ours: nothing to remove

    # -- teardown
    def teardown(self) -> None:
        """Stop delay lines, flush rules, remove qdiscs. Safe to call twice, or after the
        namespaces are already gone."""
        with self._lock:
            self._close_netlink()
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

    def run_schedule(self, profile: Profile, topo: Topology, stop: threading.Event,
                     log: Path | None = None, start: float | None = None) -> threading.Thread:
        """Apply the profile's scheduled changes and trace steps at their times, counted from ``start``
        (time.monotonic() seconds; None: now; a moment already past plays the steps due since then at
        once) (a daemon thread; set ``stop``). Each step is a row of ``log`` (CSV, :data:`STEP_FIELDS`)
        per link direction it changed: when it was due and when the kernel had it (``lag_s``).
        A step that is already late when the next one is due too is skipped (logged ``skipped``):
        the link follows the trace's time, not a backlog."""
        start = self.schedule_start = time.monotonic() if start is None else start
        steps = StepLog(log, start, link_states(profile, topo, 0.0)) if log is not None else None

        def loop() -> None:
            times = profile.timeline(list(topo.nodes))
            at_s = next(times, None)
            while at_s is not None:
                nxt = next(times, None)
                if stop.wait(max(0.0, start + at_s - time.monotonic())):
                    break
                skip = nxt is not None and time.monotonic() >= start + nxt
                if not skip:
                    self.update(build_plan(profile, topo, self.plan.backend, at_s=at_s))
                if steps is not None:
                    steps.write(at_s, time.monotonic(), link_states(profile, topo, at_s), skipped=skip)
                at_s = nxt
            if steps is not None:
                steps.close()
        thread = threading.Thread(target=loop, name="shaper-schedule", daemon=True)
        thread.start()
        return thread

    def restart_schedule(self, profile: Profile, topo: Topology, log: Path | None = None,
                         start: float | None = None) -> None:
        """Back to the links at time 0 and play the schedule and traces again from ``start`` (None: now;
        see run_schedule)."""
        self.hold_schedule(profile, topo)
        stop = threading.Event()
        self._schedule = (stop, self.run_schedule(profile, topo, stop, log, start))

    def hold_schedule(self, profile: Profile, topo: Topology) -> None:
        """Stop the schedule and hold the links at its time 0 until ``restart_schedule`` starts its clock
        (a cell holds them while its processes start and its workers join: harness/run/launch.py)."""
        self.stop_schedule()
        self.schedule_start = None
        self.update(build_plan(profile, topo, self.plan.backend, at_s=0.0))

    def stop_schedule(self) -> None:
        if self._schedule is not None:
            stop, thread = self._schedule
            stop.set()
            thread.join()
            self._schedule = None


STEP_FIELDS = ["at_s", "due_t_s", "applied_t_s", "lag_s", "skipped", "node", "direction",
               "rate_bit_s", "delay_s", "loss_frac"]


class StepLog:
    """The schedule's steps as they are applied: one CSV row per changed link direction, written
    (and flushed) as it goes. ``*_t_s`` are time.monotonic() seconds, the clock of the services'
    event rows and of links.csv; ``lag_s`` = applied - due."""

    def __init__(self, path: Path, start: float, first: dict[tuple[str, str], dict]):
        self.start, self.last = start, {}
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = path.open("w", newline="")
        self.out = csv.DictWriter(self.fh, STEP_FIELDS)
        self.out.writeheader()
        self.write(0.0, start, first, skipped=False)   # the state the cell starts in (lag 0 by definition)

    def write(self, at_s: float, applied: float, states: dict[tuple[str, str], dict], skipped: bool) -> None:
        due = self.start + at_s
        for (node, direction), link in states.items():
            if self.last.get((node, direction)) == link:
                continue
            self.out.writerow({"at_s": at_s, "due_t_s": round(due, 6), "applied_t_s": round(applied, 6),
                               "lag_s": round(applied - due, 6), "skipped": skipped, "node": node,
                               "direction": direction, **link})
        if not skipped:
            self.last = states
        self.fh.flush()

    def close(self) -> None:
        self.fh.close()


def link_states(profile: Profile, topo: Topology, at_s: float) -> dict[tuple[str, str], dict]:
    """(node, direction) -> {rate_bit_s, delay_s, loss_frac} in force ``at_s`` into the schedule."""
    out = {}
    for node in topo.nodes:
        spec = profile.link(node, at_s)
        for direction, d in (("up", spec.up), ("down", spec.down)):
            out[(node, direction)] = {"rate_bit_s": d.rate_bit_s, "delay_s": d.delay_s, "loss_frac": d.loss_frac}
    return out


def _readline(proc: subprocess.Popen, timeout_s: float) -> str:
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    return out[0] if out else ""


@contextlib.contextmanager
def emulate(profile: Profile, n_workers: int, run_id: str | None = None,
            backend: str | None = None, create=Topology.create) -> Iterator[tuple[Topology, Shaper]]:
    """``with emulate(profile, 8) as (topo, shaper):`` topology + shaping + schedule, all torn down on exit.
    ``create(run_id, n_workers)`` builds the topology (harness/run/containers.py: containers' namespaces)."""
    chosen = decide(backend).name      # a bad name fails before anything is created
    topo = create(run_id or topology.new_run_id(), n_workers)
    try:
        with signals_raise():
            plan = build_plan(profile, topo, chosen)
            with Shaper(plan) as shaper:
                stop = threading.Event()
                shaper._schedule = (stop, shaper.run_schedule(profile, topo, stop))
                _ACTIVE[topo.run_id] = (shaper, profile, topo)
                try:
                    yield topo, shaper
                finally:
                    _ACTIVE.pop(topo.run_id, None)
                    shaper.stop_schedule()
    finally:
        topo.destroy()


_ACTIVE: dict[str, tuple[Shaper, Profile, Topology]] = {}   # run id -> what `emulate` is shaping now


def _changing(run_id: str) -> tuple[Shaper, Profile, Topology] | None:
    """What ``emulate`` shapes for the run, where its links change over time (a schedule or a trace)."""
    if run_id not in _ACTIVE:
        return None
    shp, profile, topo = _ACTIVE[run_id]
    if not profile.change_times() and not profile.trace_intervals(list(topo.nodes)):
        return None
    return shp, profile, topo


def restart_schedule(run_id: str, log: Path, start: float | None = None) -> bool:
    """Play the schedule and traces of the run ``emulate`` shapes from time 0 again, counted from ``start``
    (time.monotonic() seconds, may be past; None: now), logging each step to ``log`` (a cell's
    ``schedule.csv``); False (nothing done) when its links never change."""
    if (active := _changing(run_id)) is None:
        return False
    shp, profile, topo = active
    shp.restart_schedule(profile, topo, log, start)
    return True


def hold_schedule(run_id: str) -> bool:
    """The run's links back at their time 0 and held there, the clock stopped, until ``restart_schedule``;
    False (nothing done) when its links never change."""
    if (active := _changing(run_id)) is None:
        return False
    shp, profile, topo = active
    shp.hold_schedule(profile, topo)
    return True


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
        if "harness.net.delayline" in argv:
            for q in json.loads(argv[argv.index("harness.net.delayline") + 1])["queues"]:
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
    :func:`harness.net.profiles.from_doc` accepts (so `show` output can be applied again)."""
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
