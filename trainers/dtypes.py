"""Dtype names: the one table between the strings that travel and torch dtypes.

The same short names are used wherever a dtype is spelled out: wire tensor tables
(`trainers.wire`), compressor payload tables and options (`trainers.compress`, e.g.
`dtype="bf16"`), method names (`full-bf16`) and results. A name outside this table is never
accepted from the wire.

Tensors travel as their raw little-endian bytes in C order (every supported host is
little-endian); bf16, which numpy lacks, goes through the same byte view as every other dtype.
"""
from __future__ import annotations

import torch

DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16, "fp64": torch.float64,
    "int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16, "int32": torch.int32,
    "int64": torch.int64, "bool": torch.bool,
}
NAMES: dict[torch.dtype, str] = {dt: name for name, dt in DTYPES.items()}


def itemsize(name: str) -> int:
    """Bytes per element of the dtype called `name`."""
    return DTYPES[name].itemsize


def to_bytes(t: torch.Tensor) -> bytes:
    """The raw bytes of `t` (C order), whatever its dtype."""
    t = t.detach().cpu().contiguous().reshape(-1)
    return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""


def from_bytes(buf: bytes | memoryview, name: str) -> torch.Tensor:
    """A 1-D tensor of dtype `name` over a private, writable copy of `buf` (never aliases it)."""
    dtype = DTYPES[name]
    if len(buf) % dtype.itemsize:
        raise ValueError(f"{len(buf)} bytes are not a whole number of {name} elements")
    return torch.frombuffer(bytearray(buf), dtype=dtype) if len(buf) else torch.empty(0, dtype=dtype)
