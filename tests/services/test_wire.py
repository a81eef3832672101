"""The frame format: round trips over real sockets, byte counts, and rejection of bad frames."""
import socket
import struct
import threading

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trainers import wire
from trainers.wire import Connection, MessageType, WireError

TOKEN = "test-token"


def pair(max_body_bytes=wire.DEFAULT_MAX_BODY_BYTES, token_a=TOKEN, token_b=TOKEN):
    a, b = socket.socketpair()
    ca = Connection(a, token=token_a, sender=1, peer="learner")
    cb = Connection(b, token=token_b, sender=0, peer="w1", max_body_bytes=max_body_bytes)
    return ca, cb


def raw_frame(msg_type=MessageType.HELLO, body=b"{}", token=TOKEN, seq=0, **overrides):
    frame = bytearray(wire.encode_frame(msg_type, body, check=wire.token_check(token), sender=1,
                                        version=0, seq=seq))
    for offset, value in overrides.items():  # e.g. o4=b"\x09" rewrites byte 4 (format version)
        i = int(offset[1:])
        frame[i:i + len(value)] = value
    return bytes(frame)


def test_header_is_44_bytes_and_token_is_not_on_the_wire():
    frame = raw_frame(body=b"xyz")
    assert len(frame) == wire.HEADER_BYTES + 3 == 47
    assert TOKEN.encode() not in frame
    assert wire.token_check(TOKEN) != wire.token_check("other")


def test_round_trip_and_exact_byte_counts():
    ca, cb = pair()
    tensors = {"a": torch.randn(3, 4), "b": torch.arange(5, dtype=torch.int64),
               "c": torch.randn(2, 2).to(torch.bfloat16), "empty": torch.zeros(0, 3)}
    body = wire.pack_tensors(tensors, meta={"batch": 3})
    written = ca.send(MessageType.ROLLOUTS, body, version=7)
    frame = cb.recv()
    assert written == wire.HEADER_BYTES + len(body) == frame.nbytes
    assert (frame.type, frame.sender, frame.version, frame.seq) == (MessageType.ROLLOUTS, 1, 7, 0)
    out, meta = wire.unpack_tensors(frame.body)
    assert meta == {"batch": 3}
    assert list(out) == list(tensors)
    for k in tensors:
        assert out[k].dtype == tensors[k].dtype and torch.equal(out[k], tensors[k])
    assert ca.counter.total(direction="sent") == written
    assert ca.counter.total(direction="sent", field="payload") == len(body)
    assert cb.counter.total(direction="received", msg_type="ROLLOUTS") == written
    ca.close(), cb.close()


def test_received_tensors_do_not_alias_the_body():
    body = wire.pack_tensors({"x": torch.ones(4)})
    out, _ = wire.unpack_tensors(body)
    out["x"] += 1  # writable, private copy
    assert torch.equal(wire.unpack_tensors(body)[0]["x"], torch.ones(4))


def test_sequence_numbers_increase_and_a_replay_is_rejected():
    ca, cb = pair()
    ca.send(MessageType.HASH, wire.pack_json({"v": 1}))
    ca.send(MessageType.HASH, wire.pack_json({"v": 2}))
    assert [cb.recv().seq, cb.recv().seq] == [0, 1]
    ca.sock.sendall(raw_frame(MessageType.HASH, seq=1))  # replay of seq 1
    with pytest.raises(WireError, match="out of sequence: expected 2, got 1"):
        cb.recv()


