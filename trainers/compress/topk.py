"""`topk`: the largest-magnitude gradient elements across the whole adapter, with error feedback.

Each kept element costs its value (in `dtype`) plus a 4-byte index into the flattened adapter.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from trainers import spec

from trainers.compress.base import BudgetedCompressor, check_wire_dtype
from trainers.compress.container import header_bytes, require, Segment, Unpacked
from trainers.compress.kernels import contiguous_span, flatten
from trainers.protocol.dtypes import DTYPES, itemsize

_INDEX_BYTES = 4  # int32 index: adapters up to 2^31 elements


SAMPLE = 1 << 16     # elements of the strided sample that sets the candidates' threshold
MARGIN = 2.0         # the threshold keeps ~MARGIN x k candidates, so the sample's error rarely leaves < k
CHUNK = 1 << 17      # elements per step of the candidate pass: 512 KiB of fp32, whose |x| stays in cache


def top_indices(flat: torch.Tensor, k: int) -> torch.Tensor:
    """Indices (int32, increasing) of the k largest |flat|: the same set as a topk over every
    element (ties broken by topk). A threshold from a strided sample keeps ~MARGIN * k candidates
    in one pass (`above`), and the exact top k is taken among them; if the sample under-shot (fewer
    than k candidates), a topk over every element instead. A full topk over ~35 M magnitudes
    costs ~60 memcpy of the adapter; this ~3."""
    n = flat.numel()
    if n <= 4 * SAMPLE or MARGIN * k >= n / 4:
        return torch.sort(torch.topk(flat.abs(), k, sorted=False).indices).values.to(torch.int32)
    sample = flat[:: n // SAMPLE].abs()
    keep = max(1, int(sample.numel() * MARGIN * k / n))                   # sample elements above it
    t = float(torch.topk(sample, keep, sorted=False).values.min())
    cand = above(flat, t)                                                 # increasing
    if cand.numel() < k:
        return torch.sort(torch.topk(flat.abs(), k, sorted=False).indices).values.to(torch.int32)
    chosen = torch.topk(flat[cand].abs(), k, sorted=False).indices
    return cand[torch.sort(chosen).values].to(torch.int32)            # cand is increasing: so is this


def above(flat: torch.Tensor, t: float) -> torch.Tensor:
    """Indices (int64, increasing) of the elements of the 1-D fp32 `flat` with |x| >= t, in one read
    of `flat`: chunk by chunk, |x| and the mask go through two small scratch buffers that stay in
    cache (whole-vector temporaries cost a 141 MB write and read each, and torch.nonzero two passes
    over the mask: ~11 memcpy; this ~2). numpy's flatnonzero is one pass."""
    x = flat.numpy()
    mag, mask = np.empty(min(CHUNK, len(x)), np.float32), np.empty(min(CHUNK, len(x)), np.bool_)
    found = []
    for start in range(0, len(x), CHUNK):
        part = x[start:start + CHUNK]
        m = np.greater_equal(np.abs(part, out=mag[:len(part)]), t, out=mask[:len(part)])
        hits = np.flatnonzero(m)
        if len(hits):
            found.append(hits + start)
    return torch.from_numpy(np.concatenate(found) if found else np.zeros(0, np.int64))


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
        index = top_indices(flat, k)                     # sent in increasing order, which decode checks
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
        out = self.output_zeros(p.tensors)
        flat = contiguous_span(list(out.values()))
        flat[idx] = values.to(torch.float32)
        return out

    def _accumulate(self, p: Unpacked, out, alpha: float) -> None:
        """out += alpha * decoded at the sent elements only (the rest of the decode is zeros): the
        residual's update touches k elements instead of building and adding a whole adapter. Same
        bits as the dense update: an element not sent gets r + alpha * 0 = r."""
        flat = contiguous_span(list(out.values()))
        if flat is None or flat.dtype != torch.float32:
            return super()._accumulate(p, out, alpha)
        idx = p.segments["index"].long()
        flat[idx] = flat[idx].add_(p.segments["values"].to(torch.float32), alpha=alpha)
