"""Lossless delta sync: ship only the elements of the shipped adapter that changed.

What RL frameworks ship in 2026 (TRL, slime, prime-rl, Fireworks): after one step most elements
of the bf16 weights are bit-identical to the last shipped ones, so the update is the changed
elements as (index, value) pairs, compressed with a fast general-purpose codec. Here it is a
FULL-protocol method (`delta` in trainers/hilo/methods.py): the replicas end up holding exactly
what `full-bf16` would have shipped, bit for bit, not a gradient to replay.

What is compared: the adapter rounded to the ship dtype (bf16 by default) now against the one
shipped at the previous version, bit pattern by bit pattern (so -0.0 vs 0.0 counts as a change).
The learner trains in fp32; a change below half a bf16 ulp is not shipped, exactly as full-bf16
would not ship it, and the learner's fp32 copy keeps it (the next rounding may carry it). With
`dtype=fp32` the fp32 adapter itself is compared (Adam moves nearly every element every step).

Payload (little-endian, one per update):
    header  HEADER: magic "HLDT", format, codec id, dtype id, base version, version,
            total elements, changed elements, raw bytes
    body    codec(gaps as uint32 || values as raw ship-dtype bytes)
The changed positions are flat indices over the adapter's tensors in the replica's order;
gap[0] = index[0], gap[i] = index[i] - index[i-1] (>= 1): small numbers that a codec packs well.
Decode checks every field against the receiver's own state before it decompresses, decompresses
at most the announced size, and refuses out-of-range indices and non-finite values.
"""
from __future__ import annotations

import struct

import lz4.block
import torch
import zstandard

from trainers.compress.container import PayloadError
from trainers.protocol import dtypes

MAGIC = b"HLDT"
FORMAT = 1
HEADER = struct.Struct("<4sBBBxQQQQQ")  # magic, format, codec, dtype, pad, base, version, total, changed, raw bytes
CODECS = ("zstd", "lz4")
DTYPES = ("bf16", "fp16", "fp32")
GAP = torch.int32  # uint32 on the wire; torch has no uint32 arithmetic, so totals stay below 2**31
MAX_TOTAL = 2**31 - 1
ZSTD_LEVEL = 3  # zstd's default: ~300 MB/s encode here; higher levels buy a few % for several x the time
_BITS = {2: torch.int16, 4: torch.int32}  # same-size integer view: compare bit patterns, not values


def is_delta(body: bytes | memoryview) -> bool:
    """A delta payload (else a tensor table: a keyframe, whose u32 table length cannot read as the magic)."""
    return bytes(body[:4]) == MAGIC


def compress(codec: str, raw: bytes) -> bytes:
    if codec == "zstd":
        return zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(raw)
    return lz4.block.compress(raw, store_size=False)


def decompress(codec: str, data: bytes, size: int) -> bytes:
    """At most `size` bytes out (a decompression bomb is refused, not allocated), exactly `size` or an error."""
    try:
        if codec == "zstd":
            if zstandard.frame_content_size(data) not in (size, -1):  # zstd would allocate what the frame says
                raise PayloadError(f"delta: zstd frame says {zstandard.frame_content_size(data)} bytes, header {size}")
            out = zstandard.ZstdDecompressor().decompress(data, max_output_size=size, allow_extra_data=False)
        else:
            out = lz4.block.decompress(data, uncompressed_size=size) if size else b""
    except (zstandard.ZstdError, lz4.block.LZ4BlockError) as e:
        raise PayloadError(f"delta: {codec} body does not decompress: {e}") from None
    if len(out) != size:
        raise PayloadError(f"delta: body decompresses to {len(out)} bytes, header says {size}")
    return out


