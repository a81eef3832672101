"""The data-parallel aggregator: the star's centre for `ddp`, `lowrank-ddp`, `diloco`, `lordo-*`.

    RUN_TOKEN=... python -m trainers.dataparallel.aggregator --listen 0.0.0.0:29500 --run-dir DIR --method lordo-global ...

It takes the learner's place (same flags, same `learner.addr`, same `events-learner.jsonl` and
`summary.json`, so harness/results/tables.py reads it like a learner): workers (trainers/dataparallel/worker.py) say
HELLO, get WELCOME {"params": RunParams}, then at every sync each uploads one SYNC tensor table;
the aggregator combines (trainers/dataparallel: the method's Aggregator) and sends one SYNC table
back to each. After the last step every worker sends a final SYNC (no tensors; meta: parameter
hash, held-out perplexity) and gets STOP.

Joins (`accept`): each connection gets its own handshake thread, budgeted by
`trainers.protocol.gate` (at most 64 token-less connections at once, 48 from one address; one that
shows the token leaves the budget; a newcomer over it evicts the largest holder's oldest past its
grace), with 3 s for the frame header (the run token) and 10 s for the whole HELLO, so idle or
garbage connections from any address, the workers' own included, cannot keep the workers out (and
the workers retry a refused connect until their connect timeout). Refused connections are counted:
one `rejected` row per source address per 10 s, with the count. A HELLO for an id already joined is
refused. A joined worker from which no byte arrives for `--liveness` seconds (10 by default; the
workers send a HEARTBEAT every quarter of it while they compute: trainers/protocol/heartbeat.py)
stops the run at once with that reason, instead of each sync waiting `--worker-timeout`. Every
meta passes its schema in `trainers.protocol.messages` (SYNC_UPLOAD, SYNC_FINAL) before it is read; a worker's frame that fails it stops the run with the reason (a sync needs every
worker's share), never with a traceback.

Event rows: one `update` row per optimizer step (version = step), the interval between two syncs
spread evenly over its K steps (seconds_per_update = seconds per optimizer step); the sync step's
row carries the bytes: update_payload_bytes / update_frame_bytes (download, per worker),
payload_bytes_up / wire_bytes_up (uploads, all workers, counted at this socket), claimed_bytes_up /
claimed_bytes_down (the method's formula, per worker); the subspace overlap is in the dp workers' rows.
"""
from __future__ import annotations

import errno
import queue
import signal
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

import torch

from trainers.protocol import messages, wire
from trainers.protocol.gate import Gate, Ticket, await_token, source_of
from trainers.dataparallel import get_method
from trainers.dataparallel.inprocess import replica
from trainers.dataparallel.config import BUILD_LOCK, dp_config, params_hash
from trainers.events import EventLog, PhaseTimer, Tally, atomic_write_text, write_summary
from trainers.process import die_with_parent, log, set_threads
from trainers import service_args
from trainers.spec import RunParams
from trainers.protocol.wire import Connection, MessageType

PROCESS = "learner"          # the event file's name: results.py reads the star's centre as the learner
MAX_META_BYTES = 64 * 1024   # a SYNC table's meta (losses of K steps, a hash)
REJECTED_INTERVAL_S = 10.0  # at most one `rejected` row per source address per this many seconds
TOKEN_TIMEOUT_S, HANDSHAKE_TIMEOUT_S = 3.0, 10.0  # for the frame header (the token); for the whole HELLO
HANDSHAKE_MAX_BODY = 64 * 1024  # bytes a connection may send before its HELLO passed
LIVENESS_S = 10.0  # seconds without a byte from a joined worker before the run stops (--liveness; spec.py)


class ProtocolError(wire.WireError):
    """A worker sent something the protocol does not allow here; the run stops (a data-parallel
    sync cannot proceed without every worker's share)."""


