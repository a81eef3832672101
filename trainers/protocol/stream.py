"""A `Connection` on a non-blocking socket, driven by one selector for many connections.

A service that serves N peers from one thread (the data-parallel aggregator) cannot block in
`Connection.recv` or `send` on one of them: a slow link would stall every other. `Stream` wraps a
Connection whose socket is non-blocking and moves its bytes when the selector says it can:

- `read()` (on EVENT_READ) takes what the socket holds and returns the frames it completed, each
  checked as `Connection.recv` checks it (the header before any body byte is read: token, sequence,
  the length against the connection's cap; CRC-32C of the body computed chunk by chunk as it
  arrives), counted in the connection's ByteCounter. A peer that trickles bytes costs a few bytes
  of state, never a thread.
- `queue_prepared()` appends a frame whose body was prepared once (`wire.prepare_body`: its CRC
  computed once for a broadcast to every stream), with this connection's header; `write()` (on
  EVENT_WRITE, or right after queueing) writes as much of the queue as the socket takes in
  scatter-gather `sendmsg` calls and returns the byte counts of the frames it finished.

The bytes on the wire are exactly `Connection.send`'s. One thread owns a Stream (no lock).
"""
from __future__ import annotations

import time
from collections import deque

from trainers.protocol import wire
from trainers.protocol.wire import Connection, Frame, MessageType

READ_CHUNK = 1 << 20  # bytes per recv_into call: a frame's body goes straight into its own buffer


class Stream:
    def __init__(self, conn: Connection):
        conn.sock.setblocking(False)
        self.conn = conn
        self.last_byte_t = time.monotonic()  # when a byte last arrived (liveness)
        self._header = bytearray(wire.HEADER_BYTES)
        self._got = 0  # bytes of the current header, then of the current body
        self._parsed = None  # (type, sender, version, seq, body length, crc) once the header passed
        self._body: memoryview | None = None
        self._crc = 0
        self._t_header = 0.0
        self._out: deque = deque()  # [memoryview parts of one frame, its type, its length, bytes left]

    @property
    def header_done(self) -> bool:
        """True once the current frame's header passed its checks (the run token among them)."""
        return self._parsed is not None

    # ---- reading --------------------------------------------------------------------------
    def read(self) -> list[Frame]:
        """Every frame completed by the bytes the socket holds now; WireError for a bad header or
        body (PeerClosed at EOF). Call it when the selector reports the socket readable."""
        frames = []
        while True:
            try:
                if self._parsed is None:
                    n = self.conn.sock.recv_into(memoryview(self._header)[self._got:])
                else:
                    view = self._body[self._got:self._got + READ_CHUNK]
                    n = self.conn.sock.recv_into(view) if len(view) else 0
            except (BlockingIOError, InterruptedError):
                return frames
            if self._parsed is None:
                if not n:
                    if self._got:
                        raise wire.PeerClosed(f"connection closed in the middle of a header: {self._got} of "
                                              f"{wire.HEADER_BYTES} bytes")
                    raise wire.PeerClosed("connection closed by peer")
                self.last_byte_t = time.monotonic()
                self._got += n
                if self._got == wire.HEADER_BYTES:
                    self._start_body()
            else:
                if not n and len(self._body):
                    raise wire.PeerClosed(f"connection closed in the middle of a body: {self._got} of "
                                          f"{len(self._body)} bytes")
                if n:
                    self.last_byte_t = time.monotonic()
                    t0 = time.perf_counter()
                    self._crc = wire.checksum(self._body[self._got:self._got + n], self._crc)
                    self.conn.counter.add_seconds(time.perf_counter() - t0)
                    self._got += n
            if self._parsed is not None and self._got == len(self._body):
                frames.append(self._finish())

    def _start_body(self) -> None:
        header = bytes(self._header)
        t0 = time.perf_counter()
        self._parsed = wire.parse_header(header, check=self.conn.check, expected_seq=self.conn._recv_seq,
                                         max_body_bytes=self.conn.max_body_bytes)
        self._body = wire.recv_buffer(self._parsed[4])
        self._crc = wire.checksum(memoryview(header)[:-4])
        self.conn.counter.add_seconds(time.perf_counter() - t0)
        self._t_header, self._got = time.monotonic(), 0

    def _finish(self) -> Frame:
        mtype, sender, version, seq, body_len, crc = self._parsed
        if self._crc != crc:
            raise wire.WireError("checksum mismatch")
        self.conn._recv_seq += 1
        self.conn.counter.add(self.conn.peer, "received", mtype, wire.HEADER_BYTES + body_len, body_len)
        frame = Frame(mtype, sender, version, seq, self._body, (self._t_header, time.monotonic()))
        self._parsed, self._body, self._got = None, None, 0
        return frame

    # ---- writing --------------------------------------------------------------------------
    def queue_prepared(self, msg_type: MessageType, body: wire.PreparedBody, version: int = 0) -> None:
        """Queue one frame of a prepared body (its bytes are `Connection.send_prepared`'s); `write`
        sends it. The body's buffers must stay unchanged until it is written."""
        conn = self.conn
        header = wire.prepared_header(msg_type, body, check=conn.check, sender=conn.sender, version=version,
                                      seq=conn._send_seq)
        conn._send_seq += 1
        parts = [memoryview(header), *body.parts]
        size = wire.HEADER_BYTES + body.length
        self._out.append([parts, msg_type, size, size])

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
            entry = self._out[0]
            parts = entry[0]
            try:
                n = self.conn.sock.sendmsg(parts[:wire.MAX_IOV])
            except (BlockingIOError, InterruptedError):
                break
            entry[3] -= n
            while n:
                if n >= len(parts[0]):
                    n -= len(parts.pop(0))
                else:
                    parts[0], n = parts[0][n:], 0
            if entry[3] == 0:
                self._out.popleft()
                self.conn.counter.add(self.conn.peer, "sent", entry[1], entry[2], entry[2] - wire.HEADER_BYTES)
                self.conn.sent_t = time.monotonic()
                done.append((entry[1], entry[2]))
        return done

    def close(self) -> None:
        self._out.clear()
        self.conn.close()
