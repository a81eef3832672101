"""A hostile peer for the join tests of both service families: idle connections without the token."""
from __future__ import annotations

import socket
import threading
import time


def idle_flood(address, sources: list[str], threads: int, stop: threading.Event,
               connect_timeout_s: float = 30) -> list[threading.Thread]:
    """`threads` threads that each keep one idle connection open to `address` (from one of `sources`,
    round robin), re-opening it as soon as the service closes or refuses it, until `stop` is set."""
    def one(source):
        while not stop.is_set():
            try:
                with socket.create_connection(address, timeout=connect_timeout_s, source_address=(source, 0)) as s:
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
