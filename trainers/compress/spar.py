"""`spar`: spectral budget allocation across all LoRA factors, with error feedback (ALGORITHMS.md 2).

Per factor, M = G + E is thin (one side is the LoRA rank r), so its spectrum comes from the
small Gram matrix (r x r) by `eigh`. Every singular triplet of every factor is pooled, scored
by the energy it captures (sigma^2, or sigma^2 per byte), and taken greedily until the byte
budget is spent. A triplet costs (a + b) values in `dtype` plus an fp32 sigma; the per-factor
counts (int16) and the container header are reserved first, and the finished payload is
checked against the budget, so `len(payload) <= budget` always holds.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from trainers.compress.base import (DTYPES, BudgetedCompressor, OptionError, Segment, Unpacked,
                                    add_outer_, check_wire_dtype, dtype_bytes, header_bytes, require, zeros_for)

_SIGMA_BYTES = 4
_SELECTIONS = ("energy", "energy_per_byte")


class SparCompressor(BudgetedCompressor):
    """Global greedy selection of singular triplets under one byte budget."""

    name = "spar"
    options = {"dtype": "fp16", "select": "energy"}

    def _validate(self) -> None:
        super()._validate()
        self.dtype = check_wire_dtype(self.name, self.config["dtype"])
        if self.config["select"] not in _SELECTIONS:
            raise OptionError(f"{self.name}: select must be one of {list(_SELECTIONS)}, got {self.config['select']!r}")

    def _compress(self, m):
        layout = [(n, tuple(t.shape)) for n, t in m.items()]
        for name, shape in layout:
            if len(shape) != 2:
                raise ValueError(f"{self.name}: {name!r} is not a matrix (shape {shape})")
        spectra = _spectra(m)                       # name -> (eigenvalues desc, short-side eigenvectors)
        budget = self.budget_for([s for _, s in layout])
        counts = self._select(layout, spectra, budget)
        while True:
            segments = self._segments(m, layout, spectra, counts)
            size = header_bytes(self.name, layout, [(s.key, s.dtype, s.array.numel()) for s in segments])
            size += sum(s.array.numel() * dtype_bytes(s.dtype) for s in segments)
            if size <= budget:
                return segments, {}
            self._drop_weakest(layout, spectra, counts)

    def _cost(self, shape: tuple[int, int]) -> int:
        return (shape[0] + shape[1]) * dtype_bytes(self.dtype) + _SIGMA_BYTES

    def _select(self, layout, spectra, budget: int) -> list[int]:
        n = len(layout)
        worst_specs = [("counts", "int16", n)] + [(k, d, 10**12) for k, d in
                                                  (("sigma", "fp32"), ("left", self.dtype), ("right", self.dtype))]
        left = budget - header_bytes(self.name, layout, worst_specs) - 2 * n
        if left < 0:
            raise ValueError(f"{self.name}: budget of {budget} bytes is below the payload's fixed overhead")
        energy = [spectra[name][0].numpy() for name, _ in layout]
        factor = np.concatenate([np.full(len(e), i) for i, e in enumerate(energy)])
        index = np.concatenate([np.arange(len(e)) for e in energy])
        cost = np.concatenate([np.full(len(e), self._cost(shape)) for e, (_, shape) in zip(energy, layout)])
        energy = np.concatenate(energy).astype(np.float64)
        score = energy / cost if self.config["select"] == "energy_per_byte" else energy
        keep = energy > 0
        # By score, ties by (factor, index): deterministic, and a factor's directions come in order.
        order = np.lexsort((index[keep], factor[keep], -score[keep]))
        factor, index, cost = factor[keep][order], index[keep][order], cost[keep][order]
        fits = int(np.searchsorted(np.cumsum(cost), left, side="right"))   # the greedy prefix, at once
        counts = np.bincount(factor[:fits], minlength=n).tolist()
        left -= int(cost[:fits].sum())
        cheapest = int(cost.min()) if len(cost) else 0
        for i, j, c in zip(factor[fits:].tolist(), index[fits:].tolist(), cost[fits:].tolist()):
            if left < cheapest:
                break
            if c <= left and j == counts[i]:         # smaller factors may still fit in what is left
                counts[i] += 1
                left -= c
        return counts

    def _drop_weakest(self, layout, spectra, counts: list[int]) -> None:
        taken = [(spectra[name][0][counts[i] - 1].item(), i) for i, (name, _) in enumerate(layout) if counts[i]]
        if not taken:
            raise ValueError(f"{self.name}: budget too small for an empty payload")
        counts[min(taken)[1]] -= 1

    def _segments(self, m, layout, spectra, counts) -> list[Segment]:
        picked = [_selected_vectors(m, spectra, name, k) for (name, _), k in zip(layout, counts) if k]
        wire = DTYPES[self.dtype][0]
        cat = lambda xs, dt: torch.cat(xs).to(dt) if xs else torch.zeros(0, dtype=dt)  # noqa: E731
        return [Segment("counts", "int16", torch.tensor(counts, dtype=torch.int16)),
                Segment("sigma", "fp32", cat([s for s, _, _ in picked], torch.float32)),
                Segment("left", self.dtype, cat([u.reshape(-1) for _, u, _ in picked], wire)),
                Segment("right", self.dtype, cat([v.reshape(-1) for _, _, v in picked], wire))]

    def _reconstruct(self, p: Unpacked):
        out = zeros_for(p.tensors)
        self._accumulate(p, out, 1.0)
        return out

    def _accumulate(self, p: Unpacked, out, alpha: float) -> None:
        seg = p.segments
        require(all(k in seg for k in ("counts", "sigma", "left", "right")), self.name, "missing segment")
        counts = seg["counts"].tolist()
        require(len(counts) == len(p.tensors), self.name, "counts do not match the table")
        require(bool((seg["sigma"] >= 0).all()), self.name, "negative singular value")
        s_pos = l_pos = r_pos = 0
        for (name, shape), k in zip(p.tensors, counts):
            require(len(shape) == 2 and 0 <= k <= min(shape), self.name, f"bad count {k} for {name!r} {shape}")
            a, b = shape
            require(s_pos + k <= seg["sigma"].numel() and l_pos + k * a <= seg["left"].numel()
                    and r_pos + k * b <= seg["right"].numel(), self.name, "segments shorter than the counts say")
            add_outer_(out[name], seg["sigma"][s_pos:s_pos + k], seg["left"][l_pos:l_pos + k * a].reshape(k, a),
                       seg["right"][r_pos:r_pos + k * b].reshape(k, b), alpha)
            s_pos, l_pos, r_pos = s_pos + k, l_pos + k * a, r_pos + k * b
        require((s_pos, l_pos, r_pos) == (seg["sigma"].numel(), seg["left"].numel(), seg["right"].numel()),
                self.name, "segments longer than the counts say")


def _spectra(m: dict[str, torch.Tensor]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """name -> (sigma^2 descending (s,), short-side eigenvectors as columns (s, s)), s = min(a, b).

    One small Gram matrix per factor (reads the factor once, allocates s x s), then one batched
    eigh per Gram size. Stacking the factors themselves would copy the whole adapter.
    """
    grams: dict[int, list[tuple[str, torch.Tensor]]] = {}
    for name, t in m.items():
        gram = t @ t.T if t.shape[0] <= t.shape[1] else t.T @ t
        grams.setdefault(gram.shape[0], []).append((name, gram))
    out = {}
    for entries in grams.values():
        evals, evecs = torch.linalg.eigh(torch.stack([g for _, g in entries]))   # ascending
        evals, evecs = evals.flip(-1).clamp_min(0), evecs.flip(-1)
        for i, (name, _) in enumerate(entries):
            out[name] = (evals[i], evecs[i])
    return out


def _selected_vectors(m, spectra, name: str, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sigma (k,), left (k, a), right (k, b)) of the top-k directions of factor `name`.

    The long-side vectors are M^T u (or M v); their norms are sigma measured on M itself rather
    than the square root of a Gram eigenvalue.
    """
    t = m[name]
    short = spectra[name][1][:, :k]                                   # (s, k) orthonormal
    left_is_short = t.shape[0] <= t.shape[1]
    long = (t.T if left_is_short else t) @ short                      # (long side, k)
    norms = long.norm(dim=0)
    unit = (long / torch.where(norms > 0, norms, torch.ones_like(norms))).T
    return (norms, short.T, unit) if left_is_short else (norms, unit, short.T)
