"""`powersgd`: PowerSGD per factor (Vogels et al. 2019), warm-started, with error feedback.

Per factor M (a x b) at rank k: P = M Q; P <- orth(P); Q = M^T P; M_hat = P Q^T. P and Q are
sent in `dtype`; Q is kept (fp32) to warm-start the next step, as in PyTorch's powerSGD_hook.

Ranks: with `rank` set, every factor gets that rank (PyTorch's hook at equal rank; the byte
budget is not applied). With `rank` unset, per-factor ranks are picked to fit the byte budget:
a rank-1 direction of an a x b factor costs (a + b) values in `dtype`; the j-th direction of
factor i scores ||M_i||_F^2 / j (PowerSGD computes no spectrum before it picks ranks, so a
flat spectrum is assumed), directions are taken greedily by score while they fit, and the
container header is counted exactly (it depends only on the layout and the ranks). Error
feedback makes a factor that was skipped score higher next update.
"""
from __future__ import annotations

import torch

from trainers import spec

from trainers.compress.base import (BudgetedCompressor, check_wire_dtype, OptionError, ordered_state, rng_state,
                                    set_rng_state, take_ordered)
from trainers.compress.container import header_bytes, require, Segment, Unpacked
from trainers.compress.kernels import add_low_rank_, shape_groups, stacked, zeros_for
from trainers.protocol.dtypes import DTYPES, itemsize


