"""The learner's connections on one event loop (trainers/hilo/links.py), over real sockets:
a stalled half frame holds up no other connection, a receiver that stops reading delays no other
member's copy of a broadcast, and the learner's threads do not grow with its connections."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from trainers.protocol import wire
from trainers.protocol.wire import Connection, MessageType

TOKEN = "links-token"
WAIT_S = 60.0


@pytest.fixture
def make_learner(tmp_path):
    from trainers.hilo.learner import Learner
    from trainers.spec import RunParams

    made = []

    def make(workers: int, **kw):
        learner = Learner(RunParams(method="identity", workers=workers, updates=3, model="micro", objective="grpo"),
                          TOKEN, str(tmp_path / f"run{len(made)}"), ("127.0.0.1", 0), **kw)
        made.append(learner)
        return learner

    yield make
    for learner in made:
        learner.close()


def connect(learner, worker: int, rcvbuf: int | None = None) -> Connection:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(WAIT_S)
    sock.connect(learner.address)
    return Connection(sock, token=TOKEN, sender=worker, peer="learner")


def pump_until(learner, what: str, done) -> list:
    """Pump the membership until `done()`; returns the (peer, frame) pairs it yielded."""
    got, end = [], time.monotonic() + WAIT_S
    while not done():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        got += list(learner.members.pump(0.05))
    return got


def frames(learner, what: str) -> list:
    """The first non-empty batch of (peer, frame) pairs the membership yields."""
    end = time.monotonic() + WAIT_S
    while not (got := list(learner.members.pump(0.05))):
        assert time.monotonic() < end, f"timed out waiting for {what}"
    return got


def join(learner, worker: int, rcvbuf: int | None = None) -> Connection:
    conn = connect(learner, worker, rcvbuf)
    conn.send(MessageType.HELLO, wire.pack_json({"worker": worker}))
    pump_until(learner, f"w{worker} to join", lambda: worker in learner.members.peers)
    assert conn.recv(deadline=time.monotonic() + WAIT_S).type == MessageType.WELCOME
    return conn


def hash_frame(worker: int, seq: int) -> bytes:
    return wire.encode_frame(MessageType.HASH, wire.pack_json({"version": 0}), check=wire.token_check(TOKEN),
                             sender=worker, version=0, seq=seq)


def test_a_stalled_half_frame_does_not_hold_up_another_connections_frames_or_join(make_learner):
    learner = make_learner(3)
    learner.members.listen()
    w1 = join(learner, 1)
    half = hash_frame(1, 1)
    w1.sock.sendall(half[:len(half) // 2])  # and then nothing: its reassembly waits, nobody else does
    stalled = connect(learner, 3)  # half a HELLO, stalled in its handshake
    hello = wire.encode_frame(MessageType.HELLO, wire.pack_json({"worker": 3}), check=wire.token_check(TOKEN),
                              sender=3, version=0, seq=0)
    stalled.sock.sendall(hello[:30])
    w2 = join(learner, 2)  # joins while both stall
    w2.sock.sendall(hash_frame(2, 1))
    assert [(peer.worker, frame.type) for peer, frame in frames(learner, "w2's frame")] == [(2, MessageType.HASH)]
    assert set(learner.members.peers) == {1, 2}
    w1.sock.sendall(half[len(half) // 2:])  # the rest of w1's frame arrives: whole, in order
    assert [(peer.worker, frame.type) for peer, frame in frames(learner, "w1's frame")] == [(1, MessageType.HASH)]
    for c in (w1, w2, stalled):
        c.close()


def test_a_receiver_that_stops_reading_does_not_delay_the_broadcast_to_the_others(make_learner):
    learner = make_learner(2, worker_timeout_s=WAIT_S)
    learner.members.listen()
    slow = join(learner, 1, rcvbuf=4096)  # never reads until the fast one has its copy
    fast = join(learner, 2)
    msg = bytes(range(256)) * (64 << 12)  # 16 MiB: more than the slow end's socket buffers hold
    out: dict = {}
    sender = threading.Thread(target=lambda: out.update(learner.members.broadcast(msg, 1)), daemon=True)
    sender.start()
    frame = fast.recv(deadline=time.monotonic() + WAIT_S)  # the whole frame, while the slow one holds its own
    assert frame.type == MessageType.UPDATE and frame.version == 1 and bytes(frame.body) == msg
    assert sender.is_alive() and not out, "the broadcast finished before the slow member read a byte"
    got = slow.recv(deadline=time.monotonic() + WAIT_S)  # now it reads: its copy goes out, the broadcast ends
    assert bytes(got.body) == msg
    sender.join(WAIT_S)
    assert out == {"w1": wire.HEADER_BYTES + len(msg), "w2": wire.HEADER_BYTES + len(msg)}
    assert not learner.members.dropped
    slow.close(), fast.close()


def test_bytes_that_arrived_while_the_loop_was_busy_are_not_silence(make_learner):
    """A member's frame that waits in the kernel when the loop comes back from a long turn is read,
    not judged silent: the liveness deadline (1 s here) counts bytes that arrived, read or not."""
    learner = make_learner(1, liveness_s=1.0)
    learner.members.listen()
    w1 = join(learner, 1)
    learner.members.links.call(lambda: time.sleep(3.0))  # the loop's turn takes 3 s: past the deadline
    time.sleep(1.5)
    w1.sock.sendall(hash_frame(1, 1))  # arrives while the loop sleeps
    assert [(peer.worker, frame.type) for peer, frame in frames(learner, "w1's frame")] == [(1, MessageType.HASH)]
    assert not learner.members.dropped
    w1.close()


def test_the_learners_threads_do_not_grow_with_its_connections(make_learner):
    n = 32
    learner = make_learner(n)
    before = threading.active_count()
    learner.members.listen()
    listening = threading.active_count()
    conns = [join(learner, w) for w in range(1, n + 1)]
    learner.members.broadcast(b"\1" * 4096, 1)
    for c in conns:
        assert c.recv(deadline=time.monotonic() + WAIT_S).type == MessageType.UPDATE
    print(f"\nlearner threads: {before} before listening, {listening} listening, "
          f"{threading.active_count()} with {n} members after a broadcast")
    assert listening == before + 1  # the event loop
    assert threading.active_count() == listening
    for c in conns:
        c.close()
    pump_until(learner, "the disconnects", lambda: all(p.conn is None for p in learner.members.peers.values()))
    assert threading.active_count() == listening
