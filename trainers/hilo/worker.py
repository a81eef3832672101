"""The worker service: samples rollouts with its current policy, sends them, replays updates.

    RUN_TOKEN=... python -m trainers.hilo.worker --learner 10.0.0.1:29500 --worker-id 3 --run-dir results/run1

The run's parameters (method, model, seed, task, ...) come from the learner's WELCOME; any
given as flags here must agree with them, or the worker refuses to run (exit 2).

Per batch t (pipelining depth D in {0, 1}):
    apply updates until version >= t - D                  (strictly in order, never skipping)
    sample rollouts for batch t with the current policy   (seeded by (seed, worker, t))
    send them
and at the end apply the remaining updates. Applying update v: full methods load the shipped
adapter; replay methods run AdamW on decode(payload), exactly as the learner did. Every K
versions, after catching up, and at the end the worker reports its hashes to the learner.
A worker that starts late or restarts is first brought to the learner's version: snapshot
(if any) + the logged updates after it, in order.
"""
from __future__ import annotations

import gc

if __name__ == "__main__":   # exec'd (python -m): the imports go without the collector (trainers.process.imports_done)
    gc.disable()

import os
import queue
import signal
import sys
import threading
import time

from trainers.protocol import messages, wire
from trainers.protocol.heartbeat import Heartbeat

from trainers import spec
from trainers.events import EventLog, PhaseTimer
from trainers.tasks.heldout import training_problems
from trainers.model.rollout import generate_rollouts
from trainers.compress import delta
from trainers.hilo import stack
from trainers.hilo.stack import rollout_seed
from trainers.process import die_with_parent, imports_done, log, set_threads
from trainers import service_args
from trainers.protocol.join import hello
from trainers.spec import RunParams
from trainers.protocol.wire import Connection, MessageType, WireError


class WorkerError(Exception):
    """The worker cannot go on (the learner went away, a version gap, a bad update)."""


class ConnectionLost(WorkerError):
    """The connection to the learner broke; the worker may rejoin (and catch up) on a new one."""


class UsageError(Exception):
    """A flag given to the worker contradicts the learner's run parameters."""


class Stopped(Exception):
    """The learner said STOP."""


def global_problem_ids(p, worker: int, batch: int) -> list[int]:
    """Problem ids unique over every worker's rows of one batch: the learner concatenates the
    workers' rollouts, and rows sharing an id form one GRPO group (worker-local ids 0..P-1
    would merge unrelated problems into one group and normalise their advantages together)."""
    first = (batch * p.workers + (worker - 1)) * p.problems_per_worker
    return list(range(first, first + p.problems_per_worker))