class PowerSGDCompressor(BudgetedCompressor):
    """One power iteration per step, factors of equal shape and rank batched together."""

    options = spec.COMPRESSOR_OPTIONS["powersgd"]  # defaults and flags: trainers/spec.py

    def _validate(self) -> None:
        super()._validate()
        rank = self.config["rank"]
        if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool) or rank < 1):
            raise OptionError(f"{self.name}: rank must be a positive integer (or unset: ranks from the budget), got {rank!r}")
        self.rank = rank
        self.dtype = check_wire_dtype(self.name, self.config["dtype"])
        self.q_state: dict[str, torch.Tensor] = {}
        self.generator = torch.Generator().manual_seed(int(self.config["seed"]))

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The residual, the warm-start Q per factor and the generator that draws fresh columns."""
        return {**super().state_dict(), **ordered_state("q", self.q_state), "rng": rng_state(self.generator)}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        state = dict(state)
        self.q_state = take_ordered(state, "q")
        set_rng_state(self.name, self.generator, state.pop("rng", None))
        super().load_state_dict(state)

    def _compress(self, m):
        layout = [(n, tuple(t.shape)) for n, t in m.items()]
        for name, shape in layout:
            if len(shape) != 2:
                raise ValueError(f"{self.name}: {name!r} is not a matrix (shape {shape})")
        ranks = ([min(self.rank, *s) for _, s in layout] if self.rank is not None
                 else self.budget_ranks(layout, _squared_norms(m)))
        groups: dict[tuple[int, int, int], list[str]] = {}
        for (name, (a, b)), k in zip(layout, ranks):
            groups.setdefault((a, b, k), []).append(name)
        ps, qs = {}, {}
        for (a, b, k), names in groups.items():
            if k == 0:                                                          # nothing sent: all in E
                for n in names:
                    ps[n], qs[n] = torch.zeros(a, 0), torch.zeros(b, 0)
                continue
            mats = stacked([m[n] for n in names])                 # (g, a, b): a view of M where it can be
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
        return [Segment("p", self.dtype, p_flat), Segment("q", self.dtype, q_flat)], {"ranks": ranks}

    def payload_bytes(self, layout, ranks: list[int]) -> int:
        """Exact size of a payload with these per-factor ranks (header + P + Q), bytes."""
        p = sum(k * s[0] for k, (_, s) in zip(ranks, layout))
        q = sum(k * s[1] for k, (_, s) in zip(ranks, layout))
        segs = [("p", self.dtype, p), ("q", self.dtype, q)]
        return header_bytes(self.name, layout, segs, {"ranks": ranks}) + (p + q) * itemsize(self.dtype)

    def budget_ranks(self, layout, energy: list[float]) -> list[int]:
        """Per-factor ranks whose payload fits the budget (greedy by ||M_i||^2 / j; see the module doc)."""
        budget = self.budget_for([s for _, s in layout])
        n = len(layout)
        empty = self.payload_bytes(layout, [0] * n)
        cost = [(a + b) * itemsize(self.dtype) for _, (a, b) in layout]
        if budget < empty + min(cost):
            raise ValueError(f"{self.name}: budget of {budget} bytes cannot hold one direction ({min(cost)} bytes) "
                             f"after the {empty}-byte header")
        cands = [(-e / j, i, j) for i, e in enumerate(energy) if e > 0
                 for j in range(1, min(layout[i][1]) + 1)]
        cands.sort()                                             # by score; ties by (factor, index)
        ranks, left = [0] * n, budget - empty
        for _, i, j in cands:
            if left < min(cost):
                break
            if j == ranks[i] + 1 and cost[i] <= left:            # a factor's directions come in order
                ranks[i], left = j, left - cost[i]
        while self.payload_bytes(layout, ranks) > budget:        # the ranks table grew the header
            i = max(range(n), key=lambda f: (ranks[f] > 0, -energy[f] / max(ranks[f], 1)))
            ranks[i] -= 1
        return ranks

    def _initial_q(self, name: str, b: int, k: int) -> torch.Tensor:
        q = self.q_state.get(name)
        if q is not None and q.shape == (b, k):
            return q
        if q is not None and q.shape[1] > k:                     # fewer directions than last update
            return q[:, :k]
        fresh = torch.randn(b, k if q is None else k - q.shape[1], generator=self.generator)
        return fresh if q is None else torch.cat([q, fresh], dim=1)

    def _reconstruct(self, p: Unpacked):
        out = self.output_zeros(p.tensors, zero=False)    # every factor is written (overwrite)
        self._accumulate(p, out, 1.0, overwrite=True)
        return out

    def _subtract_sent(self, p: Unpacked, residuals) -> None:
        self._accumulate(p, residuals, -1.0, portable=False)     # the encoder's own E: BLAS is fine

    def _accumulate(self, p: Unpacked, out, alpha: float, overwrite: bool = False, portable: bool = True) -> None:
        ranks = p.meta.get("ranks")
        require(isinstance(ranks, list) and len(ranks) == len(p.tensors), self.name, "ranks do not match the table")
        ps, qs = p.segments.get("p"), p.segments.get("q")
        require(ps is not None and qs is not None, self.name, "missing p or q segment")
        pp = qq = 0
        terms = {}
        for (name, shape), k in zip(p.tensors, ranks):
            require(len(shape) == 2 and isinstance(k, int) and 0 <= k <= min(shape), self.name,
                    f"bad rank {k!r} for {name!r} {shape}")
            a, b = shape
            require(pp + k * a <= ps.numel() and qq + k * b <= qs.numel(), self.name, "p or q segment too short")
            if k:
                terms[name] = (torch.ones(k), ps[pp:pp + k * a].reshape(k, a), qs[qq:qq + k * b].reshape(k, b))
            pp, qq = pp + k * a, qq + k * b
        require(pp == ps.numel() and qq == qs.numel(), self.name, "p or q segment longer than the table says")
        add_low_rank_(out, terms, alpha, overwrite, portable)


def _squared_norms(m: dict[str, torch.Tensor]) -> list[float]:
    """||M_i||_F^2 per factor, in `m`'s order: one fp32 norm per shape group over its strided view of M
    (a float64 copy of each factor, as this once did, cost ~2 memcpys of the adapter per update)."""
    out = {}
    for names in shape_groups(m):
        norms = torch.linalg.vector_norm(stacked([m[n] for n in names]), dim=(1, 2)).double().square()
        out.update(zip(names, norms.tolist()))
    return [out[n] for n in m]
