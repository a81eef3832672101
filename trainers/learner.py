"""The learner service: collects rollouts, trains, encodes, steps itself, ships the update.

    RUN_TOKEN=... python -m trainers.learner --listen 0.0.0.0:29500 --run-dir results/run1 \
        --workers 8 --method spar --budget 1.6% --model micro --updates 20 --depth 1

Per update t (ALGORITHMS.md section 1):
    collect batch t from every member worker (in worker order, whatever order they arrive in)
    G = gradient of the objective on the batch                   (exact)
    replay methods: msg = encode(G); step on decode(msg)         (never on G)
    full methods:   step on G; msg = the adapter in the ship dtype
    log msg, snapshot every S versions, hash every K versions, send msg to every member

Threads: one listener that accepts connections, one reader per connection that validates
frames and puts them in the inbox; the main loop below owns all training state and is the
only one to act on inbox events. Sends to several workers go out in parallel.
"""
from __future__ import annotations

import argparse
import os
import queue
import signal
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from trainers import wire
from trainers.events import EventLog, PhaseTimer, median, write_summary
from trainers.models import lora_gradients
from trainers.rollout import Rollouts, concat
from trainers.service import (RunParams, add_run_args, build_replica, build_task, log, parse_addr,
                              run_params_from_args, run_token, set_threads, shipped_policy_hash)
from trainers.wire import Connection, MessageType, WireError

PROCESS = "learner"
HANDSHAKE_MAX_BODY = 64 * 1024  # bytes a connection may send before it has said a valid HELLO


class Interrupted(Exception):
    """SIGTERM/SIGINT: stop, write an incomplete summary, let the workers go."""


@dataclass
class Peer:
    worker: int
    conn: Connection | None  # None: disconnected, waiting for it to come back or time out
    start_batch: int  # the first batch this worker contributes to
    joined_t: float = field(default_factory=time.monotonic)
    lost_t: float | None = None

    @property
    def name(self) -> str:
        return f"w{self.worker}"