class Worker:
    def __init__(self, worker_id: int, learner: tuple[str, int], token: str, run_dir: str,
                 expect: dict, connect_timeout_s: float = 60.0, update_timeout_s: float = 600.0):
        self.id, self.name = worker_id, f"w{worker_id}"
        self.learner, self.token, self.run_dir, self.expect = learner, token, run_dir, expect
        self.connect_timeout_s, self.update_timeout_s = connect_timeout_s, update_timeout_s
        self.events = EventLog(run_dir, self.name)
        self.counter = wire.ByteCounter()
        self.inbox: queue.Queue = queue.Queue()
        self.conn: Connection | None = None
        self.heartbeat: Heartbeat | None = None

    # ------------------------------------------------------------------ setup

    def join(self) -> dict:
        """Connect, say HELLO, read WELCOME; build the replica the learner describes.

        A learner that closes the connection before its WELCOME (its handshake budget was full) is
        tried again, with back-off, until the connect timeout has passed (trainers/protocol/join.py)."""
        self.conn, frame = hello(self.learner, self.id, self.token, self.connect_timeout_s, peer="learner",
                                 counter=self.counter, name=self.name)
        if frame.type != MessageType.WELCOME:
            raise WorkerError(f"expected WELCOME from the learner, got {frame.type.name}")
        welcome = messages.decode(MessageType.WELCOME, frame.body)
        if welcome.get("heartbeat_s") is not None:  # before the model is built: that takes a while too
            self.heartbeat = Heartbeat(self.conn, welcome["heartbeat_s"]).start()
        if welcome["snapshot_version"] > welcome["version"]:
            raise WorkerError(f"WELCOME at version {welcome['version']} names a later snapshot {welcome['snapshot_version']}")
        self.params = RunParams.from_json(welcome["params"])
        for key, value in self.expect.items():
            if value is not None and getattr(self.params, key) != value:
                raise UsageError(f"--{key.replace('_', '-')}={value!r} contradicts the learner's {getattr(self.params, key)!r}")
        built = stack.build(self.params)  # once per process
        self.method, self.model, self.replica = built.method, built.model, built.replica
        self.decoder = self.method.make_compressor() if self.method.replay else None
        self.delta = self.method.make_delta(self.replica.adapter()) if self.method.delta else None
        self.task, self.tokenizer = built.task, built.tokenizer
        threading.Thread(target=self.read, daemon=True).start()
        return welcome

    def read(self) -> None:
        """Reader thread: frames arrive while the main thread samples (no head-of-line blocking).
        Into the connection's kept buffers (recv(reuse=True)): `apply_next` is done with each
        frame when it returns, so the next frame but one lands in the same memory; a frame
        still held (queued, or its tensors kept) is never overwritten, it only costs a fresh buffer."""
        try:
            while True:
                self.inbox.put(self.conn.recv(reuse=True))
        except (WireError, OSError) as e:
            self.inbox.put(e)

    # ------------------------------------------------------------------ updates

    def next_frame(self) -> wire.Frame:
        try:
            item = self.inbox.get(timeout=self.update_timeout_s)
        except queue.Empty:
            raise WorkerError(f"nothing from the learner for {self.update_timeout_s} s") from None
        if isinstance(item, Exception):
            raise ConnectionLost(f"learner connection: {item}")
        if item.type == MessageType.STOP:
            raise Stopped(messages.decode(MessageType.STOP, item.body)["reason"])
        return item

    def apply_next(self) -> None:
        """Receive the next message and apply it: version -> version + 1 (or a snapshot)."""
        timer = PhaseTimer()
        wait_start = time.monotonic()
        frame = self.next_frame()
        got = time.monotonic()
        t_header, t_body = frame.received
        timer.add("receive", t_header, t_body)
        timer.add("idle", wait_start, max(wait_start, min(got, t_header)))
        with timer.phase("decode_replay"):
            self.apply(frame)
        report = None
        if self.replica.version % self.params.hash_every == 0 or self.replica.version == self.params.updates:
            with timer.phase("hash"):
                report = self.report_hash()
        self.events.write("update", version=self.replica.version, type=frame.type.name, **timer.row(),
                          bytes={"received": {frame.type.name: frame.nbytes}}, payload_bytes=len(frame.body),
                          hash=report and report["policy_hash"])

    def apply(self, frame: wire.Frame) -> None:
        v = self.replica.version
        if frame.type == MessageType.SNAPSHOT:
            self.replica.restore(frame.body)
            if self.replica.version != frame.version:
                raise WorkerError(f"snapshot says version {self.replica.version}, frame says {frame.version}")
            return
        if frame.type != MessageType.UPDATE:
            raise WorkerError(f"unexpected {frame.type.name} from the learner")
        # Replay: Adam's state depends on history, so a gap is fatal, never skipped. Full sync
        # ships the whole policy: a late worker starts from the newest adapter.
        if frame.version != v + 1 and (self.method.replay or frame.version <= v):
            raise WorkerError(f"version gap: holding {v}, received update {frame.version}")
        if self.method.replay:
            self.replica.step(self.decoder.decode(frame.body, reuse=True))  # stepped from at once: one kept buffer
        elif self.delta is not None and delta.is_delta(frame.body):  # its base version is checked: never skips
            tensors, version = self.delta.apply(frame.body)
            if version != frame.version:
                raise WorkerError(f"update frame {frame.version} carries the delta to version {version}")
            self.replica.load_adapter(tensors, frame.version)
        else:
            tensors, meta = wire.unpack_tensors(frame.body)
            if messages.check_meta(MessageType.UPDATE, meta)["version"] != frame.version:
                raise WorkerError(f"update frame {frame.version} carries the adapter of version {meta['version']}")
            self.replica.load_adapter(tensors, frame.version)
            if self.delta is not None:  # a keyframe (catch-up): the next delta applies on top of it
                self.delta.reset(tensors, frame.version)

    def send(self, msg_type: MessageType, body: bytes) -> int:
        """Send one frame; a learner that said STOP and closed is a clean stop, not an error."""
        try:
            return self.conn.send(msg_type, body, self.replica.version)
        except OSError as e:
            time.sleep(0.2)  # let the reader thread deliver what arrived before the close
            while True:
                try:
                    item = self.inbox.get_nowait()
                except queue.Empty:
                    raise ConnectionLost(f"sending {msg_type.name}: {e}") from None
                if isinstance(item, wire.Frame) and item.type == MessageType.STOP:
                    raise Stopped(messages.decode(MessageType.STOP, item.body)["reason"]) from None

    def report_hash(self) -> dict:
        report = {"version": self.replica.version, "policy_hash": self.replica.policy_hash(),
                  "optimizer_hash": self.replica.optimizer_hash() if self.method.replay else None}
        self.send(MessageType.HASH, wire.pack_json(report))
        return report

    # ------------------------------------------------------------------ rollouts

    def rollouts(self, batch: int) -> None:
        """Sample batch `batch` with the current policy and send it."""
        p, timer = self.params, PhaseTimer()
        seed = rollout_seed(p.seed, self.id, batch)
        with timer.phase("rollout"):
            problems = training_problems(self.task, p.problems_per_worker, seed)  # never a held-out one
            r = generate_rollouts(self.model, self.tokenizer, self.task, problems, p.samples_per_problem,
                                  p.max_new_tokens, p.temperature, seed=seed,
                                  policy_version=self.replica.version,
                                  problem_ids=global_problem_ids(p, self.id, batch))
        straggle = spec.parse_straggler(p.straggler).get(self.id)   # --straggler: this worker's injected delay
        late = straggle.delay(p.seed, self.id, batch) if straggle else 0.0
        if late:
            with timer.phase("straggle"):
                time.sleep(late)
        with timer.phase("send_rollouts"):
            body = wire.pack_tensors(r.to_tensors(), meta={"batch": batch, "worker": self.id})
            written = self.send(MessageType.ROLLOUTS, body)
        self.events.write("rollouts", batch=batch, policy_version=self.replica.version, **timer.row(),
                          rows=len(r), reward_mean=sum(r.rewards) / len(r.rewards), seed=seed, straggle_s=late,
                          bytes={"sent": {"ROLLOUTS": written}}, payload_bytes=len(body),
                          tcp=self.conn.tcp_delta())  # the socket since the previous row (wire.tcp_info)

    # ------------------------------------------------------------------ the loop

    def run(self) -> int:
        welcome = self.join()
        p = self.params
        self.events.write("joined", version=welcome["version"], start_batch=welcome["start_batch"],
                          snapshot_version=welcome["snapshot_version"], attempts=self.conn.join_attempts,
                          join_s=round(self.conn.join_s, 6))
        t0, before = time.monotonic(), self.counter.total(direction="received")
        while self.replica.version < welcome["version"]:  # catch up: snapshot + logged updates (full: the newest)
            self.apply_next()
        report = self.report_hash()  # the learner checks it against its own hash at this version
        self.events.write("caught_up", version=self.replica.version, snapshot_version=welcome["snapshot_version"],
                          seconds=round(time.monotonic() - t0, 6), policy_hash=report["policy_hash"],
                          bytes_received=self.counter.total(direction="received") - before)
        for t in range(welcome["start_batch"], p.updates):
            while self.replica.version < t - p.pipeline:
                self.apply_next()
            self.rollouts(t)
        while self.replica.version < p.updates:
            self.apply_next()
        try:  # the final hash is out; wait (bounded) for the learner to let us go
            self.next_frame()
        except (Stopped, WorkerError):
            pass
        log(self.name, f"done at version {self.replica.version}")
        return 0

    def close(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.stop()
        if self.conn is not None:
            self.conn.close()
        self.events.close()


# the worker's plumbing flags (trainers/spec.py SERVICE_PARAMS); each run parameter it is given is a check
WORKER_FLAGS = ("learner", "worker_id", "run_dir", "connect_timeout", "update_timeout", "reconnects", "threads")


def main(argv=None) -> int:
    die_with_parent()  # first thing: a harness that dies takes its services with it
    _, args = service_args.parse("trainers.hilo.worker", __doc__, WORKER_FLAGS, argv, run="expected")
    set_threads(args.threads)
    signal.signal(signal.SIGTERM, lambda s, f: sys.exit(143))
    for attempt in range(args.reconnects + 1):
        worker = Worker(args.worker_id, args.learner, args.token, args.run_dir, args.expect, args.connect_timeout,
                        args.update_timeout)
        try:
            return worker.run()
        except Stopped as e:
            log(worker.name, f"stopped by the learner: {e}")
            return 0
        except UsageError as e:
            log(worker.name, f"error: {e}")
            worker.events.write("error", reason=str(e))
            return 2
        except ConnectionLost as e:  # resynchronise: a fresh replica, rejoined and caught up by the learner
            log(worker.name, f"{e}; rejoining ({attempt + 1} of {args.reconnects})")
            worker.events.write("connection_lost", reason=str(e), attempt=attempt + 1)
        except (WorkerError, WireError, OSError, ValueError) as e:  # ValueError: an undecodable update
            log(worker.name, f"error: {e}")
            worker.events.write("error", reason=str(e))
            return 1
        finally:
            worker.close()
    log(f"w{args.worker_id}", f"giving up after {args.reconnects} reconnects")
    return 1


if __name__ == "__main__":
    imports_done()
    code = main()
    sys.stdout.flush(), sys.stderr.flush()
    # Skip interpreter teardown: daemon reader threads blocked in recv() must not race it (files are closed).
    os._exit(code)
