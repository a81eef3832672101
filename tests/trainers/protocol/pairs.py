"""Two `Connection`s over one localhost TCP connection, for the wire's tests."""
from __future__ import annotations

import socket

from trainers.protocol import wire
from trainers.protocol.wire import Connection

TOKEN = "wire-test-token"


def tcp_pair(sndbuf: int | None = None):
    """Two ends of a localhost TCP connection; `sndbuf` shrinks the sender's kernel buffer (bytes)."""
    with socket.create_server(("127.0.0.1", 0)) as srv:
        a = socket.socket()
        if sndbuf is not None:
            a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        a.connect(srv.getsockname())
        b, _ = srv.accept()
    return a, b


def connections(sndbuf: int | None = None, max_body_bytes: int = wire.DEFAULT_MAX_BODY_BYTES):
    """(sender as worker 1's end, receiver as the learner's end), both with TOKEN."""
    a, b = tcp_pair(sndbuf)
    return (Connection(a, token=TOKEN, sender=0, peer="w1"),
            Connection(b, token=TOKEN, sender=1, peer="learner", max_body_bytes=max_body_bytes))
