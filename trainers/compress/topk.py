"""`topk`: the largest-magnitude gradient elements across the whole adapter, with error feedback.

Each kept element costs its value (in `dtype`) plus a 4-byte index into the flattened adapter.
"""
from __future__ import annotations

import math

import torch

from trainers import spec

from trainers.compress import register
from trainers.compress.base import (DTYPES, BudgetedCompressor, Segment, Unpacked, check_wire_dtype,
                                    flatten, header_bytes, itemsize, require, unflatten)

_INDEX_BYTES = 4  # int32 index: adapters up to 2^31 elements


@register("topk")
class TopKCompressor(BudgetedCompressor):
    """Global top-k by |value| under a byte budget."""

    options = spec.COMPRESSOR_OPTIONS["topk"]  # defaults and flags: trainers/spec.py

    def _validate(self) -> None:
        super()._validate()
        self.dtype = check_wire_dtype(self.name, self.config["dtype"])

    def _compress(self, m):
        layout = [(n, tuple(t.shape)) for n, t in m.items()]
        flat = flatten(m)
        if flat.numel() >= 2**31:
            raise ValueError(f"{self.name}: adapter of {flat.numel()} elements exceeds the int32 index")
        k = self._k(layout, flat.numel())
        # topk is a partial selection (a full sort of ~35 M magnitudes costs seconds); indices are
        # then sent in increasing order, which decode checks.
        index = torch.sort(torch.topk(flat.abs(), k, sorted=False).indices).values.to(torch.int32)
        values = flat[index.long()].to(DTYPES[self.dtype])
        return [Segment("index", "int32", index), Segment("values", self.dtype, values)], {}

    def _k(self, layout, numel: int) -> int:
        budget = self.budget_for([s for _, s in layout])
        # Upper bound of the header: the segment counts written with as many digits as numel.
        head = header_bytes(self.name, layout, [("index", "int32", numel), ("values", self.dtype, numel)])
        per_element = itemsize(self.dtype) + _INDEX_BYTES
        k = (budget - head) // per_element
        if k < 1:
            raise ValueError(f"{self.name}: budget of {budget} bytes cannot hold one element after the "
                             f"{head}-byte header")
        k = min(int(k), numel)
        # zlib's output is not monotone in the digits it compresses: the bound can be a byte short.
        while k > 1 and header_bytes(self.name, layout, [("index", "int32", k), ("values", self.dtype, k)]) \
                + k * per_element > budget:
            k -= 1
        return k

    def _reconstruct(self, p: Unpacked):
        total = sum(math.prod(s) for _, s in p.tensors)
        index, values = p.segments.get("index"), p.segments.get("values")
        require(index is not None and values is not None and index.numel() == values.numel(), self.name,
                "index and values segments missing or of different lengths")
        idx = index.long()
        if idx.numel():
            require(int(idx[0]) >= 0 and int(idx[-1]) < total, self.name, f"index outside [0, {total})")
            require(bool((idx[1:] > idx[:-1]).all()), self.name, "indices not strictly increasing")
        flat = torch.zeros(total, dtype=torch.float32)
        flat[idx] = values.to(torch.float32)
        return unflatten(flat, p.tensors)
