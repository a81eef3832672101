"""The payload container every compressor writes (the wire format of an update body).

Payload container (shared by every compressor, little-endian)::

    magic      4s   b"HLOC"
    version    u8   FORMAT_VERSION
    name_len   u8   then the compressor name (ascii): a payload of one compressor is
                    never decoded by another
    table_len  u32  then `table`: zlib-compressed JSON
                    {"tensors": [[name, [dim, ...]], ...],        the gradients' layout
                     "segments": [[key, dtype, count], ...],       the body's arrays, in order
                                                                   (dtype: a name of trainers.protocol.dtypes)
                     "meta": {...}}                                 compressor-specific, small
    body            the segments' raw little-endian bytes, back to back; nothing may follow

``decode`` validates every field before it allocates anything: lengths are checked against
the bytes actually present, decompression is capped, shapes are bounded by
``max_decoded_elements``, and float segments must be finite. Any violation raises
``PayloadError`` with a one-line reason; it never crashes the process.
"""
from __future__ import annotations

import json
import math
import struct
import zlib
from dataclasses import dataclass
from typing import Any

import torch

from trainers.compress.kernels import all_finite
from trainers.protocol.dtypes import DTYPES, byte_view, itemsize, over_bytes

MAGIC = b"HLOC"
FORMAT_VERSION = 1
_PREFIX = struct.Struct("<4sBB")  # magic, version, name length
_U32 = struct.Struct("<I")

# Caps that bound what a hostile payload can make the decoder allocate.
MAX_TABLE_BYTES = 1 << 20          # compressed table, bytes
MAX_TABLE_JSON_BYTES = 16 << 20    # decompressed table, bytes (zip-bomb guard)


class PayloadError(ValueError):
    """A payload that is malformed, truncated, foreign or otherwise not decodable."""


@dataclass(frozen=True)
class Segment:
    """One array of the payload body."""

    key: str
    dtype: str
    array: torch.Tensor  # 1-D, contiguous, of dtype DTYPES[dtype]


def _table(tensors: list[tuple[str, tuple[int, ...]]], segment_specs: list[tuple[str, str, int]],
           meta: dict[str, Any] | None) -> bytes:
    table = {"tensors": [[n, list(s)] for n, s in tensors],
             "segments": [list(x) for x in segment_specs], "meta": meta or {}}
    return zlib.compress(json.dumps(table, sort_keys=True, separators=(",", ":")).encode(), 6)


def pack(name: str, tensors: list[tuple[str, tuple[int, ...]]], segments: list[Segment],
         meta: dict[str, Any] | None = None) -> bytes:
    """Serialise a payload. Deterministic: same arguments -> same bytes."""
    head = container_head(name, tensors, [(s.key, s.dtype, int(s.array.numel())) for s in segments], meta)
    return b"".join([head, *(byte_view(s.array) for s in segments)])  # views: the join is the one copy


def container_head(name: str, tensors: list[tuple[str, tuple[int, ...]]],
                   segment_specs: list[tuple[str, str, int]], meta: dict[str, Any] | None = None) -> bytes:
    """The payload's bytes before its body (prefix, name, table): `pack` without the segments, for a
    compressor that joins its body from buffers of its own (identity: the gradients themselves)."""
    table_bytes = _table(tensors, segment_specs, meta)
    name_b = name.encode("ascii")
    return _PREFIX.pack(MAGIC, FORMAT_VERSION, len(name_b)) + name_b + _U32.pack(len(table_bytes)) + table_bytes


def header_bytes(name: str, tensors: list[tuple[str, tuple[int, ...]]],
                 segment_specs: list[tuple[str, str, int]], meta: dict[str, Any] | None = None) -> int:
    """Bytes the payload spends before its body: what a budget must reserve up front."""
    return len(container_head(name, tensors, segment_specs, meta))


@dataclass
class Unpacked:
    tensors: list[tuple[str, tuple[int, ...]]]
    segments: dict[str, torch.Tensor]
    meta: dict[str, Any]


def unpack(name: str, payload: bytes, max_decoded_elements: int) -> Unpacked:
    """Parse and validate the container; raises PayloadError, never anything else."""
    try:
        return _unpack(name, memoryview(payload), max_decoded_elements)
    except PayloadError:
        raise
    except Exception as exc:  # any parsing surprise is the payload's fault, reported in one line
        raise PayloadError(f"{name}: malformed payload ({type(exc).__name__}: {exc})") from None


