"""Membership: which workers take part in a run, as the learner sees it.

Threads: the main thread and one event loop (`trainers.hilo.links.Links`), whatever the number of
workers. The loop accepts connections, checks each handshake (the first frame must be a valid HELLO,
whole, within the handshake timeout: a total deadline), reassembles every connection's frames without
blocking and puts what it got in the inbox; it also writes the frames the main thread sends (one
output queue per connection: a slow link holds up only its own). Only the learner's main thread acts
on the inbox, through `Membership.pump`, which handles joins and departures here and hands the
members' frames (rollouts, hash reports) to the caller in arrival order.

Hostile or broken peers (see docs/DESIGN.md, "Hostile peers"):
- at most `max_pending` connections that have not shown the run token may be in their handshake
  at once, at most `per_source` from one address (`trainers.protocol.gate`: a connection leaves
  that budget as soon as its frame header shows the token, so members and genuine joiners never
  compete with token-less peers; a newcomer over a budget evicts the largest holder's oldest
  connection past its grace, or is refused); the frame header must arrive within
  `token_timeout_s`, the whole HELLO within `handshake_timeout_s`;
- every refused connection (over the budget, evicted, a wrong token, a bad HELLO, a forged id) is
  counted in `rejections`: one `rejected` row per source address per interval, with the count, so
  a flood grows the event file with the number of its addresses, not with its rate;
- memory is bounded in bytes in every phase: the loop starts reading a connection's next frame only
  while that connection has less than `max_frame_bytes` waiting in the inbox (so at most two frames
  per connection are held: one queued, one being read), and what it does not read waits in the
  kernel's socket buffers and, past them, in the sender (TCP backpressure); after the loop
  `close_connections` closes the listener and every connection, so nothing is read during the
  held-out evaluation;
- accept() errors (EMFILE, ENFILE, ECONNABORTED, ...) are retried with back-off, logged once
  per burst (`accept_error`, then `accept_recovered`): the listener ends only with the learner;
- a connection that breaks (EOF, reset) is a disconnect; one that breaks the protocol (a bad
  frame, a HELLO or any JSON that fails its schema in `trainers.protocol.messages`, any unexpected
  exception while the loop serves it) is `rejected` before it joined and `dropped` after; an exception
  while the main thread handles a peer's event drops that peer, never the learner;
- a HELLO for a worker id whose member is still connected is refused (`rejected`); the member and
  its connection are untouched, so a forger cannot use up a genuine worker's reconnects.
- liveness: once a member is welcomed the loop waits at most `liveness_s` (--liveness, 10 s) for
  each byte; a member silent that long (no frame, no HEARTBEAT: workers send one every quarter of it
  when nothing else went out, trainers/protocol/heartbeat.py) is `dropped` at once with that reason,
  instead of holding every update for --worker-timeout. The clock runs only while the loop reads
  that member: frames the learner has not taken yet hold it back, which is not the member's silence.

- Join: a worker that says HELLO is admitted at the learner's current version v: it is a member
  at once (it contributes from batch v, every broadcast after v goes to it), and its WELCOME and
  catch-up from the replay log (replay methods: the newest snapshot at or below v and every logged
  update after it, in order; full methods: the newest shipped adapter) are queued on its
  connection, ahead of every later broadcast: the loop writes them while the main thread goes on
  (K joiners at once are caught up side by side, a slow one holds up nobody). The `joined` row is
  written once the loop has written the whole catch-up (`catch_up_send_s`: seconds from the
  admission to the last byte handed to the kernel); a joiner whose socket takes no byte of it for
  the send timeout, or whose connection breaks before the end, is dropped (not a stall: it may
  say HELLO again). A broadcast does not wait for its copy to a joiner whose catch-up is still
  being written (it sits behind it; a send that fails later drops the joiner all the same). A HELLO
  from the id of a disconnected member replaces it; one of a connected member is refused.
- Disconnect: a member whose connection breaks stays a member, without a connection and without
  the rollouts it had sent, until it says HELLO again (and is caught up) or is dropped.
- Drop: the learner gives up on a worker (a timeout, a bad frame, a failed send); timeouts are
  the caller's to decide. A worker dropped for a missed contribution (a stall: no rollouts or final
  hash in time, silence past the liveness deadline) is kept out, so that a member that stalls and
  rejoins cannot make every update wait for it: after its first stall for `exclude_updates` updates
  (its HELLOs until then are refused and counted as `rejected`), after a second for the rest of the
  run (its HELLO gets a STOP with the reason). One stalling member thus costs at most two
  --worker-timeouts per run. Stalls are counted in summary.json (`stalls`; a run with any is
  "degraded"). A worker dropped for a bad frame or a failed send, or let back in, is admitted afresh.
"""
from __future__ import annotations

