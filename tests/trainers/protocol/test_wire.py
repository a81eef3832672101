"""The frame format: round trips over real sockets, byte counts, and rejection of bad frames."""
import math
import re
import socket
import struct
import threading

import crc32c
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trainers.protocol import dtypes, wire
from trainers.protocol.wire import Connection, MessageType, WireError

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


@pytest.mark.parametrize("name", sorted(dtypes.DTYPES))
def test_every_dtype_of_the_one_table_round_trips_by_its_name(name):
    t = torch.arange(-3, 3).reshape(2, 3).to(dtypes.DTYPES[name])
    body = wire.pack_tensors({"t": t})
    assert f'"dtype":"{name}"'.encode() in body
    out, _ = wire.unpack_tensors(body)
    assert out["t"].dtype == t.dtype and torch.equal(out["t"], t)


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
    ([{"name": "x", "dtype": "fp32", "shape": [-1]}], b"", "bad shape"),
    ([{"name": "x", "dtype": "fp32", "shape": [2**39, 2**39]}], b"", "bad shape"),   # past 2^40 elements: refused before bytes
    ([{"name": "x", "dtype": "fp32", "shape": [2.5]}], b"", "bad shape"),
    ([{"name": "x", "dtype": "fp32", "shape": [3]}], b"\0" * 8, "declares 12 bytes, body carries 8"),
    ([{"name": "x", "dtype": "fp32", "shape": [1]}] * 2, b"\0" * 8, "duplicate"),
    ([{"name": "x", "dtype": "fp32", "shape": [1], "pickle": 1}], b"\0" * 4, "exactly name/dtype/shape"),
    ([{"name": "", "dtype": "fp32", "shape": [1]}], b"\0" * 4, "bad tensor name"),
])
def test_bad_tensor_entries(entries, data, reason):
    with pytest.raises(WireError, match=reason):
        wire.unpack_tensors(_table(entries, data))


def recv_bytes(data: bytes, max_body_bytes: int = 1 << 16) -> wire.Frame:
    """What a receiving Connection makes of `data` followed by EOF: a Frame, or it raises WireError."""
    a, b = socket.socketpair()
    cb = Connection(b, token=TOKEN, sender=0, peer="w1", max_body_bytes=max_body_bytes)
    try:
        a.sendall(data)
        a.shutdown(socket.SHUT_WR)
        return cb.recv()
    finally:
        a.close(), cb.close()


@st.composite
def frames(draw):
    """A frame with the right magic, version and token, each other field either right or random,
    and a random body: (bytes on the socket, the fields, the body)."""
    body = draw(st.binary(max_size=300))

    def mostly(right, wrong):  # the right value two times in three, so that later checks are reached
        return draw(st.sampled_from([0, 1, 2]).flatmap(lambda i: wrong if i == 2 else right))

    f = {"type": mostly(st.sampled_from([int(t) for t in MessageType]), st.integers(0, 255)),
         "flags": mostly(st.just(0), st.integers(0, 0xFFFF)),
         "sender": draw(st.integers(0, 2**32 - 1)), "version": draw(st.integers(0, 2**64 - 1)),
         "seq": mostly(st.just(0), st.integers(0, 2**64 - 1)),
         "length": draw(st.one_of(st.just(len(body)), st.integers(0, len(body) + 8), st.integers(0, 2**32 - 1)))}
    prefix = wire.HEADER.pack(wire.MAGIC, wire.FORMAT_VERSION, f["type"], f["flags"], wire.token_check(TOKEN),
                              f["sender"], f["version"], f["seq"], f["length"], 0)[:-4]
    right = crc32c.crc32c(body[:f["length"]], crc32c.crc32c(prefix))  # the format: CRC-32C
    f["crc"] = draw(st.one_of(st.just(right), st.integers(0, 2**32 - 1)))
    f["crc_ok"] = f["crc"] == right
    return prefix + struct.pack("!I", f["crc"]) + body, f, body


def expected_reason(f: dict, body: bytes) -> str | None:
    """The receiver's checks in their order: the first that fails names the reason (None: accepted)."""
    if f["type"] not in {int(t) for t in MessageType}:
        return f"unknown message type {f['type']}"
    if f["flags"]:
        return "reserved flags set"
    if f["length"] > 1 << 16:
        return "frame too large"
    if f["seq"]:
        return f"out of sequence: expected 0, got {f['seq']}"
    if f["length"] > len(body):
        return "closed in the middle of a body"
    return None if f["crc_ok"] else "checksum mismatch"


