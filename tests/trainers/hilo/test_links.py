"""The learner's connections on one event loop (trainers/hilo/links.py), over real sockets:
a stalled half frame holds up no other connection, a receiver that stops reading delays no other
member's copy of a broadcast, a joiner stuck in its catch-up holds up no update, and the learner's
threads do not grow with its connections."""
from __future__ import annotations

import socket
import threading
import time

import pytest
import torch

from trainers.events import read_events
from trainers.protocol import wire
from trainers.protocol.wire import Connection, MessageType

TOKEN = "links-token"
WAIT_S = 60.0
LOGGED = 120  # updates in the learner's replay log when a joiner arrives: 9 MB of catch-up (identity, micro)


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
    pump_until(learner, f"w{worker} to join", lambda: worker in learner.members.peers
               and learner.members.peers[worker].catching_up is None)  # its catch-up (the WELCOME) written
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


def publish(learner, generator: torch.Generator) -> tuple[int, dict]:
    """One update as the learner's loop makes it past the training step: encode a gradient, step on
    its decoding, log it for joiners, record the hash, broadcast; returns (version, frame bytes written)."""
    grads = {n: torch.randn(t.shape, generator=generator) for n, t in learner.replica.params.items()}
    msg = learner.compressor.encode(grads)
    learner.replica.step(learner.compressor.decode(msg, reuse=True))
    version = learner.replica.version
    learner.replay_log.append(version, learner.catch_up_message(msg))
    learner.consistency.record(version)
    return version, learner.members.broadcast(msg, version)


def read_all(conn: Connection, into: list) -> threading.Thread:
    """A member that keeps reading (its frames' (type, version) into `into`) until its connection ends."""
    def run():
        try:
            while True:
                frame = conn.recv()
                into.append((frame.type, frame.version))
        except (OSError, wire.WireError):
            pass
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_joiner_stuck_in_its_catch_up_holds_up_no_update_and_is_dropped_then_rejoins_hash_equal(make_learner,
                                                                                                  tmp_path):
    """w3 says HELLO at version 120 and reads nothing: its catch-up (120 logged updates, 9 MB: more than
    the socket buffers hold, 4 MiB at most by Linux's default tcp_wmem) sticks in the learner's output queue. The learner goes on publishing updates
    to w1 and w2 (w3 is a member the whole time, neither refused nor waited for), the send deadline
    (2 s) drops w3, and a genuine worker 3 then rejoins, catches up, takes the next broadcast after
    its catch-up and reports hashes equal to the learner's."""
    from trainers.hilo.worker import Worker

    learner = make_learner(3, worker_timeout_s=2.0, liveness_s=WAIT_S)
    learner.members.listen()
    generator = torch.Generator().manual_seed(0)
    received: dict[int, list] = {w: [] for w in (1, 2)}
    members = {w: join(learner, w) for w in (1, 2)}
    readers = [read_all(members[w], received[w]) for w in (1, 2)]
    for _ in range(LOGGED):
        publish(learner, generator)
    stuck = connect(learner, 3, rcvbuf=4096)
    stuck.send(MessageType.HELLO, wire.pack_json({"worker": 3}))
    pump_until(learner, "w3 to be admitted", lambda: 3 in learner.members.peers)
    catching = learner.members.peers[3].catching_up
    assert catching is not None and catching["version"] == LOGGED and catching["replayed"] == LOGGED
    assert catching["catch_up_bytes"] > 8 << 20  # more than its socket buffers hold
    published = []
    for _ in range(3):  # the main thread is not held by w3's catch-up
        version, written = publish(learner, generator)
        assert sorted(written) == ["w1", "w2"]
        published.append(version)
    assert 3 in learner.members.peers and learner.members.peers[3].catching_up is not None
    end = time.monotonic() + WAIT_S
    while not all((MessageType.UPDATE, published[-1]) in received[w] for w in (1, 2)):
        assert time.monotonic() < end, "w1 and w2 never received the updates published during w3's catch-up"
        time.sleep(0.05)
    pump_until(learner, "w3 to be dropped", lambda: 3 not in learner.members.peers)
    drop = learner.members.dropped[-1]
    assert drop["worker"] == 3 and not drop["stall"], drop
    assert drop["reason"].startswith("catch-up failed: send failed: the socket took no byte for 2 s"), drop
    assert sorted(learner.members.peers) == [1, 2] and not learner.members.stalls
    stuck.close()

    worker = Worker(3, learner.address, TOKEN, str(tmp_path / "w3"), expect={}, connect_timeout_s=WAIT_S,
                    update_timeout_s=WAIT_S)
    got: dict = {}

    def rejoin():
        try:
            welcome = got["welcome"] = worker.join()
            while worker.replica.version < welcome["version"]:
                worker.apply_next()
            got["caught_up"] = worker.report_hash()
            worker.apply_next()  # the first broadcast after its catch-up
            got["next"] = worker.report_hash()
        except BaseException as e:  # noqa: BLE001 - the test thread asserts on it
            got["error"] = e

    thread = threading.Thread(target=rejoin, daemon=True)
    thread.start()
    try:
        end = time.monotonic() + 3 * WAIT_S  # it builds its model, then replays and hashes every version
        while not learner.consistency.reported("w3", LOGGED + 3):
            assert time.monotonic() < end and "error" not in got, f"w3 never reported its catch-up: {got}"
            learner.pump(0.05)
        version, written = publish(learner, generator)
        while not learner.consistency.reported("w3", version):
            assert time.monotonic() < end and "error" not in got, f"w3 never reported version {version}: {got}"
            learner.pump(0.05)
        thread.join(WAIT_S)
    finally:
        worker.close()
    assert got["welcome"]["version"] == LOGGED + 3 and got["welcome"]["snapshot_version"] == 0
    checks = [c for c in learner.consistency.checks if c["replica"] == "w3"]
    # it reports every version it replays (--hash-every 1), the one after its catch-up too: all equal
    assert [c["version"] for c in checks] == list(range(1, LOGGED + 5)) and all(c["equal"] for c in checks), checks[-1]
    joined = [r for r in read_events(learner.events.path) if r["kind"] == "joined" and r["worker"] == 3]
    assert len(joined) == 1 and joined[0]["version"] == joined[0]["replayed"] == LOGGED + 3, joined
    assert joined[0]["catch_up_bytes"] > 0 and joined[0]["catch_up_send_s"] >= 0
    assert sorted(learner.members.peers) == [1, 2, 3] and len(learner.members.dropped) == 1
    for c in members.values():
        c.close()
    for r in readers:
        r.join(WAIT_S)
