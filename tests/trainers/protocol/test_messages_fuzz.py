"""Property-based fuzzing of the JSON control messages (trainers/protocol/messages.py) and of the learner's
handling of a peer's frames, in-process, over real socket pairs.

1. Any JSON value (deep, wide, wrong types, near-valid messages) through a schema check either
   passes, and then matches the schema, or raises MessageError; any bytes through `decode`
   either parse and match, or raise WireError. Nothing else, ever.
2. Frames with random bodies handed to a real in-process Learner through its inbox (the path the
   event loop's frames take) never raise out of `Learner.pump`, never take an unexpected-
   exception path (no traceback in the learner's log), and leave the peer either a member or
   dropped with a reason. The same for random HELLOs through the learner's event loop (`Links.adopt`).
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import socket

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainers.protocol import messages, wire
from trainers.protocol.messages import META_SCHEMAS, SCHEMAS, MessageError
from trainers.protocol.wire import Connection, Frame, MessageType, WireError

TOKEN = "fuzz-token"

# ----------------------------------------------------------------------------- JSON values

LEAVES = (st.none() | st.booleans() | st.integers() | st.integers(-2**70, 2**70)
          | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20)
          | st.sampled_from(["", "ab12", "0" * 129, "[", "{", '"', "\\", "NaN"]))
JSON_VALUES = st.recursive(LEAVES, lambda children: st.lists(children, max_size=5)
                           | st.dictionaries(st.text(max_size=8), children, max_size=5), max_leaves=30)


def deep(n: int, open_: str = "[", close: str = "]") -> object:
    """A value nested n deep, built without recursion."""
    value: object = 0
    for _ in range(n):
        value = [value] if open_ == "[" else {"k": value}
    return value


def near_valid(schema: messages.Schema):
    """Dictionaries with the schema's keys (some missing), each value right or wrong, and maybe extra keys."""
    right = {"int": st.integers(-3, 2**64), "str": st.text(max_size=30), "hex": st.text("0123456789abcdefAZ", max_size=140),
             "scalars": st.dictionaries(st.text(max_size=8), LEAVES, max_size=6),
             "number": st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-2**70, 2**70)),
             "numbers": st.lists(st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), LEAVES),
                                 max_size=6)}
    values = {k: st.one_of(right[f.kind], JSON_VALUES) for k, f in schema.fields.items()}
    return st.builds(lambda present, extra: {**present, **extra},
                     st.fixed_dictionaries({}, optional=values),
                     st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=2))


ALL_SCHEMAS = list(SCHEMAS.values()) + list(META_SCHEMAS.values()) + [messages.SYNC_UPLOAD, messages.SYNC_FINAL,
                                                                      messages.SYNC_DOWN]


def assert_matches(schema: messages.Schema, obj: dict) -> None:
    """What a passed check promises to the caller."""
    assert type(obj) is dict and set(obj) <= set(schema.fields)
    for key, f in schema.fields.items():
        if key not in obj:
            assert not f.required
            continue
        v = obj[key]
        if v is None:
            assert f.nullable
        elif f.kind == "int":
            assert type(v) is int and f.lo <= v <= f.hi
        elif f.kind in ("str", "hex"):
            assert type(v) is str and len(v) <= f.max_len
        elif f.kind == "number":
            assert type(v) in (int, float) and math.isfinite(v) and f.lo <= v <= f.hi
        elif f.kind == "numbers":
            assert type(v) is list and len(v) <= f.max_len
            assert all(x is None or (type(x) in (int, float) and math.isfinite(x)) for x in v)
        else:
            assert type(v) is dict and all(x is None or type(x) in (bool, int, float, str) for x in v.values())


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(ALL_SCHEMAS), st.one_of(JSON_VALUES, st.integers(0, 40).map(deep),
                                                 st.integers(0, 40).map(lambda n: deep(n, "{"))))
