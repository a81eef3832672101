"""Link counters: bytes, packets and drops per node link and direction, sampled through netlink.

``up`` counts what the node sent into the network (received on router port ``p<i>``), ``down``
what the network delivered to it (sent on ``p<i>``). Drops: ``qdisc_drops`` are rate-limiter queue
overflows (HTB leaf on the node's eth0 for up, on ``p<i>`` for down); ``loss_drops`` are the
emulated random losses (iptables ``statistic`` rule counters in the router namespace).

API::

    with LinkSampler(topo, run_dir / "links.csv", interval_s=1.0):   # a background thread
        ...                                                           # appends rows as it goes
    rows = sample(topo)                                               # one snapshot (list of dicts)
"""
from __future__ import annotations

import csv
import threading
import time
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute

from harness import shaper
from harness.topology import Topology

FIELDS = ["t_s", "wall_s", "node", "direction", "bytes", "packets", "qdisc_drops", "loss_drops"]


def _qdisc_drops(ipr: IPRoute, dev: str) -> int:
    idx = ipr.link_lookup(ifname=dev)
    if not idx:
        return 0
    total = 0
    for qd in ipr.get_qdiscs(index=idx[0]):
        stats = qd.get_attr("TCA_STATS2")
        queue = stats.get_attr("TCA_STATS_QUEUE") if stats else None
        if queue and qd["parent"] == 0xFFFFFFFF:   # the root qdisc sums its children
            total += queue["drops"]
    return total


def _loss_counters(rt: str) -> dict[tuple[str, str], int]:
    out = {}
    for line in shaper.iptables_save(rt, counters=True).splitlines():
        parts = line.split()
        if line.startswith("[") and "--probability" in parts and parts[-1] == "DROP":
            packets = int(parts[0].strip("[]").split(":")[0])
            out[(parts[3], "up" if parts[2] == "-i" else "down")] = packets
    return out


def sample(topo: Topology) -> list[dict[str, Any]]:
    now, wall = time.monotonic(), time.time()
    loss = _loss_counters(topo.router_ns)
    rows = []
    with IPRoute(netns=topo.router_ns, flags=0) as rt:
        for node in topo.nodes.values():
            idx = rt.link_lookup(ifname=node.port)[0]
            stats = rt.get_links(idx)[0].get_attr("IFLA_STATS64")
            with IPRoute(netns=node.netns, flags=0) as ipr:
                up_drops = _qdisc_drops(ipr, node.ifname)
            rows.append({"t_s": now, "wall_s": wall, "node": node.name, "direction": "up",
                         "bytes": stats["rx_bytes"], "packets": stats["rx_packets"],
                         "qdisc_drops": up_drops, "loss_drops": loss.get((node.port, "up"), 0)})
            rows.append({"t_s": now, "wall_s": wall, "node": node.name, "direction": "down",
                         "bytes": stats["tx_bytes"], "packets": stats["tx_packets"],
                         "qdisc_drops": _qdisc_drops(rt, node.port), "loss_drops": loss.get((node.port, "down"), 0)})
    return rows


class LinkSampler:
    """Appends :func:`sample` rows to a CSV file every ``interval_s`` until stopped."""

    def __init__(self, topo: Topology, path: Path, interval_s: float = 1.0):
        self.topo, self.path, self.interval_s = topo, Path(path), interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def start(self) -> "LinkSampler":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("w", newline="") as fh:
            csv.DictWriter(fh, FIELDS).writeheader()
        self._thread = threading.Thread(target=self._loop, name="linkstats", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while True:
            try:
                rows = sample(self.topo)
            except Exception as err:  # namespaces torn down under us: stop quietly, keep the reason
                self.error = err
                return
            with self.path.open("a", newline="") as fh:
                csv.DictWriter(fh, FIELDS).writerows(rows)
            if self._stop.wait(self.interval_s):
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            rows = sample(self.topo)   # a final sample, so totals cover the whole run
        except Exception:
            return
        with self.path.open("a", newline="") as fh:
            csv.DictWriter(fh, FIELDS).writerows(rows)

    def __enter__(self) -> "LinkSampler":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
