"""A data-parallel worker: a full replica that trains on its own shard of the generated corpus
and synchronises with the aggregator (trainers/dataparallel/aggregator.py) as its method says.

    RUN_TOKEN=... python -m trainers.dataparallel.worker --learner 10.88.0.2:29500 --worker-id 1 --run-dir DIR

Its flags are the spec's (trainers/spec.py SERVICE_PARAMS, parsed by trainers/service_args.py); `--learner`
names the aggregator, which stands where the HiLo learner does. The run's parameters come in the WELCOME.

Per optimizer step: train (forward, backward, clip, the method's local step), and at a sync:
encode (the upload as a tensor table), send_update, idle (until the download's first byte),
receive, decode_replay (the method's finish). One `update` row per step in events-w<i>.jsonl with
those phases, the loss, and at a sync the bytes written and read at this socket and the overlap.
After the last step: the parameter hash and (worker 1) the held-out perplexity in a final SYNC.
"""
from __future__ import annotations

import gc

if __name__ == "__main__":   # exec'd (python -m): the imports go without the collector (trainers.process.imports_done)
    gc.disable()

import math
import signal
import sys
import threading
import time

from trainers.protocol import messages, wire
from trainers.protocol.heartbeat import Heartbeat
from trainers.dataparallel.corpus import Corpus, perplexity
from trainers.dataparallel import get_method
from trainers.dataparallel.inprocess import gradients, replica
from trainers.dataparallel.config import BUILD_LOCK, dp_config, params_hash
from trainers.events import EventLog, PhaseTimer
from trainers.protocol.join import hello
from trainers.process import die_with_parent, imports_done, log, set_threads
from trainers import service_args, spec
from trainers.spec import RunParams
from trainers.protocol.wire import Connection, MessageType


def join(addr: tuple[str, int], worker: int, token: str, timeout_s: float) -> tuple[Connection, RunParams]:
    """HELLO, WELCOME (retried while the aggregator refuses or closes the connection before its
    WELCOME, until `timeout_s`: trainers/protocol/join.py); the heartbeats the aggregator asks for start at once (building the replica
    and the first K local steps send nothing else)."""
    conn, frame = hello(addr, worker, token, timeout_s, peer="aggregator")
    if frame.type != MessageType.WELCOME:
        raise wire.WireError(f"expected WELCOME, got {frame.type.name}")
    welcome = messages.decode(MessageType.WELCOME, frame.body)
    if welcome.get("heartbeat_s") is not None:
        Heartbeat(conn, welcome["heartbeat_s"]).start()  # ends when the connection closes
    return conn, RunParams.from_json(welcome["params"])


def finite(x: float) -> float | None:
    """A metric as the SYNC schemas carry it: null where it is not finite (JSON has no NaN)."""
    return float(x) if math.isfinite(x) else None


def sync(conn: Connection, method, step: int, up: dict, losses: list[float], timer: PhaseTimer) -> dict:
    """Upload, wait, download, apply; returns the row's byte fields and the method's metrics."""
    with timer.phase("encode"):
        body = wire.pack_tensors(up, meta={"step": step, "losses": [finite(x) for x in losses]})
    with timer.phase("send_update"):
        sent = conn.send(MessageType.SYNC, body, version=step)
    t0 = time.monotonic()
    frame = conn.recv(reuse=True)  # the download is spent before the next sync: its buffer serves again
    t_header, t_end = frame.received
    timer.add("idle", t0, t_header)
    timer.add("receive", t_header, t_end)
    with timer.phase("decode_replay"):
        if frame.type != MessageType.SYNC or frame.version != step:
            raise wire.WireError(f"expected SYNC for step {step}, got {frame.type.name} v{frame.version}")
        down, meta = wire.unpack_tensors(frame.body)
        messages.check(messages.SYNC_DOWN, meta)
        metrics = method.finish(step, down)
    return {"payload_bytes": len(body), "bytes": {"sent": {"SYNC": sent}, "received": {"SYNC": frame.nbytes}},
            "payload_bytes_down": len(frame.body), **metrics}


def train(conn: Connection, p: RunParams, worker: int, events: EventLog) -> None:
    with BUILD_LOCK:   # identical initial replicas: same seed everywhere
        model, params = replica(p.model, p.seed, p.dp_train, p.lora_rank)
    method = get_method(p.method, params, dp_config(p), worker)
    corpus = Corpus(p.seed, p.dp_seq_len)
    losses: list[float] = []
    straggle = spec.parse_straggler(p.straggler).get(worker)   # --straggler: this worker's injected delay
    for step in range(1, p.updates + 1):
        timer = PhaseTimer()
        with timer.phase("train"):
            loss, grads = gradients(model, params, corpus.batch(worker, step, p.dp_batch))
            up = method.step(step, grads)
        late = straggle.delay(p.seed, worker, step) if straggle else 0.0
        if late:
            with timer.phase("straggle"):
                time.sleep(late)
        losses.append(loss)
        row = {"version": step, "type": "DP", "loss": loss, "sync": up is not None, "straggle_s": late}
        if up is not None:
            row.update(sync(conn, method, step, up, losses, timer))
            losses = []
        events.write("update", **row, **timer.row())
    final = {"hash": params_hash(params)}
    if worker == 1:
        final["heldout_ppl"] = finite(perplexity(model, corpus.heldout(p.dp_heldout)))
    conn.send(MessageType.SYNC, wire.pack_tensors({}, meta=final), version=p.updates + 1)
    stop = conn.recv()
    events.write("stop", reason=messages.decode(MessageType.STOP, stop.body)["reason"], **final)


def _terminate(signum, _frame):
    raise SystemExit(128 + signum)


# the worker's plumbing flags (trainers/spec.py SERVICE_PARAMS); the run's parameters come in the WELCOME
DP_WORKER_FLAGS = ("learner", "worker_id", "run_dir", "connect_timeout")


def main(argv=None) -> int:
    die_with_parent()  # first thing: a harness that dies takes its services with it
    _, args = service_args.parse("trainers.dataparallel.worker", __doc__, DP_WORKER_FLAGS, argv)
    set_threads(1)
    signal.signal(signal.SIGTERM, _terminate)
    name = f"w{args.worker_id}"
    events = EventLog(args.run_dir, name)
    try:
        conn, params = join(args.learner, args.worker_id, args.token, args.connect_timeout)
        events.write("start", params=params.to_json(), role="dpworker", attempts=conn.join_attempts,
                     join_s=round(conn.join_s, 6))
        train(conn, params, args.worker_id, events)
        conn.close()
        return 0
    except (wire.WireError, OSError, ValueError) as err:
        log(name, f"failed: {type(err).__name__}: {err}")
        events.write("error", reason=f"{type(err).__name__}: {err}")
        return 1
    finally:
        events.close()


if __name__ == "__main__":
    imports_done()
    sys.exit(main())
