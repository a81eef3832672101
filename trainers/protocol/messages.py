"""The JSON control messages: one schema per message type, checked before anything uses them.

Every JSON body (or tensor-table `meta`) that arrives from a peer goes through this module, on
both sides and in both service families: the learner decodes HELLO, HEARTBEAT, HASH and the ROLLOUTS meta
here; the worker decodes WELCOME, STOP and the meta of a full-sync UPDATE here; the data-parallel
aggregator decodes HELLO, HEARTBEAT and the meta of each SYNC upload (`SYNC_UPLOAD`: step, losses) and of the
final report (`SYNC_FINAL`: parameter hash, held-out perplexity), its workers WELCOME, STOP and the
SYNC download's meta (`SYNC_DOWN`). Two layers:

- bytes (`wire.unpack_json`): the body's size is capped (per message type, below), its nesting
  depth is measured on the raw bytes without recursing (`wire.check_json_depth`) before
  `json.loads` sees it, and NaN/Infinity, out-of-range floats, integers of more than 40 digits
  and duplicate keys are refused;
- values (`check`): the object has exactly the schema's keys (unknown keys and missing required
  ones are refused), each value has the schema's type (a bool is not an int), integers lie in
  their range, strings are bounded (hashes: lowercase hex), nested objects hold scalars only.

Anything wrong raises `MessageError` (a `wire.WireError`) with a one-line reason naming the
message and the field; nothing else is raised, whatever the bytes (a property test fuzzes it).
Semantic checks that need the run's state (a worker id within 1..workers, a batch within the
pipeline window) stay with the caller, on values that have passed these checks.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from trainers.protocol import wire
from trainers.protocol.wire import MessageType, WireError

INT64_MAX = 2**63 - 1
MAX_WORKERS = 2**16
MAX_STR = 4096


class MessageError(WireError):
    """A JSON control message that does not match its schema; the message is the one-line reason."""


@dataclass(frozen=True)
class Field:
    """One key of a message: its kind, whether it must be there, and its bounds.

    kinds: "int" (lo..hi), "str" (at most max_len characters), "hex" (lowercase hex digits,
    1..max_len), "scalars" (an object of at most max_len keys whose values are null, bool, int,
    float or a string of at most MAX_STR characters), "number" (a finite int or float, not a bool,
    lo..hi), "numbers" (an array of at most max_len finite numbers or nulls).
    """

    kind: str
    required: bool = True
    nullable: bool = False
    lo: int = 0
    hi: int = INT64_MAX
    max_len: int = MAX_STR


@dataclass(frozen=True)
class Schema:
    name: str
    fields: dict[str, Field] = field(default_factory=dict)
    max_bytes: int = 4096  # of the JSON body


VERSION = Field("int", lo=0, hi=INT64_MAX)
HASH_HEX = Field("hex", max_len=128)

SCHEMAS: dict[MessageType, Schema] = {
    MessageType.HELLO: Schema("HELLO", {"worker": Field("int", lo=1, hi=MAX_WORKERS)}, max_bytes=1024),
    MessageType.WELCOME: Schema("WELCOME", {
        "params": Field("scalars", max_len=1024), "version": VERSION, "start_batch": VERSION,
        "snapshot_version": VERSION,
        # seconds between the worker's heartbeats (a quarter of the learner's liveness deadline)
        "heartbeat_s": Field("number", required=False, lo=0, hi=86400)}, max_bytes=256 * 1024),
    MessageType.HASH: Schema("HASH", {
        "version": VERSION, "policy_hash": HASH_HEX,
        "optimizer_hash": Field("hex", nullable=True, max_len=128)}, max_bytes=4096),
    MessageType.STOP: Schema("STOP", {"reason": Field("str", max_len=MAX_STR)}, max_bytes=64 * 1024),
    MessageType.HEARTBEAT: Schema("HEARTBEAT", {}, max_bytes=64),  # an empty object: its arrival is the message
}

# The `meta` of tensor-table bodies (the table itself is checked by `wire.unpack_tensors`).
META_SCHEMAS: dict[MessageType, Schema] = {
    MessageType.ROLLOUTS: Schema("ROLLOUTS meta", {
        "batch": Field("int", lo=0, hi=2**31 - 1),
        "worker": Field("int", required=False, lo=1, hi=MAX_WORKERS)}),
    MessageType.UPDATE: Schema("UPDATE meta", {"version": VERSION}),  # full methods: the shipped adapter
}

# The data-parallel SYNC tables: one message type, three metas (the step says which one is due).
MAX_STEPS = 2**20  # optimizer steps in a run (losses of one sync interval: at most this many)
SYNC_UPLOAD = Schema("SYNC upload meta", {
    "step": Field("int", lo=1, hi=MAX_STEPS),
    "losses": Field("numbers", required=False, max_len=4096)})  # one per local step since the last sync; null: not finite
SYNC_FINAL = Schema("SYNC final meta", {
    "hash": HASH_HEX,
    "heldout_ppl": Field("number", required=False, nullable=True, lo=0, hi=1.7e308)})  # worker 1 only; null: not finite
SYNC_DOWN = Schema("SYNC download meta", {"step": Field("int", lo=1, hi=MAX_STEPS)})

_HEX = frozenset("0123456789abcdef")


def decode(msg_type: MessageType, body: bytes) -> dict:
    """Parse and check the JSON body of a `msg_type` frame; raises WireError (MessageError) only."""
    schema = SCHEMAS.get(msg_type)
    if schema is None:
        raise MessageError(f"{getattr(msg_type, 'name', msg_type)} has no JSON body")
    return check(schema, wire.unpack_json(body, max_bytes=schema.max_bytes))


def check_meta(msg_type: MessageType, meta) -> dict:
    """Check the `meta` of a `msg_type` tensor-table body."""
    schema = META_SCHEMAS.get(msg_type)
    if schema is None:
        raise MessageError(f"{getattr(msg_type, 'name', msg_type)} carries no tensor table")
    return check(schema, meta)


def check(schema: Schema, obj) -> dict:
    """`obj` if it matches `schema`; otherwise MessageError naming the first problem."""
    if type(obj) is not dict:
        raise MessageError(f"{schema.name} must be a JSON object, got {_kind(obj)}")
    unknown = sorted(k for k in obj if k not in schema.fields)
    if unknown:
        raise MessageError(f"{schema.name}: unknown key {_short(unknown[0])}"
                           + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""))
    for key, f in schema.fields.items():
        if key not in obj:
            if f.required:
                raise MessageError(f"{schema.name}: missing {key!r}")
            continue
        problem = _problem(f, obj[key])
        if problem:
            raise MessageError(f"{schema.name}: {key!r} {problem}")
    return obj


def _problem(f: Field, value) -> str | None:
    """What is wrong with `value` for field `f` (None: nothing)."""
    if value is None:
        return None if f.nullable else "must not be null"
    if f.kind == "int":
        if type(value) is not int:
            return f"must be an integer, got {_kind(value)}"
        if not f.lo <= value <= f.hi:
            return f"{_short(value)} is outside {f.lo}..{f.hi}"
        return None
    if f.kind in ("str", "hex"):
        if type(value) is not str:
            return f"must be a string, got {_kind(value)}"
        if len(value) > f.max_len:
            return f"is longer than {f.max_len} characters"
        if f.kind == "hex" and (not value or not _HEX.issuperset(value)):
            return f"must be lowercase hex, got {_short(value)}"
        return None
    if f.kind == "number":
        if type(value) not in (int, float) or value != value or value in (float("inf"), float("-inf")):
            return f"must be a finite number, got {_kind(value) if type(value) not in (int, float) else _short(value)}"
        if not f.lo <= value <= f.hi:
            return f"{_short(value)} is outside {f.lo}..{f.hi}"
        return None
    if f.kind == "numbers":
        if type(value) is not list:
            return f"must be an array, got {_kind(value)}"
        if len(value) > f.max_len:
            return f"has {len(value)} entries, more than {f.max_len}"
        for i, v in enumerate(value):
            if v is not None and _problem(Field("number", lo=-INT64_MAX, hi=INT64_MAX), v):
                return f"entry {i} must be a finite number or null, got {_kind(v) if type(v) not in (int, float) else _short(v)}"
        return None
    if f.kind == "scalars":
        if type(value) is not dict:
            return f"must be an object, got {_kind(value)}"
        if len(value) > f.max_len:
            return f"has {len(value)} keys, more than {f.max_len}"
        for k, v in value.items():
            if not (v is None or type(v) in (bool, int, float) or (type(v) is str and len(v) <= MAX_STR)):
                return f"entry {_short(k)} must be null, a boolean, a number or a short string, got {_kind(v)}"
        return None
    raise AssertionError(f"unknown field kind {f.kind!r}")  # a bug in a schema above, not in the message


def _kind(value) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def _short(value, n: int = 40) -> str:
    if type(value) is int and value.bit_length() > 128:  # repr of a huge int is slow (or refused)
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= n else text[:n] + "..."