def test_any_json_value_passes_its_schema_or_raises_message_error(schema, value):
    try:
        out = messages.check(schema, value)
    except MessageError:
        return
    assert_matches(schema, out)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_near_valid_messages_pass_their_schema_or_raise_message_error(data):
    schema = data.draw(st.sampled_from(ALL_SCHEMAS))
    value = data.draw(near_valid(schema))
    try:
        out = messages.check(schema, value)
    except MessageError as e:
        assert schema.name in str(e)
        return
    assert_matches(schema, out)


def json_bytes(value) -> bytes:
    return json.dumps(value, allow_nan=True).encode()


BODIES = st.one_of(
    JSON_VALUES.map(json_bytes),
    st.sampled_from(ALL_SCHEMAS).flatmap(near_valid).map(json_bytes),
    st.integers(0, 300_000).map(lambda n: b"[" * n),
    st.integers(0, 3000).map(lambda n: b'{"version":' + b"[" * n + b"]" * n + b"}"),
    st.integers(0, 100).map(lambda n: b'{"worker":' + b"9" * n + b"}"),
    st.binary(max_size=200),
    st.text(max_size=60).map(str.encode),
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(SCHEMAS)), BODIES)
def test_any_body_decodes_to_a_valid_message_or_raises_wire_error(msg_type, body):
    try:
        out = messages.decode(msg_type, body)
    except WireError:
        return
    assert_matches(SCHEMAS[msg_type], out)


@settings(max_examples=100, deadline=None)
@given(BODIES)
def test_tensor_table_meta_from_any_json_is_checked_or_raises_wire_error(meta_body):
    table = b'{"meta":' + meta_body + b',"tensors":[]}'
    body = len(table).to_bytes(4, "big") + table
    for msg_type in META_SCHEMAS:
        try:
            _, meta = wire.unpack_tensors(body)
            out = messages.check_meta(msg_type, meta)
        except WireError:
            continue
        assert_matches(META_SCHEMAS[msg_type], out)


# ----------------------------------------------------------------------------- the learner's handler


@pytest.fixture(scope="module")
def learner(tmp_path_factory):
    from trainers.hilo.learner import Learner
    from trainers.spec import RunParams

    params = RunParams(method="identity", workers=1, updates=3, model="micro", objective="grpo",
                       problems_per_worker=1, group_size=2, max_new_tokens=6)
    lrn = Learner(params, TOKEN, str(tmp_path_factory.mktemp("fuzz")), ("127.0.0.1", 0))
    yield lrn
    lrn.close()


def rollout_tensors(draw) -> dict[str, torch.Tensor]:
    """A valid rollouts table, with some of its tensors replaced by random values."""
    from trainers.model.rollout import Rollouts

    r = Rollouts(problem_index=[0, 0], prompt_ids=[[1, 2], [1]], completion_ids=[[3], [4, 5]],
                 logprobs=[[-1.0], [-0.5, -0.1]], rewards=[0.0, 1.0])
    t = r.to_tensors()
    if draw(st.booleans()):
        t["temperature"] = torch.tensor([draw(st.floats(width=64))], dtype=torch.float64)
    if draw(st.booleans()):
        t["policy_version"] = torch.tensor([draw(st.integers(-2**63, 2**63 - 1))], dtype=torch.int64)
    if draw(st.booleans()):
        t["completion_ids"] = torch.tensor(draw(st.lists(st.integers(-2**63, 2**63 - 1), min_size=3, max_size=3)),
                                           dtype=torch.int64)
    if draw(st.booleans()):
        del t[draw(st.sampled_from(sorted(t)))]
    return t


