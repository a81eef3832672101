"""Benchmark: what K joiners' catch-ups cost the learner's main thread (trainers/hilo/membership.py admit).

    .venv/bin/python -m pytest tests/benchmarks/test_catch_up_bench.py -m benchmark -s
    WAN_BENCH_CATCH_UP_JOINERS=1,4,16 (the default)

A real Learner (micro model, identity) logs 120 updates (9 MB of catch-up per joiner), then K
joiners say HELLO at once: K that read their catch-up, then K that read nothing (their catch-up sticks
in the learner's output queue until the send timeout, 2 s here, drops them). Printed per K and kind:
the main thread's wall and CPU seconds from the first HELLO handled until all K are members (the
catch-up is queued, not sent, by then), and for the reading joiners the loop's `catch_up_send_s`
(admission -> last byte written), median and max. No time is asserted; the load is printed.
"""
from __future__ import annotations

import os
import socket
import statistics
import threading
import time

import pytest
import torch

from trainers.events import read_events
from trainers.protocol import wire
from trainers.protocol.wire import Connection, MessageType

pytestmark = [pytest.mark.benchmark]
TOKEN = "catch-up-bench"
LOGGED = 120
JOINERS = [int(n) for n in os.environ.get("WAN_BENCH_CATCH_UP_JOINERS", "1,4,16").split(",")]


def hello(address, worker: int, rcvbuf: int | None) -> Connection:
    sock = socket.socket()
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(120)
    sock.connect(address)
    conn = Connection(sock, token=TOKEN, sender=worker, peer="learner")
    conn.send(MessageType.HELLO, wire.pack_json({"worker": worker}))
    return conn


def drain(conn: Connection) -> None:
    try:
        while True:
            conn.recv()
    except (OSError, wire.WireError):
        pass


def point(tmp_path, k: int) -> list[dict]:
    from trainers.hilo.learner import Learner
    from trainers.spec import RunParams

    learner = Learner(RunParams(method="identity", workers=2 * k, updates=3, model="micro", objective="grpo"), TOKEN,
                      str(tmp_path / f"k{k}"), ("127.0.0.1", 0), worker_timeout_s=2.0, liveness_s=600.0)
    conns, rows = [], []
    try:
        learner.members.listen()
        generator = torch.Generator().manual_seed(0)
        for _ in range(LOGGED):
            grads = {n: torch.randn(t.shape, generator=generator) for n, t in learner.replica.params.items()}
            msg = learner.compressor.encode(grads)
            learner.replica.step(learner.compressor.decode(msg, reuse=True))
            learner.replay_log.append(learner.replica.version, msg)
        for kind, workers, rcvbuf in (("reading", range(1, k + 1), None), ("stuck", range(k + 1, 2 * k + 1), 4096)):
            batch = [hello(learner.address, w, rcvbuf) for w in workers]
            conns += batch
            if rcvbuf is None:
                for c in batch:
                    threading.Thread(target=drain, args=(c,), daemon=True).start()
            end = time.monotonic() + 60
            while learner.members.inbox.qsize() < k:  # every HELLO is in, none handled yet
                assert time.monotonic() < end, "the HELLOs never arrived"
                time.sleep(0.01)
            wall0, cpu0 = time.monotonic(), time.thread_time()
            while not all(w in learner.members.peers for w in workers):
                assert time.monotonic() < end, f"{kind}: not every joiner was admitted"
                list(learner.members.pump(0.01))
            rows.append({"K": k, "joiners": kind, "main wall s": time.monotonic() - wall0,
                         "main cpu s": time.thread_time() - cpu0})
            if rcvbuf is None:
                while any(learner.members.peers[w].catching_up for w in workers):
                    assert time.monotonic() < end + 60, "the reading joiners were never caught up"
                    list(learner.members.pump(0.05))
                sends = [r["catch_up_send_s"] for r in read_events(learner.events.path) if r["kind"] == "joined"]
                rows[-1].update({"catch_up_send_s median": statistics.median(sends), "max": max(sends)})
        return rows
    finally:
        for c in conns:
            c.close()
        learner.close()


def test_catch_ups_do_not_hold_the_main_thread(tmp_path):
    print(f"\nload average at the start: {os.getloadavg()}, cores: {os.cpu_count()}")
    rows = [r for k in JOINERS for r in point(tmp_path, k)]
    print(f"load average at the end: {os.getloadavg()}")
    for r in rows:
        print(" | ".join(f"{key} {value:.4f}" if isinstance(value, float) else f"{key} {value}"
                         for key, value in r.items()))
