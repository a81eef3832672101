"""Link counters: bytes, packets and drops per node link and direction, sampled through netlink.

``up`` counts what the node sent into the network (received on router port ``p<i>``), ``down``
what the network delivered to it (sent on ``p<i>``). Drops: ``qdisc_drops`` are the root qdisc's
drops (HTB leaf overflows on the node's eth0 for up, on ``p<i>`` for down; on the netem backend
they include netem's random losses); ``loss_drops`` are the fallback backend's random losses,
the packet counters of its iptables ``statistic`` DROP rules in the router namespace.

Bytes, packets and qdisc drops come from netlink (pyroute2). The loss rules are read with
``iptables-save -c`` (the fallback loads them with ``iptables-restore``; pyroute2 0.9 cannot read
xtables rules), and only where the router namespace has netfilter tables at all: a netem run,
or a fallback run without loss or delay, never calls a binary, so it needs no iptables package.

Each counter is read on its own: one that fails (a missing binary, a vanished namespace) is
left empty in that row, or the row is skipped when its bytes cannot be read, and the others
keep being sampled. :class:`LinkSampler` keeps one line per distinct failure in ``errors``
(printed to stderr when first seen; `harness run` copies them into meta.json "errors").

API::

    with LinkSampler(topo, run_dir / "links.csv", interval_s=1.0) as s:   # a background thread
        ...                                                                # appends rows as it goes
    s.errors                                                               # [] when every counter read
    rows = sample(topo)                                                    # one snapshot; raises on failure
"""
from __future__ import annotations

import contextlib
import csv
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from pyroute2 import IPRoute

from harness.net import shaper, topology
from harness.net.topology import Topology

FIELDS = ["t_s", "wall_s", "node", "direction", "bytes", "packets", "qdisc_drops", "loss_drops"]
NFPROTO_IPV4 = 2

OnError = Callable[[str, BaseException], None]


def _root_drops(qdiscs) -> dict[int, int]:
    """ifindex -> drops of its root qdisc (which sums its children), from one qdisc dump."""
    out: dict[int, int] = {}
    for qd in qdiscs:
        stats = qd.get_attr("TCA_STATS2")
        queue = stats.get_attr("TCA_STATS_QUEUE") if stats else None
        if queue and qd["parent"] == 0xFFFFFFFF:
            out[qd["index"]] = out.get(qd["index"], 0) + queue["drops"]
    return out


def _qdisc_drops(ipr: IPRoute, dev: str) -> int:
    idx = ipr.link_lookup(ifname=dev)
    if not idx:
        return 0
    return _root_drops(ipr.get_qdiscs(index=idx[0])).get(idx[0], 0)


def parse_loss_counters(saved: str) -> dict[tuple[str, str], int]:
    """(port, 'up'|'down') -> packets dropped, from ``iptables-save -c`` output, whose rule lines
    read ``[packets:bytes] -A CHAIN -i|-o PORT -m statistic ... --probability P -j DROP``
    (``-i`` port: the node's uplink, ``-o`` port: its downlink)."""
    out: dict[tuple[str, str], int] = {}
    for line in saved.splitlines():
        parts = line.split()
        if not (parts and parts[0].startswith("[") and "--probability" in parts and parts[-2:] == ["-j", "DROP"]):
            continue
        packets = int(parts[0].strip("[]").split(":")[0])
        for flag, direction in (("-i", "up"), ("-o", "down")):
            if flag in parts[:-1]:
                key = (parts[parts.index(flag) + 1], direction)
                out[key] = out.get(key, 0) + packets
    return out


def xtables_in_use(ns: str) -> bool:
    """Whether namespace ``ns`` has any iptables table (iptables-nft: an nf_tables table of the
    ip family; iptables-legacy: /proc/net/ip_tables_names). Read through the kernel, no binary."""
    from pyroute2.netlink.exceptions import NetlinkError
    from pyroute2.nftables.main import NFTables

    with topology.in_netns(ns):
        try:
            with open("/proc/thread-self/net/ip_tables_names") as fh:
                if fh.read().split():
                    return True
        except OSError:
            pass                     # no legacy ip_tables in this kernel
        try:
            nft = NFTables(nfgen_family=NFPROTO_IPV4)
        except (NetlinkError, OSError):
            return False             # no nf_tables in this kernel
        try:
            return bool(nft.get_tables())
        except (NetlinkError, OSError):
            return False
        finally:
            nft.close()


def _loss_counters(rt: str) -> dict[tuple[str, str], int]:
    if not xtables_in_use(rt):
        return {}                    # no table, so no loss rule: nothing dropped, no binary needed
    try:
        return parse_loss_counters(shaper.iptables_save(rt, counters=True))
    except FileNotFoundError:
        raise RuntimeError(f"iptables-save not found, so the loss rules in {rt} cannot be read "
                           "(apt-get install iptables)") from None


class Netlinks:
    """Netlink sockets kept open per namespace: opening one inside a namespace costs ~100 ms of
    this process here (pyroute2 0.9), every 0.5 s for every node, and the shaper's trace steps
    run in the same process. A socket that fails is dropped and opened again next time."""

    def __init__(self):
        self.open: dict[str, IPRoute] = {}

    def get(self, ns: str) -> IPRoute:
        if ns not in self.open:
            self.open[ns] = IPRoute(netns=ns, flags=0)
        return self.open[ns]

    def drop(self, ns: str) -> None:
        ipr = self.open.pop(ns, None)
        if ipr is not None:
            try:
                ipr.close()
            except Exception:
                pass      # a socket of a vanished namespace: nothing left to close

    def close(self) -> None:
        for ns in list(self.open):
            self.drop(ns)