@st.composite
def member_frames(draw):
    """(type, body) of a frame a member might send: random JSON for any type, or a tensor table
    with random meta and (mostly valid) rollouts."""
    msg_type = draw(st.sampled_from(list(MessageType)))
    kind = draw(st.sampled_from(["json", "hash", "rollouts", "rollouts", "bytes"]))
    if kind == "json":
        return msg_type, draw(BODIES)
    if kind == "bytes":
        return msg_type, draw(st.binary(max_size=300))
    if kind == "hash":  # mostly well-typed reports, so that the consistency check is reached
        hexes = st.text("0123456789abcdef", min_size=1, max_size=32)
        report = draw(st.fixed_dictionaries(
            {"version": st.one_of(st.integers(0, 3), st.integers(-2, 2**64), JSON_VALUES),
             "policy_hash": st.one_of(hexes, JSON_VALUES), "optimizer_hash": st.one_of(st.none(), hexes, JSON_VALUES)},
            optional={"extra": JSON_VALUES}))
        return MessageType.HASH, json_bytes(report)
    meta = draw(st.one_of(st.fixed_dictionaries({"batch": st.integers(-2, 5)},
                                                optional={"worker": st.integers(0, 3)}),
                          st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=3)))
    try:
        body = wire.pack_tensors(rollout_tensors(draw), meta=meta)
    except ValueError:
        body = b"{}"
    return draw(st.sampled_from([MessageType.ROLLOUTS, msg_type])), body


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(member_frames())
def test_random_frames_from_a_member_never_raise_out_of_the_learner(learner, case):
    from trainers.hilo.membership import Peer

    msg_type, body = case
    a, b = socket.socketpair()
    conn = Connection(b, token=TOKEN, sender=0, peer="w1")
    members = learner.members
    members.peers[1] = Peer(1, conn, start_batch=0)
    dropped = len(members.dropped)
    err = io.StringIO()
    try:
        members.inbox.put(("frame", 1, conn, Frame(msg_type, 1, 0, 1, body)))
        with contextlib.redirect_stderr(err):
            learner.pump(0)  # must not raise
        if 1 not in members.peers:  # dropped, with its reason
            assert len(members.dropped) == dropped + 1 and members.dropped[-1]["worker"] == 1
            assert members.dropped[-1]["reason"]
        assert "Traceback" not in err.getvalue(), err.getvalue()  # only foreseen errors: no bug path taken
        assert members.inbox.empty()
    finally:
        members.peers.pop(1, None)
        a.close(), conn.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(BODIES, st.integers(0, 3))
def test_random_hellos_through_the_event_loop_never_raise_and_always_close(learner, body, sender):
    members = learner.members
    members.listen()
    a, b = socket.socketpair()
    conn = Connection(b, token=TOKEN, sender=0, peer="x", max_body_bytes=64 * 1024)
    data = wire.encode_frame(MessageType.HELLO, body, check=wire.token_check(TOKEN), sender=sender, version=0, seq=0)
    err = io.StringIO()
    try:
        ticket, _ = members.gate.enter(b, "fuzz")  # as the loop does when it accepts a connection
        sender_thread = _send_all(a, data)
        with contextlib.redirect_stderr(err):
            members.links.call(lambda: members.links.adopt(conn, ticket))
            kinds = _inbox_kinds_until_settled(members)
            sender_thread.join(30)
            if kinds == ["hello"]:  # a valid HELLO: admitted, then its EOF is read
                learner.pump(0)
                kinds += _inbox_kinds_until_settled(members)
            assert conn.closed and members.gate.pending() == 0
            learner.pump(0)  # the main thread's side: admit (fails: closed), reject, ...
        # Every connection ends with exactly one "error" or "bad", after a "hello" if the handshake passed.
        assert kinds in (["error"], ["bad"], ["hello", "error"], ["hello", "bad"]), kinds
        assert members.inbox.empty()
        assert "Traceback" not in err.getvalue(), err.getvalue()
    finally:
        members.peers.pop(1, None)
        a.close(), conn.close()


def _inbox_kinds_until_settled(members, timeout: float = 30.0) -> list[str]:
    """The kinds of the inbox's items once it holds a connection's last one ("error", "bad") or a "hello"."""
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        kinds = [item[0] for item in list(members.inbox.queue)]
        if kinds and kinds[-1] in ("hello", "error", "bad"):
            return kinds
        time.sleep(0.005)
    raise AssertionError("the connection's handshake did not end")


def _send_all(sock: socket.socket, data: bytes):
    """Write `data` then EOF from a thread (a reader may stop reading early and close)."""
    import threading

    def run():
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t
