"""The wire format: length-prefixed binary frames over TCP, with byte counting at the socket.

A frame is a fixed 44-byte header followed by `body_len` bytes of body:

    offset size field
    0      4    magic           b"HILO"
    4      1    format version  FORMAT_VERSION; any other value is rejected
    5      1    message type    one of MessageType
    6      2    flags           reserved, must be 0
    8      8    token check     first 8 bytes of HMAC-SHA256(run token, TOKEN_CONTEXT): proves the
                                sender knows the run token without ever sending the token itself
    16     4    sender          0 = learner, 1..N = worker id
    20     8    policy version  the adapter version the message refers to
    28     8    sequence number per connection and direction, starts at 0, +1 per frame
    36     4    body length     bytes; bounded by the receiver's max_body_bytes before reading
    40     4    checksum        CRC-32C (Castagnoli) of header bytes 0..39 followed by the body

All integers are big-endian. What the body holds depends on the message type (see the
message table in `MESSAGE_BODIES`): opaque bytes (a compressor payload, a safetensors
snapshot), a JSON object, or a tensor table built by `pack_tensors`:

    u32 table length | JSON table {"meta": {...}, "tensors": [{"name", "dtype", "shape"}, ...]}
    | the raw little-endian bytes of each tensor, in table order, back to back

Dtype names ("fp32", "bf16", "int64", ...) come from the one table in `trainers.protocol.dtypes`.

Received bytes are never unpickled and never passed to `torch.load`: a tensor is rebuilt with
`torch.frombuffer`, after its dtype (whitelist), shape and byte count have been checked
against the bytes actually present.

No whole-payload copies (format 3). A body is one buffer or a list of buffers (`Body`); a
frame goes out as [header, *body buffers] in scatter-gather `sendmsg` calls, so the bytes
of a payload or of the tensors of `pack_tensor_parts` go from their own storage to the
kernel. The receiver reads the header, checks it (the length against its cap) and only then
allocates one buffer of the announced length (`recv_buffer`: uninitialised from 64 KiB, in
transparent huge pages from 4 MiB: `huge_pages`) and `recv_into`s it, computing
the checksum chunk by chunk as the bytes arrive; `Frame.body` is a writable memoryview of
that buffer, and `unpack_tensors` (like the compressors' `unpack`) builds its tensors as
views over it when their offset is aligned for their dtype (else a private copy). The
buffer's END is 64-byte aligned: the tensors of a table and a payload's segments lie at the
end of the body, so a tensor followed by a whole number of its own elements (an fp32-only
table or payload, always) lands aligned. The CRC-32C runs in hardware (`crc32c-rs`: SIMD folding with
(V)PCLMULQDQ, ~80 GB/s on a 1 MB body in cache here; the `crc32c` package's SSE4.2 instruction
~28 GB/s when it is missing; zlib's CRC-32 was ~2-3 GB/s and made the checksum the largest cost
of a frame in format 2). Without a deadline the header is one receive call and the body is
received in RECV_CHUNK pieces, each waited for whole (MSG_WAITALL: one return to Python per piece,
not one per burst of segments) and checksummed while it is still in cache; a body of up to
RECV_CHUNK is one call and one checksum pass (the loop takes over only after a short read: a signal,
a socket timeout, a peer that closed). A service that is done with each frame before its next receive asks for
`recv(reuse=True)`: the connection's kept buffers, never one that a live frame, view or tensor
still reads (`Connection.recv`'s release contract).

JSON from a peer is parsed by `unpack_json` only: its size is capped and its nesting depth is
measured on the raw bytes (`check_json_depth`, no recursion) before `json.loads` sees it, and
NaN/Infinity, non-finite floats, integers of more than 40 digits and duplicate keys are refused.
What each message must hold is checked next, by its schema in `trainers.protocol.messages`.

Every malformed, forged, oversized or out-of-sequence frame raises `WireError` with a
one-line reason; the caller logs it and closes that connection only. `Connection.recv` takes
an optional total deadline (the handshake's): a peer that trickles bytes is cut when it passes.
"""
from __future__ import annotations

import ctypes
import enum
import functools
import hashlib
import hmac
import itertools
import json
import math
import mmap
import re
import select
import socket
import struct
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

try:  # CRC-32C by SIMD folding: ~3x the crc32c package's three-way crc32 instruction on a 1 MB body
    from crc32c_rs import crc32c as _crc32c
except ImportError:  # same function, same values
    from crc32c import crc32c as _crc32c

from trainers.protocol import dtypes

