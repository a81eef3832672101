"""`int8`: block-scaled 8-bit quantisation (absmax scale per block, fp32 scales) with error feedback."""
from __future__ import annotations

import math

import torch

from trainers import spec

from trainers.compress.base import Compressor, OptionError, Segment, Unpacked, flatten, require, unflatten

_LEVELS = 127  # symmetric int8: -127..127, so that negation is exact


class Int8Compressor(Compressor):
    """All gradients flattened into one vector, cut into blocks of `block_size` elements."""

    name = "int8"
    options = spec.COMPRESSOR_OPTIONS["int8"]  # defaults and flags: trainers/spec.py

    def _validate(self) -> None:
        bs = self.config["block_size"]
        if not isinstance(bs, int) or not 1 <= bs <= 1 << 20:
            raise OptionError(f"{self.name}: block_size must be an integer in [1, 2^20], got {bs!r}")
        self.block_size = bs

    def _compress(self, m):
        flat = flatten(m)
        blocks = _blocks(flat, self.block_size)                      # (n_blocks, block_size)
        scales = blocks.abs().amax(dim=1) / _LEVELS                  # fp32, one per block
        safe = torch.where(scales > 0, scales, torch.ones_like(scales))
        q = torch.round(blocks / safe[:, None]).clamp_(-_LEVELS, _LEVELS).to(torch.int8)
        q = q.reshape(-1)[: flat.numel()]
        return [Segment("scales", "fp32", scales), Segment("q", "int8", q)], {"block_size": self.block_size}

    def _reconstruct(self, p: Unpacked):
        bs = p.meta.get("block_size")
        require(isinstance(bs, int) and 1 <= bs <= 1 << 20, self.name, f"bad block_size {bs!r}")
        total = sum(math.prod(s) for _, s in p.tensors)
        q, scales = p.segments.get("q"), p.segments.get("scales")
        require(q is not None and q.numel() == total, self.name, f"q segment does not hold the {total} table elements")
        require(scales is not None and scales.numel() == math.ceil(total / bs), self.name,
                "scales segment does not match the number of blocks")
        require(bool((scales >= 0).all()), self.name, "negative block scale")
        values = _blocks(q.to(torch.float32), bs) * scales[:, None]
        return unflatten(values.reshape(-1)[:total], p.tensors)


def _blocks(flat: torch.Tensor, block_size: int) -> torch.Tensor:
    pad = (-flat.numel()) % block_size
    return torch.nn.functional.pad(flat, (0, pad)).reshape(-1, block_size)
