"""Dtype names: the one table between the strings that travel and torch dtypes.

The same short names are used wherever a dtype is spelled out: wire tensor tables
(`trainers.protocol.wire`), compressor payload tables and options (`trainers.compress`, e.g.
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


def byte_view(t: torch.Tensor) -> memoryview:
    """The raw bytes of `t` (C order) as a flat view over its storage: no copy for a contiguous
    CPU tensor. The view keeps the storage alive; it is only as immutable as the tensor is."""
    t = t.detach().cpu().contiguous().reshape(-1)
    return memoryview(t.view(torch.uint8).numpy()) if t.numel() else memoryview(b"")


def over_bytes(buf: bytes | bytearray | memoryview, name: str) -> torch.Tensor:
    """A 1-D tensor of dtype `name` over `buf` WITHOUT a copy when `buf` is writable and its
    address is aligned for the dtype (a receive buffer); otherwise `from_bytes`' private copy
    (read-only bytes; a misaligned offset, which torch kernels must never load from)."""
    view = memoryview(buf)
    dtype = DTYPES[name]
    if view.readonly or not len(view) or len(view) % dtype.itemsize:
        return from_bytes(view, name)
    if torch.frombuffer(view, dtype=torch.uint8).data_ptr() % dtype.itemsize:
        return from_bytes(view, name)
    return torch.frombuffer(view, dtype=dtype)