@settings(max_examples=400, deadline=None)
@given(frames())
def test_frames_behind_a_valid_header_prefix_get_the_first_failing_check(case):
    # Past the magic/version/token checks: every other field, the checksum and the body parsers.
    data, f, body = case
    reason = expected_reason(f, body)
    if reason is not None:
        with pytest.raises(WireError, match=re.escape(reason)):
            recv_bytes(data)
        return
    frame = recv_bytes(data)
    assert (int(frame.type), frame.sender, frame.version, frame.body) == (f["type"], f["sender"], f["version"],
                                                                          body[:f["length"]])
    try:  # a random body under a valid header: its parser returns or rejects it, nothing else
        {"json": wire.unpack_json, "tensors": wire.unpack_tensors, "raw": bytes}[wire.MESSAGE_BODIES[frame.type]](frame.body)
    except WireError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=wire.HEADER_BYTES, max_size=wire.HEADER_BYTES))
def test_random_headers_are_rejected(header):
    with pytest.raises(WireError):
        wire.parse_header(header, check=wire.token_check(TOKEN), expected_seq=0, max_body_bytes=1 << 20)


ENTRY = st.fixed_dictionaries({
    "name": st.one_of(st.sampled_from(["a", "b", "c"]), st.text(max_size=4)),
    "dtype": st.one_of(st.sampled_from(sorted(dtypes.DTYPES)), st.text(max_size=8)),
    "shape": st.one_of(st.lists(st.integers(0, 6), max_size=3), st.lists(st.integers(-2, 2**41), max_size=9),
                       st.lists(st.floats(allow_nan=False), max_size=2))})


@settings(max_examples=300, deadline=None)
@given(st.lists(ENTRY, max_size=4), st.data())
def test_tensor_tables_with_random_entries_and_data_parse_or_raise_wire_error(entries, data):
    # A valid table length and JSON table: past the first checks, into the entry and size checks.
    declared = sum(math.prod(e["shape"]) * dtypes.itemsize(e["dtype"]) for e in entries
                   if e["dtype"] in dtypes.DTYPES and all(type(d) is int and d >= 0 for d in e["shape"]))
    size = data.draw(st.one_of(st.just(declared), st.integers(0, 64)) if declared < 4096 else st.integers(0, 64))
    body = _table(entries, data.draw(st.binary(min_size=size, max_size=size)))
    try:
        out, meta = wire.unpack_tensors(body)
    except WireError:
        return
    assert meta == {} and list(out) == [e["name"] for e in entries]
    assert sum(t.numel() * t.element_size() for t in out.values()) == size == declared


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0), st.integers(1, 255), st.integers(min_value=0))
def test_a_valid_tensor_body_with_one_byte_changed_or_cut_parses_or_raises_wire_error(at, xor, cut):
    body = bytearray(wire.pack_tensors({"x": torch.arange(6, dtype=torch.int64).reshape(2, 3),
                                        "y": torch.ones(4).to(torch.bfloat16)}, meta={"batch": 1}))
    body[at % len(body)] ^= xor
    for candidate in (bytes(body), bytes(body[:cut % len(body)])):
        try:
            out, _ = wire.unpack_tensors(candidate)
        except WireError:
            continue
        assert len(out) == 2  # a changed name or table byte may still parse, and then sizes add up
        assert sum(t.numel() * t.element_size() for t in out.values()) == 48 + 8


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


# ----------------------------------------------------------------------------- JSON bodies from peers


