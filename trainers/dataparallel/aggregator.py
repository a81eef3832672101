"""The data-parallel aggregator: the star's centre for `ddp`, `lowrank-ddp`, `diloco`, `lordo-*`.

    RUN_TOKEN=... python -m trainers.dataparallel.aggregator --listen 0.0.0.0:29500 --run-dir DIR --method lordo-global ...

It takes the learner's place (same flags, same `learner.addr`, same `events-learner.jsonl` and
`summary.json`, so harness/results/tables.py reads it like a learner): workers (trainers/dataparallel/worker.py) say
HELLO, get WELCOME {"params": RunParams}, then at every sync each uploads one SYNC tensor table;
the aggregator combines (trainers/dataparallel: the method's Aggregator) and sends one SYNC table
back to each. After the last step every worker sends a final SYNC (no tensors; meta: parameter
hash, held-out perplexity) and gets STOP.

One thread serves every connection: the listener and each socket are in one selector, and each
connection's frames are read and written as its bytes move (trainers/protocol/stream.py), so the
threads stay constant in the number of workers and a slow link holds only its own transfer. The
download of a sync is one prepared body (its CRC-32C computed once) queued on every socket.

Joins (`accept`): each connection's handshake runs as its bytes arrive, budgeted by
`trainers.protocol.gate` (at most 64 token-less connections at once, 48 from one address; one whose
frame header passed its checks, the run token among them, leaves the budget; a newcomer over it
evicts the largest holder's oldest past its grace), with 3 s for the frame header (the run token)
and 10 s for the whole HELLO, so idle or garbage connections from any address, the workers' own
included, cannot keep the workers out (and the workers retry a refused connect until their connect
timeout). Refused connections are counted: one `rejected` row per source address per 10 s, with the
count. A HELLO for an id already joined is refused. A joined worker from which no byte arrives for
`--liveness` seconds while a sync waits for it (10 by default; the workers send a HEARTBEAT every
quarter of it while they compute: trainers/protocol/heartbeat.py) stops the run at once with that
reason, instead of each sync waiting `--worker-timeout`. Every meta passes its schema in
`trainers.protocol.messages` (SYNC_UPLOAD, SYNC_FINAL) before it is read; a worker's frame that fails
it stops the run with the reason (a sync needs every worker's share), never with a traceback.

Event rows: one `update` row per optimizer step (version = step), the interval between two syncs
spread evenly over its K steps (seconds_per_update = seconds per optimizer step); the sync step's
row carries the bytes: update_payload_bytes / update_frame_bytes (download, per worker),
payload_bytes_up / wire_bytes_up (uploads, all workers, counted at this socket), claimed_bytes_up /
claimed_bytes_down (the method's formula, per worker); the subspace overlap is in the dp workers' rows.
"""
from __future__ import annotations

import gc

if __name__ == "__main__":   # exec'd (python -m): the imports go without the collector (trainers.process.imports_done)
    gc.disable()

import errno
import selectors
import signal
import socket
import sys
import time
from collections import deque

import torch

from trainers.protocol import messages, wire
from trainers.protocol.gate import Gate, Ticket, source_of
from trainers.dataparallel import get_method
from trainers.dataparallel.inprocess import replica
from trainers.dataparallel.config import BUILD_LOCK, dp_config
from trainers.events import EventLog, PhaseTimer, Tally, atomic_write_text, write_summary
from trainers.process import die_with_parent, imports_done, log, set_threads
from trainers import service_args
from trainers.spec import RunParams
from trainers.protocol.stream import Stream
from trainers.protocol.wire import Connection, MessageType

