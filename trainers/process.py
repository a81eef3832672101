"""What every service process needs, whichever family it runs: addresses, the run token,
connecting with retries, log lines, and its thread count."""
from __future__ import annotations

import os
import socket
import sys
import time

import torch

RUN_TOKEN_ENV = "RUN_TOKEN"


def parse_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"address {addr!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def run_token(explicit: str | None = None) -> str:
    token = explicit or os.environ.get(RUN_TOKEN_ENV)
    if not token:
        raise ValueError(f"no run token: set ${RUN_TOKEN_ENV}")
    return token


def connect(addr: tuple[str, int], deadline_s: float) -> socket.socket:
    """Connect, retrying until `deadline_s` seconds have passed (the learner may start later)."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            sock = socket.create_connection(addr, timeout=5)
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.2)


def log(process: str, msg: str) -> None:
    print(f"[{process}] {msg}", file=sys.stderr, flush=True)


def set_threads(n: int) -> None:
    # Bit-exact replay needs the same op order everywhere; one thread also keeps a 2-core box usable.
    torch.set_num_threads(max(1, n))