class Learner:
    def __init__(self, params: RunParams, token: str, run_dir: str, listen: tuple[str, int],
                 worker_timeout_s: float = 120.0, join_timeout_s: float = 300.0,
                 handshake_timeout_s: float = 10.0, max_frame_bytes: int = 64 * 2**20):
        self.params, self.token, self.run_dir = params, token, run_dir
        self.worker_timeout_s, self.join_timeout_s = worker_timeout_s, join_timeout_s
        self.handshake_timeout_s, self.max_frame_bytes = handshake_timeout_s, max_frame_bytes
        self.method = params.get_method()
        self.model, self.replica = build_replica(params, self.method)
        self.compressor = self.method.make_compressor() if self.method.replay else None
        self.objective = build_objective(params)
        self.events = EventLog(run_dir, PROCESS)
        self.counter = wire.ByteCounter()
        self.inbox: queue.Queue = queue.Queue()
        self.peers: dict[int, Peer] = {}  # current members by worker id
        self.pending: dict[tuple[int, int], tuple[Rollouts, float]] = {}  # (batch, worker) -> rollouts
        self.log_msgs: dict[int, bytes] = {}  # version -> update payload (the replay log)
        self.snapshots: dict[int, bytes] = {0: self.replica.snapshot()}
        self.hashes: dict[int, tuple[str, str | None]] = {}  # version -> (policy, optimizer) of the learner
        self.reports: dict[str, dict] = {}  # replica -> latest hash report
        self.checks: list[dict] = []
        self.consistent = True
        self.dropped: list[dict] = []
        self.rows: list[dict] = []
        self.server = socket.create_server(listen, reuse_port=False)
        self.address = self.server.getsockname()[:2]
        self._stopping = False
        self.parse_seconds = 0.0  # validating rollout bodies (tensor tables, offsets)
        self._record_hash(0)

    # ------------------------------------------------------------------ connections (threads)

    def serve(self) -> None:
        """Accept connections until stopped; each gets its own reader thread."""
        while not self._stopping:
            try:
                sock, addr = self.server.accept()
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Connection(sock, token=self.token, sender=0, peer=f"{addr[0]}:{addr[1]}",
                              counter=self.counter, max_body_bytes=HANDSHAKE_MAX_BODY)
            threading.Thread(target=self.read, args=(conn,), daemon=True).start()

    def read(self, conn: Connection) -> None:
        """Reader thread: handshake, then every frame into the inbox; any bad frame ends the connection."""
        worker = None
        try:
            conn.sock.settimeout(self.handshake_timeout_s)
            worker = self.handshake(conn)
            conn.sock.settimeout(None)
            conn.max_body_bytes = self.max_frame_bytes
            self.inbox.put(("hello", worker, conn, None))
            while True:
                self.inbox.put(("frame", worker, conn, conn.recv()))
        except (WireError, OSError, ValueError) as e:
            reason = str(e) or type(e).__name__
            if isinstance(e, socket.timeout):
                reason = "handshake timed out"
            self.inbox.put(("error", worker, conn, reason))
            conn.close()

    def handshake(self, conn: Connection) -> int:
        frame = conn.recv()
        if frame.type != MessageType.HELLO:
            raise WireError(f"expected HELLO as the first frame, got {frame.type.name}")
        hello = wire.unpack_json(frame.body)
        worker = hello.get("worker")
        if type(worker) is not int or not 1 <= worker <= self.params.workers:
            raise WireError(f"HELLO names worker {worker!r:.20}, expected 1..{self.params.workers}")
        if frame.sender != worker:
            raise WireError(f"HELLO from sender {frame.sender} claims to be worker {worker}")
        self.counter.rename(conn.peer, f"w{worker}")
        conn.peer = f"w{worker}"
        return worker

    # ------------------------------------------------------------------ inbox (main thread)

    def pump(self, timeout: float) -> None:
        """Handle inbox events for up to `timeout` seconds (returns after the first batch of them)."""
        try:
            item = self.inbox.get(timeout=timeout)
        except queue.Empty:
            return
        while True:
            self.handle(*item)
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                return

    def handle(self, kind: str, worker: int | None, conn: Connection, payload) -> None:
        if kind == "hello":
            return self.admit(worker, conn)
        current = self.peers.get(worker)
        if current is None or current.conn is None or current.conn is not conn:
            if kind == "error" and not getattr(conn, "dropped_by_learner", False):  # a connection that never joined, or was replaced: log and forget
                self.events.write("rejected", peer=conn.peer, worker=worker, reason=payload)
                log(PROCESS, f"rejected connection from {conn.peer}: {payload}")
            return
        if kind == "error":
            # Still a member: it may come back (a restarted worker says HELLO again) before the
            # timeout; `collect` drops it if it does not.
            current.conn, current.lost_t = None, time.monotonic()
            self.forget_pending(worker)
            self.events.write("disconnected", worker=worker, version=self.replica.version, reason=payload)
            log(PROCESS, f"worker {worker} disconnected at version {self.replica.version}: {payload}")
            return
        try:
            self.on_frame(current, payload)
        except (WireError, ValueError) as e:
            self.drop(worker, f"bad {payload.type.name} frame: {e}")

    def on_frame(self, peer: Peer, frame: wire.Frame) -> None:
        if frame.type == MessageType.ROLLOUTS:
            t0 = time.perf_counter()
            tensors, meta = wire.unpack_tensors(frame.body)
            batch = meta.get("batch")
            if type(batch) is not int or not 0 <= batch < self.params.updates:
                raise WireError(f"rollouts for batch {batch!r:.20} outside 0..{self.params.updates - 1}")
            if batch < self.replica.version:
                self.events.write("stale_rollouts", worker=peer.worker, batch=batch, version=self.replica.version)
                return
            if batch > self.replica.version + self.params.depth + 1 or (batch, peer.worker) in self.pending:
                raise WireError(f"rollouts for batch {batch} while at version {self.replica.version}")
            rollouts = Rollouts.from_tensors(tensors)
            vocab = self.model.get_input_embeddings().num_embeddings
            ids = [t for row in rollouts.prompt_ids + rollouts.completion_ids for t in row]
            if ids and not 0 <= min(ids) <= max(ids) < vocab:
                raise WireError(f"rollouts hold token ids outside the vocabulary 0..{vocab - 1}")
            self.pending[(batch, peer.worker)] = (rollouts, time.monotonic())
            self.parse_seconds += time.perf_counter() - t0
        elif frame.type == MessageType.HASH:
            self.on_hash(peer.name, wire.unpack_json(frame.body))
        else:
            raise WireError(f"unexpected {frame.type.name} from a worker")

    def admit(self, worker: int, conn: Connection) -> None:
        """A worker said HELLO: welcome it, bring it to the current version, make it a member."""
        old = self.peers.pop(worker, None)
        if old is not None and old.conn is not None:
            old.conn.dropped_by_learner = True
            old.conn.close()
            self.events.write("replaced", worker=worker)
        self.forget_pending(worker)
        version = self.replica.version
        # A fresh worker builds version 0 itself from the seeds (the hash check verifies it), so
        # snapshot 0 is never shipped: it replays the log from there instead.
        base = max(v for v in self.snapshots if v <= version)
        if not self.method.replay:  # full sync: the newest shipped adapter is the whole policy
            base = max(version - 1, 0)
        welcome = {"params": self.params.to_json(), "version": version, "start_batch": version,
                   "snapshot_version": base}
        try:
            conn.send(MessageType.WELCOME, wire.pack_json(welcome), version)
            if base > 0 and self.method.replay:
                conn.send(MessageType.SNAPSHOT, self.snapshots[base], base)
            for v in range(base + 1, version + 1):  # never skip: every logged update in order
                conn.send(MessageType.UPDATE, self.log_msgs[v], v)
        except OSError as e:
            self.events.write("rejected", worker=worker, reason=f"catch-up failed: {e}")
            conn.close()
            return
        self.peers[worker] = Peer(worker, conn, start_batch=version)
        if version not in self.hashes:
            self._record_hash(version)  # so the worker's post-catch-up report can be checked
        self.events.write("joined", worker=worker, version=version, snapshot_version=base,
                          replayed=version - base)
        log(PROCESS, f"worker {worker} joined at version {version} (snapshot {base} + {version - base} updates)")

    def drop(self, worker: int, reason: str) -> None:
        peer = self.peers.pop(worker, None)
        if peer is None:
            return
        if peer.conn is not None:
            peer.conn.dropped_by_learner = True  # its reader's error is then expected, not news
            peer.conn.close()
        self.forget_pending(worker)
        self.dropped.append({"worker": worker, "version": self.replica.version, "reason": reason})
        self.events.write("dropped", worker=worker, version=self.replica.version, reason=reason)
        log(PROCESS, f"dropped worker {worker} at version {self.replica.version}: {reason}")

    def harness_seconds(self) -> float:
        """Cumulative seconds of harness work outside the phase timers (framing, parsing, logging)."""
        return self.counter.seconds + self.parse_seconds + self.events.seconds

    def forget_pending(self, worker: int) -> None:
        for key in [k for k in self.pending if k[1] == worker]:
            del self.pending[key]

    # ------------------------------------------------------------------ consistency

    def _record_hash(self, version: int) -> None:
        if self.method.replay:
            self.hashes[version] = (self.replica.policy_hash(), self.replica.optimizer_hash())
        elif self.method.ship_dtype == torch.float32 or version == 0:  # version 0: built from the seed, not shipped
            self.hashes[version] = (self.replica.policy_hash(), None)
        else:  # workers sample with the adapter rounded to the ship dtype: that is the policy compared
            self.hashes[version] = (shipped_policy_hash(self.replica.adapter(), self.method.ship_dtype), None)

    def on_hash(self, replica: str, report: dict) -> None:
        version = report.get("version")
        if version not in self.hashes:
            self.events.write("hash_unchecked", replica=replica, report=report)
            return
        policy, optimizer = self.hashes[version]
        ok = report.get("policy_hash") == policy and (optimizer is None or report.get("optimizer_hash") == optimizer)
        check = {"replica": replica, "version": version, "equal": ok, "policy_hash": report.get("policy_hash"),
                 "optimizer_hash": report.get("optimizer_hash"), "learner_policy_hash": policy,
                 "learner_optimizer_hash": optimizer}
        self.checks.append(check)
        self.reports[replica] = report
        self.events.write("hash", **check)
        if not ok:
            self.consistent = False
            log(PROCESS, f"HASH MISMATCH: {replica} at version {version}: {report} vs learner {policy} {optimizer}")

    # ------------------------------------------------------------------ the loop

    def wait_for_workers(self) -> None:
        """Before the first update: wait (bounded) until every configured worker has joined."""
        end = time.monotonic() + self.join_timeout_s
        while len(self.peers) < self.params.workers and time.monotonic() < end:
            self.pump(0.1)
        if not self.peers:
            raise RuntimeError(f"no worker joined within {self.join_timeout_s} s")
        missing = sorted(set(range(1, self.params.workers + 1)) - set(self.peers))
        if missing:
            self.events.write("join_timeout", missing=missing)

    def collect(self, batch: int) -> list[tuple[int, Rollouts, float]]:
        """Batch `batch` from every member, in worker order; members that do not answer are dropped."""
        start = time.monotonic()
        while True:
            members = sorted(w for w, p in self.peers.items() if p.start_batch <= batch)
            missing = [w for w in members if (batch, w) not in self.pending]
            if members and not missing:
                return [(w, *self.pending.pop((batch, w))) for w in members]
            if time.monotonic() - start > self.worker_timeout_s:
                for w in missing:
                    self.drop(w, f"no rollouts for batch {batch} within {self.worker_timeout_s} s")
                if not self.peers:
                    raise RuntimeError(f"no worker left at batch {batch}")
                start = time.monotonic()  # the rest get a fresh timeout
            self.pump(0.05)

    def train_step(self, batch: list[tuple[int, Rollouts, float]], timer: PhaseTimer) -> tuple[bytes, dict]:
        """One update from one batch; returns (the update message, metrics)."""
        parts = [r for _, r, _ in batch]
        versions = [r.policy_version for r in parts]
        # concat wants one policy version per batch; a late joiner's rows may be one version newer.
        rollouts = concat([Rollouts(**{**vars(r), "policy_version": min(versions)}) for r in parts])
        with timer.phase("train"):
            self.model.zero_grad(set_to_none=True)
            loss, metrics = self.objective.loss(self.model, rollouts)
            loss.backward()
            grads = lora_gradients(self.model)
        if self.method.replay:
            with timer.phase("encode"):
                msg = self.compressor.encode(grads)
            with timer.phase("decode_replay"):
                self.replica.step(self.compressor.decode(msg))
        else:
            with timer.phase("decode_replay"):
                self.replica.step(grads)
            with timer.phase("encode"):
                adapter = {n: t.to(self.method.ship_dtype) for n, t in self.replica.adapter().items()}
                msg = wire.pack_tensors(adapter, meta={"version": self.replica.version})
        rewards = rollouts.rewards
        info = {"loss": float(loss.detach()), "reward_mean": sum(rewards) / len(rewards),
                "rows": len(rollouts), "metrics": metrics,
                "policy_versions": {f"w{w}": r.policy_version for w, r, _ in batch},
                "lag": self.replica.version - 1 - min(versions)}
        return msg, info

    def broadcast(self, msg: bytes, version: int, pool: ThreadPoolExecutor) -> dict[str, int]:
        """Send update `version` to every member at once; returns frame bytes written per worker."""
        peers = [p for p in self.peers.values() if p.start_batch < version and p.conn is not None]
        futures = {p.worker: pool.submit(p.conn.send, MessageType.UPDATE, msg, version) for p in peers}
        written = {}
        for worker, fut in futures.items():
            try:
                written[f"w{worker}"] = fut.result()
            except OSError as e:
                self.drop(worker, f"send failed: {e}")
        return written

    def run(self) -> dict:
        p = self.params
        self.write_summary(complete=False, status="running")
        threading.Thread(target=self.serve, daemon=True).start()
        self.events.write("start", params=p.to_json(), address=list(self.address))
        log(PROCESS, f"listening on {self.address[0]}:{self.address[1]}, method {p.method}, {p.workers} workers")
        self.wait_for_workers()
        pool = ThreadPoolExecutor(max_workers=max(1, p.workers))
        last_done, last_harness = time.monotonic(), self.harness_seconds()
        for t in range(p.updates):
            timer = PhaseTimer()
            with timer.phase("idle"):  # waiting for rollouts: the learner's share of the critical path
                batch = self.collect(t)
            before = self.counter_snapshot()
            msg, info = self.train_step(batch, timer)
            version = self.replica.version
            self.log_msgs[version] = msg
            with timer.phase("hash"):
                if version % p.hash_every == 0 or version == p.updates:
                    self._record_hash(version)
                if version % p.snapshot_every == 0:
                    self.snapshots[version] = self.replica.snapshot()
                    self.prune_log()
            with timer.phase("send_update"):
                written = self.broadcast(msg, version, pool)
            done = time.monotonic()
            # The harness's own work this update: framing + checksums, parsing rollouts, hashing,
            # snapshots, and writing the previous row; what the method's time must not include.
            now_harness = self.harness_seconds()  # this row's own write is charged to the next row
            harness = now_harness - last_harness + timer.durations.get("hash", 0.0)
            row = self.events.write(
                "update", version=version, batch=t, **timer.row(), **info,
                seconds_per_update=round(done - last_done, 6), update_payload_bytes=len(msg),
                update_frame_bytes=written, workers=sorted(written), bytes=self.counter_delta(before),
                rollout_arrival={f"w{w}": round(at, 6) for w, _, at in batch},
                hash=self.hashes.get(version, (None,))[0], harness_s=round(harness, 6))
            self.rows.append(row)
            last_done, last_harness = done, now_harness
            self.pump(0)
        self.finish()
        pool.shutdown()
        return self.write_summary(complete=True, status="complete")

    def finish(self) -> None:
        """Wait (bounded) for every member's final hash, then tell everyone to stop."""
        final = self.replica.version
        end = time.monotonic() + self.worker_timeout_s
        while time.monotonic() < end:
            waiting = [p.name for p in self.peers.values() if self.reports.get(p.name, {}).get("version") != final]
            if not waiting:
                break
            self.pump(0.05)
        else:
            for p in list(self.peers.values()):
                if self.reports.get(p.name, {}).get("version") != final:
                    self.drop(p.worker, f"no final hash within {self.worker_timeout_s} s")
        self.stop_workers("complete")

    def stop_workers(self, reason: str) -> None:
        for peer in [p for p in self.peers.values() if p.conn is not None]:
            try:
                peer.conn.send(MessageType.STOP, wire.pack_json({"reason": reason}), self.replica.version)
            except OSError:
                pass

    def prune_log(self) -> None:
        """Keep the two newest snapshots and every logged update after the older one."""
        keep = sorted(self.snapshots)[-2:]
        for v in list(self.snapshots):
            if v not in keep:
                del self.snapshots[v]
        for v in list(self.log_msgs):
            if v <= keep[0]:
                del self.log_msgs[v]

    # ------------------------------------------------------------------ metrics

    def counter_snapshot(self) -> dict:
        """Frame bytes so far by (direction, message type), summed over peers."""
        out: dict = {}
        for r in self.counter.rows():
            key = (r["direction"], r["type"])
            out[key] = out.get(key, 0) + r["frame_bytes"]
        return out

    def counter_delta(self, before: dict) -> dict:
        out: dict = {}
        for key, value in self.counter_snapshot().items():
            delta = value - before.get(key, 0)
            if delta:
                out.setdefault(key[0], {})[key[1]] = delta
        return out

    def write_summary(self, complete: bool, status: str) -> dict:
        final = self.replica.version
        state_hashes = {"learner": self.hashes.get(final, (None, None))[0]}
        optimizer_hashes = {"learner": self.hashes.get(final, (None, None))[1]}
        for name, report in sorted(self.reports.items()):
            if report.get("version") == final:
                state_hashes[name] = report.get("policy_hash")
                optimizer_hashes[name] = report.get("optimizer_hash")
        policies = set(state_hashes.values())
        optims = set(optimizer_hashes.values()) if self.method.replay else {None}
        rows = self.rows
        one = [v for r in rows for v in r["update_frame_bytes"].values()]
        summary = {
            "complete": complete, "status": status, "method": self.params.method,
            "protocol": self.method.protocol, "workers": self.params.workers, "params": self.params.to_json(),
            "updates": final, "updates_planned": self.params.updates,
            "seconds_per_update_median": median(r["seconds_per_update"] for r in rows),
            # framing, checksums, rollout validation, hashing, snapshots, event rows (learner side)
            "harness_fraction_median": median(r["harness_s"] / r["seconds_per_update"] for r in rows
                                              if r["seconds_per_update"] > 0),
            "payload_bytes_per_update": {
                "update_payload": median(r["update_payload_bytes"] for r in rows),
                "learner_to_one_worker": median(one),
                "learner_to_workers_total": median(sum(r["update_frame_bytes"].values()) for r in rows),
            },
            "lag": {"median": median(r["lag"] for r in rows), "max": max((r["lag"] for r in rows), default=None)},
            "state_hashes": state_hashes,
            "optimizer_hashes": optimizer_hashes if self.method.replay else None,
            "consistent": bool(complete and self.consistent and len(policies) == 1 and len(optims) == 1
                               and len(state_hashes) > 1),
            "hash_checks": len(self.checks), "hash_mismatches": [c for c in self.checks if not c["equal"]],
            "dropped": self.dropped, "bytes_by_peer": self.counter.rows(),
        }
        write_summary(self.run_dir, summary)
        return summary

    def close(self) -> None:
        self._stopping = True
        try:
            self.server.shutdown(socket.SHUT_RDWR)  # wakes the accept() of the listener thread
        except OSError:
            pass
        self.server.close()
        for peer in [p for p in self.peers.values() if p.conn is not None]:
            peer.conn.close()
        self.events.close()


