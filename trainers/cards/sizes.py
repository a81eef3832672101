"""Bytes of the wire formats, from shapes alone (torch-free): what the cards' byte rules and the cost
model count. Each constant mirrors the module that writes the bytes; tests/harness/projection/
test_costmodel.py holds every rule equal to real encoders' payloads."""
from __future__ import annotations

import json
import math
import zlib
from typing import Any, Mapping

from trainers.cards import Tensors

FRAME_HEADER_BYTES = 44        # trainers/protocol/wire.py HEADER_BYTES
CONTAINER_PREFIX_BYTES = 6     # trainers/compress/container.py _PREFIX: magic "HLOC", version, name length
CONTAINER_TABLE_LEN_BYTES = 4  # ... then the u32 table length
TABLE_ZLIB_LEVEL = 6           # ... the JSON table is zlib-compressed at this level
FLOAT_DTYPES = ("fp32", "bf16", "fp16")  # what a payload may ship its values in
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "int8": 1, "int16": 2, "int32": 4, "int64": 8}  # protocol/dtypes.py

Segments = list[tuple[str, str, int]]   # (segment name, dtype, elements)


def n_params(tensors: Tensors) -> int:
    return sum(math.prod(s) for _, s in tensors)


def _json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def tensor_table_bytes(tensors: Tensors, dtype: str, meta: Mapping[str, Any] | None = None) -> int:
    """Bytes of `trainers/protocol/wire.py pack_tensors`: u32 table length, the JSON table, the raw tensors."""
    table = _json({"meta": dict(meta or {}), "tensors": [{"name": n, "dtype": dtype, "shape": list(s)}
                                                          for n, s in tensors]})
    return 4 + len(table) + n_params(tensors) * DTYPE_BYTES[dtype]


def container_header_bytes(name: str, tensors: Tensors, segments: Segments,
                           meta: Mapping[str, Any] | None = None) -> int:
    """Bytes of an `HLOC` payload before its body (`trainers/compress/container.py header_bytes`)."""
    table = {"tensors": [[n, list(s)] for n, s in tensors], "segments": [list(x) for x in segments],
             "meta": dict(meta or {})}
    return (CONTAINER_PREFIX_BYTES + len(name.encode("ascii")) + CONTAINER_TABLE_LEN_BYTES
            + len(zlib.compress(_json(table), TABLE_ZLIB_LEVEL)))


def container_bytes(name: str, tensors: Tensors, segments: Segments, meta: Mapping[str, Any] | None = None) -> int:
    """Bytes of a whole `HLOC` payload: its header and its segments."""
    return container_header_bytes(name, tensors, segments, meta) + sum(c * DTYPE_BYTES[d] for _, d, c in segments)
