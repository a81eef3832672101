"""A frame that comes in pieces: `Connection.recv` without deadlines reads a header and a body of up
to RECV_CHUNK bytes in one call each and falls back to its loop when a call returns short (a socket
with a timeout returns what has arrived; a peer closes). Every check still holds on that path: the
checksum continues over the bytes already read, a cut header or body says where it was cut."""
import os
import socket
import threading
import time

import pytest

from trainers.protocol import wire
from trainers.protocol.wire import Connection, MessageType, PeerClosed, WireError
from tests.trainers.protocol.pairs import TOKEN, connections

PAUSE_S = 0.1  # between the pieces: long enough that the first piece is read alone


def frame_bytes(body: bytes, seq: int = 0) -> bytes:
    return wire.encode_frame(MessageType.UPDATE, body, check=wire.token_check(TOKEN), sender=0, version=3, seq=seq)


def send_in_pieces(sock: socket.socket, data: bytes, cuts: list[int], close: bool = False) -> threading.Thread:
    """Send `data` cut at `cuts`, pausing between the pieces (and shut the socket down after, if `close`)."""
    def go():
        for a, b in zip([0, *cuts], [*cuts, len(data)]):
            sock.sendall(data[a:b])
            time.sleep(PAUSE_S)
        if close:
            sock.shutdown(socket.SHUT_WR)
    thread = threading.Thread(target=go)
    thread.start()
    return thread


@pytest.fixture
def pair():
    s, r = connections()
    r.sock.settimeout(10)  # a socket with a timeout returns a short read where MSG_WAITALL would wait
    yield s, r
    s.close(), r.close()


@pytest.mark.parametrize("cut", [1, 20, wire.HEADER_BYTES - 1, wire.HEADER_BYTES, wire.HEADER_BYTES + 1,
                                 wire.HEADER_BYTES + 700])
def test_a_frame_cut_anywhere_arrives_whole_and_counted(pair, cut):
    s, r = pair
    body = os.urandom(1500)
    thread = send_in_pieces(s.sock, frame_bytes(body), [cut])
    frame = r.recv()
    thread.join()
    assert (frame.type, frame.version, bytes(frame.body)) == (MessageType.UPDATE, 3, body)
    assert r.counter.total(direction="received") == wire.HEADER_BYTES + len(body)
    assert r.counter.seconds > 0  # the checksum's seconds are counted on the short path too


@pytest.mark.parametrize("at", [0, 699, 700, 1499])
def test_a_corrupted_byte_before_or_after_a_short_read_fails_the_checksum(pair, at):
    s, r = pair
    data = bytearray(frame_bytes(os.urandom(1500)))
    data[wire.HEADER_BYTES + at] ^= 0x10
    thread = send_in_pieces(s.sock, bytes(data), [wire.HEADER_BYTES + 700])
    with pytest.raises(WireError, match="checksum mismatch"):
        r.recv(reuse=True)
    thread.join()


@pytest.mark.parametrize("cut, reason", [
    (0, "connection closed by peer"),
    (20, f"in the middle of a header: 20 of {wire.HEADER_BYTES} bytes"),
    (wire.HEADER_BYTES, "in the middle of a body: 0 of 1500 bytes"),
    (wire.HEADER_BYTES + 700, "in the middle of a body: 700 of 1500 bytes"),
])
def test_a_peer_that_closes_mid_frame_is_named_where_it_stopped(cut, reason):
    a, b = socket.socketpair()
    r = Connection(b, token=TOKEN, sender=1, peer="learner")
    try:
        thread = send_in_pieces(a, frame_bytes(os.urandom(1500))[:cut], [], close=True)
        with pytest.raises(PeerClosed, match=reason):
            r.recv()
        thread.join()
    finally:
        a.close(), r.close()


def test_the_length_cap_is_checked_before_the_one_call_body_read():
    s, r = connections(max_body_bytes=1000)
    try:
        s.send(MessageType.UPDATE, os.urandom(1000))
        assert len(r.recv().body) == 1000
        s.send(MessageType.UPDATE, os.urandom(1001))
        with pytest.raises(WireError, match="frame too large: body of 1001 bytes exceeds the limit of 1000"):
            r.recv()
    finally:
        s.close(), r.close()


def test_a_body_of_exactly_one_chunk_and_one_more_byte_round_trip():
    s, r = connections()
    try:
        for n in (0, wire.RECV_CHUNK, wire.RECV_CHUNK + 1):
            body = os.urandom(n)
            thread = threading.Thread(target=s.send, args=(MessageType.UPDATE, body))
            thread.start()
            assert bytes(r.recv(reuse=True).body) == body
            thread.join()
    finally:
        s.close(), r.close()
