"""The learner's connections, served by one event-loop thread: accept, handshake, reading, sending.

One thread and one selector (epoll) for every connection, however many workers: the listener,
each connection's handshake and frames (reassembled without blocking, trainers/protocol/
reassembly.py), and the frames the main thread hands over to send. What arrives goes to the
membership's inbox (trainers/hilo/membership.py); only the main thread acts on it. The main
thread talks to the loop through `call` (a queue of functions the loop runs, and a wake-up
socket); it never closes a socket the loop has registered (`hang_up` shuts it down and lets the
loop close it), so a descriptor number is never reused under the selector.

Per connection (`Link`), in order:
- handshake: the first frame's header must show the run token within the token timeout (the
  connection then leaves the gate's token-less budget) and the whole HELLO must arrive within
  the handshake timeout, both total deadlines from the accept;
- admitting: after a valid HELLO the loop stops reading it; the main thread admits it and hands
  over its catch-up (`catch_up`: WELCOME, then the snapshot and logged updates), which goes out
  through the connection's output queue like any frame, ahead of every later broadcast to it.
  Once the last catch-up byte is written the loop puts one "caught_up" item in the inbox and starts
  reading it (its heartbeats start with the WELCOME, and a joiner busy taking in its catch-up must
  not be judged silent: the liveness clock starts there);
- member: every frame goes to the inbox (HEARTBEATs only reset the liveness clock), while the
  connection has less than `max_frame_bytes` there; past that the loop stops reading it (the rest
  waits in the socket buffers and then in the sender: TCP backpressure) and the liveness clock
  stops with it, until the main thread takes frames. A member silent for `liveness_s` while the
  loop reads it is "silent".
Sending: each frame to send (a catch-up, a broadcast's one prepared body, a STOP) goes to the
connection's output queue; the loop writes whatever each socket takes without blocking, so a slow
link holds only its own queue. A connection whose socket takes no byte for `send_timeout_s` while
it has something to send fails its sends and ends (a joiner stuck in its catch-up too: the main
thread never waits for a catch-up); the frames a connection that ended otherwise (EOF, a bad
frame, silence) leaves unwritten fail as `ConnectionGone`, which a sender leaves to that ending's
inbox item. A connection ends with one inbox item (kind "error": it broke; "bad": it broke the
protocol; "silent") unless the learner hung up on it or the gate evicted it.
"""
from __future__ import annotations

import collections
import errno
import selectors
import socket
import struct
import threading
import time
import traceback
from typing import Callable

from trainers.protocol import messages, wire
from trainers.protocol.gate import source_of
from trainers.protocol.reassembly import FrameAssembler
from trainers.protocol.stream import send_some
from trainers.process import log
from trainers.protocol.wire import Connection, MessageType, PeerClosed, WireError

PROCESS = "learner"
SCAN_S = 0.05  # seconds between checks of the deadlines (handshake, liveness, send progress)
READS_PER_TURN = 16  # recv calls on one connection before the loop serves the others
ACCEPTS_PER_TURN = 64  # accept() calls per turn
ACCEPT_BACKOFF_S = (0.01, 1.0)  # first and longest pause of the listener after a failed accept()
ACCEPT_BURST_GAP_S = 10.0  # an accept() error this soon after a recovery continues the burst (one `accept_error` row)

HANDSHAKE, ADMITTING, MEMBER, DONE = "handshake", "admitting", "member", "done"


class ConnectionGone(OSError):
    """A frame not written because its connection had ended for another reason than a send (EOF,
    a bad frame, silence): that ending reaches the inbox on its own and decides what becomes of the
    member (a disconnect, a drop); a sender need not act on it."""