MAGIC = b"HILO"
FORMAT_VERSION = 3  # 2: tensor tables name dtypes as in trainers.protocol.dtypes; 3: CRC-32C instead of CRC-32
TOKEN_CONTEXT = b"wan-harness/wire/token-check/v1"
HEADER = struct.Struct("!4sBBH8sIQQII")  # see the module docstring for the layout
HEADER_BYTES = HEADER.size  # 44
HEADER_PREFIX = struct.Struct(HEADER.format[:-1])  # bytes 0..39: what the checksum covers before the body
CHECKSUM = struct.Struct("!I")  # bytes 40..43
_pack_prefix, _pack_checksum = HEADER_PREFIX.pack, CHECKSUM.pack
_perf_counter, _monotonic = time.perf_counter, time.monotonic
_WAITALL = socket.MSG_WAITALL
DEFAULT_MAX_BODY_BYTES = 256 * 2**20  # 256 MiB: a rank-64 adapter of a 7B model fits; a forged length does not
MAX_TABLE_BYTES = 4 * 2**20  # the JSON table of a tensor body
MAX_TENSORS = 65536
MAX_DIMS = 8
MAX_JSON_BYTES = 1 * 2**20  # a JSON-bodied control message (each type has a smaller cap: trainers/protocol/messages.py)
MAX_JSON_DEPTH = 16  # nesting of any JSON we parse; checked on the raw bytes, so json.loads never recurses deeper
MAX_JSON_INT_DIGITS = 40  # an integer literal longer than this is refused before int() parses it
MAX_IOV = 512  # buffers per sendmsg call; Linux refuses more than IOV_MAX (1024)
RECV_ALIGN = 64  # bytes; the receive buffer's end is aligned to this (a cache line, any dtype)
SMALL_BUFFER = 64 * 2**10  # bytes; a receive buffer below this is a bytearray (`aligned_region`)
RECV_CHUNK = 1 * 2**20  # bytes a receive call waits for (MSG_WAITALL) before the checksum reads them, still in cache
KEPT_BUFFERS = 2  # per connection, for recv(reuse=True): one a consumer still holds while the next frame arrives
HUGE_PAGES_FROM = 4 * 2**20  # bytes; a receive buffer this large gets huge pages (`huge_pages`): one 2 MiB page at least

# A frame body: one bytes-like object, or a list/tuple of them sent back to back (never joined).
Body = bytes | bytearray | memoryview | Sequence[bytes | bytearray | memoryview]


class MessageType(enum.IntEnum):
    HELLO = 1  # worker -> learner, JSON {"worker": id}; must be the first frame of a connection
    WELCOME = 2  # learner -> worker, JSON: the run's parameters and where to start
    ROLLOUTS = 3  # worker -> learner, tensor table: one batch of rollouts (+ meta: batch, policy version)
    UPDATE = 4  # learner -> worker, opaque bytes: the method's payload for version v-1 -> v
    SNAPSHOT = 5  # learner -> worker, opaque bytes: safetensors of adapter + optimizer at version v
    HASH = 6  # worker -> learner, JSON: state hashes at version v
    STOP = 7  # learner -> worker, JSON {"reason": ...}: no more updates, exit cleanly
    SYNC = 8  # dp worker <-> aggregator, tensor table: one sync's upload or download (trainers/dataparallel)
    HEARTBEAT = 9  # worker -> learner/aggregator, JSON {}: still here (sent when nothing else went out; protocol/heartbeat.py)


_MESSAGE_TYPES = {int(t): t for t in MessageType}  # a header's type byte -> its MessageType

# How a receiver parses each body; "raw" bodies are handed on as bytes.
MESSAGE_BODIES = {
    MessageType.HELLO: "json", MessageType.WELCOME: "json", MessageType.ROLLOUTS: "tensors",
    MessageType.UPDATE: "raw", MessageType.SNAPSHOT: "raw", MessageType.HASH: "json",
    MessageType.STOP: "json", MessageType.SYNC: "tensors", MessageType.HEARTBEAT: "json",
}



class WireError(Exception):
    """A frame or body that must be rejected; the message is the one-line reason."""


class PeerClosed(WireError):
    """The peer closed the connection (cleanly, between frames, or in the middle of one)."""


class DeadlineExceeded(WireError):
    """A whole frame did not arrive before the receiver's deadline (`Connection.recv(deadline=...)`)."""


class Silent(WireError):
    """No byte arrived for the receiver's liveness deadline (`Connection.recv(idle_s=...)`)."""


def token_check(token: str | bytes) -> bytes:
    """8 bytes derived from the run token; the token itself never goes on the wire."""
    key = token.encode() if isinstance(token, str) else token
    return hmac.new(key, TOKEN_CONTEXT, hashlib.sha256).digest()[:8]


@dataclass(slots=True)
class Frame:
    """A received frame; treat it as read-only. Not frozen: a frozen dataclass's __init__ (one
    object.__setattr__ per field) costs ~0.5 us, a sixth of a small frame's receive."""
    type: MessageType
    sender: int
    version: int
    seq: int
    body: bytes | memoryview  # as received: a writable memoryview over this frame's own buffer
    # Monotonic seconds when the header was complete and when the last body byte arrived:
    # the receive phase of a large frame on a slow link.
    received: tuple[float, float] | None = None

    @property
    def nbytes(self) -> int:
        """Bytes this frame occupies on the socket."""
        return HEADER_BYTES + len(self.body)

    def release(self) -> None:
        """Done with this frame's body: `body` is released, so a later read of it raises ValueError
        (a stale use shows at once), and a buffer of `Connection.recv(reuse=True)` goes back to its
        connection as soon as no view or tensor made from the body is alive either (`recv`)."""
        if isinstance(self.body, memoryview):
            self.body.release()


# ----------------------------------------------------------------------------- frames


def checksum(data, value: int = 0) -> int:
    """CRC-32C of `data` (any bytes-like), continuing from `value`; reads the buffer in place."""
    return _crc32c(data, value)


def body_parts(body: Body) -> list[memoryview]:
    """The body as flat byte views, empty ones left out; no byte is copied."""
    if type(body) is bytes or type(body) is bytearray:  # flat already: the common one-buffer body
        return [memoryview(body)] if body else []
    out = []
    for part in (body if isinstance(body, (list, tuple)) else (body,)):
        view = memoryview(part)
        if not view.c_contiguous:
            raise ValueError("a frame body buffer must be C-contiguous")
        view = view.cast("B") if (view.format, view.ndim) != ("B", 1) else view
        if len(view):
            out.append(view)
    return out