import queue
import socket
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Iterator

from trainers.protocol import messages, wire
from trainers.protocol import gate
from trainers.protocol.gate import Gate
from trainers.hilo.links import ConnectionGone, Links, SendBatch
from trainers.hilo.consistency import Consistency
from trainers.events import EventLog, Tally
from trainers.hilo.methods import Method
from trainers.model.replica import Replica
from trainers.model.rollout import Rollouts
from trainers.process import log
from trainers.spec import RunParams
from trainers.protocol.wire import Connection, MessageType, WireError

PROCESS = "learner"
HANDSHAKE_MAX_BODY = 64 * 1024  # bytes a connection may send before it has said a valid HELLO
MAX_PENDING_CONNECTIONS = gate.MAX_PENDING  # token-less connections at once (learner flag --max-pending-connections)
MAX_PENDING_PER_SOURCE = gate.PER_SOURCE  # of them from one address (--max-pending-per-source)
REJECTED_INTERVAL_S = 10.0  # at most one `rejected` row per source address per this many seconds
TOKEN_TIMEOUT_S = 3.0  # seconds a new connection has to send the frame header with the token (--token-timeout)
EXCLUDE_UPDATES = 2  # updates a worker is kept out after its first drop (after its second: the rest of the run)
LIVENESS_S = 10.0  # seconds without a byte from a joined member before it is dropped (--liveness; spec.py)
ACCEPT_BACKLOG = 1024  # connections the kernel queues before accept(): every worker of a large run connects at once


@dataclass
class Peer:
    worker: int
    conn: Connection | None  # None: disconnected, waiting for it to come back or time out
    start_batch: int  # the first batch this worker contributes to
    joined_t: float = field(default_factory=time.monotonic)
    lost_t: float | None = None
    hash_reported: int = -1  # the newest version its HASH reports covered (each once, in order, from its catch-up base)
    catching_up: dict | None = None  # its `joined` row until the loop reports its catch-up written; then None
    catch_up_batch: SendBatch | None = None  # its catch-up's frames (done once each is written or has failed)
    rollouts: dict[int, tuple[Rollouts, float]] = field(default_factory=dict)  # batch -> (rollouts, arrival), not yet trained on

    @property
    def name(self) -> str:
        return f"w{self.worker}"


class ReplayLog:
    """What a late worker replays: snapshots every S versions and the update messages after them
    (the two newest snapshots are kept, and every update after the older one)."""

    def __init__(self, snapshot0: bytes, version: int = 0):
        """`snapshot0`: the replica at `version` (0, or where a resumed learner starts)."""
        self.snapshots: dict[int, bytes] = {version: snapshot0}
        self.updates: dict[int, bytes] = {}  # version -> the update message that produced it

    def append(self, version: int, msg: bytes) -> None:
        self.updates[version] = msg

    def snapshot(self, version: int, blob: bytes) -> None:
        self.snapshots[version] = blob
        keep = sorted(self.snapshots)[-2:]
        for v in [v for v in self.snapshots if v not in keep]:
            del self.snapshots[v]
        for v in [v for v in self.updates if v <= keep[0]]:
            del self.updates[v]

    def base(self, version: int, replay: bool) -> int:
        """The version a worker joining at `version` is caught up from."""
        if not replay:  # full sync: the newest shipped adapter is the whole policy
            return max(version - 1, 0)
        return max(v for v in self.snapshots if v <= version)


