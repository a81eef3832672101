"""`powersgd`: rank-k PowerSGD per factor (Vogels et al. 2019), warm-started, with error feedback.

Per factor M (a x b): P = M Q; P <- orth(P); Q = M^T P; M_hat = P Q^T. P and Q are sent in
`dtype`; Q is kept (fp32) to warm-start the next step, as in PyTorch's powerSGD_hook.
"""
from __future__ import annotations

import torch

from trainers import spec

from trainers.compress.base import (DTYPES, Compressor, OptionError, Segment, Unpacked, add_outer_,
                                    check_wire_dtype, require, zeros_for)


class PowerSGDCompressor(Compressor):
    """One power iteration per step, factors of equal shape batched together."""

    name = "powersgd"
    options = spec.COMPRESSOR_OPTIONS["powersgd"]  # defaults and flags: trainers/spec.py

    def _validate(self) -> None:
        rank = self.config["rank"]
        if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
            raise OptionError(f"{self.name}: rank must be a positive integer, got {rank!r}")
        self.rank = rank
        self.dtype = check_wire_dtype(self.name, self.config["dtype"])
        self.q_state: dict[str, torch.Tensor] = {}
        self.generator = torch.Generator().manual_seed(int(self.config["seed"]))

    def _compress(self, m):
        groups: dict[tuple[int, ...], list[str]] = {}
        for name, t in m.items():
            if t.dim() != 2:
                raise ValueError(f"{self.name}: {name!r} is not a matrix (shape {tuple(t.shape)})")
            groups.setdefault(tuple(t.shape), []).append(name)
        ps, qs = {}, {}
        for (a, b), names in groups.items():
            k = min(self.rank, a, b)
            mats = torch.stack([m[n] for n in names])                           # (g, a, b)
            q = torch.stack([self._initial_q(n, b, k) for n in names])          # (g, b, k)
            p = torch.linalg.qr(torch.bmm(mats, q)).Q                           # (g, a, k) orthonormal
            q = torch.bmm(mats.transpose(1, 2), p)                              # (g, b, k)
            for i, n in enumerate(names):
                ps[n], qs[n] = p[i], q[i]
                if self.config["warm_start"]:
                    self.q_state[n] = q[i].clone()
        wire = DTYPES[self.dtype]
        order = list(m)
        p_flat = torch.cat([ps[n].T.reshape(-1) for n in order]).to(wire)      # rows = directions
        q_flat = torch.cat([qs[n].T.reshape(-1) for n in order]).to(wire)
        ranks = [ps[n].shape[1] for n in order]
        return [Segment("p", self.dtype, p_flat), Segment("q", self.dtype, q_flat)], {"ranks": ranks}

    def _initial_q(self, name: str, b: int, k: int) -> torch.Tensor:
        q = self.q_state.get(name)
        if q is not None and q.shape == (b, k):
            return q
        return torch.randn(b, k, generator=self.generator)

    def _reconstruct(self, p: Unpacked):
        out = zeros_for(p.tensors)
        self._accumulate(p, out, 1.0)
        return out

    def _accumulate(self, p: Unpacked, out, alpha: float) -> None:
        ranks = p.meta.get("ranks")
        require(isinstance(ranks, list) and len(ranks) == len(p.tensors), self.name, "ranks do not match the table")
        ps, qs = p.segments.get("p"), p.segments.get("q")
        require(ps is not None and qs is not None, self.name, "missing p or q segment")
        pp = qq = 0
        for (name, shape), k in zip(p.tensors, ranks):
            require(len(shape) == 2 and isinstance(k, int) and 0 <= k <= min(shape), self.name,
                    f"bad rank {k!r} for {name!r} {shape}")
            a, b = shape
            require(pp + k * a <= ps.numel() and qq + k * b <= qs.numel(), self.name, "p or q segment too short")
            add_outer_(out[name], torch.ones(k), ps[pp:pp + k * a].reshape(k, a), qs[qq:qq + k * b].reshape(k, b),
                       alpha)
            pp, qq = pp + k * a, qq + k * b
        require(pp == ps.numel() and qq == qs.numel(), self.name, "p or q segment longer than the table says")
