"""Frames of one connection reassembled from whatever bytes a non-blocking socket has.

`Connection.recv` reads a frame in blocking calls, one thread per connection. An event loop that
serves every connection from one thread (trainers/hilo/links.py) instead reads a connection only
when the selector says it is readable, one non-blocking `recv_into` at a time, and keeps the
frame's state between reads here: the 44-byte header, checked as soon as it is whole (the cap on
the body among the checks, so a forged length never allocates), then the body into one buffer of
the announced length (`wire.recv_buffer`, never reused: the frames go to a queue and outlive the
next read), its CRC-32C continued chunk by chunk while the bytes are in cache. The first 16
header bytes carry the run token: `token_shown` says when they have arrived and were right.
Reads never go past the frame being assembled, so the bytes of the next frame stay in the kernel
(backpressure works by not reading). Errors are those of `Connection.recv`: PeerClosed at EOF,
WireError with a one-line reason for anything malformed. Deadlines are the caller's (it owns the
clock of every connection).
"""
from __future__ import annotations

import socket
import time

from trainers.protocol import wire
from trainers.protocol.gate import token_shown
from trainers.protocol.wire import HEADER_BYTES, Frame, PeerClosed, WireError


class FrameAssembler:
    """`read` one chunk at a time; it returns each frame once its last byte arrived."""

    def __init__(self, check: bytes, max_body_bytes: int, counter: wire.ByteCounter | None = None):
        self.check, self.max_body_bytes = check, max_body_bytes
        self.counter = counter  # its `seconds`: header checks and checksums (the framing cost)
        self.expected_seq = 0
        self.token_shown = False
        self._header = bytearray(HEADER_BYTES)
        self._got = 0  # header bytes of the frame being assembled
        self._body: memoryview | None = None
        self._body_got = 0
        self._fields = None  # the parsed header of the frame being assembled
        self._crc = 0  # running checksum: header bytes 0..39, then the body so far
        self._t_header = 0.0

    @property
    def between_frames(self) -> bool:
        """No byte of a next frame has been read."""
        return self._got == 0

    def progress(self) -> str:
        """Where the frame being assembled stands, for a reason: 'k of n header|body bytes'."""
        if self._body is None:
            return f"{self._got} of {HEADER_BYTES} header bytes received"
        return f"{self._body_got} of {len(self._body)} body bytes received"

    def read(self, sock: socket.socket) -> Frame | None:
        """One non-blocking recv into the frame being assembled; the frame once complete, else None.
        Raises BlockingIOError when the socket has nothing, PeerClosed at EOF, WireError."""
        if self._body is None:
            k = sock.recv_into(memoryview(self._header)[self._got:], 0, socket.MSG_DONTWAIT)
            if not k:
                if not self._got:
                    raise PeerClosed("connection closed by peer")
                raise PeerClosed(f"connection closed in the middle of a header: {self._got} of {HEADER_BYTES} bytes")
            self._got += k
            if not self.token_shown:
                self.token_shown = token_shown(memoryview(self._header)[:self._got], self.check)
            if self._got < HEADER_BYTES:
                return None
            return self._start_body()
        view = self._body[self._body_got:]
        k = sock.recv_into(view, 0, socket.MSG_DONTWAIT)
        if not k:
            raise PeerClosed(f"connection closed in the middle of a body: {self._body_got} of {len(self._body)} bytes")
        t0 = time.perf_counter()
        self._crc = wire.checksum(view[:k], self._crc)
        self._charge(time.perf_counter() - t0)
        self._body_got += k
        return self._finish() if self._body_got == len(self._body) else None

    def _start_body(self) -> Frame | None:
        t0 = time.perf_counter()
        self._t_header = time.monotonic()
        self._fields = wire.parse_header(bytes(self._header), check=self.check, expected_seq=self.expected_seq,
                                         max_body_bytes=self.max_body_bytes)
        self._body, self._body_got = wire.recv_buffer(self._fields[4]), 0
        self._crc = wire.checksum(memoryview(self._header)[:-4])
        self._charge(time.perf_counter() - t0)
        return self._finish() if not len(self._body) else None

    def _finish(self) -> Frame:
        mtype, sender, version, seq, _, crc = self._fields
        body = self._body
        self._body, self._got, self._fields = None, 0, None
        if self._crc != crc:
            raise WireError("checksum mismatch")
        self.expected_seq += 1
        return Frame(mtype, sender, version, seq, body, (self._t_header, time.monotonic()))

    def _charge(self, seconds: float) -> None:
        if self.counter is not None:
            self.counter.add_seconds(seconds)
