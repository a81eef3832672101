"""What every service process needs, whichever family it runs: addresses, the run token,
connecting with retries, log lines, its thread count, and dying with the harness that started it."""
from __future__ import annotations

import ctypes
import gc
import os
import signal
import socket
import sys
import time

import torch

RUN_TOKEN_ENV = "RUN_TOKEN"
PARENT_PID_ENV = "WAN_PARENT_PID"  # set by harness.run.launch.Processes: the pid of the harness that started us
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def imports_done() -> None:
    """The end of an exec'd service's imports, which ran with the collector off from the module's first
    line: Python's recipe for a process that imports much and then runs (the gc module's docs), as the
    fork server does for the services it forks. The collector re-scanned torch's and transformers'
    ~350k objects every few thousand allocations while they were imported (~0.45 s of a ~2.6 s import);
    frozen, they stay out of every later collection too."""
    gc.freeze()
    gc.enable()


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


def die_with_parent() -> None:
    """SIGTERM this service when the harness that started it dies, however it dies (SIGKILL too):
    the kernel's parent-death signal (prctl PR_SET_PDEATHSIG), asked for first thing in main().
    The harness names itself in $WAN_PARENT_PID; a parent that died before the request was made
    (we were re-parented already) is handled here at once. Without the variable (started by hand,
    or in a container whose controller is not our parent) nothing changes. SIGTERM, not SIGKILL:
    the services' handlers then write their summary as interrupted and exit."""
    parent = os.environ.get(PARENT_PID_ENV, "")
    if not parent.isdigit() or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        log("process", f"prctl(PR_SET_PDEATHSIG) failed: {os.strerror(ctypes.get_errno())}")
    if os.getppid() != int(parent):
        os.kill(os.getpid(), signal.SIGTERM)