class SendBatch:
    """Frames handed to the loop together; `wait` returns once each is written or has failed."""

    def __init__(self, keys: list):
        self._cond = threading.Condition()
        self.keys = keys
        self._left = len(keys)
        self.results: dict = {}  # key -> frame bytes written, or the OSError that failed it
        self.done_t: float | None = None  # time.monotonic() when the last frame was done

    def done(self, key, result) -> None:
        with self._cond:
            if key in self.results:
                return
            self.results[key] = result
            self._left -= 1
            if self._left <= 0:
                self.done_t = time.monotonic()
                self._cond.notify_all()

    def wait(self, timeout: float | None = None, alive: Callable[[], bool] = lambda: True) -> bool:
        """True once every frame is done; False after `timeout` seconds, or once `alive()` is False
        (the loop that would write them is gone)."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._left > 0:
                left = None if end is None else end - time.monotonic()
                if (left is not None and left <= 0) or not alive():
                    return False
                self._cond.wait(1.0 if left is None else min(left, 1.0))
            return True


class Outgoing:
    """One frame on one connection's output queue."""

    __slots__ = ("parts", "msg_type", "total", "batch", "key")

    def __init__(self, parts: list[memoryview], msg_type: MessageType, batch: SendBatch, key):
        self.parts, self.msg_type, self.batch, self.key = parts, msg_type, batch, key
        self.total = sum(len(p) for p in parts)


class Link:
    """One connection as the loop sees it."""

    def __init__(self, conn: Connection, ticket, assembler: FrameAssembler, now: float):
        self.conn, self.ticket, self.assembler = conn, ticket, assembler
        self.phase = HANDSHAKE
        self.worker: int | None = None
        self.accepted_t = now
        self.last_in_t = now  # the last byte received (or the liveness clock's restart)
        self.paused = False  # not read: its frames in the inbox fill its budget
        self.out: collections.deque[Outgoing] = collections.deque()
        self.out_progress_t = now  # the last byte the socket took while something waited to go out
        self.catch_up_last: Outgoing | None = None  # the catch-up's last frame, while it waits to go out
        self.mask = 0  # the events it is registered for


