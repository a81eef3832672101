"""Hostile peers against the data-parallel aggregator (docs/FAULTS.md D4-D6), over real sockets: the
aggregator and its dp workers run as threads of this process with the services' own classes.

- idle connections without the token, re-opened as fast as they close, cannot keep the workers out
  (the handshakes run concurrently within the gate's budget; they used to run one at a time, 10 s each);
- a SYNC meta that fails its schema (`losses: ["x"]`, `heldout_ppl: "not-a-number"`) stops the run
  with a ProtocolError naming the field (it used to crash with a TypeError, or complete with a
  string for a perplexity and no report);
- a second HELLO for a joined worker id is refused and the run goes on.
Waits are event-driven or guards against a hang; nothing asserts how long anything took.
"""
import socket
import threading
import time

import pytest

from trainers.dataparallel.aggregator import Aggregator, ProtocolError
from trainers.dataparallel.worker import join, train
from trainers.events import EventLog, read_events
from trainers.protocol import wire
from trainers.protocol.wire import Connection, MessageType
from trainers.spec import RunParams
from tests.trainers.flood import garbage_flood, idle_flood, refusals

TOKEN = "t" * 32
JOIN_S = 20  # each worker's deadline for its WELCOME: what two idle peers used to use up


def params(**changes) -> RunParams:
    values = dict(method="ddp", workers=2, updates=2, model="micro", seed=1, dp_batch=2, dp_seq_len=16, dp_heldout=4)
    return RunParams(**{**values, **changes})


def start_workers(agg: Aggregator, tmp_path, workers: int, errors: list) -> list[threading.Thread]:
    return [start_one(agg, tmp_path, w, errors) for w in range(1, workers + 1)]


def start_one(agg: Aggregator, tmp_path, w: int, errors: list) -> threading.Thread:
    def worker(w):
        try:
            conn, p = join(("127.0.0.1", agg.address[1]), w, TOKEN, JOIN_S)
            events = EventLog(tmp_path, f"w{w}")
            try:
                train(conn, p, w, events)
            finally:
                events.close()
                conn.close()
        except Exception as err:  # surfaced by the test
            errors.append(err)

    t = threading.Thread(target=worker, args=(w,), daemon=True)
    t.start()
    return t


def test_idle_connections_cannot_keep_the_workers_out(tmp_path):
    """D4: 35 idle connections from three addresses, re-opened as they close, while two dp workers
    join with a 20 s WELCOME deadline; the run completes, and no connection was refused over a cap."""
    agg = Aggregator(params(), TOKEN, str(tmp_path), ("127.0.0.1", 0))
    stop, errors = threading.Event(), []
    flood = idle_flood(agg.address, ["127.0.0.2", "127.0.0.3", "127.0.0.4"], 35, stop)
    try:
        time.sleep(0.5)  # the flood holds the budget before the workers come
        workers = start_workers(agg, tmp_path, 2, errors)
        agg.accept(120)
        stop.set()
        summary = agg.run()
    finally:
        stop.set()
        agg.close()
        for t in flood:
            t.join(10)
    for t in workers:
        t.join(60)
    assert not errors, errors
    assert summary["complete"] and summary["consistent"], summary
    rejected = refusals(read_events(tmp_path / "events-learner.jsonl"))
    assert not [r for r in rejected if "over the cap" in r], rejected  # the token-less budget held all 35


@pytest.mark.parametrize("flood", [idle_flood, garbage_flood])
def test_workers_join_under_32_connections_from_their_own_address(tmp_path, flood):
    """32 idle (or wrong-token) connections from 127.0.0.1, the workers' own address, while two dp
    workers join: the token-less budget holds them all (a worker leaves it once its header shows
    the token) and the run completes; the refused ones are one `rejected` row per source per
    interval. Join times are printed, not asserted."""
    agg = Aggregator(params(), TOKEN, str(tmp_path), ("127.0.0.1", 0))
    stop, errors = threading.Event(), []
    attackers = flood(agg.address, ["127.0.0.1"], 32, stop)
    try:
        time.sleep(0.5)  # the flood is in before the workers come
        t0 = time.monotonic()
        workers = start_workers(agg, tmp_path, 2, errors)
        agg.accept(120)
        joined = time.monotonic() - t0
        stop.set()
        summary = agg.run()
    finally:
        stop.set()
        agg.close()
        for t in attackers:
            t.join(10)
    for t in workers:
        t.join(60)
    assert not errors, errors
    assert summary["complete"] and summary["consistent"], summary
    rows = [r for r in read_events(tmp_path / "events-learner.jsonl") if r["kind"] == "rejected"]
    assert {r["source"] for r in rows} <= {"127.0.0.1"}
    print(f"\n{flood.__name__}: both dp workers joined {joined:.2f} s after they started; "
          f"{len(rows)} rejected rows for {sum(refusals(rows).values())} refusals")