class Membership:
    """The connections (`links`: the listener and the event loop), the inbox and the members (`peers`, by worker id)."""

    def __init__(self, params: RunParams, method: Method, token: str, listen: tuple[str, int], replica: Replica,
                 replay_log: ReplayLog, consistency: Consistency, events: EventLog, counter: wire.ByteCounter,
                 handshake_timeout_s: float = 10.0, max_frame_bytes: int = 64 * 2**20,
                 max_pending: int = MAX_PENDING_CONNECTIONS, send_timeout_s: float = 120.0,
                 per_source: int = MAX_PENDING_PER_SOURCE, token_timeout_s: float = TOKEN_TIMEOUT_S,
                 liveness_s: float = LIVENESS_S, exclude_updates: int = EXCLUDE_UPDATES):
        self.params, self.method, self.token = params, method, token
        self.replica, self.replay_log, self.consistency = replica, replay_log, consistency
        self.events, self.counter = events, counter
        self.handshake_timeout_s, self.max_frame_bytes = handshake_timeout_s, max_frame_bytes
        self.token_timeout_s = min(token_timeout_s, handshake_timeout_s)
        self.max_pending, self.send_timeout_s = max_pending, send_timeout_s
        self.liveness_s = liveness_s
        self.gate = Gate(max_pending, per_source)
        self.rejections = Tally(events, "rejected", REJECTED_INTERVAL_S)  # refused connections, per source
        self.inbox: queue.Queue = queue.Queue()  # (kind, worker, conn, frame or reason) from the loop
        self._queued: dict[Connection, int] = {}  # body bytes each live connection has in the inbox
        self._room = threading.Lock()  # guards _queued (the loop adds, the main thread takes)
        self.peers: dict[int, Peer] = {}  # current members by worker id
        self.dropped: list[dict] = []
        self.exclude_updates = exclude_updates
        self.strikes: dict[int, int] = {}  # drops per worker id
        self.kept_out: dict[int, int | None] = {}  # worker id -> the version it may rejoin at (None: never)
        self.stalls = 0  # drops for a missed contribution (the caller says which: `drop(..., stall=True)`)
        self.handshake_max_body = HANDSHAKE_MAX_BODY
        self.server = socket.create_server(listen, reuse_port=False, backlog=ACCEPT_BACKLOG)
        self.address = self.server.getsockname()[:2]
        self.links = Links(self, self.server)  # the one thread that accepts, reads and sends

    # ------------------------------------------------------------------ connections (the loop's thread)

    def listen(self) -> None:
        """Start serving connections: one event-loop thread for all of them (trainers/hilo/links.py)."""
        self.links.start()

    def reject(self, source: str, peer: str | None, worker: int | None, reason: str) -> None:
        """A connection refused before (or instead of) joining: counted per source (`rejections`)."""
        self.rejections.add(source, peer=peer, worker=worker, reason=reason)

    def queued_add(self, conn: Connection, nbytes: int) -> int:
        """Count `nbytes` more of `conn`'s frames in the inbox; returns its bytes there now."""
        with self._room:
            total = self._queued[conn] = self._queued.get(conn, 0) + nbytes
            return total

    def queued_forget(self, conn: Connection) -> None:
        with self._room:
            self._queued.pop(conn, None)

    def _taken(self, item: tuple) -> None:
        """The main thread took `item` from the inbox: its bytes no longer count, and a connection
        held back by its budget is read again."""
        if item[0] == "frame":
            with self._room:
                if item[2] not in self._queued:
                    return
                left = self._queued[item[2]] = self._queued[item[2]] - len(item[3].body)
            link = getattr(item[2], "link", None)
            if link is not None and link.paused and left < self.max_frame_bytes:
                self.links.resume(item[2])

    def check_hello(self, frame: wire.Frame) -> int:
        """The worker id of a connection's first frame, which must be a valid HELLO (WireError if not)."""
        if frame.type != MessageType.HELLO:
            raise WireError(f"expected HELLO as the first frame, got {frame.type.name}")
        worker = messages.decode(MessageType.HELLO, frame.body)["worker"]
        if worker > self.params.workers:
            raise WireError(f"HELLO names worker {worker}, expected 1..{self.params.workers}")
        if frame.sender != worker:
            raise WireError(f"HELLO from sender {frame.sender} claims to be worker {worker}")
        return worker

    # ------------------------------------------------------------------ the inbox (main thread)

    def pump(self, timeout: float) -> Iterator[tuple[Peer, wire.Frame]]:
        """Handle inbox events for up to `timeout` seconds (stops after the first batch of them);
        yields (member, frame) for each frame of a current member, in arrival order."""
        self.rejections.flush()
        try:
            item = self.inbox.get(timeout=timeout)
        except queue.Empty:
            return
        while True:
            self._taken(item)
            try:
                peer = self._handle(*item)
            except Exception as e:  # one peer's event must not take the learner down
                self._failed(item, e)
                peer = None
            if peer is not None:
                yield peer, item[3]
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                return

    def _handle(self, kind: str, worker: int | None, conn: Connection, payload) -> Peer | None:
        """One inbox event; returns the member a frame is from, None when there is nothing to pass on."""
        if kind == "hello":
            self.admit(worker, conn)
            return None
        current = self.peers.get(worker)
        if current is None or current.conn is None or current.conn is not conn:
            if kind in ("error", "bad", "silent") and not getattr(conn, "dropped_by_learner", False):  # a connection that never joined, or was replaced: count and forget
                self.reject(getattr(conn, "source", conn.peer), conn.peer, worker, payload)
            return None
        if kind == "caught_up":
            self.caught_up(current, payload)
            return None
        if kind == "error" and current.catching_up is not None:
            self.drop(worker, f"catch-up failed: {payload}")
            return None
        if kind == "error" and payload.startswith("send failed"):  # a copy no broadcast waited for (behind a catch-up)
            self.drop(worker, payload)
            return None
        if kind == "error":
            self.disconnect(current, payload)
            return None
        if kind == "bad":
            self.drop(worker, f"bad frame: {payload}")
            return None
        if kind == "silent":
            self.drop(worker, payload, stall=True)
            return None
        return current

    def _failed(self, item: tuple, e: Exception) -> None:
        """An exception while handling an inbox event: drop (or reject) that peer, log what it was."""
        kind, worker, conn, _ = item
        reason = f"{type(e).__name__} while handling {kind}: {e}"
        log(PROCESS, f"{reason}\n{traceback.format_exc()}")
        current = self.peers.get(worker)
        if current is not None and current.conn is conn:
            self.drop(worker, reason)
        else:
            self.links.hang_up(conn)
            self.reject(getattr(conn, "source", conn.peer), conn.peer, worker, reason)

    # ------------------------------------------------------------------ joins and departures

    def admit(self, worker: int, conn: Connection) -> None:
        """A worker said HELLO: welcome it, bring it to the current version, make it a member. While
        the member of that id is connected, the newcomer is refused and the member left alone: a
        restarted worker's old connection breaks (EOF) before its new HELLO, and one that only looks
        alive is dropped by its deadlines, after which the worker, retrying, gets in."""
        current = self.peers.get(worker)
        if current is not None and current.conn is not None and not current.conn.closed:
            self.links.hang_up(conn)
            self.reject(getattr(conn, "source", conn.peer), conn.peer, worker, f"worker {worker} is already connected")
            return
        if self.keep_out(worker, conn):
            return
        self.peers.pop(worker, None)
        version, replay = self.replica.version, self.method.replay
        resync = replay and self.params.catch_up == "resync" and version > 0
        # A fresh worker builds version 0 itself from the seeds (the hash check verifies it), so
        # snapshot 0 is never shipped: it replays the log from there instead. --catch-up resync
        # ships the learner's replica as it is now instead (one SNAPSHOT, no updates).
        base = version if resync else self.replay_log.base(version, replay)
        welcome = {"params": self.params.to_json(), "version": version, "start_batch": version,
                   "snapshot_version": base, "heartbeat_s": self.liveness_s / 4}
        t0 = time.monotonic()
        bodies = [(MessageType.WELCOME, wire.pack_json(welcome), version)]
        if base > 0 and replay:
            bodies.append((MessageType.SNAPSHOT, self.replica.snapshot() if resync else self.replay_log.snapshots[base],
                           base))
        bodies += [(MessageType.UPDATE, self.replay_log.updates[v], v)  # never skip: every logged update in order
                   for v in range(base + 1, version + 1)]
        t1 = time.perf_counter()
        frames = []
        for i, (msg_type, body, v) in enumerate(bodies):
            frames.append((i, msg_type, wire.claim_prepared_frame(conn, msg_type, wire.prepare_body(body), v)))
        self.counter.add_seconds(time.perf_counter() - t1)  # the checksums: framing, the harness's own time
        queued = sum(len(p) for _, _, parts in frames[1:] for p in parts)  # the catch-up proper, WELCOME aside
        peer = self.peers[worker] = Peer(worker, conn, start_batch=version, hash_reported=base - 1)
        peer.catching_up = {"worker": worker, "version": version, "snapshot_version": base, "replayed": version - base,
                            "catch_up": "resync" if resync else "replay", "catch_up_bytes": queued, "t0": t0}
        peer.catch_up_batch = self.links.catch_up(conn, frames)
        if version not in self.consistency.hashes:
            self.consistency.record(version)  # so the worker's post-catch-up report can be checked

    def caught_up(self, peer: Peer, batch) -> None:
        """The loop wrote `peer`'s whole catch-up: its `joined` row, with the bytes and the seconds
        from the admission to the last byte written."""
        row, peer.catching_up, peer.catch_up_batch = peer.catching_up, None, None
        if row is None:
            return
        t0 = row.pop("t0")
        self.events.write("joined", **row, catch_up_send_s=round((batch.done_t or time.monotonic()) - t0, 6))
        log(PROCESS, f"worker {peer.worker} joined at version {row['version']} (snapshot {row['snapshot_version']} "
                     f"+ {row['replayed']} updates)")

    def keep_out(self, worker: int, conn: Connection) -> bool:
        """Refuse the HELLO of a worker that is kept out after a drop (True), else False."""
        if worker not in self.kept_out:
            return False
        until = self.kept_out[worker]
        if until is not None and self.replica.version >= until:
            del self.kept_out[worker]
            return False
        reason = (f"worker {worker} is kept out for the rest of the run after {self.strikes[worker]} drops"
                  if until is None else f"worker {worker} is kept out until version {until} after a drop")
        if until is None:  # it will never be let in: tell it, so a genuine worker stops retrying
            try:
                conn.send(MessageType.STOP, wire.pack_json({"reason": reason}), self.replica.version)
            except OSError:
                pass
        self.links.hang_up(conn)
        self.reject(getattr(conn, "source", conn.peer), conn.peer, worker, reason)
        return True

    def disconnect(self, peer: Peer, reason: str) -> None:
        """Still a member: it may come back (a restarted worker says HELLO again) before the
        caller's timeout drops it. What it had sent is forgotten: it resends after its catch-up."""
        peer.conn, peer.lost_t = None, time.monotonic()
        peer.rollouts.clear()
        self.events.write("disconnected", worker=peer.worker, version=self.replica.version, reason=reason)
        log(PROCESS, f"worker {peer.worker} disconnected at version {self.replica.version}: {reason}")

    def drop(self, worker: int, reason: str, stall: bool = False) -> None:
        """Give up on `worker`; `stall`: it missed a contribution, and is kept out (the module doc)."""
        peer = self.peers.pop(worker, None)
        if peer is None:
            return
        if peer.conn is not None:
            self.links.hang_up(peer.conn)  # what the loop still reads of it is then not news
        version, version_of_rejoin = self.replica.version, None
        if stall:
            self.stalls += 1
            strikes = self.strikes[worker] = self.strikes.get(worker, 0) + 1
            until = version + self.exclude_updates if strikes == 1 else None
            self.kept_out[worker] = until
            version_of_rejoin = "never" if until is None else until
        self.dropped.append({"worker": worker, "version": version, "reason": reason, "stall": stall,
                             "kept_out_until": version_of_rejoin})
        self.events.write("dropped", worker=worker, version=version, reason=reason, stall=stall,
                          kept_out_until=version_of_rejoin)
        log(PROCESS, f"dropped worker {worker} at version {version}: {reason}"
                     + ("" if version_of_rejoin is None else f"; kept out until version {version_of_rejoin}"))

    def contributors(self, batch: int) -> list[Peer]:
        """The members that contribute to batch `batch`, in worker order."""
        return [self.peers[w] for w in sorted(self.peers) if self.peers[w].start_batch <= batch]

    # ------------------------------------------------------------------ sending

    def broadcast(self, msg: bytes, version: int) -> dict[str, int]:
        """Send update `version` to every connected member; returns frame bytes written per worker.
        One checksum of the body for every worker's frame; the loop writes each socket what it
        takes, so a slow link delays only its own copy. Returns once every caught-up member's copy is
        written or has failed (a member whose socket takes no byte for the send timeout, or whose send
        fails, is dropped; one whose connection had broken otherwise is left to the inbox's report of
        it: a disconnect); a copy queued behind a joiner's unfinished catch-up is not waited for
        (counted here only if already written; if it fails, the loop's report of the connection's
        end drops the joiner)."""
        peers = [p for p in self.peers.values() if p.start_batch < version and p.conn is not None]
        body = wire.prepare_body(msg)
        # A joiner whose catch-up is still being written (its batch not done): its copy waits behind it.
        joining = {p.worker for p in peers if p.catch_up_batch is not None and p.catch_up_batch.done_t is None}
        batches = {}
        for behind in (False, True):
            batches[behind] = self.links.send([
                (p.worker, p.conn, MessageType.UPDATE, wire.claim_prepared_frame(p.conn, MessageType.UPDATE, body, version))
                for p in peers if (p.worker in joining) == behind])
        self.links.wait(batches[False])
        # A joiner's copy waits behind its catch-up: not waited for (its connection's end drops it).
        results = {**{w: r for w, r in batches[True].results.items() if not isinstance(r, OSError)},
                   **batches[False].results}
        written = {}
        for worker in sorted(results):
            result = results[worker]
            if isinstance(result, ConnectionGone):  # it broke (EOF, ...): the inbox's report of that decides
                continue
            if isinstance(result, OSError):
                self.drop(worker, f"send failed: {result}")
            else:
                written[f"w{worker}"] = result
        return written

    def stop_all(self, reason: str) -> None:
        """Tell every connected member to stop (best effort: a member that takes no byte for the
        send timeout is not waited for longer)."""
        peers = [p for p in self.peers.values() if p.conn is not None]
        body = wire.prepare_body(wire.pack_json({"reason": reason[:1000]}))
        batch = self.links.send([(p.worker, p.conn, MessageType.STOP,
                                  wire.claim_prepared_frame(p.conn, MessageType.STOP, body, self.replica.version))
                                 for p in peers])
        self.links.wait(batch, self.send_timeout_s + 1.0)

    def close_connections(self) -> None:
        """After the loop: stop listening and close every connection, so that nothing is read or
        held while the learner evaluates and tears down."""
        self.links.stop()
        self.rejections.flush(due_only=False)
        while True:  # what is queued is not going to be read: let it go
            try:
                self.inbox.get_nowait()
            except queue.Empty:
                break

    def close(self) -> None:
        self.rejections.flush(due_only=False)  # an interrupted run's held counts too
        self.links.stop()
        for peer in [p for p in self.peers.values() if p.conn is not None]:
            peer.conn.close()