def _unpack(name: str, buf: memoryview, max_elements: int) -> Unpacked:
    if len(buf) < _PREFIX.size:
        raise PayloadError(f"{name}: payload truncated: {len(buf)} bytes, shorter than the {_PREFIX.size}-byte prefix")
    magic, version, name_len = _PREFIX.unpack_from(buf, 0)
    if magic != MAGIC:
        raise PayloadError(f"{name}: bad magic {bytes(magic)!r}, expected {MAGIC!r}")
    if version != FORMAT_VERSION:
        raise PayloadError(f"{name}: unsupported payload format version {version}, expected {FORMAT_VERSION}")
    pos = _PREFIX.size
    sender = bytes(buf[pos:pos + name_len]).decode("ascii", errors="replace")
    if sender != name:
        raise PayloadError(f"{name}: payload was written by compressor {sender!r}")
    pos += name_len
    if len(buf) < pos + _U32.size:
        raise PayloadError(f"{name}: payload truncated before the table length")
    (table_len,) = _U32.unpack_from(buf, pos)
    pos += _U32.size
    if table_len > MAX_TABLE_BYTES or pos + table_len > len(buf):
        raise PayloadError(f"{name}: table length {table_len} exceeds the {len(buf) - pos} bytes present (cap {MAX_TABLE_BYTES})")
    table = _read_table(name, bytes(buf[pos:pos + table_len]))
    pos += table_len
    tensors = _check_tensors(name, table.get("tensors"), max_elements)
    segments = _read_segments(name, table.get("segments"), buf[pos:])
    meta = table.get("meta")
    if not isinstance(meta, dict):
        raise PayloadError(f"{name}: table meta is not an object")
    return Unpacked(tensors, segments, meta)


def _read_table(name: str, raw: bytes) -> dict:
    inflater = zlib.decompressobj()
    text = inflater.decompress(raw, MAX_TABLE_JSON_BYTES)
    if inflater.unconsumed_tail:
        raise PayloadError(f"{name}: table inflates beyond {MAX_TABLE_JSON_BYTES} bytes")
    table = json.loads(text)
    if not isinstance(table, dict):
        raise PayloadError(f"{name}: table is not a JSON object")
    return table


def _check_tensors(name: str, entries: Any, max_elements: int) -> list[tuple[str, tuple[int, ...]]]:
    if not isinstance(entries, list):
        raise PayloadError(f"{name}: table has no tensor list")
    out, total = [], 0
    for entry in entries:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
                and isinstance(entry[1], list) and len(entry[1]) <= 8
                and all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d for d in entry[1])):
            raise PayloadError(f"{name}: bad tensor entry {str(entry)[:80]}")
        total += math.prod(entry[1])
        if total > max_elements:
            raise PayloadError(f"{name}: tensors hold more than max_decoded_elements={max_elements}")
        out.append((entry[0], tuple(entry[1])))
    if len({n for n, _ in out}) != len(out):
        raise PayloadError(f"{name}: duplicate tensor names in the table")
    return out


def _read_segments(name: str, specs: Any, body: memoryview) -> dict[str, torch.Tensor]:
    if not isinstance(specs, list):
        raise PayloadError(f"{name}: table has no segment list")
    segments, pos = {}, 0
    for spec in specs:
        if not (isinstance(spec, list) and len(spec) == 3 and isinstance(spec[0], str)
                and spec[1] in DTYPES and isinstance(spec[2], int) and spec[2] >= 0):
            raise PayloadError(f"{name}: bad segment entry {str(spec)[:80]}")
        key, dtype, count = spec
        size = count * itemsize(dtype)
        if pos + size > len(body):
            raise PayloadError(f"{name}: segment {key!r} needs {size} bytes, only {len(body) - pos} left (truncated)")
        array = over_bytes(body[pos:pos + size], dtype)  # no copy from a receive buffer (writable, aligned)
        if array.is_floating_point() and not all_finite(array):
            raise PayloadError(f"{name}: segment {key!r} holds NaN or inf")
        segments[key] = array
        pos += size
    if pos != len(body):
        raise PayloadError(f"{name}: {len(body) - pos} trailing bytes after the last segment")
    return segments


def require(cond: bool, name: str, reason: str) -> None:
    """Raise a PayloadError unless `cond`: a payload's contents disagree with its own table."""
    if not cond:
        raise PayloadError(f"{name}: {reason}")

