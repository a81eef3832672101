"""The socket ledger of a namespace: every TCP connection's kernel counters, read from outside.

A job the harness did not write (`harness wrap`) cannot report its own TCP_INFO, so the harness asks
the kernel (netlink sock_diag, inet_diag with INET_DIAG_INFO: the same struct tcp_info a socket's
getsockopt returns) for every TCP connection in each node's namespace, every ``interval_s``.

``sockets.csv``, one row per connection and sample::

    t_s, wall_s, node, local, remote, state, bytes_sent, bytes_acked, bytes_received,
    bytes_retrans, total_retrans, rtt_us

``bytes_sent`` counts data segments the kernel sent (retransmissions included, Linux >= 4.19),
``bytes_retrans`` the retransmitted part, ``bytes_acked``/``bytes_received`` the in-order bytes.
The counters are cumulative per connection: a connection's last row holds its totals. Besides the
periodic samples, the kernel announces every TCP socket it destroys, with its final counters
(sock_diag multicast group SKNLGRP_INET_TCP_DESTROY, Linux >= 4.5, CAP_NET_ADMIN): that row (state
"destroyed") is written when it arrives, so a connection that closes between two samples, as a
job's do when it exits, still counts every byte. Listening sockets and connections that moved
nothing are left out.

API::

    with SocketSampler(topo, run_dir / "sockets.csv", interval_s=0.5) as s:   # a background thread
        ...
    rows = sample_namespace("wh1a2b3c-w1")                                    # one snapshot
"""
from __future__ import annotations

import contextlib
import csv
import select
import socket
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pyroute2 import DiagSocket
from pyroute2.netlink.diag import inet_diag_msg

from harness.net import topology
from harness.net.topology import Topology

FIELDS = ["t_s", "wall_s", "node", "local", "remote", "state", "bytes_sent", "bytes_acked", "bytes_received",
          "bytes_retrans", "total_retrans", "rtt_us"]
INET_DIAG_INFO = 2                    # <linux/inet_diag.h>: the extension that carries struct tcp_info
TCP_STATES = {1: "established", 2: "syn_sent", 3: "syn_recv", 4: "fin_wait1", 5: "fin_wait2", 6: "time_wait",
              7: "close", 8: "close_wait", 9: "last_ack", 10: "listen", 11: "closing"}
CONNECTED = sum(1 << s for s in (1, 4, 5, 7, 8, 9, 11))   # states whose socket still carries counters
NETLINK_SOCK_DIAG = 4                 # <linux/netlink.h>
SKNLGRP_INET_TCP_DESTROY = 1          # <linux/sock_diag.h>: a message per destroyed IPv4 TCP socket
SKNLGRP_INET6_TCP_DESTROY = 3
NLMSG_HEADER = struct.Struct("=IHHII")


def open_diag(netns: str | None) -> DiagSocket:
    """A sock_diag socket bound inside `netns` (a socket belongs to the namespace it was made in)."""
    with (topology.in_netns(netns) if netns else contextlib.nullcontext()):
        diag = DiagSocket()
        diag.bind()
    return diag


def _row(msg, state: str | None = None) -> dict[str, Any] | None:
    """A connection's row from an inet_diag message; None without counters or bytes."""
    info = msg.get_attr("INET_DIAG_INFO")
    if info is None:
        return None
    row = {"local": f"{msg.get('idiag_src')}:{msg.get('idiag_sport')}",
           "remote": f"{msg.get('idiag_dst')}:{msg.get('idiag_dport')}",
           "state": state or TCP_STATES.get(msg.get("idiag_state"), str(msg.get("idiag_state"))),
           "bytes_sent": info.get("tcpi_bytes_sent") or 0, "bytes_acked": info.get("tcpi_bytes_acked") or 0,
           "bytes_received": info.get("tcpi_bytes_received") or 0,
           "bytes_retrans": info.get("tcpi_bytes_retrans") or 0,
           "total_retrans": info.get("tcpi_total_retrans") or 0, "rtt_us": info.get("tcpi_rtt")}
    return row if row["bytes_sent"] or row["bytes_received"] else None


