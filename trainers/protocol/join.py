"""A worker's side of the handshake, for both families: connect, HELLO, WELCOME, retried.

A service whose handshake budget is full (trainers/protocol/gate.py) closes or resets a new
connection before its WELCOME; a service not listening yet refuses the connect. Both are tried
again with back-off (0.2 s doubling to 2 s) until the connect timeout has passed, so a genuine
worker outlasts a flood instead of exiting at the first refusal. Anything else (a wrong token
answered by a close after the header was read is indistinguishable and is retried too; a frame
that is not WELCOME is not) goes to the caller.
"""
from __future__ import annotations

import time

from trainers.process import connect, log
from trainers.protocol import wire
from trainers.protocol.wire import Connection, MessageType, PeerClosed

FIRST_RETRY_S, LAST_RETRY_S = 0.2, 2.0  # back-off between attempts


def hello(address: tuple[str, int], worker: int, token: str, timeout_s: float, *, peer: str,
          counter: wire.ByteCounter | None = None, name: str | None = None) -> tuple[Connection, wire.Frame]:
    """(the connection, its first frame: the WELCOME, unchecked) within `timeout_s` seconds; the
    connection's socket is left blocking, and `conn.join_attempts` / `conn.join_s` say how many
    connections and seconds (from the first connect to the WELCOME) it took. Raises the last error
    once the time is up."""
    start = time.monotonic()
    end, delay, attempt = start + timeout_s, FIRST_RETRY_S, 0
    while True:
        attempt += 1
        sock = connect(address, max(0.0, end - time.monotonic()))
        conn = Connection(sock, token=token, sender=worker, peer=peer, counter=counter)
        try:
            conn.send(MessageType.HELLO, wire.pack_json({"worker": worker}))
            frame = conn.recv(deadline=time.monotonic() + timeout_s)  # the service may be mid-update
            sock.settimeout(None)
            conn.join_attempts, conn.join_s = attempt, time.monotonic() - start
            return conn, frame
        except (PeerClosed, ConnectionError) as e:
            conn.close()
            if time.monotonic() + delay > end:
                raise
            if attempt == 1:  # once: a flood must not flood the worker's log either
                log(name or f"w{worker}", f"the {peer} closed the connection before its WELCOME ({e}); trying again")
            time.sleep(delay)
            delay = min(2 * delay, LAST_RETRY_S)