PROCESS = "learner"          # the event file's name: results.py reads the star's centre as the learner
MAX_META_BYTES = 64 * 1024   # a SYNC table's meta (losses of K steps, a hash)
REJECTED_INTERVAL_S = 10.0  # at most one `rejected` row per source address per this many seconds
TOKEN_TIMEOUT_S, HANDSHAKE_TIMEOUT_S = 3.0, 10.0  # for the frame header (the token); for the whole HELLO
HANDSHAKE_MAX_BODY = 64 * 1024  # bytes a connection may send before its HELLO passed
LIVENESS_S = 10.0  # seconds without a byte from a joined worker before the run stops (--liveness; spec.py)
POLL_S = 0.05  # seconds the event loop waits for a socket before it looks at the deadlines
ACCEPTS_PER_EVENT = 64  # connections accepted per readiness of the listener before the others' turn
LISTEN_BACKLOG = 4096  # the listener's queue: every worker of a large run may connect at once (somaxconn caps it)


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


class Handshake:
    """A connection between its accept and its HELLO: its slot in the gate, its deadlines."""

    def __init__(self, stream: Stream, source: str, ticket: Ticket):
        self.stream, self.source, self.ticket = stream, source, ticket
        self.start = time.monotonic()


class Member:
    """A joined worker: its stream, the frames read from it and not yet used (heartbeats are
    consumed on arrival), the uploads it owes from syncs that went on without it (--quorum),
    the error that ended its connection."""

    def __init__(self, worker: int, stream: Stream):
        self.worker, self.stream = worker, stream
        self.inbox: deque[wire.Frame] = deque()
        self.owed = 0
        self.error: BaseException | None = None
        self.done = False  # its final report is in: its end of file is expected

    def ready(self) -> bool:
        """Its frame for the current sync has arrived (after the late ones it owes)."""
        return len(self.inbox) > self.owed


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
        self.members: dict[int, Member] = {}
        self.handshakes: dict[socket.socket, Handshake] = {}
        self.rows: list[dict] = []
        self.finals: dict[int, dict] = {}
        self.sock = socket.create_server(listen, backlog=min(LISTEN_BACKLOG, max(128, 2 * params.workers)))
        self.sock.setblocking(False)
        self.address = self.sock.getsockname()[:2]
        self.selector = selectors.DefaultSelector()
        self.gate = Gate()  # the token-less budget (trainers.protocol.gate's defaults)
        self.rejections = Tally(self.events, "rejected", REJECTED_INTERVAL_S)
        self._joining = True  # False once every worker joined: late handshakes close their connection
        self._arrived = False  # a member's frame (not a heartbeat) arrived in the last pump

    # ---- the event loop: one thread, one selector for the listener and every connection -----
    def _pump(self, timeout_s: float) -> None:
        for key, mask in self.selector.select(timeout_s):
            if key.data is None:
                self._accept_ready()
            elif isinstance(key.data, Handshake):
                self._handshake_ready(key.data)
            else:
                self._member_ready(key.data, mask)

    def _watch(self, member: Member) -> None:
        """Read always; write while frames are queued."""
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if member.stream.pending else 0)
        sock = member.stream.conn.sock
        key = self.selector.get_map().get(sock)
        if key is None:
            self.selector.register(sock, events, member)
        elif (key.events, key.data) != (events, member):
            self.selector.modify(sock, events, member)

    def _drop(self, sock: socket.socket) -> None:
        try:
            self.selector.unregister(sock)
        except (KeyError, ValueError):
            pass

    # ---- membership: all M workers, once ----------------------------------------------------
    def accept(self, timeout_s: float) -> None:
        """Until every worker has joined (or TimeoutError after `timeout_s`): accept connections,
        run each handshake as its bytes arrive within the gate's budget, WELCOME the valid HELLOs."""
        end = time.monotonic() + timeout_s
        self.selector.register(self.sock, selectors.EVENT_READ, None)
        try:
            while len(self.members) < self.p.workers:
                self.rejections.flush()
                if time.monotonic() > end:
                    raise TimeoutError(f"{len(self.members)} of {self.p.workers} workers joined in {timeout_s:g} s")
                self._pump(POLL_S)
                self._expire_handshakes()
        finally:
            self._joining = False
            self._drop(self.sock)
            self.sock.close()  # nobody else may join a data-parallel run
            for hs in list(self.handshakes.values()):
                self._end_handshake(hs)
            self.rejections.flush(due_only=False)

    def _accept_ready(self) -> None:
        for _ in range(ACCEPTS_PER_EVENT):  # a burst of connects, without starving the other sockets
            try:
                s, addr = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:  # out of descriptors, an aborted connection: retry, never end the run
                if err.errno not in (errno.ECONNABORTED, errno.EAGAIN):
                    time.sleep(0.05)
                return
            evicted = self.gate.evicted
            ticket, why = self.gate.enter(s, source_of(addr))
            if ticket is None:
                s.close()
                self.rejections.add(source_of(addr), reason=why)
                continue
            if self.gate.evicted > evicted:
                self.rejections.add(source_of(addr), reason="evicted from its handshake slot (token-less past its grace) by a newcomer")
            peer = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) and len(addr) >= 2 else str(addr)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Connection(s, token=self.token, sender=0, peer=peer, counter=self.counter,
                              max_body_bytes=HANDSHAKE_MAX_BODY)
            hs = Handshake(Stream(conn), source_of(addr), ticket)
            self.handshakes[s] = hs
            self.selector.register(s, selectors.EVENT_READ, hs)

    def _end_handshake(self, hs: Handshake, err: BaseException | None = None, keep: bool = False) -> None:
        """The handshake is over: its slot is free; its connection closed unless it became a member;
        a failure logged (unless the gate evicted it or the join is over)."""
        sock = hs.stream.conn.sock
        self.handshakes.pop(sock, None)
        self.gate.leave(hs.ticket)
        if keep:
            return
        self._drop(sock)
        hs.stream.close()
        if err is not None and not hs.ticket.evicted and self._joining:
            self.rejections.add(hs.source, peer=hs.stream.conn.peer, reason=f"{type(err).__name__}: {err}")

    def _expire_handshakes(self) -> None:
        now = time.monotonic()
        for hs in list(self.handshakes.values()):
            if not hs.stream.token_shown and now > hs.start + TOKEN_TIMEOUT_S:
                self._end_handshake(hs, wire.DeadlineExceeded("deadline passed before the frame header (the run token) arrived"))
            elif now > hs.start + HANDSHAKE_TIMEOUT_S:
                self._end_handshake(hs, wire.DeadlineExceeded("deadline passed before the HELLO arrived"))

    def _handshake_ready(self, hs: Handshake) -> None:
        """A valid HELLO within the deadlines makes a member (WELCOME); anything else is closed."""
        try:
            frames = hs.stream.read()
            if hs.stream.token_shown:
                self.gate.leave(hs.ticket)  # the token showed: out of the token-less budget (idempotent)
            if not frames:
                return
            hello = frames[0]
            if hello.type != MessageType.HELLO:
                raise wire.WireError(f"expected HELLO as the first frame, got {hello.type.name}")
            worker = messages.decode(MessageType.HELLO, hello.body)["worker"]
            if not 1 <= worker <= self.p.workers or hello.sender != worker:
                raise wire.WireError(f"HELLO names worker {worker} (sender {hello.sender}), expected 1..{self.p.workers}")
        except (wire.WireError, OSError) as err:  # a bad or silent peer ends here, whatever it sent
            self._end_handshake(hs, err)
            return
        conn = hs.stream.conn
        if worker in self.members:
            self._end_handshake(hs)
            self.rejections.add(hs.source, peer=conn.peer, worker=worker, reason=f"worker {worker} is already connected")
            return
        self._end_handshake(hs, keep=True)
        self.counter.rename(conn.peer, f"w{worker}")
        conn.peer = f"w{worker}"
        conn.max_body_bytes = wire.DEFAULT_MAX_BODY_BYTES
        member = Member(worker, hs.stream)
        member.inbox.extend(frames[1:])  # a worker that wrote on before its WELCOME
        try:
            member.stream.queue(MessageType.WELCOME, wire.pack_json({"params": self.p.to_json(), "version": 0,
                                                                     "start_batch": 0, "snapshot_version": 0,
                                                                     "heartbeat_s": self.liveness_s / 4}))
            member.stream.write()
        except OSError as err:
            self._drop(conn.sock)
            member.stream.close()
            self.events.write("rejected", worker=worker, reason=f"WELCOME failed: {err}")
            return
        self.members[worker] = member
        self._watch(member)
        self.events.write("joined", worker=worker)

    def _member_ready(self, member: Member, mask: int) -> None:
        """Read what arrived (heartbeats checked and dropped), write what is queued; an error ends
        this member's connection and is raised when the run needs it."""
        try:
            if mask & selectors.EVENT_READ:
                for frame in member.stream.read():
                    if frame.type == MessageType.HEARTBEAT:
                        messages.decode(MessageType.HEARTBEAT, frame.body)
                    else:
                        member.inbox.append(frame)
                        self._arrived = True
            if mask & selectors.EVENT_WRITE:
                member.stream.write()
            self._watch(member)
        except (wire.WireError, OSError) as err:
            self._drop(member.stream.conn.sock)
            if not member.done:
                member.error = err
            self._arrived = True  # wakes the wait that needs this member

    # ---- one sync -----------------------------------------------------------------------------
    def collect(self, step: int, need: int) -> tuple[list[int], list[wire.Frame]]:
        """The frames for `step`: every worker's, or as soon as `need` are in, every one in by then
        (worker order). A worker's error, --worker-timeout without its frame, or the liveness
        deadline without a byte from it stops the run (the first two as they are, the last as a
        ProtocolError). A late worker's frame is read at a later collect and dropped there (a
        `stale_upload` row: the step it was for, its staleness in steps)."""
        everyone = sorted(self.members)
        start = time.monotonic()
        end, checked = start + self.worker_timeout_s, 0.0
        count = sum(self.members[w].ready() for w in everyone)
        while count < need:
            now = time.monotonic()
            if now - checked >= POLL_S:
                checked = now
                for w in everyone:
                    m = self.members[w]
                    if m.ready():
                        continue
                    if m.error is not None:
                        raise m.error
                    if now - max(m.stream.last_byte_t, start) > self.liveness_s:
                        raise ProtocolError(f"w{w}: silent for {self.liveness_s:g} s (the liveness deadline): "
                                            f"no byte since its last frame")
                    if now > end:
                        raise wire.DeadlineExceeded(f"w{w}: no frame for step {step} within --worker-timeout "
                                                    f"{self.worker_timeout_s:g} s")
            self._arrived = False
            self._pump(POLL_S)
            if self._arrived:
                count = sum(self.members[w].ready() for w in everyone)
        got = []
        for w in everyone:
            m = self.members[w]
            if not m.ready():
                m.owed += 1  # its frame for this step is dropped when it comes
                continue
            for _ in range(m.owed):
                old = m.inbox.popleft()
                self.events.write("stale_upload", worker=w, step=old.version, staleness=step - old.version)
            m.owed = 0
            got.append((w, m.inbox.popleft()))
        return [w for w, _ in got], [f for _, f in got]

    def gather(self, step: int) -> tuple[list[int], list[wire.Frame]]:
        """The uploads for `step`: every worker's, or with --quorum K as soon as K are in (`collect`);
        the late worker still gets this sync's download (it reads it after its upload), so every
        replica applies the same downloads and stays consistent."""
        return self.collect(step, min(self.p.quorum or len(self.members), len(self.members)))

    def broadcast(self, msg_type: MessageType, body: wire.Body, version: int = 0) -> int:
        """One frame to every member: the body's checksum computed once, its bytes written to each
        socket as it takes them (a slow link holds only its own); returns the frame's bytes per worker."""
        prepared = wire.prepare_body(body)
        for m in self.members.values():
            m.stream.queue_prepared(msg_type, prepared, version)
            if m.error is None:
                self._member_ready(m, selectors.EVENT_WRITE)
        end = time.monotonic() + self.worker_timeout_s
        while True:
            late = [m for m in self.members.values() if m.stream.pending]
            for m in late:
                if m.error is not None:
                    raise m.error
            if not late:
                return wire.HEADER_BYTES + prepared.length
            if time.monotonic() > end:
                raise wire.DeadlineExceeded(f"w{late[0].worker}: {msg_type.name} not written within --worker-timeout "
                                            f"{self.worker_timeout_s:g} s")
            self._pump(POLL_S)

    def sync(self, step: int, timer: PhaseTimer) -> dict:
        everyone = sorted(self.members)
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
            frame_bytes = self.broadcast(MessageType.SYNC, body, version=step)
        up_wire = sum(self.counter.total(peer=f"w{w}", direction="received") - up_before[w] for w in everyone)
        up_pay = sum(self.counter.total(peer=f"w{w}", direction="received", field="payload") - up_payload[w]
                     for w in everyone)
        losses = [m.get("losses", []) for _, m in got]
        claimed = self.method.claimed_bytes(step)
        return {"update_payload_bytes": len(body), "update_frame_bytes": {str(w): frame_bytes for w in everyone},
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
        upload still owed (--quorum) is read and dropped first."""
        workers, frames = self.collect(self.p.updates + 1, len(self.members))
        for f, w in zip(frames, workers):
            _, meta = check_upload(f, self.p.updates + 1, w, messages.SYNC_FINAL)
            self.finals[w] = meta
            self.members[w].done = True  # it closes once it has its STOP
        ppl = self.finals[workers[0]].get("heldout_ppl")
        self.events.write("heldout", version=self.p.updates, heldout_ppl=ppl)  # not "eval": that is pass@k's
        self.broadcast(MessageType.STOP, wire.pack_json({"reason": "complete"}))

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
        for m in self.members.values():
            m.stream.close()
        for hs in list(self.handshakes.values()):
            hs.stream.close()
        self.sock.close()
        self.selector.close()
        self.events.close()


class Interrupted(BaseException):
    """SIGTERM/SIGINT (the harness passes on the one it received: harness/run/launch.py NAMES_ITS_SIGNAL):
    stop and write an incomplete summary whose status names the signal, as trainers/hilo/learner.py does
    ("interrupted: SIGINT", not "failed: SystemExit: 143"). A BaseException, so that no `except Exception`
    swallows it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _interrupt(signum, _frame):
    raise Interrupted(signum)


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
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    agg = Aggregator(params, args.token, args.run_dir, args.listen, args.worker_timeout, args.liveness)
    atomic_write_text(f"{args.run_dir}/learner.addr", f"{agg.address[0]}:{agg.address[1]}\n")
    log(PROCESS, f"aggregator on {agg.address[0]}:{agg.address[1]}, method {params.method}, {params.workers} workers")
    try:
        agg.events.write("start", params=params.to_json(), role="aggregator")
        agg.accept(args.join_timeout)
        summary = agg.run()
        return 0 if summary["consistent"] else 3
    except Interrupted as err:
        log(PROCESS, f"stopped early: {err}")
        agg.events.write("interrupted", reason=str(err))
        agg.write_summary(False, f"interrupted: {err}")
        return 128 + err.signum   # the exit a process the signal ended would have had
    except BaseException as err:
        agg.write_summary(False, f"failed: {type(err).__name__}: {err}")
        if isinstance(err, Exception):
            log(PROCESS, f"failed: {type(err).__name__}: {err}")
            return 1
        raise
    finally:
        agg.close()


if __name__ == "__main__":
    imports_done()
    sys.exit(main())
