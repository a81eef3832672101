"""Admission before the handshake: which new connections may wait to show the run token.

Both service families (the HiLo learner's membership and the data-parallel aggregator) accept
connections on one listener and handshake each on its own (the learner on one event loop for all,
trainers/hilo/links.py; the aggregator in a thread each), so a slow or silent peer holds one slot,
never the listener. Only connections that have not yet shown the run token are budgeted
here: `await_token` peeks at the first frame's header and, once the token check in it is right, the
connection leaves the gate (`leave`), so an authenticated worker never competes with token-less
peers for a slot, and the slots cost a flood only what it holds itself:
- at most `max_pending` token-less connections at once (threads, sockets): a global budget, apart
  from the members;
- at most `per_source` of them from one source address;
- a newcomer over a budget takes the slot of the oldest pending connection of the largest holder
  (its own source when that is at its cap), which is closed (evicted), but only a connection older
  than `grace_s`: every connection gets that long to show the token, whoever comes after it. A
  genuine worker sends its header at once, so it is out of the gate one link delay after its
  connect, long before any grace ends; a newcomer that finds no slot past its grace is refused.
With the defaults (64 slots, 48 from one address) 32 idle or garbage connections from any mix of
addresses, the workers' own (127.0.0.1 in a --no-emulation run) included, never fill a budget: no
newcomer is refused or evicted and the workers join at once. Past the budgets, the eviction rule
keeps a flood from one address from holding every slot against another address.
The callers add the deadlines: a short one for the frame header (`await_token`: it carries the
token check) and the handshake timeout for the whole HELLO. Pure bookkeeping under one lock: no
logging, no I/O beyond shutting an evicted socket down (which wakes its handshake thread).
"""
from __future__ import annotations

import hmac
import select
import socket
import threading
import time
from dataclasses import dataclass, field

from trainers.protocol import wire

MAX_PENDING = 64  # token-less connections in their handshake at once (both families)
PER_SOURCE = 48  # of them from one source address
GRACE_S = 1.0  # seconds a pending connection is safe from eviction (a WAN link delay and then some)
TOKEN_BYTES = 16  # the header's magic, format, type, flags and token check: enough to authenticate
PARTIAL_POLL_S = 0.005  # sleep between peeks while a header is arriving in pieces


@dataclass(eq=False)
class Ticket:
    """One connection's slot; `evicted` once the gate gave its slot to a newcomer."""

    source: str
    sock: socket.socket
    t: float = field(default_factory=time.monotonic)
    evicted: bool = False


class Gate:
    def __init__(self, max_pending: int = MAX_PENDING, per_source: int = PER_SOURCE, grace_s: float = GRACE_S):
        self.max_pending, self.per_source = max_pending, min(per_source, max_pending)
        self.grace_s = grace_s
        self._lock = threading.Lock()
        self._pending: list[Ticket] = []  # oldest first
        self.evicted = 0  # connections evicted so far
        self.refused = 0  # newcomers refused so far

    def enter(self, sock: socket.socket, source: str) -> tuple[Ticket | None, str | None]:
        """A slot for a new connection from `source`, or (None, why it was refused)."""
        with self._lock:
            mine = sum(1 for t in self._pending if t.source == source)
            if mine >= self.per_source or len(self._pending) >= self.max_pending:
                victim = self._victim(source, mine)
                if victim is None:
                    self.refused += 1
                    cap = (f"the cap of {self.per_source} pending connections from {source}"
                           if mine >= self.per_source else f"the cap of {self.max_pending} pending connections")
                    return None, f"over {cap}, none older than {self.grace_s:g} s"
                self._evict(victim)
            ticket = Ticket(source, sock)
            self._pending.append(ticket)
            return ticket, None

    def leave(self, ticket: Ticket) -> None:
        """The connection showed the token, or its handshake is over: the slot is free (idempotent)."""
        with self._lock:
            if ticket in self._pending:
                self._pending.remove(ticket)

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def _victim(self, source: str, mine: int) -> Ticket | None:
        """The oldest connection past its grace of the source that must give a slot up: the
        newcomer's own at its per-source cap, else the largest holder (counting the newcomer)."""
        if mine >= self.per_source:
            top = source
        else:
            counts: dict[str, int] = {source: mine + 1}
            for t in self._pending:
                counts[t.source] = counts.get(t.source, 0) + (t.source != source)
            top = max(counts, key=lambda s: (counts[s], s == source))  # a tie costs the newcomer's own source
        now = time.monotonic()
        return next((t for t in self._pending if t.source == top and now - t.t >= self.grace_s), None)

    def _evict(self, ticket: Ticket) -> None:
        self._pending.remove(ticket)
        ticket.evicted = True
        self.evicted += 1
        try:
            ticket.sock.shutdown(socket.SHUT_RDWR)  # its handshake thread's poll/recv returns at once
        except OSError:
            pass


def await_token(sock: socket.socket, check: bytes, deadline: float) -> None:
    """Wait (until `deadline`, time.monotonic() seconds) for the first frame's header to show the
    run token; the bytes stay in the socket (peeked) for `Connection.recv`. Raises PeerClosed (EOF,
    also an eviction), DeadlineExceeded, or WireError for a wrong magic, format or token."""
    poller = select.poll()
    poller.register(sock, select.POLLIN | select.POLLPRI)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise wire.DeadlineExceeded("deadline passed before the frame header (the run token) arrived")
        if not poller.poll(max(1, int(left * 1000))):
            continue
        data = sock.recv(TOKEN_BYTES, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        if not data:
            raise wire.PeerClosed("connection closed by peer")
        if token_shown(data, check):
            return
        time.sleep(PARTIAL_POLL_S)  # part of the header is here: the rest is on its way


def token_shown(data, check: bytes) -> bool:
    """Whether the first bytes of a connection's first frame header (`data`, any prefix of it) show
    the run token: True once they do, False while too few have arrived; WireError for a wrong magic,
    format or token, as soon as the bytes that show it are there."""
    if bytes(data[:4]) != wire.MAGIC[:len(data[:4])]:
        raise wire.WireError(f"bad magic {bytes(data[:4])!r}, expected {wire.MAGIC!r}")
    if len(data) > 4 and data[4] != wire.FORMAT_VERSION:
        raise wire.WireError(f"unsupported format version {data[4]}, expected {wire.FORMAT_VERSION}")
    if len(data) < TOKEN_BYTES:
        return False
    if not hmac.compare_digest(bytes(data[8:16]), check):
        raise wire.WireError("wrong run token")
    return True


def source_of(addr) -> str:
    """The source address of an accepted connection (host only: one host's ports are one source)."""
    return str(addr[0]) if isinstance(addr, tuple) and addr else str(addr)