def read(diag: DiagSocket) -> list[dict[str, Any]]:
    """One row per IPv4/IPv6 TCP connection that moved bytes (without t_s, wall_s and node)."""
    rows = []
    for family in (socket.AF_INET, socket.AF_INET6):
        for msg in diag.get_sock_stats(family=family, states=CONNECTED, extensions=1 << (INET_DIAG_INFO - 1)):
            row = _row(msg)
            if row is not None:
                rows.append(row)
    return rows


def open_destroy_listener(netns: str | None) -> socket.socket:
    """A netlink socket in `netns` that receives a message per TCP socket the kernel destroys."""
    with (topology.in_netns(netns) if netns else contextlib.nullcontext()):
        nl = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
    nl.bind((0, (1 << (SKNLGRP_INET_TCP_DESTROY - 1)) | (1 << (SKNLGRP_INET6_TCP_DESTROY - 1))))
    nl.setblocking(False)
    return nl


def read_destroyed(nl: socket.socket) -> list[dict[str, Any]]:
    """The final rows of the connections destroyed since the last call (non-blocking)."""
    rows = []
    while True:
        try:
            data = nl.recv(1 << 20)
        except BlockingIOError:
            return rows
        at = 0
        while at + NLMSG_HEADER.size <= len(data):
            length = NLMSG_HEADER.unpack_from(data, at)[0]
            if length < NLMSG_HEADER.size:
                break
            msg = inet_diag_msg(data[at:at + length])
            msg.decode()
            row = _row(msg, state="destroyed")
            if row is not None:
                rows.append(row)
            at += (length + 3) & ~3


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
        self._listeners: dict[str, socket.socket] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _error(self, node: str, err: BaseException) -> None:
        line = f"socket ledger: {node} unreadable: {type(err).__name__}: {err}"
        if line not in self.errors:
            self.errors.append(line)
            print(f"harness: {line}", file=sys.stderr, flush=True)

    def _write(self, rows: list[dict]) -> None:
        if rows:
            with self.path.open("a", newline="") as fh:
                csv.DictWriter(fh, FIELDS).writerows(rows)

    def _sample_once(self) -> None:
        now, wall, rows = time.monotonic(), time.time(), []
        for node in self.nodes:
            try:
                if node not in self._diags:
                    self._diags[node] = open_diag(self.topo.nodes[node].netns)
                rows += [{"t_s": now, "wall_s": wall, "node": node, **r} for r in read(self._diags[node])]
            except Exception as err:   # a namespace gone at teardown, a netlink error: the others still count
                self._error(node, err)
        self._write(rows)

    def _drain_destroyed(self) -> None:
        now, wall, rows = time.monotonic(), time.time(), []
        for node, nl in self._listeners.items():
            try:
                rows += [{"t_s": now, "wall_s": wall, "node": node, **r} for r in read_destroyed(nl)]
            except Exception as err:
                self._error(node, err)
        self._write(rows)

    def _loop(self) -> None:
        due = time.monotonic() + self.interval_s
        while not self._stop.is_set():
            wait = min(0.1, max(0.0, due - time.monotonic()))   # 0.1 s: how soon a stop is noticed
            if self._listeners:
                ready, _, _ = select.select(list(self._listeners.values()), [], [], wait)
                if ready:
                    self._drain_destroyed()
            else:
                self._stop.wait(wait)
            if time.monotonic() >= due:
                self._sample_once()
                due += self.interval_s

    def start(self) -> "SocketSampler":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("w", newline="") as fh:
            csv.DictWriter(fh, FIELDS).writeheader()
        for node in self.nodes:
            try:
                self._listeners[node] = open_destroy_listener(self.topo.nodes[node].netns)
            except Exception as err:   # no CAP_NET_ADMIN, an old kernel: periodic samples only
                self._error(node, err)
        self._thread = threading.Thread(target=self._loop, name="sockets", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._drain_destroyed()
        self._sample_once()
        for closable in (*self._diags.values(), *self._listeners.values()):
            with contextlib.suppress(Exception):
                closable.close()
        self._diags.clear()
        self._listeners.clear()

    def __enter__(self) -> "SocketSampler":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
