"""`identity`: the exact gradient, in fp32 (bit-exact) or a 16-bit wire dtype (rounded, with error feedback)."""
from __future__ import annotations

import math

import torch

from trainers import spec

from trainers.compress import register
from trainers.compress.base import (DTYPES, Compressor, Segment, Unpacked, check_wire_dtype, contiguous_span,
                                    flatten, header_bytes, itemsize, require, unflatten)


@register("identity")
class IdentityCompressor(Compressor):
    """Ships every gradient element as is, in `dtype`."""

    options = spec.COMPRESSOR_OPTIONS["identity"]  # defaults and flags: trainers/spec.py

    def _validate(self) -> None:
        self.dtype = check_wire_dtype(self.name, self.config["dtype"])

    def stated_bytes(self, tensors) -> int:
        n = sum(math.prod(s) for _, s in tensors)
        return header_bytes(self.name, list(tensors), [("values", self.dtype, n)]) + n * itemsize(self.dtype)

    def _compress(self, m):
        flat = flatten(m).to(DTYPES[self.dtype])
        return [Segment("values", self.dtype, flat)], {}

    def _reconstruct(self, p: Unpacked):
        values = p.segments.get("values")
        total = sum(math.prod(s) for _, s in p.tensors)
        require(values is not None and values.numel() == total, self.name,
                f"values segment does not match the {total} elements of the table")
        if values.dtype == torch.float32:
            return unflatten(values, p.tensors)             # a view over a writable receive buffer
        out = self.output_zeros(p.tensors, zero=False)      # every element is written below
        contiguous_span(list(out.values())).copy_(values)
        return out