@pytest.mark.parametrize("frame, reason", [
    (raw_frame(o0=b"JUNK"), "bad magic"),
    (raw_frame(o4=b"\x09"), "unsupported format version 9"),
    (raw_frame(token="wrong"), "wrong run token"),
    (raw_frame(o5=b"\x63"), "unknown message type 99"),
    (raw_frame(o6=b"\x00\x01"), "reserved flags"),
    (raw_frame(seq=5), "out of sequence: expected 0, got 5"),
    (raw_frame(o36=struct.pack("!I", 2**32 - 1)), "frame too large"),
    (raw_frame(body=b'{"a":1}', o44=b"["), "checksum mismatch"),
    (raw_frame()[:20], "closed in the middle of a header"),
    (raw_frame(body=b"0123456789")[:50], "closed in the middle of a body"),
])
def test_bad_frames_are_rejected_with_a_reason(frame, reason):
    a, b = socket.socketpair()
    cb = Connection(b, token=TOKEN, sender=0, peer="w1", max_body_bytes=1 << 20)
    a.sendall(frame)
    a.shutdown(socket.SHUT_WR)
    with pytest.raises(WireError, match=reason):
        cb.recv()
    a.close(), cb.close()


def test_a_huge_length_is_rejected_before_the_body_is_read():
    # The body never arrives: the receiver must decide from the header alone, not block or allocate.
    a, b = socket.socketpair()
    cb = Connection(b, token=TOKEN, sender=0, peer="w1", max_body_bytes=1024)
    a.sendall(raw_frame(o36=struct.pack("!I", 10**9))[:wire.HEADER_BYTES])
    b.settimeout(5)
    with pytest.raises(WireError, match="frame too large"):
        cb.recv()
    a.close(), cb.close()


@pytest.mark.parametrize("body, reason", [
    (b"", "no table length"),
    (struct.pack("!I", 100) + b"{}", "does not fit"),
    (struct.pack("!I", 2) + b"[]", "must be an object"),
    (struct.pack("!I", 2) + b"{}", "must be"),
])
def test_bad_tensor_tables(body, reason):
    with pytest.raises(WireError, match=reason):
        wire.unpack_tensors(body)


def _table(entries, data=b""):
    table = wire.pack_json({"meta": {}, "tensors": entries})
    return struct.pack("!I", len(table)) + table + data


@pytest.mark.parametrize("entries, data, reason", [
    ([{"name": "x", "dtype": "object", "shape": [1]}], b"\0" * 8, "not in the whitelist"),
    ([{"name": "x", "dtype": "float32", "shape": [-1]}], b"", "bad shape"),
    ([{"name": "x", "dtype": "float32", "shape": [2**39, 2**39]}], b"", "declares"),
    ([{"name": "x", "dtype": "float32", "shape": [2.5]}], b"", "bad shape"),
    ([{"name": "x", "dtype": "float32", "shape": [3]}], b"\0" * 8, "declares 12 bytes, body carries 8"),
    ([{"name": "x", "dtype": "float32", "shape": [1]}] * 2, b"\0" * 8, "duplicate"),
    ([{"name": "x", "dtype": "float32", "shape": [1], "pickle": 1}], b"\0" * 4, "exactly name/dtype/shape"),
    ([{"name": "", "dtype": "float32", "shape": [1]}], b"\0" * 4, "bad tensor name"),
])
def test_bad_tensor_entries(entries, data, reason):
    with pytest.raises(WireError, match=reason):
        wire.unpack_tensors(_table(entries, data))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_bodies_either_parse_or_raise_wire_error(body):
    try:
        wire.unpack_tensors(body)
    except WireError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=wire.HEADER_BYTES, max_size=wire.HEADER_BYTES))
def test_random_headers_are_rejected(header):
    with pytest.raises(WireError):
        wire.parse_header(header, check=wire.token_check(TOKEN), expected_seq=0, max_body_bytes=1 << 20)


def test_concurrent_senders_keep_frames_whole_and_counted():
    ca, cb = pair()
    body = wire.pack_tensors({"x": torch.randn(2000)})

    def blast():
        for _ in range(20):
            ca.send(MessageType.UPDATE, body)

    got = []
    reader = threading.Thread(target=lambda: got.extend(cb.recv() for _ in range(80)))
    reader.start()
    threads = [threading.Thread(target=blast) for _ in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    reader.join(30)
    assert [f.seq for f in got] == list(range(80))
    assert ca.counter.total(direction="sent") == cb.counter.total(direction="received") == 80 * got[0].nbytes
    ca.close(), cb.close()