def body_len(body: Body) -> int:
    """Bytes of a body, one buffer or several."""
    return sum(view.nbytes for view in map(memoryview, body if isinstance(body, (list, tuple)) else (body,)))


def frame_header(msg_type: MessageType, parts: list[memoryview], *, check: bytes, sender: int, version: int,
                 seq: int) -> bytes:
    """The 44-byte header of a frame whose body is `parts`, checksum included (one pass over the body)."""
    prefix = _pack_prefix(MAGIC, FORMAT_VERSION, msg_type, 0, check, sender, version, seq, sum(map(len, parts)))
    crc = _crc32c(prefix)
    for part in parts:
        crc = _crc32c(part, crc)
    return prefix + _pack_checksum(crc)


def _gf2_times(mat: tuple[int, ...], vec: int) -> int:
    """A 32 x 32 matrix over GF(2) (its columns as ints) times a 32-bit vector."""
    out, i = 0, 0
    while vec:
        if vec & 1:
            out ^= mat[i]
        vec >>= 1
        i += 1
    return out


def _gf2_product(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(_gf2_times(a, col) for col in b)


@functools.lru_cache(maxsize=64)
def _zeros_operator(n: int) -> tuple[int, ...]:
    """The GF(2) operator that advances a CRC-32C register over n zero bytes (kept per length: a
    broadcast body's length repeats from update to update). zlib's crc32_combine, for the
    Castagnoli polynomial (reflected 0x82F63B78)."""
    op = (0x82F63B78, *(1 << k for k in range(31)))                  # one zero bit
    for _ in range(3):
        op = _gf2_product(op, op)                                       # one zero byte
    result = None
    while n:
        if n & 1:
            result = op if result is None else _gf2_product(op, result)
        n >>= 1
        if n:
            op = _gf2_product(op, op)
    return result or tuple(1 << k for k in range(32))


@functools.lru_cache(maxsize=64)
def _zeros_tables(n: int) -> tuple[tuple[int, ...], ...]:
    """`_zeros_operator(n)` as four 256-entry tables, one per byte of the register: applying it is
    four lookups instead of a 32-step loop in Python (a prepared send pays it once per frame)."""
    columns, tables = _zeros_operator(n), []
    for k in range(4):
        table = [0] * 256
        for b in range(1, 256):
            low = b & -b                                   # the lowest set bit: the rest is a smaller entry
            table[b] = table[b ^ low] ^ columns[8 * k + low.bit_length() - 1]
        tables.append(tuple(table))
    return tuple(tables)


def checksum_combine(crc_a: int, crc_b: int, len_b: int) -> int:
    """CRC-32C of A followed by B from crc(A), crc(B) and len(B), without reading either."""
    if not len_b:
        return crc_a
    t0, t1, t2, t3 = _zeros_tables(len_b)
    return t0[crc_a & 255] ^ t1[crc_a >> 8 & 255] ^ t2[crc_a >> 16 & 255] ^ t3[crc_a >> 24] ^ crc_b


@dataclass(frozen=True)
class PreparedBody:
    """A frame body with its CRC-32C computed once (`prepare_body`), to be sent on many connections
    (`Connection.send_prepared`: each frame's checksum is the header's combined with this one, so a
    broadcast to N workers reads its body once for checksums, not N times). Holds views of the
    caller's buffers: they must stay unchanged until the last send returns."""
    parts: tuple[memoryview, ...]
    length: int
    crc: int


def prepare_body(body: Body) -> PreparedBody:
    parts = body_parts(body)
    crc = 0
    for part in parts:
        crc = checksum(part, crc)
    return PreparedBody(tuple(parts), sum(len(p) for p in parts), crc)


def prepared_header(msg_type: MessageType, body: PreparedBody, *, check: bytes, sender: int, version: int,
                    seq: int) -> bytes:
    """`frame_header` of a prepared body: the same 44 bytes, without a pass over the body."""
    prefix = _pack_prefix(MAGIC, FORMAT_VERSION, msg_type, 0, check, sender, version, seq, body.length)
    return prefix + _pack_checksum(checksum_combine(_crc32c(prefix), body.crc, body.length))


def encode_frame_parts(msg_type: MessageType, body: Body, *, check: bytes, sender: int, version: int,
                       seq: int) -> list[memoryview]:
    """[header, *body views]: a frame for `send_parts`, with no copy of the body."""
    parts = body_parts(body)
    return [memoryview(frame_header(msg_type, parts, check=check, sender=sender, version=version, seq=seq)), *parts]


def encode_frame(msg_type: MessageType, body: Body, *, check: bytes, sender: int, version: int,
                 seq: int) -> bytes:
    """Header + body as one bytes object (a copy; `Connection.send` sends the parts instead)."""
    return b"".join(encode_frame_parts(msg_type, body, check=check, sender=sender, version=version, seq=seq))


def send_parts(sock: socket.socket, parts: list[memoryview]) -> int:
    """Write every buffer of `parts` to `sock` in order, in scatter-gather `sendmsg` calls; returns
    the bytes written. A partial send (a socket timeout, SO_SNDTIMEO after some progress, a signal)
    resumes where it stopped; a call that moves no byte raises, as `sendall` does."""
    if len(parts) <= MAX_IOV:  # one call moves a whole frame unless the socket buffer fills
        n = sock.sendmsg(parts)
        if n == sum(map(len, parts)):
            return n
        if n <= 0:
            raise ConnectionError("sendmsg wrote no byte")
        return _send_rest(sock, parts, n)
    return _send_rest(sock, parts, 0)


def _send_rest(sock: socket.socket, parts: Sequence[memoryview], n: int) -> int:
    """`send_parts` once a first call wrote `n` bytes (0: no call yet): the loop over partial sends."""
    parts, i, written = list(parts), 0, n
    while True:
        while n:  # drop what went out; keep the unsent tail of a buffer sent in part
            if n >= len(parts[i]):
                n -= len(parts[i])
                i += 1
            else:
                parts[i], n = parts[i][n:], 0
        if i == len(parts):
            return written
        n = sock.sendmsg(parts[i:i + MAX_IOV])
        if n <= 0:
            raise ConnectionError("sendmsg wrote no byte")
        written += n


def recv_buffer(n: int) -> memoryview:
    """A writable, uninitialised n-byte buffer whose end is RECV_ALIGN-aligned (see the module
    docstring). Uninitialised: recv_into writes every byte before anyone reads it, so a zero
    fill would only be one more pass over the whole body. From HUGE_PAGES_FROM bytes on, its own
    private mapping advised to transparent huge pages (`huge_pages`)."""
    owner, start = aligned_region(n)
    return memoryview(owner)[start:start + n]


def aligned_region(n: int):
    """`recv_buffer`'s memory: (the object that owns it, the offset of the n bytes in it). Below
    SMALL_BUFFER bytes a bytearray (its zero fill is cheaper than a tensor's allocation), up to
    HUGE_PAGES_FROM an uninitialised tensor's storage, from there a huge-page mapping."""
    if n == 0:
        return bytearray(), 0
    if n >= HUGE_PAGES_FROM and hasattr(mmap, "MADV_HUGEPAGE"):
        start = -n % RECV_ALIGN                          # a mapping starts on a page: aligned for any dtype
        return huge_pages(n + start).obj, start
    if n < SMALL_BUFFER:
        owner = bytearray(n + RECV_ALIGN - 1)
        address = ctypes.addressof(ctypes.c_char.from_buffer(owner))
    else:
        raw = torch.empty(n + RECV_ALIGN - 1, dtype=torch.uint8)
        owner, address = raw.numpy(), raw.data_ptr()
    return owner, -(address + n) % RECV_ALIGN


def huge_pages(n: int) -> memoryview:
    """n writable bytes of a private anonymous mapping advised to transparent huge pages (this
    kernel's THP setting is `madvise`: nothing is huge unless asked). A fresh 141 MB buffer in 4 KiB
    pages costs 6-9 memcpy of its bytes in page faults; in 2 MiB pages ~1.4. The mapping goes when
    the last view of it does. (MAP_PRIVATE: a shared anonymous mapping is shmem, which THP skips.)"""
    region = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    region.madvise(mmap.MADV_HUGEPAGE)
    return memoryview(region)


def parse_header(header: bytes, *, check: bytes, expected_seq: int, max_body_bytes: int):
    """Validate a 44-byte header; returns (type, sender, version, seq, body_len, crc).

    Checked before any body byte is read, so a forged length never allocates memory.
    """
    if len(header) != HEADER_BYTES:
        raise WireError(f"truncated header: {len(header)} of {HEADER_BYTES} bytes")
    magic, fmt, mtype, flags, tok, sender, version, seq, body_len, crc = HEADER.unpack(header)
    msg_type = _MESSAGE_TYPES.get(mtype)
    if magic != MAGIC:
        raise WireError(f"bad magic {magic!r}, expected {MAGIC!r}")
    if fmt != FORMAT_VERSION:
        raise WireError(f"unsupported format version {fmt}, expected {FORMAT_VERSION}")
    if not hmac.compare_digest(tok, check):
        raise WireError("wrong run token")
    if msg_type is None:
        raise WireError(f"unknown message type {mtype}")
    if flags != 0:
        raise WireError(f"reserved flags set: {flags:#x}")
    if body_len > max_body_bytes:
        raise WireError(f"frame too large: body of {body_len} bytes exceeds the limit of {max_body_bytes}")
    if seq != expected_seq:
        raise WireError(f"out of sequence: expected {expected_seq}, got {seq}")
    return msg_type, sender, version, seq, body_len, crc


def verify_checksum(header: bytes, body, crc: int) -> None:
    """Raise WireError unless `crc` is the checksum of header bytes 0..39 and `body` (bytes-like)."""
    if checksum(body, checksum(memoryview(header)[:-4])) != crc:
        raise WireError("checksum mismatch")


# ----------------------------------------------------------------------------- bodies


def pack_json(obj: dict) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


_JSON_ESCAPE = re.compile(rb"\\.", re.S)  # a backslash and the byte after it
_JSON_STRING = re.compile(rb'"[^"]*"')  # once escapes are gone; linear: no backtracking
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_DEPTH_STEP = [0] * 256
_DEPTH_STEP[ord("[")] = _DEPTH_STEP[ord("{")] = 1
_DEPTH_STEP[ord("]")] = _DEPTH_STEP[ord("}")] = -1


def check_json_depth(body: bytes, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Refuse JSON nested deeper than `max_depth`, measured on the raw bytes without recursing.

    Escapes are removed first, then strings, so that brackets inside strings do not count; what
    is left is scanned as +1/-1 steps. Exact for valid JSON; invalid JSON is refused by the parser
    anyway. Linear in the body (regular expressions without backtracking, C-level scans).
    """
    brackets = _JSON_STRING.sub(b"", _JSON_ESCAPE.sub(b"", body)).translate(None, _NOT_BRACKET)
    if brackets.count(b"[") + brackets.count(b"{") <= max_depth:
        return  # cannot nest deeper than it opens
    depth = max(itertools.accumulate(map(_DEPTH_STEP.__getitem__, brackets)))
    if depth > max_depth:
        raise WireError(f"JSON nested {depth} deep, more than {max_depth}")


def _json_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:20]} is out of range")
    return value


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_JSON_INT_DIGITS:
        raise ValueError(f"integer of {len(text)} digits")
    return int(text)


def _json_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _json_object(pairs: list) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise ValueError("duplicate key in an object")
    return obj


def unpack_json(body: bytes, max_bytes: int = MAX_JSON_BYTES, max_depth: int = MAX_JSON_DEPTH) -> dict:
    """A JSON object from untrusted bytes: size and depth checked before parsing; strict JSON
    (no NaN/Infinity, finite floats, integers of at most 40 digits, no duplicate keys).
    Raises WireError only. What the object must hold is `trainers.protocol.messages`' business."""
    if len(body) > max_bytes:
        raise WireError(f"JSON body of {len(body)} bytes exceeds {max_bytes}")
    try:
        text = bytes(body).decode("utf-8")
    except UnicodeDecodeError as e:
        raise WireError(f"body is not valid JSON: {e}") from None
    check_json_depth(bytes(body), max_depth)
    try:
        obj = json.loads(text, parse_float=_json_float, parse_int=_json_int, parse_constant=_json_constant,
                         object_pairs_hook=_json_object)
    except (ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError; RecursionError: never, by the depth check
        raise WireError(f"body is not valid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise WireError(f"JSON body must be an object, got {type(obj).__name__}")
    return obj


def pack_tensor_parts(tensors: dict[str, torch.Tensor], meta: dict | None = None) -> list[memoryview]:
    """A tensor table as a body of buffers: the length and JSON table, then a view over each
    tensor's own storage (no copy for contiguous CPU tensors; keep them unchanged until sent)."""
    entries, views = [], []
    for name, t in tensors.items():
        if t.dtype not in dtypes.NAMES:
            raise ValueError(f"tensor {name!r}: dtype {t.dtype} is not in the wire whitelist {sorted(dtypes.DTYPES)}")
        entries.append({"name": name, "dtype": dtypes.NAMES[t.dtype], "shape": list(t.shape)})
        views.append(dtypes.byte_view(t))
    table = pack_json({"meta": meta or {}, "tensors": entries})
    return [memoryview(struct.pack("!I", len(table)) + table), *views]


def pack_tensors(tensors: dict[str, torch.Tensor], meta: dict | None = None) -> bytes:
    """A tensor table: names, dtypes and shapes as JSON, then the raw bytes (little-endian, C order).
    One bytes object (one copy of the tensors); `pack_tensor_parts` makes none."""
    return b"".join(pack_tensor_parts(tensors, meta))


def _check_entry(entry) -> tuple[str, str, tuple[int, ...], int]:
    """Validate one table entry; returns (name, dtype name, shape, nbytes)."""
    if not isinstance(entry, dict) or set(entry) != {"name", "dtype", "shape"}:
        raise WireError(f"tensor table entry must have exactly name/dtype/shape, got {entry!r:.80}")
    name, dtype_name, shape = entry["name"], entry["dtype"], entry["shape"]
    if not isinstance(name, str) or not name or len(name) > 512:
        raise WireError(f"bad tensor name {name!r:.80}")
    if dtype_name not in dtypes.DTYPES:
        raise WireError(f"tensor {name!r}: dtype {dtype_name!r:.40} not in the whitelist {sorted(dtypes.DTYPES)}")
    if (not isinstance(shape, list) or len(shape) > MAX_DIMS
            or not all(type(d) is int and 0 <= d < 2**40 for d in shape)
            or math.prod(max(d, 1) for d in shape) >= 2**40):  # torch's strides overflow even at 0 elements
        raise WireError(f"tensor {name!r}: bad shape {shape!r:.80}")
    nbytes = math.prod(shape) * dtypes.itemsize(dtype_name)  # exact Python ints: no overflow
    return name, dtype_name, tuple(shape), nbytes


def unpack_tensors(body: bytes | memoryview) -> tuple[dict[str, torch.Tensor], dict]:
    """Parse a tensor table; every size is checked against the bytes present first. From a
    writable body (`Frame.body`) the tensors are views over it where aligned (no copy); from
    read-only bytes they are private copies."""
    if len(body) < 4:
        raise WireError(f"tensor body of {len(body)} bytes has no table length")
    (table_len,) = struct.unpack_from("!I", body)
    if table_len > MAX_TABLE_BYTES or 4 + table_len > len(body):
        raise WireError(f"tensor table length {table_len} does not fit the body of {len(body)} bytes")
    table = unpack_json(body[4:4 + table_len], max_bytes=MAX_TABLE_BYTES)
    if set(table) != {"meta", "tensors"} or not isinstance(table["meta"], dict) \
            or not isinstance(table["tensors"], list):
        raise WireError("tensor table must be {'meta': {...}, 'tensors': [...]}")
    if len(table["tensors"]) > MAX_TENSORS:
        raise WireError(f"{len(table['tensors'])} tensors exceed the limit of {MAX_TENSORS}")
    entries = [_check_entry(e) for e in table["tensors"]]
    names = [e[0] for e in entries]
    if len(set(names)) != len(names):
        raise WireError("duplicate tensor names in the table")
    data_bytes = len(body) - 4 - table_len
    if sum(e[3] for e in entries) != data_bytes:
        raise WireError(f"tensor table declares {sum(e[3] for e in entries)} bytes, body carries {data_bytes}")
    out, offset = {}, 4 + table_len
    view = memoryview(body)
    for name, dtype_name, shape, nbytes in entries:
        out[name] = dtypes.over_bytes(view[offset:offset + nbytes], dtype_name).reshape(shape)
        offset += nbytes
    return out, table["meta"]


# ----------------------------------------------------------------------------- byte counting


class ByteCounter:
    """Bytes and frames per (peer, direction, message type), counted where they hit the socket.

    `frame` bytes are header + body, exactly what `sendall` wrote (or `recv` read);
    `payload` bytes are the body alone. Thread-safe: senders run on several threads.
    """

    def __init__(self):
        self._lock = threading.Lock()
        # (peer, direction, MessageType) -> [frame bytes, payload bytes, frames]; types are named on reading
        self._counts: dict[tuple[str, str, MessageType], list[int]] = {}
        self.seconds = 0.0  # CPU-side framing work: building frames, checking headers and checksums

    def add_seconds(self, dt: float) -> None:
        with self._lock:
            self.seconds += dt

    def add(self, peer: str, direction: str, msg_type: MessageType, frame_bytes: int, payload_bytes: int,
            seconds: float = 0.0):
        """Count one frame (and `seconds` of framing work spent on it: one lock for both)."""
        key = (peer, direction, msg_type)
        with self._lock:
            c = self._counts.get(key)
            if c is None:
                c = self._counts[key] = [0, 0, 0]
            c[0] += frame_bytes
            c[1] += payload_bytes
            c[2] += 1
            self.seconds += seconds

    def rename(self, old: str, new: str) -> None:
        """Move the counts of `old` to `new` (a connection is named once its handshake says who it is)."""
        with self._lock:
            for (p, d, t) in [k for k in self._counts if k[0] == old]:
                c, into = self._counts.pop((p, d, t)), self._counts.setdefault((new, d, t), [0, 0, 0])
                for i in range(3):
                    into[i] += c[i]

    def total(self, *, peer: str | None = None, direction: str | None = None,
              msg_type: str | None = None, field: str = "frame") -> int:
        i = {"frame": 0, "payload": 1, "frames": 2}[field]
        with self._lock:
            return sum(c[i] for (p, d, t), c in self._counts.items()
                       if (peer is None or p == peer) and (direction is None or d == direction)
                       and (msg_type is None or t.name == msg_type))

    def by_type(self) -> dict[tuple[str, str], int]:
        """Frame bytes so far by (direction, message type), summed over peers."""
        out: dict[tuple[str, str], int] = defaultdict(int)
        with self._lock:
            for (_, d, t), c in self._counts.items():
                out[(d, t.name)] += c[0]
        return dict(out)

    def rows(self) -> list[dict]:
        with self._lock:
            return [{"peer": p, "direction": d, "type": t.name, "frame_bytes": c[0], "payload_bytes": c[1],
                     "frames": c[2]} for (p, d, t), c in sorted(self._counts.items(), key=_named)]


def _named(item) -> tuple[str, str, str]:
    """A count's sort key: peer, direction, type name (as the rows were always ordered)."""
    (peer, direction, msg_type), _ = item
    return peer, direction, msg_type.name


# ----------------------------------------------------------------------------- TCP_INFO

# What the kernel's socket did, read with getsockopt(TCP_INFO) and unpacked at the offsets of
# struct tcp_info (include/uapi/linux/tcp.h; the struct only grows, so an older kernel returns a
# shorter buffer and its missing fields are left out). name: (byte offset, struct format).
TCP_INFO_FIELDS = {
    "total_retrans": (100, "I"),   # segments retransmitted over the connection's life
    "bytes_acked": (120, "Q"),     # data bytes the peer acknowledged (RFC 4898 HCThruOctetsAcked), Linux >= 4.1
    "bytes_received": (128, "Q"),  # in-order data bytes received (HCThruOctetsReceived), Linux >= 4.1
    "segs_out": (136, "I"),        # segments sent, pure ACKs and retransmissions included, Linux >= 4.2
    "segs_in": (140, "I"),         # segments received, pure ACKs included
    "bytes_sent": (200, "Q"),      # data bytes sent, retransmissions included (HCDataOctetsOut), Linux >= 4.19
    "bytes_retrans": (208, "Q"),   # data bytes retransmitted (OctetsRetrans), Linux >= 4.19
}
TCP_INFO_BYTES = 232               # through tcpi_snd_wnd: asking for more is harmless, the kernel copies less


def tcp_info(sock: socket.socket) -> dict[str, int]:
    """The TCP_INFO counters above (cumulative over the connection); {} when the socket is gone."""
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_BYTES)
    except OSError:
        return {}
    return {name: struct.unpack_from("=" + fmt, raw, off)[0] for name, (off, fmt) in TCP_INFO_FIELDS.items()
            if len(raw) >= off + struct.calcsize(fmt)}


def sum_counts(rows: list[dict[str, int]]) -> dict[str, int]:
    """Counter dicts added key by key (the TCP_INFO deltas of several connections)."""
    out: dict[str, int] = defaultdict(int)
    for row in rows:
        for k, v in row.items():
            out[k] += v
    return dict(out)


# ----------------------------------------------------------------------------- connections


def _unreferenced(entry: list) -> bool:
    """True when `entry[0]`, a kept buffer's owner, is referenced by `entry` alone (and by this
    call's argument): every memoryview over it keeps one reference to it while it or any slice of
    it is alive, and a tensor made from such a view keeps that view alive, so a count of 2 means no
    frame, view or tensor can still read the buffer."""
    return sys.getrefcount(entry[0]) == 2


class Connection:
    """One TCP connection speaking the frame format: counted sends, validated receives.

    `send` is thread-safe (one lock per connection). `recv` is meant for a single reader
    thread. Sequence numbers are tracked per direction: a frame whose number is not exactly
    the next one (a replay, a gap) is rejected.
    """

    def __init__(self, sock: socket.socket, *, token: str | bytes, sender: int, peer: str,
                 counter: ByteCounter | None = None, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES):
        self.sock = sock
        self.check = token_check(token)
        self.sender = sender
        self.peer = peer
        self.counter = counter if counter is not None else ByteCounter()
        self.max_body_bytes = max_body_bytes
        self._send_lock = threading.Lock()
        self.sent_t = time.monotonic()  # when the last frame went out (a heartbeat is due only after a quiet spell)
        self._send_seq = 0
        self._recv_seq = 0
        self.closed = False
        self._tcp_last: dict[str, int] = {}
        self._header = bytearray(HEADER_BYTES)    # each frame's header is read into this one buffer
        self._header_view = memoryview(self._header)
        self._header_prefix = self._header_view[:HEADER_PREFIX.size]  # what the checksum covers before the body
        self._recv_into = sock.recv_into
        self._spent = 0.0                          # checksum seconds of the frame being read
        self._kept: list[list] = []                # recv(reuse=True)'s buffers: [owner, offset, capacity]
        self.fresh_buffers = 0  # recv(reuse=True) calls that found every kept buffer still in use

    def tcp_delta(self) -> dict[str, int]:
        """TCP_INFO counters (tcp_info) since the previous call, the first call since the connection
        opened; for the byte ledger of one update. Call it from one thread."""
        now = tcp_info(self.sock)
        delta = {k: v - self._tcp_last.get(k, 0) for k, v in now.items()}
        self._tcp_last = now or self._tcp_last
        return delta

    def send(self, msg_type: MessageType, body: Body, version: int = 0) -> int:
        """Write one frame (`body`: one buffer or a list of them); returns the bytes written to the socket."""
        with self._send_lock:
            t0 = _perf_counter()
            parts = body_parts(body)
            parts.insert(0, frame_header(msg_type, parts, check=self.check, sender=self.sender, version=version,
                                         seq=self._send_seq))
            spent = _perf_counter() - t0
            written = send_parts(self.sock, parts)
            self._send_seq += 1
            self.sent_t = _monotonic()
        self.counter.add(self.peer, "sent", msg_type, written, written - HEADER_BYTES, spent)
        return written

    def send_prepared(self, msg_type: MessageType, body: PreparedBody, version: int = 0) -> int:
        """`send` of a body whose checksum was computed once (`prepare_body`): a broadcast sends one
        PreparedBody to every connection. The bytes on the wire are the same as `send`'s."""
        with self._send_lock:
            t0 = _perf_counter()
            header = prepared_header(msg_type, body, check=self.check, sender=self.sender, version=version,
                                     seq=self._send_seq)
            spent = _perf_counter() - t0
            written = send_parts(self.sock, (header, *body.parts))
            self._send_seq += 1
            self.sent_t = _monotonic()
        self.counter.add(self.peer, "sent", msg_type, written, written - HEADER_BYTES, spent)
        return written

    def _read_into(self, view: memoryview, what: str, deadline: float | None = None, crc: int | None = None,
                   idle_s: float | None = None):
        """Fill `view` from the socket; returns the checksum of its bytes continued from `crc`
        (None: no checksum), computed chunk by chunk while the bytes are still in cache. `idle_s`:
        Silent when no byte arrives for that long (waited with poll(), so the socket's timeout,
        which a concurrent send also obeys, is left alone). The checksum's seconds go to `_spent`."""
        if deadline is None and idle_s is None:
            return self._read_plain(view, what, crc)
        n, got = len(view), 0
        while got < n:
            if deadline is not None:  # a total deadline: a byte per second does not keep it alive
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DeadlineExceeded(f"deadline passed with {got} of {n} {what} bytes received")
                self.sock.settimeout(left)
            if idle_s is not None and not self._readable(idle_s if deadline is None else min(idle_s, left)):
                if deadline is None or idle_s < left:
                    raise Silent(f"no byte for {idle_s:g} s ({got} of {n} {what} bytes received)")
                raise DeadlineExceeded(f"deadline passed with {got} of {n} {what} bytes received")
            try:
                k = self.sock.recv_into(view[got:])
            except socket.timeout:
                if deadline is None:
                    raise
                raise DeadlineExceeded(f"deadline passed with {got} of {n} {what} bytes received") from None
            crc = self._took(view, got, k, what, crc)
            got += k
        return crc

    def _read_plain(self, view: memoryview, what: str, crc: int | None, got: int = 0):
        """`_read_into` without deadlines (from byte `got` on): the loop a frame of a running service takes."""
        n, recv_into = len(view), self.sock.recv_into
        while got < n:
            k = recv_into(view[got:got + RECV_CHUNK], 0, socket.MSG_WAITALL)
            crc = self._took(view, got, k, what, crc)
            got += k
        return crc

    def _took(self, view: memoryview, got: int, k: int, what: str, crc: int | None) -> int | None:
        """`k` more bytes arrived at `view[got:]` (0: the peer closed): the running CRC over them."""
        if not k:
            if not got and what == "header":
                raise PeerClosed("connection closed by peer")
            raise PeerClosed(f"connection closed in the middle of a {what}: {got} of {len(view)} bytes")
        if crc is not None:
            t0 = time.perf_counter()
            crc = _crc32c(view[got:got + k], crc)
            self._spent += time.perf_counter() - t0
        return crc

    def _readable(self, secs: float) -> bool:
        """True once the socket has a byte (or EOF, or an error) to read, False after `secs` seconds."""
        poller = select.poll()
        poller.register(self.sock, select.POLLIN | select.POLLPRI)
        return bool(poller.poll(max(0, math.ceil(secs * 1000))))

    def _body_buffer(self, n: int, reuse: bool) -> memoryview:
        """A receive buffer for an n-byte body: a fresh one, or (reuse) one of this connection's
        KEPT_BUFFERS kept buffers that nothing refers to any more (no frame, view or tensor over it
        alive; `_unreferenced`). A free one too small is replaced by one of n bytes; when every kept
        buffer is still in use the body gets a fresh buffer (counted in `fresh_buffers`)."""
        if not reuse:
            return recv_buffer(n)
        small = None
        for entry in self._kept:
            if _unreferenced(entry):
                if entry[2] >= n:
                    owner, offset, capacity = entry
                    end = offset + capacity            # the body ends where the buffer ends: aligned
                    return memoryview(owner)[end - n:end]
                small = entry
        owner, offset = aligned_region(n)
        if small is not None:
            small[:] = owner, offset, n
        elif len(self._kept) < KEPT_BUFFERS:
            self._kept.append([owner, offset, n])
        else:
            self.fresh_buffers += 1
        return memoryview(owner)[offset:offset + n]

    def recv(self, deadline: float | None = None, header_deadline: float | None = None,
             idle_s: float | None = None, reuse: bool = False) -> Frame:
        """Read and validate one frame; raises WireError (PeerClosed on EOF).

        `deadline` (time.monotonic() seconds): the whole frame must have arrived by then, or
        DeadlineExceeded; it leaves a socket timeout set, which the caller resets. `header_deadline`:
        an earlier one for the 44-byte header, which carries the run token (a handshake gives a peer
        that has not shown the token only a short while). The body is
        read into one buffer of the announced length, allocated only after the header passed
        its checks (the cap among them). `idle_s`: the liveness deadline, Silent when no byte arrives
        for that long, between frames or within one (a slow link that keeps moving is never cut).

        `reuse`: the body is read into one of this connection's KEPT_BUFFERS kept receive buffers
        instead of a fresh one (no allocation, and no page faults of new memory, per frame).
        Release contract: a kept buffer is read into again only once nothing can read its last
        body: the frame, every slice of its body and every tensor decoded over it are gone, or the
        frame was `release()`d and the views made from it are gone. A frame is therefore valid for
        as long as it is held, as without reuse; one that is held while the next frames arrive (a
        queue, a log, a tensor kept as state) only costs those frames fresh buffers
        (`fresh_buffers` counts them). Reading a frame's `body` after its `release()` raises
        ValueError. The buffers stay with the connection (each as large as the largest body it
        held) until it is dropped."""
        plain = deadline is None and idle_s is None  # a running service's receive: no clock to watch
        if plain and header_deadline is None:        # one call for the header, the loop only if it comes short
            got = self._recv_into(self._header_view, HEADER_BYTES, _WAITALL)
            if got != HEADER_BYTES:
                self._took(self._header_view, 0, got, "header", None)  # none: PeerClosed
                self._read_plain(self._header_view, "header", None, got)
        else:
            self._read_into(self._header_view, "header", deadline if header_deadline is None else header_deadline,
                            idle_s=idle_s)
        t_header = _monotonic()
        t0 = _perf_counter()
        mtype, sender, version, seq, body_len, crc = parse_header(
            self._header, check=self.check, expected_seq=self._recv_seq, max_body_bytes=self.max_body_bytes)
        body = self._body_buffer(body_len, reuse)
        running = _crc32c(self._header_prefix)
        if plain and body_len <= RECV_CHUNK:  # one call for the body, checksummed in one pass
            self._spent = _perf_counter() - t0
            got = self._recv_into(body, body_len, _WAITALL) if body_len else 0
            if got == body_len:
                t1 = _perf_counter()
                running = _crc32c(body, running)
                self._spent += _perf_counter() - t1
            else:  # a short read: its bytes' checksum (none: PeerClosed), then the loop for the rest
                running = self._read_plain(body, "body", self._took(body, 0, got, "body", running), got)
        else:
            self._spent = _perf_counter() - t0
            running = self._read_into(body, "body", deadline, running, idle_s)
        if running != crc:
            raise WireError("checksum mismatch")
        self._recv_seq += 1
        self.counter.add(self.peer, "received", mtype, HEADER_BYTES + body_len, body_len, self._spent)
        return Frame(mtype, sender, version, seq, body, (t_header, _monotonic()))

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def claim_prepared_frame(conn: Connection, msg_type: MessageType, body: PreparedBody,
                         version: int = 0) -> list[memoryview]:
    """The frame `conn.send_prepared` would write, as [header, *body parts], with the connection's
    next sequence number claimed, for a caller that writes the bytes itself (a non-blocking sender,
    the learner's event loop: trainers/hilo/links.py). The caller must write every frame it claims,
    whole and in claim order, and count it (`ByteCounter.add`) once written."""
    with conn._send_lock:
        t0 = time.perf_counter()
        header = prepared_header(msg_type, body, check=conn.check, sender=conn.sender, version=version,
                                 seq=conn._send_seq)
        conn.counter.add_seconds(time.perf_counter() - t0)
        conn._send_seq += 1
        conn.sent_t = time.monotonic()
    return [memoryview(header), *body.parts]