def _nesting(value) -> int:
    if isinstance(value, list):
        return 1 + max((_nesting(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_nesting(v) for v in value.values()), default=0)
    return 0


TRICKY_TEXT = st.text(alphabet=st.sampled_from(list('[]{}"\\ab\n\u00e9')), max_size=12)
NESTED = st.recursive(st.none() | st.integers() | TRICKY_TEXT,
                      lambda c: st.lists(c, max_size=4) | st.dictionaries(TRICKY_TEXT, c, max_size=4), max_leaves=40)


@settings(max_examples=400, deadline=None)
@given(NESTED, st.sampled_from([(",", ":"), (", ", ": ")]))
def test_the_depth_scan_on_raw_bytes_is_exact_for_valid_json(value, separators):
    # Brackets, quotes and backslashes inside strings must not count.
    import json

    body = json.dumps(value, separators=separators, ensure_ascii=False).encode()
    depth = _nesting(value)
    wire.check_json_depth(body, depth)
    if depth:
        with pytest.raises(WireError, match=f"nested {depth} deep"):
            wire.check_json_depth(body, depth - 1)


@pytest.mark.parametrize("body, reason", [
    (b"[" * 1_000_000, "nested 1000000 deep"),  # was RecursionError in json.loads
    (b'{"a":' + b"[" * 17 + b"]" * 17 + b"}", "nested 18 deep"),
    (b'{"a":NaN}', "NaN is not JSON"),
    (b'{"a":-Infinity}', "-Infinity is not JSON"),
    (b'{"a":1e999}', "out of range"),
    (b'{"a":' + b"7" * 41 + b"}", "integer of 41 digits"),
    (b'{"a":1,"a":2}', "duplicate key"),
    (b"\xff{}", "not valid JSON"),
    (b"[1]", "must be an object"),
])
def test_unpack_json_refuses_what_a_peer_must_not_send(body, reason):
    with pytest.raises(WireError, match=re.escape(reason)):
        wire.unpack_json(body, max_bytes=len(body))


def test_unpack_json_caps_the_size_before_parsing():
    body = wire.pack_json({"a": "x" * 100})
    assert wire.unpack_json(body, max_bytes=len(body)) == {"a": "x" * 100}
    with pytest.raises(WireError, match=f"JSON body of {len(body)} bytes exceeds {len(body) - 1}"):
        wire.unpack_json(body, max_bytes=len(body) - 1)


def test_tensor_tables_up_to_their_own_cap_parse():
    # The table has its own cap (MAX_TABLE_BYTES), above the cap of a JSON control message.
    tensors = {f"layer.{i:06d}.lora_A.weight.some.long.name": torch.zeros(0) for i in range(25_000)}
    body = wire.pack_tensors(tensors)
    assert wire.MAX_JSON_BYTES < len(body) < wire.MAX_TABLE_BYTES
    out, _ = wire.unpack_tensors(body)
    assert len(out) == len(tensors)


def test_a_total_deadline_cuts_a_frame_that_trickles_in():
    # One byte every 50 ms keeps every single recv() busy; only a total deadline ends it.
    a, b = socket.socketpair()
    cb = Connection(b, token=TOKEN, sender=0, peer="x")
    data = raw_frame(body=b'{"worker":1}')
    sent, stop = [0], threading.Event()

    def trickle():
        for byte in data:
            if stop.wait(0.05):
                return
            try:
                a.sendall(bytes([byte]))
            except OSError:
                return
            sent[0] += 1

    t = threading.Thread(target=trickle)
    t.start()
    import time

    with pytest.raises(wire.DeadlineExceeded, match="deadline passed with"):
        cb.recv(deadline=time.monotonic() + 0.5)
    stop.set()
    t.join()
    assert sent[0] < len(data)
    a.close(), cb.close()


def test_a_frame_within_its_deadline_is_received():
    import time

    ca, cb = pair()
    ca.send(MessageType.HELLO, wire.pack_json({"worker": 1}))
    assert cb.recv(deadline=time.monotonic() + 60).body == b'{"worker":1}'
    ca.close(), cb.close()


def test_idle_s_raises_silent_when_no_byte_arrives_and_a_heartbeat_keeps_a_peer_alive():
    """The liveness deadline counts bytes, not frames: a peer that says nothing is Silent; one whose
    Heartbeat thread runs (and whose other sends make heartbeats unnecessary) never is."""
    from trainers.protocol import messages
    from trainers.protocol.heartbeat import Heartbeat

    ca, cb = pair()
    with pytest.raises(wire.Silent, match="no byte for 0.2 s"):
        cb.recv(idle_s=0.2)
    beat = Heartbeat(ca, 0.05).start()
    for _ in range(3):  # each arrives well within 30 s; the bound only guards against a hang
        frame = cb.recv(idle_s=30)
        assert frame.type == MessageType.HEARTBEAT and messages.decode(MessageType.HEARTBEAT, frame.body) == {}
    beat.stop()
    assert beat.sent >= 3
    ca.close()
    with pytest.raises(wire.PeerClosed):  # a closed peer is EOF, never Silent
        while True:
            cb.recv(idle_s=30)
    cb.close()
