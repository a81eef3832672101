"""`identity`: the exact gradient, in fp32 (bit-exact) or a 16-bit wire dtype (rounded, with error feedback)."""
from __future__ import annotations

import math

import torch

from trainers import spec

from trainers.compress.base import check_wire_dtype, Compressor
from trainers.compress.container import container_head, header_bytes, require, Segment, Unpacked
from trainers.compress.kernels import contiguous_span, flatten, unflatten, zeros_for
from trainers.protocol.dtypes import byte_view, DTYPES, itemsize


class IdentityCompressor(Compressor):
    """Ships every gradient element as is, in `dtype`."""

    options = spec.COMPRESSOR_OPTIONS["identity"]  # defaults and flags: trainers/spec.py

    def _validate(self) -> None:
        self.dtype = check_wire_dtype(self.name, self.config["dtype"])

    def stated_bytes(self, tensors) -> int:
        n = sum(math.prod(s) for _, s in tensors)
        return header_bytes(self.name, list(tensors), [("values", self.dtype, n)]) + n * itemsize(self.dtype)

    def encode(self, grads: dict[str, torch.Tensor]) -> bytes:
        """fp32: the gradients' own bytes joined once behind the header (the one copy). An fp32 payload
        carries M exactly, so E = M - decode(payload) is zero after every update: M = G, and the
        residual stays the zeros it starts as (no M buffer, no subtraction; -0.0 ships as -0.0)."""
        if self.dtype != "fp32":
            return super().encode(grads)
        self._check_inputs(grads)
        layout = [(n, tuple(g.shape)) for n, g in grads.items()]
        if self.error_feedback and self._layout is None:
            self.residuals, self._layout = zeros_for(layout), layout
        elif self.error_feedback and layout != self._layout:
            raise ValueError(f"{self.name}: gradient layout changed between updates; use a fresh compressor")
        n = sum(math.prod(s) for _, s in layout)
        with torch.no_grad():
            body = [byte_view(g.detach().to(torch.float32)) for g in grads.values()]
        return b"".join([container_head(self.name, layout, [("values", "fp32", n)]), *body])

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