class Links:
    """The event loop. `membership` provides: `gate`, `token`, `counter`, `inbox`, the timeouts,
    `reject(source, peer, worker, reason)`, `check_hello(frame) -> worker`, `queued_add(conn, n)
    -> bytes now queued`, `events`."""

    def __init__(self, membership, server: socket.socket):
        self.m = membership
        self.server = server
        self.server.setblocking(False)
        self.sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self.sel.register(self.server, selectors.EVENT_READ, "listener")
        self.links: dict[Connection, Link] = {}
        self._calls: collections.deque[Callable[[], None]] = collections.deque()
        self._lock = threading.Lock()
        self._stopping = False
        self.running = False
        self.thread: threading.Thread | None = None
        self._accept_errors, self._backoff, self._listen_again_t = 0, 0.0, None
        self._recovered_t: float | None = None  # when accept() last worked again after errors

    # ------------------------------------------------------------------ from the main thread

    def start(self) -> None:
        if self.thread is not None:
            return
        self.running = True
        self.thread = threading.Thread(target=self._run, name="learner-links", daemon=True)
        self.thread.start()

    def call(self, fn: Callable[[], None]) -> None:
        """Run `fn` on the loop's thread, soon."""
        self._calls.append(fn)
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):  # a full wake-up pipe wakes the loop all the same
            pass

    def send(self, frames: list[tuple[object, Connection, MessageType, list[memoryview]]],
             catch_up: bool = False) -> SendBatch:
        """Queue each (key, connection, type, frame parts); the batch says when each is written.
        Frames queued on one connection go out in the order of the calls that queued them."""
        batch = SendBatch([key for key, *_ in frames])
        if not self.running:
            for key, *_ in frames:
                batch.done(key, OSError("the learner's connections are closed"))
            return batch
        self.call(lambda: self._enqueue(frames, batch, catch_up))
        return batch

    def catch_up(self, conn: Connection, frames: list[tuple[object, MessageType, list[memoryview]]]) -> SendBatch:
        """The main thread admitted `conn`: queue its catch-up (each (key, type, frame parts), the
        WELCOME first) ahead of anything sent to it later. Returns at once; once the last frame is
        written the loop reads `conn`, starts its liveness clock and puts ("caught_up", worker, conn,
        batch) in the inbox; if the connection ends first, the batch fails and the inbox hears of the
        ending as of any connection's."""
        return self.send([(key, conn, msg_type, parts) for key, msg_type, parts in frames], catch_up=True)

    def resume(self, conn: Connection) -> None:
        """The main thread took frames of `conn`: read it again if its budget has room."""
        self.call(lambda: self._resume(conn))

    def hang_up(self, conn: Connection) -> None:
        """The learner closes `conn` (refused, dropped): shut it down now (the peer sees EOF), and
        let the loop close it; nothing of it reaches the inbox any more."""
        conn.dropped_by_learner = True
        if conn not in self.links or not self.running:
            conn.close()
            return
        conn.closed = True
        try:
            conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.call(lambda: self._retire(conn))

    def stop(self) -> None:
        """End the loop: the listener and every connection closed, pending sends failed."""
        if self._stopping:
            return
        self._stopping = True
        if self.thread is not None and self.thread.is_alive():
            self.call(lambda: None)
            self.thread.join(10)
        if self.thread is None or not self.thread.is_alive():
            self._close_all()

    def wait(self, batch: SendBatch, timeout: float | None = None) -> None:
        """Wait for `batch`; whatever is not done by then (or when the loop ends) fails."""
        alive = lambda: self.thread is not None and self.thread.is_alive()  # noqa: E731
        if not batch.wait(timeout, alive):
            for key in batch.keys:
                batch.done(key, OSError("not written: " + ("timed out" if alive() else "the connection loop ended")))

    # ------------------------------------------------------------------ the loop

    def _run(self) -> None:
        last_scan = time.monotonic()
        try:
            while not self._stopping:
                try:
                    ready = self.sel.select(SCAN_S)
                except InterruptedError:
                    ready = []
                for key, mask in ready:
                    try:
                        self._ready(key.data, mask)
                    except Exception as e:  # a bug: that connection ends, the loop goes on
                        self._crashed(key.data, e)
                while self._calls:
                    fn = self._calls.popleft()
                    try:
                        fn()
                    except Exception as e:
                        log(PROCESS, f"connection loop: {type(e).__name__}: {e}\n{traceback.format_exc()}")
                now = time.monotonic()
                if now - last_scan >= SCAN_S:
                    last_scan = now
                    self._scan(now)
        finally:
            self.running = False
            self._close_all()

    def _ready(self, obj, mask: int) -> None:
        if obj == "wake":
            try:
                while self._wake_r.recv(4096):
                    pass
            except (BlockingIOError, OSError):
                pass
        elif obj == "listener":
            self._accept()
        elif obj.phase != DONE:
            if mask & selectors.EVENT_WRITE:
                self._write(obj)
            if mask & selectors.EVENT_READ and obj.phase != DONE:
                self._read(obj)

    def _crashed(self, obj, e: Exception) -> None:
        reason = f"{type(e).__name__}: {e}"
        log(PROCESS, f"connection loop, {getattr(getattr(obj, 'conn', None), 'peer', obj)}: {reason}\n"
                     f"{traceback.format_exc()}")
        if isinstance(obj, Link):
            self._end(obj, "bad", reason)

    def _register(self, link: Link) -> None:
        """Register `link` for what it waits for now: reading (unless admitting or paused), writing
        (while its output queue holds a frame)."""
        mask = 0
        if link.phase in (HANDSHAKE, MEMBER) and not link.paused:
            mask |= selectors.EVENT_READ
        if link.out:
            mask |= selectors.EVENT_WRITE
        if mask == link.mask:
            return
        if link.mask == 0:
            self.sel.register(link.conn.sock, mask, link)
        elif mask == 0:
            self.sel.unregister(link.conn.sock)
        else:
            self.sel.modify(link.conn.sock, mask, link)
        link.mask = mask

    # ------------------------------------------------------------------ accept

    def _accept(self) -> None:
        for _ in range(ACCEPTS_PER_TURN):
            try:
                sock, addr = self.server.accept()
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno in (errno.ECONNABORTED, errno.EINTR):
                    continue
                self._accept_failed(e)
                return
            if self._accept_errors:
                self.m.events.write("accept_recovered", errors=self._accept_errors)
                log(PROCESS, f"accept works again after {self._accept_errors} failed attempts")
                self._accept_errors, self._backoff = 0, 0.0
                self._recovered_t = time.monotonic()
            try:
                self._open(sock, addr)
            except Exception as e:  # this connection only
                sock.close()
                log(PROCESS, f"could not serve a connection from {addr}: {type(e).__name__}: {e}")

    def _accept_failed(self, e: OSError) -> None:
        """An accept() error (out of file descriptors, ...) never ends the listener: it pauses
        (back-off) and tries again, logging once per burst of errors."""
        self._accept_errors += 1
        # Out of descriptors, accept() flaps: one works whenever a descriptor is freed for a moment (and
        # Linux takes the descriptor before it looks at the queue, so the next fails even on an empty
        # queue). An error within ACCEPT_BURST_GAP_S of the last recovery belongs to the same burst.
        again = self._recovered_t is not None and time.monotonic() - self._recovered_t < ACCEPT_BURST_GAP_S
        if self._accept_errors == 1 and not again:
            self.m.events.write("accept_error", errno=e.errno, error=str(e))
            log(PROCESS, f"accept failed: {e}; retrying with back-off")
        self._backoff = min(max(2 * self._backoff, ACCEPT_BACKOFF_S[0]), ACCEPT_BACKOFF_S[1])
        self.sel.unregister(self.server)
        self._listen_again_t = time.monotonic() + self._backoff

    def _open(self, sock: socket.socket, addr) -> None:
        """A new connection, if the gate has a slot for it (trainers/protocol/gate.py)."""
        m = self.m
        peer = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) and len(addr) >= 2 else str(addr)
        source = source_of(addr)
        evicted = m.gate.evicted
        ticket, refused = m.gate.enter(sock, source)
        if ticket is None:
            sock.close()
            m.reject(source, peer, None, refused)
            return
        if m.gate.evicted > evicted:
            m.reject(source, peer, None, "evicted from its handshake slot (token-less past its grace) by a newcomer")
        try:
            sock.settimeout(None)  # blocking mode: the loop's calls say MSG_DONTWAIT; the main thread's block
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Connection(sock, token=m.token, sender=0, peer=peer, counter=m.counter,
                              max_body_bytes=m.handshake_max_body)
            conn.source = source
            self.adopt(conn, ticket)
        except BaseException:
            m.gate.leave(ticket)
            raise

    def adopt(self, conn: Connection, ticket) -> Link:
        """Serve `conn` from its handshake on (on the loop's thread, or before the loop starts)."""
        link = Link(conn, ticket, FrameAssembler(conn.check, conn.max_body_bytes, self.m.counter), time.monotonic())
        conn.link = link
        self.links[conn] = link
        self.m.queued_add(conn, 0)
        self._register(link)
        return link

    # ------------------------------------------------------------------ reading

    def _read(self, link: Link) -> None:
        conn = link.conn
        for _ in range(READS_PER_TURN):
            try:
                frame = link.assembler.read(conn.sock)
            except BlockingIOError:
                return
            except InterruptedError:
                continue
            except (PeerClosed, OSError) as e:
                return self._end(link, "error", str(e) or type(e).__name__)
            except WireError as e:
                return self._end(link, "bad", str(e) or type(e).__name__)
            link.last_in_t = time.monotonic()
            if link.phase == HANDSHAKE and link.assembler.token_shown and link.ticket is not None:
                self.m.gate.leave(link.ticket)  # the token is shown: out of the token-less budget
            if frame is None:
                continue
            try:
                self._frame(link, frame)
            except WireError as e:
                return self._end(link, "bad", str(e) or type(e).__name__)
            if link.phase != MEMBER or link.paused:
                return

    def _frame(self, link: Link, frame: wire.Frame) -> None:
        m, conn = self.m, link.conn
        nbytes = frame.nbytes
        if link.phase == HANDSHAKE:
            try:
                worker = m.check_hello(frame)
            except WireError:
                m.counter.add(conn.peer, "received", frame.type, nbytes, len(frame.body))
                raise
            conn.peer = f"w{worker}"
            m.counter.add(conn.peer, "received", frame.type, nbytes, len(frame.body))
            link.worker, link.phase = worker, ADMITTING
            m.gate.leave(link.ticket)
            # A peer that takes no bytes for this long fails the main thread's blocking sends (the
            # STOP to a worker kept out for good); the loop's own sends time out by the same figure
            # (`_scan`). SO_SNDTIMEO bounds each send() without progress, not a whole frame.
            secs = max(m.send_timeout_s, 0.001)
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO,
                                 struct.pack("ll", int(secs), int(secs % 1 * 1e6)))
            conn.max_body_bytes = link.assembler.max_body_bytes = m.max_frame_bytes
            self._register(link)
            m.inbox.put(("hello", worker, conn, None))
            return
        m.counter.add(conn.peer, "received", frame.type, nbytes, len(frame.body))
        if frame.type == MessageType.HEARTBEAT:
            messages.decode(MessageType.HEARTBEAT, frame.body)  # its arrival was the point
            return
        if m.queued_add(conn, len(frame.body)) >= m.max_frame_bytes:
            link.paused = True
            self._register(link)
        m.inbox.put(("frame", link.worker, conn, frame))

    def _caught_up(self, link: Link, batch: SendBatch) -> None:
        """The last byte of `link`'s catch-up is written: it is read from now on, its liveness clock starts."""
        link.catch_up_last = None
        if link.phase != ADMITTING:
            return
        link.phase, link.last_in_t = MEMBER, time.monotonic()
        self._register(link)
        self.m.inbox.put(("caught_up", link.worker, link.conn, batch))

    def _resume(self, conn: Connection) -> None:
        link = self.links.get(conn)
        if link is None or not link.paused or self.m.queued_add(conn, 0) >= self.m.max_frame_bytes:
            return
        link.paused, link.last_in_t = False, time.monotonic()  # the clock ran not while it was held back
        self._register(link)

    # ------------------------------------------------------------------ sending

    def _enqueue(self, frames, batch: SendBatch, catch_up: bool = False) -> None:
        """Append each frame to its connection's output queue and write what the socket takes now;
        `catch_up`: the frames are one connection's catch-up (`catch_up`), the last one marked."""
        now = time.monotonic()
        touched = []
        for key, conn, msg_type, parts in frames:
            link = self.links.get(conn)
            if link is None or link.phase == DONE or conn.closed:
                batch.done(key, ConnectionGone(f"connection to {conn.peer} is closed"))
                continue
            if not link.out:
                link.out_progress_t = now
            link.out.append(Outgoing(list(parts), msg_type, batch, key))
            if catch_up:
                link.catch_up_last = link.out[-1]
            if not touched or touched[-1] is not link:
                touched.append(link)
        for link in touched:
            if link.phase != DONE:
                self._write(link)

    def _write(self, link: Link) -> None:
        """Write what the socket takes now, frame after frame of the output queue."""
        sock, out = link.conn.sock, link.out
        while out:
            item = out[0]
            try:
                send_some(sock, item.parts)
            except BlockingIOError:
                break
            except InterruptedError:
                continue
            except OSError as e:
                return self._end(link, "error", f"send failed: {e}", sending=True)
            link.out_progress_t = time.monotonic()
            if item.parts:
                continue
            out.popleft()
            link.conn.counter.add(link.conn.peer, "sent", item.msg_type, item.total, item.total - wire.HEADER_BYTES)
            item.batch.done(item.key, item.total)
            if item is link.catch_up_last:
                self._caught_up(link, item.batch)
        if link.phase != DONE:
            self._register(link)

    # ------------------------------------------------------------------ deadlines and endings

    def _scan(self, now: float) -> None:
        """The deadlines: handshake (token, whole HELLO), liveness, send progress; the listener's back-off."""
        m = self.m
        if self._listen_again_t is not None and now >= self._listen_again_t:
            self._listen_again_t = None
            self.sel.register(self.server, selectors.EVENT_READ, "listener")
        for link in list(self.links.values()):
            if link.phase == DONE:
                continue
            if link.out and now - link.out_progress_t > m.send_timeout_s:
                self._end(link, "error", f"send failed: the socket took no byte for {m.send_timeout_s:g} s "
                                         f"(timed out)", sending=True)
            elif link.phase == HANDSHAKE:
                progress = link.assembler.progress()
                if not link.assembler.token_shown and now >= link.accepted_t + m.token_timeout_s \
                        and m.token_timeout_s < m.handshake_timeout_s:
                    self._end(link, "bad", f"handshake timed out: no frame header (the run token) within "
                                           f"{m.token_timeout_s} s (deadline passed with {progress})")
                elif now >= link.accepted_t + m.handshake_timeout_s:
                    self._end(link, "bad", f"handshake timed out: no whole HELLO within {m.handshake_timeout_s} s "
                                           f"(deadline passed with {progress})")
            elif link.phase == MEMBER and not link.paused and now - link.last_in_t > m.liveness_s \
                    and not self._bytes_waiting(link):
                self._end(link, "silent", f"silent for {m.liveness_s:g} s (the liveness deadline): no byte for "
                                          f"{m.liveness_s:g} s ({link.assembler.progress()})")

    @staticmethod
    def _bytes_waiting(link: Link) -> bool:
        """Bytes (or an EOF, or an error) wait in the kernel for this connection. The deadlines are
        judged after a turn's reads, but a turn this thread spent elsewhere (a long call, the CPU
        taken by others) leaves what arrived meanwhile unread: that member was not silent; the next
        turn reads it."""
        try:
            link.conn.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True  # the read reports it with its own reason
        return True

    def _end(self, link: Link, kind: str, reason: str, sending: bool = False) -> None:
        """`link` is over: closed, its pending sends failed; the inbox hears of it unless the learner
        hung up on it or the gate evicted it."""
        if link.phase == DONE:
            return
        self._close_link(link, OSError(reason) if sending else ConnectionGone(reason))
        conn, ticket = link.conn, link.ticket
        if not (ticket is not None and ticket.evicted) and not getattr(conn, "dropped_by_learner", False):
            self.m.inbox.put((kind, link.worker, conn, reason))

    def _retire(self, conn: Connection) -> None:
        link = self.links.get(conn)
        if link is None:
            conn.closed = False
            conn.close()
            return
        self._close_link(link, OSError(f"connection to {conn.peer} closed by the learner"))

    def _close_link(self, link: Link, error: OSError) -> None:
        conn = link.conn
        link.phase = DONE
        if link.mask:
            try:
                self.sel.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
            link.mask = 0
        self.links.pop(conn, None)
        if link.ticket is not None:
            self.m.gate.leave(link.ticket)
        self.m.queued_forget(conn)
        conn.closed = False  # so that Connection.close does its work (hang_up marks it closed early)
        conn.close()
        while link.out:
            item = link.out.popleft()
            item.batch.done(item.key, error)

    def _close_all(self) -> None:
        for link in list(self.links.values()):
            link.conn.dropped_by_learner = True
            self._close_link(link, OSError("the learner's connections are closed"))
        for sock in (self.server, self._wake_r, self._wake_w):
            try:
                sock.close()
            except OSError:
                pass
        try:
            self.sel.close()
        except (OSError, RuntimeError):
            pass
        while self._calls:  # what was asked of a loop that is gone: sends fail, the rest is moot
            fn = self._calls.popleft()
            try:
                fn()
            except Exception:
                pass
