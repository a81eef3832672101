"""Hostile peers for the join tests of both service families: connections without the token."""
from __future__ import annotations

import os
import socket
import threading
import time

from trainers.protocol import wire


def idle_flood(address, sources: list[str], threads: int, stop: threading.Event,
               connect_timeout_s: float = 30, made: list[int] | None = None) -> list[threading.Thread]:
    """`threads` threads that each keep one idle connection open to `address` (from one of `sources`,
    round robin), re-opening it as soon as the service closes or refuses it, until `stop` is set."""
    return _flood(address, sources, threads, stop, connect_timeout_s, first=None, made=made)


def garbage_flood(address, sources: list[str], threads: int, stop: threading.Event,
                  connect_timeout_s: float = 30, made: list[int] | None = None) -> list[threading.Thread]:
    """Like `idle_flood`, but each connection first sends a well-formed frame header with a wrong
    run token (the service refuses it at once), so the threads reconnect as fast as they can."""
    header = wire.encode_frame(wire.MessageType.HELLO, b"{}", check=os.urandom(8), sender=1, version=0, seq=0)
    return _flood(address, sources, threads, stop, connect_timeout_s, first=header, made=made)


def _flood(address, sources, threads, stop, connect_timeout_s, first: bytes | None,
           made: list[int] | None = None) -> list[threading.Thread]:
    """`made`, when given, counts the connections opened (made[0])."""
    def one(source):
        while not stop.is_set():
            try:
                with socket.create_connection(address, timeout=connect_timeout_s, source_address=(source, 0)) as s:
                    if made is not None:
                        made[0] += 1
                    if first is not None:
                        s.sendall(first)
                    s.settimeout(0.2)
                    while not stop.is_set():
                        try:
                            if not s.recv(1):
                                break
                        except socket.timeout:
                            continue
            except OSError:
                time.sleep(0.001)

    out = [threading.Thread(target=one, args=(sources[i % len(sources)],), daemon=True) for i in range(threads)]
    for t in out:
        t.start()
    return out


def refusals(rows: list[dict]) -> dict[str, int]:
    """{reason: count} over the `rejected` rows of an event file (each row counts one source's
    refusals over an interval: `reasons` holds their reasons with counts)."""
    out: dict[str, int] = {}
    for r in rows:
        if r.get("kind") == "rejected":
            for reason, n in (r.get("reasons") or {r.get("reason", ""): r.get("count", 1)}).items():
                out[reason] = out.get(reason, 0) + n
    return out
