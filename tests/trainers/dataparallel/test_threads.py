"""The aggregator serves every connection from one thread, over real sockets: 64 workers (raw
`Connection`s driven from this test's own thread, no thread per worker) join, upload, read their
download, report and get STOP, while the aggregator runs in one thread of this process. The
process's Python threads, sampled at each stage, never exceed what it had before plus that one
thread (it used to hold a thread per handshake and a pool of 2 per worker for the syncs).
"""
import socket
import threading

from trainers.dataparallel import get_method
from trainers.dataparallel.aggregator import Aggregator
from trainers.dataparallel.config import dp_config
from trainers.dataparallel.inprocess import replica
from trainers.protocol import wire
from trainers.protocol.wire import Connection, MessageType
from tests.trainers.dataparallel.test_hostile import TOKEN, params

WORKERS = 64
BATCH = 16  # connections opened before their WELCOMEs are read: well inside the gate's 48 per address


def test_threads_stay_constant_with_64_connections(tmp_path):
    p = params(workers=WORKERS, updates=1, dp_train="lora")
    _, tensors = replica(p.model, p.seed, p.dp_train, p.lora_rank)
    upload = get_method(p.method, tensors, dp_config(p)).step(1, {n: t.detach() * 0 for n, t in tensors.items()})
    agg = Aggregator(p, TOKEN, str(tmp_path), ("127.0.0.1", 0))
    before = threading.active_count()
    outcome: dict = {}

    def serve():
        try:
            agg.accept(120)
            outcome["summary"] = agg.run()
        except Exception as err:  # surfaced below
            outcome["error"] = err

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    samples, conns = [], {}
    try:
        for first in range(1, WORKERS + 1, BATCH):
            batch = range(first, min(first + BATCH, WORKERS + 1))
            for w in batch:
                conns[w] = Connection(socket.create_connection(agg.address, timeout=60), token=TOKEN, sender=w,
                                      peer="aggregator")
                conns[w].send(MessageType.HELLO, wire.pack_json({"worker": w}))
            samples.append(threading.active_count())
            for w in batch:
                assert conns[w].recv().type == MessageType.WELCOME
        for w, conn in conns.items():
            conn.send(MessageType.SYNC, wire.pack_tensors(upload, meta={"step": 1, "losses": [1.0]}), version=1)
            samples.append(threading.active_count())
        for conn in conns.values():
            down = conn.recv()
            assert (down.type, down.version) == (MessageType.SYNC, 1)
            samples.append(threading.active_count())
        for conn in conns.values():
            conn.send(MessageType.SYNC, wire.pack_tensors({}, meta={"hash": "ab" * 32}), version=2)
        for conn in conns.values():
            assert conn.recv().type == MessageType.STOP
        server.join(120)
    finally:
        for conn in conns.values():
            conn.close()
        agg.close()
    assert "error" not in outcome, outcome
    assert outcome["summary"]["complete"] and outcome["summary"]["consistent"], outcome["summary"]
    assert max(samples) <= before + 1, (before, samples)
