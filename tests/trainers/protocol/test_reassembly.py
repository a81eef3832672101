"""FrameAssembler (trainers/protocol/reassembly.py): frames from a non-blocking socket, a chunk at a time,
over real socket pairs."""
from __future__ import annotations

import socket

import pytest

from trainers.protocol import wire
from trainers.protocol.reassembly import FrameAssembler
from trainers.protocol.wire import MessageType, PeerClosed, WireError

TOKEN = "reassembly-token"
CHECK = wire.token_check(TOKEN)


def frame(body: bytes, seq: int = 0, msg_type: MessageType = MessageType.HASH) -> bytes:
    return wire.encode_frame(msg_type, body, check=CHECK, sender=1, version=7, seq=seq)


def drain(asm: FrameAssembler, sock: socket.socket) -> list:
    """Every frame the socket's bytes complete now."""
    out = []
    while True:
        try:
            got = asm.read(sock)
        except BlockingIOError:
            return out
        if got is not None:
            out.append(got)


def test_frames_trickled_byte_by_byte_come_out_whole_in_order_and_the_token_shows_after_16_bytes():
    a, b = socket.socketpair()
    asm = FrameAssembler(CHECK, 1 << 20)
    data = frame(b"x" * 1000, 0) + frame(b"", 1, MessageType.HEARTBEAT) + frame(b"y" * 70000, 2)
    frames = []
    for i in range(0, 200):
        a.send(data[i:i + 1])
        frames += drain(asm, b)
        assert asm.token_shown == (i + 1 >= 16)
    a.sendall(data[200:])
    while len(frames) < 3:
        frames += drain(asm, b)
    assert [(f.type, f.seq, bytes(f.body)) for f in frames] == [
        (MessageType.HASH, 0, b"x" * 1000), (MessageType.HEARTBEAT, 1, b""), (MessageType.HASH, 2, b"y" * 70000)]
    assert asm.between_frames and drain(asm, b) == []
    a.close(), b.close()


def test_reads_stop_at_the_frame_so_the_next_frame_stays_in_the_socket():
    a, b = socket.socketpair()
    asm = FrameAssembler(CHECK, 1 << 20)
    a.sendall(frame(b"one", 0) + frame(b"two", 1))
    while (got := asm.read(b)) is None:
        pass
    assert bytes(got.body) == b"one"
    assert len(b.recv(1 << 16, socket.MSG_PEEK | socket.MSG_DONTWAIT)) == len(frame(b"two", 1))
    a.close(), b.close()


@pytest.mark.parametrize("mutate, reason", [
    (lambda d: b"XILO" + d[4:], "bad magic"),
    (lambda d: d[:8] + bytes(8) + d[16:], "wrong run token"),
    (lambda d: d[:-1] + bytes([d[-1] ^ 1]), "checksum mismatch"),
])
def test_a_bad_frame_is_a_wire_error_with_its_reason(mutate, reason):
    a, b = socket.socketpair()
    asm = FrameAssembler(CHECK, 1 << 20)
    a.sendall(mutate(frame(b"body bytes")))
    with pytest.raises(WireError, match=reason):
        for _ in range(100):
            asm.read(b)
    a.close(), b.close()


def test_an_oversized_length_is_refused_from_the_header_before_any_body_byte():
    a, b = socket.socketpair()
    asm = FrameAssembler(CHECK, 1000)
    a.sendall(frame(b"z" * 5000)[:wire.HEADER_BYTES])  # the header alone: no body byte was sent
    with pytest.raises(WireError, match="frame too large"):
        asm.read(b)
    a.close(), b.close()


def test_eof_between_frames_and_in_the_middle_of_one():
    a, b = socket.socketpair()
    asm = FrameAssembler(CHECK, 1 << 20)
    a.close()
    with pytest.raises(PeerClosed, match="connection closed by peer"):
        asm.read(b)
    b.close()
    a, b = socket.socketpair()
    asm = FrameAssembler(CHECK, 1 << 20)
    a.sendall(frame(b"q" * 100)[:60])
    a.close()
    with pytest.raises(PeerClosed, match="in the middle of a body: 16 of 100 bytes"):
        for _ in range(10):
            asm.read(b)
    b.close()