@contextlib.contextmanager
def _netlink(ns: str, netlinks: Netlinks | None):
    if netlinks is None:
        with IPRoute(netns=ns, flags=0) as ipr:
            yield ipr
        return
    try:
        yield netlinks.get(ns)
    except BaseException:
        netlinks.drop(ns)      # the next sample opens a fresh one
        raise


def sample(topo: Topology, on_error: OnError | None = None, netlinks: Netlinks | None = None) -> list[dict[str, Any]]:
    """One row per node and direction. Without ``on_error`` any failure raises; with it, each
    counter is read on its own, a failure is reported as ``on_error(what, err)`` and the rest
    is still read (a failed drop counter is None; a node whose bytes fail has no rows).
    ``netlinks``: sockets to reuse (LinkSampler's); None opens and closes them here."""
    def read(what: str, fn: Callable[[], Any]) -> Any:
        if on_error is None:
            return fn()
        try:
            return fn()
        except Exception as err:
            on_error(what, err)
            return None

    now, wall = time.monotonic(), time.time()
    loss = read("loss_drops", lambda: _loss_counters(topo.router_ns))
    rows = []
    dumps: dict[str, Any] = {}

    def router(what: str, fn: Callable[[], Any]) -> Any:
        """One dump of the router's links or qdiscs per sample (its ports are every node's), not one
        per node: a dump's cost grows with the ports, so per node it made a sample cost N^2."""
        if what not in dumps:
            dumps[what] = fn()
        return dumps[what]

    with _netlink(topo.router_ns, netlinks) as rt:
        links = lambda: router("links", lambda: {l.get_attr("IFLA_IFNAME"): l for l in rt.get_links()})  # noqa: E731
        down = lambda: router("qdiscs", lambda: _root_drops(rt.get_qdiscs()))  # noqa: E731
        for node in topo.nodes.values():
            stats = read(f"bytes of {node.name}", lambda: links()[node.port].get_attr("IFLA_STATS64"))
            if stats is None:
                continue

            def up_drops() -> int:
                with _netlink(node.netns, netlinks) as ipr:
                    return _qdisc_drops(ipr, node.ifname)

            common = {"t_s": now, "wall_s": wall, "node": node.name}
            rows.append({**common, "direction": "up", "bytes": stats["rx_bytes"], "packets": stats["rx_packets"],
                         "qdisc_drops": read(f"qdisc_drops of {node.name} up", up_drops),
                         "loss_drops": None if loss is None else loss.get((node.port, "up"), 0)})
            rows.append({**common, "direction": "down", "bytes": stats["tx_bytes"], "packets": stats["tx_packets"],
                         "qdisc_drops": read(f"qdisc_drops of {node.name} down",
                                             lambda: down().get(links()[node.port]["index"], 0)),
                         "loss_drops": None if loss is None else loss.get((node.port, "down"), 0)})
    return rows


def describe(err: BaseException) -> str:
    """An exception as one line."""
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


class LinkSampler:
    """Appends :func:`sample` rows to a CSV file every ``interval_s`` until stopped. A counter
    that cannot be read is reported (``errors``, stderr) and the others keep being sampled.
    A sample's CPU grows with the nodes (~2 ms per node here): the wait after one is at least
    CPU_SHARE_INVERSE times the CPU it took, so the sampler never takes more than that share of a
    core from the run it measures (at 256 workers it samples every ~2 s instead of every 0.5 s)."""

    CPU_SHARE_INVERSE = 5  # the sampler's CPU at most 1/5 of a core

    def __init__(self, topo: Topology, path: Path, interval_s: float = 1.0):
        self.topo, self.path, self.interval_s = topo, Path(path), interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []   # one line per distinct failure, first seen first
        self.netlinks = Netlinks()

    def _error(self, what: str, err: BaseException) -> None:
        line = f"link counters: {what} unreadable: {describe(err)}"
        if line not in self.errors:
            self.errors.append(line)
            print(f"harness: {line}", file=sys.stderr, flush=True)

    def start(self) -> "LinkSampler":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("w", newline="") as fh:
            csv.DictWriter(fh, FIELDS).writeheader()
        self._thread = threading.Thread(target=self._loop, name="linkstats", daemon=True)
        self._thread.start()
        return self

    def _sample_once(self) -> None:
        try:
            rows = sample(self.topo, on_error=self._error, netlinks=self.netlinks)
            with self.path.open("a", newline="") as fh:
                csv.DictWriter(fh, FIELDS).writerows(rows)
        except Exception as err:   # the router namespace itself, or the file: nothing this round
            self._error("every link", err)

    def _loop(self) -> None:
        while True:
            cpu = time.thread_time()
            self._sample_once()
            cpu = time.thread_time() - cpu
            if self._stop.wait(max(self.interval_s, self.CPU_SHARE_INVERSE * cpu)):
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample_once()            # a final sample, so totals cover the whole run
        self.netlinks.close()

    def __enter__(self) -> "LinkSampler":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