class DeltaSync:
    """One replica's view of the shipped adapter: encode (learner) or apply (worker) deltas.

    Both sides start from the version-0 adapter that every replica builds from the seed, rounded
    to the ship dtype, so the first delta already leaves every worker on the bf16-rounded adapter
    that full-bf16 would have shipped."""

    def __init__(self, adapter: dict[str, torch.Tensor], dtype: str = "bf16", codec: str = "zstd"):
        if codec not in CODECS:
            raise ValueError(f"delta: unknown codec {codec!r}; valid: {', '.join(CODECS)}")
        if dtype not in DTYPES:
            raise ValueError(f"delta: unknown dtype {dtype!r}; valid: {', '.join(DTYPES)}")
        self.codec, self.dtype_name = codec, dtype
        self.dtype = dtypes.DTYPES[dtype]
        self.shapes = {n: tuple(t.shape) for n, t in adapter.items()}
        self.reference = self.flatten(adapter)  # (total,) in the ship dtype: what every replica holds
        if self.reference.numel() > MAX_TOTAL:
            raise ValueError(f"delta: {self.reference.numel()} elements; indices are uint32 gaps below 2**31")
        self.version = 0

    def flatten(self, adapter: dict[str, torch.Tensor]) -> torch.Tensor:
        if {n: tuple(t.shape) for n, t in adapter.items()} != self.shapes:
            raise ValueError("delta: the adapter's tensors differ from the replica's layout")
        return torch.cat([t.detach().reshape(-1).to(self.dtype) for t in adapter.values()])

    def tensors(self) -> dict[str, torch.Tensor]:
        """The shipped adapter as tensors (views of the reference)."""
        out, at = {}, 0
        for name, shape in self.shapes.items():
            n = int(torch.Size(shape).numel())
            out[name] = self.reference[at:at + n].view(shape)
            at += n
        return out

    # ------------------------------------------------------------------ learner

    def encode(self, adapter: dict[str, torch.Tensor], version: int) -> tuple[bytes, int]:
        """The payload taking every replica from the last shipped version to `version`; and the
        number of changed elements (density = changed / total)."""
        new = self.flatten(adapter)
        bits = _BITS[new.element_size()]
        index = torch.nonzero(new.view(bits) != self.reference.view(bits)).reshape(-1)
        gaps = torch.diff(index, prepend=index.new_zeros(1)).to(GAP) if index.numel() else index.to(GAP)
        raw = gaps.numpy().tobytes() + new[index].view(bits).numpy().tobytes()
        body = compress(self.codec, raw)
        header = HEADER.pack(MAGIC, FORMAT, CODECS.index(self.codec), DTYPES.index(self.dtype_name),
                             self.version, version, new.numel(), index.numel(), len(raw))
        self.reference, self.version = new, version
        return header + body, index.numel()

    # ------------------------------------------------------------------ worker

    def reset(self, adapter: dict[str, torch.Tensor], version: int) -> None:
        """A keyframe (the whole shipped adapter, e.g. on joining late): start from it."""
        self.reference, self.version = self.flatten(adapter), version

    def apply(self, payload: bytes | memoryview) -> tuple[dict[str, torch.Tensor], int]:
        """Apply a delta to the held adapter; returns (the new shipped adapter, its version)."""
        header, version, changed, raw_size = self.check_header(payload)
        raw = decompress(self.codec_of(header), bytes(payload[HEADER.size:]), raw_size)
        gaps = torch.frombuffer(bytearray(raw[:4 * changed]), dtype=GAP) if changed else torch.zeros(0, dtype=GAP)
        if changed and (int(gaps[0]) < 0 or (changed > 1 and int(gaps[1:].min()) < 1)):
            raise PayloadError("delta: indices are not strictly increasing")
        index = torch.cumsum(gaps.to(torch.int64), 0)
        if changed and int(index[-1]) >= self.reference.numel():
            raise PayloadError(f"delta: index {int(index[-1])} outside the adapter's {self.reference.numel()} elements")
        bits = _BITS[self.reference.element_size()]
        values = torch.frombuffer(bytearray(raw[4 * changed:]), dtype=bits).view(self.dtype) if changed else None
        if values is not None and not bool(torch.isfinite(values).all()):
            raise PayloadError("delta: non-finite values")
        reference = self.reference.clone()  # a bad payload above leaves the held adapter untouched
        if values is not None:
            reference[index] = values
        self.reference, self.version = reference, version
        return self.tensors(), version

    def check_header(self, payload) -> tuple[tuple, int, int, int]:
        if len(payload) < HEADER.size:
            raise PayloadError(f"delta: {len(payload)} bytes hold no header")
        header = HEADER.unpack_from(payload)
        magic, fmt, codec, dtype, base, version, total, changed, raw_size = header
        if magic != MAGIC or fmt != FORMAT:
            raise PayloadError(f"delta: magic {magic!r} format {fmt}, expected {MAGIC!r} format {FORMAT}")
        if codec >= len(CODECS) or dtype >= len(DTYPES) or DTYPES[dtype] != self.dtype_name:
            raise PayloadError(f"delta: codec {codec} dtype {dtype}; this replica holds {self.dtype_name}")
        if base != self.version or version != base + 1:
            raise PayloadError(f"delta: from version {base} to {version}, this replica holds {self.version}")
        if total != self.reference.numel() or changed > total:
            raise PayloadError(f"delta: {changed} of {total} elements, this adapter has {self.reference.numel()}")
        if raw_size != changed * (4 + self.reference.element_size()):
            raise PayloadError(f"delta: {raw_size} raw bytes for {changed} changed elements")
        return header, version, changed, raw_size

    @staticmethod
    def codec_of(header: tuple) -> str:
        return CODECS[header[2]]
