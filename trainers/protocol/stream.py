"""A `Connection` on a non-blocking socket, driven by one selector for many connections.

A service that serves N peers from one thread (the data-parallel aggregator; the HiLo learner's
trainers/hilo/links.py uses the same two pieces) cannot block in `Connection.recv` or `send` on one
of them: a slow link would stall every other. `Stream` wraps a Connection whose socket is
non-blocking and moves its bytes when the selector says it can:

- `read()` (on EVENT_READ) takes what the socket holds and returns the frames it completed,
  reassembled and checked by reassembly.FrameAssembler (the header before any body byte is read:
  token, sequence, the length against the connection's cap; the CRC-32C of the body chunk by chunk
  as it arrives), counted in the connection's ByteCounter. A peer that trickles bytes costs a few
  bytes of state, never a thread.
- `queue_prepared()` appends a frame whose body was prepared once (`wire.prepare_body`: its CRC
  computed once for a broadcast to every stream), with this connection's header; `write()` (on
  EVENT_WRITE, or right after queueing) writes as much of the queue as the socket takes
  (`send_some`: scatter-gather `sendmsg`) and returns the byte counts of the frames it finished.

The bytes on the wire are exactly `Connection.send`'s. One thread owns a Stream (no lock).
"""
from __future__ import annotations

import socket
import time
from collections import deque

from trainers.protocol import wire
from trainers.protocol.reassembly import FrameAssembler
from trainers.protocol.wire import Connection, Frame, MessageType


def send_some(sock: socket.socket, parts: list[memoryview]) -> int:
    """One non-blocking scatter-gather send of a frame's remaining `parts`; drops what went out from
    the front of `parts` (a view sent in part keeps its unsent tail) and returns the bytes written.
    BlockingIOError when the socket takes nothing now; OSError (a reset connection) propagates."""
    n = sent = sock.sendmsg(parts[:wire.MAX_IOV], [], socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)
    while n:
        if n >= len(parts[0]):
            n -= len(parts.pop(0))
        else:
            parts[0], n = parts[0][n:], 0
    while parts and not len(parts[0]):
        parts.pop(0)
    return sent


class Stream:
    def __init__(self, conn: Connection):
        conn.sock.setblocking(False)
        self.conn = conn
        self.last_byte_t = time.monotonic()  # when a byte last arrived (liveness)
        self._in = FrameAssembler(conn.check, conn.max_body_bytes, conn.counter)
        self._in.expected_seq = conn._recv_seq
        self._out: deque = deque()  # [memoryview parts of one frame, its type, its length]

    @property
    def token_shown(self) -> bool:
        """True once the run token showed in the current frame's header (its first 16 bytes)."""
        return self._in.token_shown

    # ---- reading --------------------------------------------------------------------------
    def read(self) -> list[Frame]:
        """Every frame completed by the bytes the socket holds now; WireError for a bad header or
        body (PeerClosed at EOF). Call it when the selector reports the socket readable."""
        frames = []
        self._in.max_body_bytes = self.conn.max_body_bytes  # the cap may rise after the handshake
        while True:
            try:
                frame = self._in.read(self.conn.sock)
            except (BlockingIOError, InterruptedError):
                return frames
            self.last_byte_t = time.monotonic()
            if frame is not None:
                self.conn._recv_seq = self._in.expected_seq
                self.conn.counter.add(self.conn.peer, "received", frame.type, frame.nbytes, len(frame.body))
                frames.append(frame)

    # ---- writing --------------------------------------------------------------------------
    def queue_prepared(self, msg_type: MessageType, body: wire.PreparedBody, version: int = 0) -> None:
        """Queue one frame of a prepared body (its bytes are `Connection.send_prepared`'s); `write`
        sends it. The body's buffers must stay unchanged until it is written."""
        size = wire.HEADER_BYTES + body.length
        self._out.append([wire.claim_prepared_frame(self.conn, msg_type, body, version), msg_type, size])

    def queue(self, msg_type: MessageType, body: wire.Body, version: int = 0) -> None:
        self.queue_prepared(msg_type, wire.prepare_body(body), version)

    @property
    def pending(self) -> bool:
        """Bytes queued and not yet written."""
        return bool(self._out)

    def write(self) -> list[tuple[MessageType, int]]:
        """Write what the socket takes now; returns (type, bytes) of each frame finished. OSError
        (a reset connection) propagates."""
        done = []
        while self._out:
            parts, msg_type, size = self._out[0]
            try:
                send_some(self.conn.sock, parts)
            except (BlockingIOError, InterruptedError):
                break
            if not parts:
                self._out.popleft()
                self.conn.counter.add(self.conn.peer, "sent", msg_type, size, size - wire.HEADER_BYTES)
                self.conn.sent_t = time.monotonic()
                done.append((msg_type, size))
        return done

    def close(self) -> None:
        self._out.clear()
        self.conn.close()
