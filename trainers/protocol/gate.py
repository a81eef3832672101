"""Admission before the handshake: which new connections may wait for their HELLO.

Both service families (the HiLo learner's membership and the data-parallel aggregator) accept
connections on one listener and give each its own handshake thread, so a slow or silent peer holds
one slot, never the listener. The slots are budgeted:
- at most `max_pending` connections are in their handshake at once (threads, sockets);
- at most `per_source` of them come from one source address;
- when the global budget is full, a newcomer from a source that holds fewer slots than the largest
  holder takes the slot of that holder's oldest connection, which is closed (evicted). So peers
  without the run token cannot keep a newcomer from another address out, unless they come from more
  addresses than there are slots; a newcomer is refused only when its own source is at its budget,
  or when every slot belongs to a source holding no more than the newcomer's would.
The callers add the deadlines: a short one for the frame header (it carries the token check) and
the handshake timeout for the whole HELLO. Pure bookkeeping under one lock: no logging, no I/O
beyond shutting an evicted socket down (which wakes its handshake thread's recv).
"""
from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field


@dataclass(eq=False)
class Ticket:
    """One connection's slot; `evicted` once the gate gave its slot to a newcomer."""

    source: str
    sock: socket.socket
    t: float = field(default_factory=time.monotonic)
    evicted: bool = False


class Gate:
    def __init__(self, max_pending: int, per_source: int):
        self.max_pending, self.per_source = max_pending, min(per_source, max_pending)
        self._lock = threading.Lock()
        self._pending: list[Ticket] = []  # oldest first
        self.evicted = 0  # connections evicted so far (the caller logs them once per burst)

    def enter(self, sock: socket.socket, source: str) -> tuple[Ticket | None, str | None]:
        """A slot for a new connection from `source`, or (None, why it was refused)."""
        with self._lock:
            mine = sum(1 for t in self._pending if t.source == source)
            if mine >= self.per_source:
                return None, f"over the cap of {self.per_source} pending connections from {source}"
            if len(self._pending) >= self.max_pending:
                victim = self._victim(mine)
                if victim is None:
                    return None, f"over the cap of {self.max_pending} pending connections"
                self._evict(victim)
            ticket = Ticket(source, sock)
            self._pending.append(ticket)
            return ticket, None

    def leave(self, ticket: Ticket) -> None:
        """The handshake is over (passed or failed): the slot is free."""
        with self._lock:
            if ticket in self._pending:
                self._pending.remove(ticket)

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def _victim(self, newcomer_holds: int) -> Ticket | None:
        """The oldest connection of the source holding the most slots, if it holds more than the
        newcomer's source would after admission."""
        counts: dict[str, int] = {}
        for t in self._pending:
            counts[t.source] = counts.get(t.source, 0) + 1
        top = max(counts, key=lambda s: counts[s])
        if counts[top] <= newcomer_holds + 1:
            return None
        return next(t for t in self._pending if t.source == top)

    def _evict(self, ticket: Ticket) -> None:
        self._pending.remove(ticket)
        ticket.evicted = True
        self.evicted += 1
        try:
            ticket.sock.shutdown(socket.SHUT_RDWR)  # its handshake thread's recv returns at once
        except OSError:
            pass


def source_of(addr) -> str:
    """The source address of an accepted connection (host only: one host's ports are one source)."""
    return str(addr[0]) if isinstance(addr, tuple) and addr else str(addr)