def check_upload(frame: wire.Frame, step: int, worker: int,
                 schema: messages.Schema = messages.SYNC_UPLOAD) -> tuple[dict[str, torch.Tensor], dict]:
    """A worker's SYNC frame for `step`: tensors fp32 and finite, meta small and matching `schema`
    (SYNC_UPLOAD, or SYNC_FINAL for the final report); ProtocolError naming the worker otherwise."""
    if frame.type != MessageType.SYNC or frame.version != step:
        raise ProtocolError(f"w{worker}: expected SYNC for step {step}, got {frame.type.name} v{frame.version}")
    try:
        tensors, meta = wire.unpack_tensors(frame.body)
        if len(wire.pack_json(meta)) > MAX_META_BYTES:
            raise ProtocolError(f"SYNC meta larger than {MAX_META_BYTES} bytes")
        messages.check(schema, meta)
    except wire.WireError as err:
        raise ProtocolError(f"w{worker}: {err}") from None
    if meta.get("step", step) != step:
        raise ProtocolError(f"w{worker}: SYNC frame for step {step} whose meta says step {meta['step']}")
    for name, t in tensors.items():
        if t.dtype != torch.float32 or not torch.isfinite(t).all():
            raise ProtocolError(f"w{worker}: tensor {name!r} is not finite fp32")
    return tensors, meta


def same_tables(ups: list[dict[str, torch.Tensor]]) -> None:
    layout = [(n, tuple(t.shape)) for n, t in ups[0].items()]
    for w, u in enumerate(ups[1:], 2):
        if [(n, tuple(t.shape)) for n, t in u.items()] != layout:
            raise ProtocolError(f"w{w}: its tensor table differs from w1's")


