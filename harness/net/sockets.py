"""The socket ledger of a namespace: every TCP connection's kernel counters, read from outside.

A job the harness did not write (`harness wrap`) cannot report its own TCP_INFO, so the harness asks
the kernel (netlink sock_diag, inet_diag with INET_DIAG_INFO: the same struct tcp_info a socket's
getsockopt returns) for every TCP connection in each node's namespace, every ``interval_s``.

``sockets.csv``, one row per connection and sample::

    t_s, wall_s, node, local, remote, state, bytes_sent, bytes_acked, bytes_received,
    bytes_retrans, total_retrans, rtt_us

``bytes_sent`` counts data segments the kernel sent (retransmissions included, Linux >= 4.19),
``bytes_retrans`` the retransmitted part, ``bytes_acked``/``bytes_received`` the in-order bytes.
The counters are cumulative per connection: a connection's last row holds its totals up to that
sample; one closed between two samples loses what it moved since the last (half an interval on
average; connections in TIME_WAIT carry no counters). Listening sockets and connections that
moved nothing are left out.

API::

    with SocketSampler(topo, run_dir / "sockets.csv", interval_s=0.5) as s:   # a background thread
        ...
    rows = sample_namespace("wh1a2b3c-w1")                                    # one snapshot
"""
from __future__ import annotations

import contextlib
import csv
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pyroute2 import DiagSocket

from harness.net import topology
from harness.net.topology import Topology

FIELDS = ["t_s", "wall_s", "node", "local", "remote", "state", "bytes_sent", "bytes_acked", "bytes_received",
          "bytes_retrans", "total_retrans", "rtt_us"]
INET_DIAG_INFO = 2                    # <linux/inet_diag.h>: the extension that carries struct tcp_info
TCP_STATES = {1: "established", 2: "syn_sent", 3: "syn_recv", 4: "fin_wait1", 5: "fin_wait2", 6: "time_wait",
              7: "close", 8: "close_wait", 9: "last_ack", 10: "listen", 11: "closing"}
CONNECTED = sum(1 << s for s in (1, 4, 5, 7, 8, 9, 11))   # states whose socket still carries counters


def open_diag(netns: str | None) -> DiagSocket:
    """A sock_diag socket bound inside `netns` (a socket belongs to the namespace it was made in)."""
    with (topology.in_netns(netns) if netns else contextlib.nullcontext()):
        diag = DiagSocket()
        diag.bind()
    return diag


def read(diag: DiagSocket) -> list[dict[str, Any]]:
    """One row per IPv4/IPv6 TCP connection that moved bytes (without t_s, wall_s and node)."""
    rows = []
    for family in (socket.AF_INET, socket.AF_INET6):
        for msg in diag.get_sock_stats(family=family, states=CONNECTED, extensions=1 << (INET_DIAG_INFO - 1)):
            info = msg.get_attr("INET_DIAG_INFO")
            if info is None:
                continue
            row = {"local": f"{msg.get('idiag_src')}:{msg.get('idiag_sport')}",
                   "remote": f"{msg.get('idiag_dst')}:{msg.get('idiag_dport')}",
                   "state": TCP_STATES.get(msg.get("idiag_state"), str(msg.get("idiag_state"))),
                   "bytes_sent": info.get("tcpi_bytes_sent") or 0, "bytes_acked": info.get("tcpi_bytes_acked") or 0,
                   "bytes_received": info.get("tcpi_bytes_received") or 0,
                   "bytes_retrans": info.get("tcpi_bytes_retrans") or 0,
                   "total_retrans": info.get("tcpi_total_retrans") or 0, "rtt_us": info.get("tcpi_rtt")}
            if row["bytes_sent"] or row["bytes_received"]:
                rows.append(row)
    return rows


def sample_namespace(netns: str | None) -> list[dict[str, Any]]:
    """One snapshot of `netns`'s connections (None: this process's namespace)."""
    diag = open_diag(netns)
    try:
        return read(diag)
    finally:
        diag.close()


class SocketSampler:
    """Appends every node's connections to a CSV file every ``interval_s`` until stopped (and once
    more at the stop). A namespace that cannot be read is one stderr line and an entry in ``errors``;
    the other nodes keep being sampled."""

    def __init__(self, topo: Topology, path: Path, interval_s: float = 0.5, nodes: list[str] | None = None):
        self.topo, self.path, self.interval_s = topo, Path(path), interval_s
        self.nodes = nodes or list(topo.nodes)
        self.errors: list[str] = []
        self._diags: dict[str, DiagSocket] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _error(self, node: str, err: BaseException) -> None:
        line = f"socket ledger: {node} unreadable: {type(err).__name__}: {err}"
        if line not in self.errors:
            self.errors.append(line)
            print(f"harness: {line}", file=sys.stderr, flush=True)

    def _sample_once(self) -> None:
        now, wall, rows = time.monotonic(), time.time(), []
        for node in self.nodes:
            try:
                if node not in self._diags:
                    self._diags[node] = open_diag(self.topo.nodes[node].netns)
                rows += [{"t_s": now, "wall_s": wall, "node": node, **r} for r in read(self._diags[node])]
            except Exception as err:   # a namespace gone at teardown, a netlink error: the others still count
                self._error(node, err)
        with self.path.open("a", newline="") as fh:
            csv.DictWriter(fh, FIELDS).writerows(rows)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample_once()

    def start(self) -> "SocketSampler":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("w", newline="") as fh:
            csv.DictWriter(fh, FIELDS).writeheader()
        self._thread = threading.Thread(target=self._loop, name="sockets", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample_once()
        for diag in self._diags.values():
            with contextlib.suppress(Exception):
                diag.close()
        self._diags.clear()

    def __enter__(self) -> "SocketSampler":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
