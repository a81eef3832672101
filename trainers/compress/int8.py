"""`int8`: block-scaled 8-bit quantisation (absmax scale per block, fp32 scales) with error feedback.

Byte budget: when the budget holds every block (the dense layout, about half of the bf16
adapter) every block is sent. Below that only the blocks of largest energy (sum of squares of
M = G + E) are sent, each with its int32 index and fp32 scale, so a block costs
block + 8 bytes; the block size is halved from `block_size` until at least `MIN_BLOCKS` blocks
fit, so the payload ends within about 1/`MIN_BLOCKS` of its budget. The rest waits in the
error feedback. A budget that cannot hold one block after the header is refused.
"""
from __future__ import annotations

import math

import torch

from trainers import spec

from trainers.compress.base import BudgetedCompressor, OptionError
from trainers.compress.container import header_bytes, require, Segment, Unpacked
from trainers.compress.kernels import contiguous_span, flatten, unflatten

_LEVELS = 127        # symmetric int8: -127..127, so that negation is exact
_BLOCK_EXTRA = 8     # bytes per sent block besides its values: int32 index + fp32 scale
MIN_BLOCKS = 16      # under a budget, blocks shrink until this many fit (granularity <= ~1/16 of it)


class Int8Compressor(BudgetedCompressor):
    """All gradients flattened into one vector, cut into blocks of `block_size` elements."""

    options = spec.COMPRESSOR_OPTIONS["int8"]  # defaults and flags: trainers/spec.py

    def _validate(self) -> None:
        super()._validate()
        bs = self.config["block_size"]
        if not isinstance(bs, int) or not 1 <= bs <= 1 << 20:
            raise OptionError(f"{self.name}: block_size must be an integer in [1, 2^20], got {bs!r}")
        self.block_size = bs

    def _compress(self, m):
        layout = [(n, tuple(t.shape)) for n, t in m.items()]
        flat = flatten(m)
        plan = self.plan(layout, flat.numel())
        if plan is None:                                             # the dense layout fits
            scales, q = _quantise(_blocks(flat, self.block_size))
            return ([Segment("scales", "fp32", scales), Segment("q", "int8", q.reshape(-1)[: flat.numel()])],
                    {"block_size": self.block_size})
        bs, k = plan
        blocks = _blocks(flat, bs)                                   # (n_blocks, bs)
        energy = torch.linalg.vector_norm(blocks, dim=1)              # ranks as sum of squares does, no copy
        # by energy, ties to the lower index (stable sort); sent in increasing index order, which decode checks
        index = torch.sort(torch.sort(energy, descending=True, stable=True).indices[:k]).values
        scales, q = _quantise(blocks[index])
        return ([Segment("blocks", "int32", index.to(torch.int32)), Segment("scales", "fp32", scales),
                 Segment("q", "int8", q.reshape(-1))], {"block_size": bs})

    def plan(self, layout, numel: int) -> tuple[int, int] | None:
        """None when every block fits the budget; else (block size, blocks sent). Depends only on
        the layout and the budget, so the payload size is known before any value is read."""
        budget = self.budget_for([s for _, s in layout])
        n_blocks = -(-numel // self.block_size)
        dense = header_bytes(self.name, layout, [("scales", "fp32", n_blocks), ("q", "int8", numel)],
                             {"block_size": self.block_size}) + 4 * n_blocks + numel
        if dense <= budget:
            return None
        bs = self.block_size
        while True:
            k = (budget - self._sparse_header(layout, numel, bs)) // (bs + _BLOCK_EXTRA)
            if k >= MIN_BLOCKS or bs == 1:
                break
            bs //= 2
        if k < 1:
            raise ValueError(f"{self.name}: budget of {budget} bytes cannot hold one block ({bs + _BLOCK_EXTRA} "
                             f"bytes) after the {self._sparse_header(layout, numel, bs)}-byte header")
        k = int(min(k, -(-numel // bs)))
        while k > 1 and self._sparse_bytes(layout, bs, k) > budget:   # zlib: the bound can be a byte short
            k -= 1
        return bs, k

    def _sparse_bytes(self, layout, bs: int, k: int) -> int:
        segs = [("blocks", "int32", k), ("scales", "fp32", k), ("q", "int8", k * bs)]
        return header_bytes(self.name, layout, segs, {"block_size": bs}) + k * (bs + _BLOCK_EXTRA)

    def _sparse_header(self, layout, numel: int, bs: int) -> int:
        """Upper bound of the header: segment counts written with as many digits as the dense ones."""
        n_blocks = -(-numel // bs)
        return header_bytes(self.name, layout, [("blocks", "int32", n_blocks), ("scales", "fp32", n_blocks),
                                                ("q", "int8", n_blocks * bs)], {"block_size": bs})

    def _reconstruct(self, p: Unpacked):
        bs = p.meta.get("block_size")
        require(isinstance(bs, int) and 1 <= bs <= 1 << 20, self.name, f"bad block_size {bs!r}")
        total = sum(math.prod(s) for _, s in p.tensors)
        n_blocks = math.ceil(total / bs)
        q, scales = p.segments.get("q"), p.segments.get("scales")
        require(q is not None and scales is not None, self.name, "missing q or scales segment")
        require(bool((scales >= 0).all()), self.name, "negative block scale")
        if "blocks" not in p.segments:
            require(q.numel() == total, self.name, f"q segment does not hold the {total} table elements")
            require(scales.numel() == n_blocks, self.name, "scales segment does not match the number of blocks")
            values = _blocks(q.to(torch.float32), bs) * scales[:, None]
            return unflatten(values.reshape(-1)[:total], p.tensors)
        index = p.segments["blocks"].long()
        require(scales.numel() == index.numel() and q.numel() == index.numel() * bs, self.name,
                "blocks, scales and q segments disagree in length")
        if index.numel():
            require(int(index[0]) >= 0 and int(index[-1]) < n_blocks, self.name, f"block index outside [0, {n_blocks})")
            require(bool((index[1:] > index[:-1]).all()), self.name, "block indices not strictly increasing")
        if n_blocks * bs == total:                      # no padding: the blocks are the output itself
            out = self.output_zeros(p.tensors)
            values = contiguous_span(list(out.values())).reshape(n_blocks, bs)
        else:
            values = torch.zeros(n_blocks, bs, dtype=torch.float32)
            out = unflatten(values.reshape(-1)[:total], p.tensors)
        values[index] = q.to(torch.float32).reshape(-1, bs) * scales[:, None]
        return out

    def _accumulate(self, p: Unpacked, out, alpha: float) -> None:
        """out += alpha * decoded; under a budget at the sent blocks only (the others decode to zeros),
        so the residual's update touches k blocks instead of building and adding a whole adapter.
        Same bits as the dense update: an element not sent gets r + alpha * 0 = r."""
        flat = contiguous_span(list(out.values()))
        bs = p.meta.get("block_size")
        if "blocks" not in p.segments or flat is None or flat.dtype != torch.float32 or flat.numel() % bs:
            return super()._accumulate(p, out, alpha)
        index, q, scales = p.segments["blocks"].long(), p.segments["q"], p.segments["scales"]
        blocks = flat.view(-1, bs)
        blocks[index] = blocks[index].add_(q.to(torch.float32).reshape(-1, bs) * scales[:, None], alpha=alpha)


def _quantise(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(n, bs) fp32 -> (fp32 absmax scales (n,), int8 values (n, bs))."""
    scales = blocks.abs().amax(dim=1) / _LEVELS
    safe = torch.where(scales > 0, scales, torch.ones_like(scales))
    return scales, torch.round(blocks / safe[:, None]).clamp_(-_LEVELS, _LEVELS).to(torch.int8)


def _blocks(flat: torch.Tensor, block_size: int) -> torch.Tensor:
    """(n_blocks, block_size) over `flat`, zero-padded at the end: a view when no padding is needed."""
    pad = (-flat.numel()) % block_size
    return (torch.nn.functional.pad(flat, (0, pad)) if pad else flat).reshape(-1, block_size)