class Aggregator:
    def __init__(self, params: RunParams, token: str, run_dir: str, listen: tuple[str, int],
                 worker_timeout_s: float = 120.0, liveness_s: float = LIVENESS_S):
        self.p, self.token, self.run_dir = params, token, run_dir
        self.worker_timeout_s = worker_timeout_s  # a sync's wait for an upload (a sync needs every share)
        self.liveness_s = liveness_s  # a worker silent this long (no byte, no heartbeat) stops the run at once
        self.cfg = dp_config(params)
        with BUILD_LOCK:
            _, tensors = replica(params.model, params.seed, params.dp_train, params.lora_rank)
        self.method = get_method(params.method, tensors, self.cfg)
        self.combiner = self.method.make_aggregator()
        self.events = EventLog(run_dir, PROCESS)
        self.counter = wire.ByteCounter()
        self.conns: dict[int, Connection] = {}
        self.pool = ThreadPoolExecutor(max_workers=2 * params.workers)  # a late upload's read + the next one
        self.pending: dict = {}  # worker -> the future of an upload a sync went on without (--quorum)
        self.rows: list[dict] = []
        self.finals: dict[int, dict] = {}
        self.sock = socket.create_server(listen)
        self.address = self.sock.getsockname()[:2]
        self.gate = Gate()  # the token-less budget (trainers.protocol.gate's defaults)
        self.rejections = Tally(self.events, "rejected", REJECTED_INTERVAL_S)
        self.hellos: queue.Queue = queue.Queue()  # (worker, conn) from the handshake threads
        self._joining = True  # False once every worker joined: late handshakes close their connection

    # ---- membership: all M workers, once ----------------------------------------------------
    def accept(self, timeout_s: float) -> None:
        """Until every worker has joined (or TimeoutError after `timeout_s`): accept connections,
        each handshake in its own thread within the gate's budget; WELCOME the valid HELLOs here."""
        end = time.monotonic() + timeout_s
        self.sock.settimeout(0.1)
        try:
            while len(self.conns) < self.p.workers:
                self._welcome_ready()
                self.rejections.flush()
                if time.monotonic() > end:
                    raise TimeoutError(f"{len(self.conns)} of {self.p.workers} workers joined in {timeout_s:g} s")
                try:
                    s, addr = self.sock.accept()
                except socket.timeout:
                    continue
                except OSError as err:  # out of descriptors, an aborted connection: retry, never end the run
                    if err.errno not in (errno.ECONNABORTED, errno.EINTR, errno.EAGAIN):
                        time.sleep(0.05)
                    continue
                evicted = self.gate.evicted
                ticket, why = self.gate.enter(s, source_of(addr))
                if ticket is None:
                    s.close()
                    self.rejections.add(source_of(addr), reason=why)
                    continue
                if self.gate.evicted > evicted:
                    self.rejections.add(source_of(addr), reason="evicted from its handshake slot (token-less past its grace) by a newcomer")
                threading.Thread(target=self._handshake, args=(s, addr, ticket), daemon=True).start()
        finally:
            self._joining = False
            self.sock.close()  # nobody else may join a data-parallel run
            self.rejections.flush(due_only=False)

    def _handshake(self, s: socket.socket, addr, ticket: Ticket) -> None:
        """Handshake thread: a valid HELLO within the deadlines goes to the main thread; anything
        else is logged (unless the gate evicted it) and closed."""
        peer = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) and len(addr) >= 2 else str(addr)
        conn = Connection(s, token=self.token, sender=0, peer=peer, counter=self.counter,
                          max_body_bytes=HANDSHAKE_MAX_BODY)
        conn.source = source_of(addr)
        try:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            start = time.monotonic()
            await_token(s, conn.check, start + TOKEN_TIMEOUT_S)
            self.gate.leave(ticket)  # the token showed: out of the token-less budget
            hello = conn.recv(deadline=start + HANDSHAKE_TIMEOUT_S)
            if hello.type != MessageType.HELLO:
                raise wire.WireError(f"expected HELLO as the first frame, got {hello.type.name}")
            worker = messages.decode(MessageType.HELLO, hello.body)["worker"]
            if not 1 <= worker <= self.p.workers or hello.sender != worker:
                raise wire.WireError(f"HELLO names worker {worker} (sender {hello.sender}), expected 1..{self.p.workers}")
            s.settimeout(None)
            self.hellos.put((worker, conn))
        except Exception as err:  # a bad or silent peer ends here, whatever it sent
            conn.close()
            if not ticket.evicted and self._joining:
                self.rejections.add(source_of(addr), peer=peer, reason=f"{type(err).__name__}: {err}")
        finally:
            self.gate.leave(ticket)

    def _welcome_ready(self) -> None:
        """WELCOME the workers whose HELLO passed; a second HELLO for a joined id is refused."""
        while True:
            try:
                worker, conn = self.hellos.get_nowait()
            except queue.Empty:
                return
            if worker in self.conns:
                conn.close()
                self.rejections.add(conn.source, peer=conn.peer, worker=worker, reason=f"worker {worker} is already connected")
                continue
            self.counter.rename(conn.peer, f"w{worker}")
            conn.peer = f"w{worker}"
            conn.max_body_bytes = wire.DEFAULT_MAX_BODY_BYTES
            try:
                conn.send(MessageType.WELCOME, wire.pack_json({"params": self.p.to_json(), "version": 0,
                                                               "start_batch": 0, "snapshot_version": 0,
                                                               "heartbeat_s": self.liveness_s / 4}))
            except OSError as err:
                conn.close()
                self.events.write("rejected", worker=worker, reason=f"WELCOME failed: {err}")
                continue
            self.conns[worker] = conn
            self.events.write("joined", worker=worker)

    def recv(self, worker: int) -> wire.Frame:
        """`worker`'s next frame other than a heartbeat, within --worker-timeout; a worker from which
        no byte arrives for the liveness deadline stops the run at once (ProtocolError)."""
        conn, end = self.conns[worker], time.monotonic() + self.worker_timeout_s
        try:
            while True:
                frame = conn.recv(deadline=end, idle_s=self.liveness_s)
                if frame.type != MessageType.HEARTBEAT:
                    return frame
                messages.decode(MessageType.HEARTBEAT, frame.body)
        except wire.Silent as err:
            raise ProtocolError(f"w{worker}: silent for {self.liveness_s:g} s (the liveness deadline): {err}") from None
        finally:
            conn.sock.settimeout(None)  # the deadline's timeout must not cut the next (long) send

    # ---- one sync -----------------------------------------------------------------------------
    def gather(self, step: int) -> tuple[list[int], list[wire.Frame]]:
        """The uploads for `step`: every worker's, or with --quorum K as soon as K are in, every one
        in by then (worker order). A late worker's upload is read at the next sync and dropped there
        (a `stale_upload` row: the step it was for, its staleness in steps); the late worker still
        gets this sync's download (it reads it after its upload), so every replica applies the same
        downloads and stays consistent."""
        workers = sorted(self.conns)

        def next_upload(w: int, late):
            if late is not None:  # the upload this worker sent too late for an earlier sync
                old = late.result()
                self.events.write("stale_upload", worker=w, step=old.version, staleness=step - old.version)
            return self.recv(w)

        futures = {self.pool.submit(next_upload, w, self.pending.pop(w, None)): w for w in workers}
        need = min(self.p.quorum or len(workers), len(workers))
        done: set = set()
        for fut in as_completed(futures):
            fut.result()  # an error (a timeout, a silent worker, a bad frame) stops the run as before
            done.add(fut)
            if len(done) >= need:
                done |= {f for f in futures if f.done() and f.exception() is None}
                break
        for fut, w in futures.items():
            if fut not in done:
                self.pending[w] = fut
        got = sorted(((futures[f], f.result()) for f in done), key=lambda x: x[0])
        return [w for w, _ in got], [f for _, f in got]

    def sync(self, step: int, timer: PhaseTimer) -> dict:
        everyone = sorted(self.conns)
        up_before = {w: self.counter.total(peer=f"w{w}", direction="received") for w in everyone}
        up_payload = {w: self.counter.total(peer=f"w{w}", direction="received", field="payload") for w in everyone}
        with timer.phase("idle"):  # waiting for the slowest upload it needs (compute + link)
            workers, frames = self.gather(step)
        with timer.phase("decode_replay"):
            got = [check_upload(f, step, w) for f, w in zip(frames, workers)]
            ups = [t for t, _ in got]
            same_tables(ups)
            down = self.combiner.combine(step, ups)
            body = wire.pack_tensors(down, meta={"step": step})
        with timer.phase("send_update"):
            sent = dict(zip(everyone, self.pool.map(
                lambda w: self.conns[w].send(MessageType.SYNC, body, version=step), everyone)))
        up_wire = sum(self.counter.total(peer=f"w{w}", direction="received") - up_before[w] for w in everyone)
        up_pay = sum(self.counter.total(peer=f"w{w}", direction="received", field="payload") - up_payload[w]
                     for w in everyone)
        losses = [m.get("losses", []) for _, m in got]
        claimed = self.method.claimed_bytes(step)
        return {"update_payload_bytes": len(body), "update_frame_bytes": {str(w): n for w, n in sent.items()},
                "payload_bytes_up": up_pay, "wire_bytes_up": up_wire, "claimed_bytes_up": claimed[0],
                "claimed_bytes_down": claimed[1], "losses": losses, "contributors": [f"w{w}" for w in workers],
                "left_out": [f"w{w}" for w in everyone if w not in workers]}

    def write_rows(self, first: int, step: int, t_prev: float, now: float, timer: PhaseTimer, info: dict) -> None:
        """One update row per optimizer step first..step; the sync's bytes and phases on the last."""
        k = step - first + 1
        per = (now - t_prev) / k
        losses = info.pop("losses")
        for i, v in enumerate(range(first, step + 1)):
            loss = [ls[i] for ls in losses if i < len(ls) and ls[i] is not None]  # null: not finite there
            row = {"version": v, "batch": v - 1, "seconds_per_update": per, "t": t_prev + per * (i + 1),
                   "loss": sum(loss) / len(loss) if loss else None, "sync": v == step, "lag": 0}
            if v == step:
                row.update(timer.row(), **info)
            else:
                row.update(update_payload_bytes=0, update_frame_bytes={}, payload_bytes_up=0, wire_bytes_up=0,
                           claimed_bytes_up=0, claimed_bytes_down=0, durations_s={}, phases={})
            self.rows.append(self.events.write("update", **row))

    def run(self) -> dict:
        self.write_summary(False, "running")
        t_prev, first, last = time.monotonic(), 1, None
        for step in range(1, self.p.updates + 1):
            if not self.method.is_sync(step):
                continue
            timer = PhaseTimer()
            info = self.sync(step, timer)
            last = (first, step, t_prev, time.monotonic(), timer, info)
            if step < self.p.updates:
                self.write_rows(*last)
            t_prev, first = last[3], step + 1
        self.finish()
        last[-1]["heldout_ppl"] = self.finals[min(self.finals)].get("heldout_ppl")  # results.DP_FIELDS
        self.write_rows(*last)  # the last sync's rows wait for the held-out perplexity (evaluated untimed)
        return self.write_summary(True, "complete")

    def finish(self) -> None:
        """Every worker's final report (parameter hash, held-out perplexity), then STOP; a late
        upload still pending (--quorum) is read and dropped first."""
        workers = sorted(self.conns)
        for w, late in list(self.pending.items()):
            old = late.result()
            self.events.write("stale_upload", worker=w, step=old.version, staleness=self.p.updates + 1 - old.version)
        self.pending.clear()
        frames = list(self.pool.map(self.recv, workers))
        for f, w in zip(frames, workers):
            _, meta = check_upload(f, self.p.updates + 1, w, messages.SYNC_FINAL)
            self.finals[w] = meta
        ppl = self.finals[workers[0]].get("heldout_ppl")
        self.events.write("heldout", version=self.p.updates, heldout_ppl=ppl)  # not "eval": that is pass@k's
        for w in workers:
            self.conns[w].send(MessageType.STOP, wire.pack_json({"reason": "complete"}))

    def write_summary(self, complete: bool, status: str) -> dict:
        hashes = {str(w): m.get("hash") for w, m in self.finals.items()}
        consistent = bool(hashes) and len(set(hashes.values())) == 1
        summary = {"complete": complete, "status": status, "method": self.p.method, "protocol": "data-parallel",
                   "params": self.p.to_json(), "updates": len(self.rows), "updates_planned": self.p.updates,
                   "workers": self.p.workers, "consistent": consistent, "hashes": hashes, "hash_checks": 1 if hashes else 0,
                   "heldout_ppl": next((m.get("heldout_ppl") for m in self.finals.values()), None),
                   "bytes": self.counter.rows()}
        write_summary(self.run_dir, summary)
        return summary

    def close(self) -> None:
        for c in self.conns.values():
            c.close()
        self.sock.close()
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.events.close()