def build_objective(params: RunParams):
    from trainers.objectives import get_objective

    if params.objective == "distill":
        from trainers.objectives.teacher import build_teacher

        teacher = build_teacher(build_task(params), params.model, seed=params.seed, steps=params.teacher_steps)
        return get_objective("distill", teacher=teacher)
    return get_objective(params.objective)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainers.learner", description=__doc__.split("\n")[0])
    p.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT to listen on (port 0: any free port)")
    p.add_argument("--run-dir", required=True, help="run folder: event file, summary.json, learner.addr")
    p.add_argument("--worker-timeout", type=float, default=120.0, help="seconds before a silent worker is dropped")
    p.add_argument("--join-timeout", type=float, default=300.0, help="seconds to wait for workers to join")
    p.add_argument("--handshake-timeout", type=float, default=10.0,
                   help="seconds a new connection has to send a valid HELLO")
    p.add_argument("--max-frame-bytes", type=int, default=64 * 2**20, help="largest frame body accepted from a worker")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    add_run_args(p, required=True)
    args = p.parse_args(argv)
    try:
        params = run_params_from_args(args)
        params.get_method()
        build_task(params)  # an unknown task or objective fails here, not in every worker
        from trainers.objectives import available as objectives
        if params.objective not in objectives():
            raise ValueError(f"unknown objective {params.objective!r}; valid objectives: {', '.join(objectives())}")
        token = run_token()
        listen = parse_addr(args.listen)
    except ValueError as e:
        p.error(str(e))
    set_threads(args.threads)
    learner = Learner(params, token, args.run_dir, listen, worker_timeout_s=args.worker_timeout,
                      join_timeout_s=args.join_timeout, handshake_timeout_s=args.handshake_timeout,
                      max_frame_bytes=args.max_frame_bytes)
    # The address file lets a caller that asked for port 0 find the learner.
    addr_file = f"{args.run_dir}/learner.addr"
    with open(addr_file + ".tmp", "w") as f:
        f.write(f"{learner.address[0]}:{learner.address[1]}\n")
    os.replace(addr_file + ".tmp", addr_file)

    def interrupt(signum, _frame):
        raise Interrupted(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)
    try:
        summary = learner.run()
        log(PROCESS, f"done: {summary['updates']} updates, consistent={summary['consistent']}")
        return 0 if summary["consistent"] else 3
    except (Interrupted, RuntimeError) as e:
        log(PROCESS, f"stopped early: {e}")
        learner.events.write("interrupted", reason=str(e))
        learner.stop_workers(f"learner stopped: {e}")
        learner.write_summary(complete=False, status=f"interrupted: {e}")
        return 1
    finally:
        learner.close()


if __name__ == "__main__":
    code = main()
    sys.stdout.flush(), sys.stderr.flush()
    # Skip interpreter teardown: daemon reader threads blocked in recv() must not race it (files are closed).
    os._exit(code)