def test_a_worker_retries_a_connection_reset_before_its_welcome(tmp_path):
    """The aggregator's address first resets two connections (what a full handshake budget does),
    then refuses connects (nothing listens), then the aggregator listens there: the dp worker,
    which used to exit at the first ConnectionResetError, retries and the run completes."""
    import struct

    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    resets = []

    def reset_twice():
        for _ in range(2):
            s, _ = probe.accept()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with RST
            s.close()
            resets.append(1)
        probe.close()

    threading.Thread(target=reset_twice, daemon=True).start()
    errors: list = []
    holder = type("A", (), {"address": ("127.0.0.1", port)})
    worker = start_one(holder, tmp_path, 1, errors)
    end = time.monotonic() + 60
    while len(resets) < 2:
        assert time.monotonic() < end and not errors, errors
        time.sleep(0.01)
    agg = Aggregator(params(workers=1), TOKEN, str(tmp_path), ("127.0.0.1", port))
    try:
        agg.accept(60)
        summary = agg.run()
    finally:
        agg.close()
    worker.join(60)
    assert not errors, errors
    assert summary["complete"] and summary["consistent"], summary


def hostile_meta(monkeypatch, key: str, value) -> None:
    """A token holder's worker: every SYNC meta that has `key` carries `value` there instead."""
    real = wire.pack_tensors

    def pack(tensors, meta=None):
        if meta is not None and key in meta:
            meta = {**meta, key: value}
        return real(tensors, meta)

    monkeypatch.setattr(wire, "pack_tensors", pack)


@pytest.mark.parametrize("key, value, field", [("losses", ["x"], "'losses' entry 0"),
                                               ("losses", {"a": 1}, "'losses' must be an array"),
                                               ("heldout_ppl", "not-a-number", "'heldout_ppl'"),
                                               ("heldout_ppl", -1, "'heldout_ppl' -1 is outside"),
                                               ("hash", "ZZ", "'hash' must be lowercase hex")])
def test_a_sync_meta_that_fails_its_schema_stops_the_run_with_its_field(tmp_path, monkeypatch, key, value, field):
    """D5/D6: the SYNC metas pass `messages.SYNC_UPLOAD` / `SYNC_FINAL` before anything reads them."""
    hostile_meta(monkeypatch, key, value)
    agg = Aggregator(params(workers=1), TOKEN, str(tmp_path), ("127.0.0.1", 0))
    errors: list = []
    workers = start_workers(agg, tmp_path, 1, errors)
    try:
        agg.accept(60)
        with pytest.raises(ProtocolError, match="w1: SYNC .*" + field.replace("'", ".")):
            agg.run()
    finally:
        agg.close()
        for t in workers:
            t.join(60)


def wait_rows(path, kind: str, timeout: float = 120) -> list[dict]:
    end = time.monotonic() + timeout
    while True:
        rows = [r for r in read_events(path) if r["kind"] == kind] if path.exists() else []
        if rows:
            return rows
        assert time.monotonic() < end, f"no {kind} row"
        time.sleep(0.01)


def test_a_second_hello_for_a_joined_worker_is_refused(tmp_path):
    """D3 for the aggregator: w1 has joined; a forged HELLO as worker 1 is refused without a
    WELCOME, w2 joins, and the run completes."""
    agg = Aggregator(params(), TOKEN, str(tmp_path), ("127.0.0.1", 0))
    errors: list = []
    accepting = threading.Thread(target=lambda: agg.accept(120), daemon=True)
    accepting.start()
    threads = start_workers(agg, tmp_path, 1, errors)
    try:
        wait_rows(tmp_path / "events-learner.jsonl", "joined")
        with socket.create_connection(agg.address, timeout=30) as s:
            Connection(s, token=TOKEN, sender=1, peer="agg").send(MessageType.HELLO, wire.pack_json({"worker": 1}))
            s.settimeout(30)
            assert s.recv(1) == b""  # closed, no WELCOME
        refused = wait_rows(tmp_path / "events-learner.jsonl", "rejected")
        threads.append(start_one(agg, tmp_path, 2, errors))
        accepting.join(120)
        summary = agg.run()
    finally:
        agg.close()
        for t in threads:
            t.join(60)
    assert not errors, errors
    assert summary["complete"] and summary["consistent"], summary
    assert "already connected" in refused[0]["reason"]


def test_a_silent_worker_stops_the_run_after_the_liveness_deadline(tmp_path):
    """A token holder joins as worker 2 and then says nothing, its socket open. The first sync used
    to wait --worker-timeout (900 s here) for its upload; now the run stops with the reason once no
    byte of it arrived for the liveness deadline (2 s), while w1's heartbeats and uploads keep it in."""
    agg = Aggregator(params(updates=4), TOKEN, str(tmp_path), ("127.0.0.1", 0), worker_timeout_s=900, liveness_s=2)
    errors: list = []
    outcome: list = []
    threads = start_workers(agg, tmp_path, 1, errors)
    with socket.create_connection(agg.address, timeout=30) as s:
        silent = Connection(s, token=TOKEN, sender=2, peer="agg")
        silent.send(MessageType.HELLO, wire.pack_json({"worker": 2}))
        try:
            agg.accept(120)
            assert wire.unpack_json(silent.recv().body)["heartbeat_s"] == 0.5  # a quarter of the deadline

            def run():
                try:
                    agg.run()
                except ProtocolError as err:
                    outcome.append(err)
            runner = threading.Thread(target=run, daemon=True)
            runner.start()
            runner.join(300)  # a guard against the old 900 s wait, not a speed requirement
            assert not runner.is_alive(), "the sync is still waiting for the silent worker"
        finally:
            agg.close()
            for t in threads:
                t.join(60)
    assert len(outcome) == 1 and "w2: silent for 2 s (the liveness deadline)" in str(outcome[0]), outcome