def _terminate(signum, _frame):
    raise SystemExit(128 + signum)


# the aggregator's plumbing flags (trainers/spec.py SERVICE_PARAMS); the run's parameters come beside them
AGGREGATOR_FLAGS = ("listen", "run_dir", "worker_timeout", "join_timeout", "liveness")


def main(argv=None) -> int:
    die_with_parent()  # first thing: a harness that dies takes its services with it
    p, args = service_args.parse("trainers.dataparallel.aggregator", __doc__, AGGREGATOR_FLAGS, argv, run="given")
    params = args.params
    try:
        dp_config(params)
    except ValueError as err:
        p.error(str(err))
    set_threads(1)
    signal.signal(signal.SIGTERM, _terminate)
    agg = Aggregator(params, args.token, args.run_dir, args.listen, args.worker_timeout, args.liveness)
    atomic_write_text(f"{args.run_dir}/learner.addr", f"{agg.address[0]}:{agg.address[1]}\n")
    log(PROCESS, f"aggregator on {agg.address[0]}:{agg.address[1]}, method {params.method}, {params.workers} workers")
    try:
        agg.events.write("start", params=params.to_json(), role="aggregator")
        agg.accept(args.join_timeout)
        summary = agg.run()
        return 0 if summary["consistent"] else 3
    except BaseException as err:
        agg.write_summary(False, f"failed: {type(err).__name__}: {err}")
        if isinstance(err, Exception):
            log(PROCESS, f"failed: {type(err).__name__}: {err}")
            return 1
        raise
    finally:
        agg.close()


if __name__ == "__main__":
    sys.exit(main())
