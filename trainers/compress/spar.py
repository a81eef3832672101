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

import torch

from trainers.compress.base import (DTYPES, BudgetedCompressor, OptionError, Segment, Unpacked,
                                    check_wire_dtype, dtype_bytes, header_bytes, outer_sum, require)

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
        candidates = []
        for i, (name, shape) in enumerate(layout):
            cost = self._cost(shape)
            for j, energy in enumerate(spectra[name][0].tolist()):
                if energy > 0:
                    score = energy / cost if self.config["select"] == "energy_per_byte" else energy
                    candidates.append((-score, i, j, cost))
        candidates.sort()                            # by score, ties by (factor, index): deterministic
        counts = [0] * n
        for _, i, j, cost in candidates:
            if cost <= left and j == counts[i]:      # directions of one factor are taken in order
                counts[i] += 1
                left -= cost
        return counts

    def _drop_weakest(self, layout, spectra, counts: list[int]) -> None:
        taken = [(spectra[name][0][counts[i] - 1].item(), i) for i, (name, _) in enumerate(layout) if counts[i]]
        if not taken:
            raise ValueError(f"{self.name}: budget too small for an empty payload")
        counts[min(taken)[1]] -= 1

    def _segments(self, m, layout, spectra, counts) -> list[Segment]:
        sigmas, lefts, rights = [], [], []
        for (name, (a, b)), k in zip(layout, counts):
            if k == 0:
                continue
            short = spectra[name][1][:, :k]                          # (min(a, b), k) orthonormal
            mat = m[name]
            if a <= b:                                               # short side is the left one
                long = mat.T @ short                                 # (b, k) = sigma * v
                left_vecs, right_vecs = short.T, long.T
            else:
                long = mat @ short                                   # (a, k) = sigma * u
                left_vecs, right_vecs = long.T, short.T
            norms = long.norm(dim=0)                                 # sigma, measured on M itself
            norms_safe = torch.where(norms > 0, norms, torch.ones_like(norms))
            if a <= b:
                right_vecs = right_vecs / norms_safe[:, None]
            else:
                left_vecs = left_vecs / norms_safe[:, None]
            sigmas.append(norms)
            lefts.append(left_vecs.reshape(-1))
            rights.append(right_vecs.reshape(-1))
        wire = DTYPES[self.dtype][0]
        cat = lambda xs, dt: torch.cat(xs).to(dt) if xs else torch.zeros(0, dtype=dt)  # noqa: E731
        return [Segment("counts", "int16", torch.tensor(counts, dtype=torch.int16)),
                Segment("sigma", "fp32", cat(sigmas, torch.float32)),
                Segment("left", self.dtype, cat(lefts, wire)),
                Segment("right", self.dtype, cat(rights, wire))]

    def _reconstruct(self, p: Unpacked):
        seg = p.segments
        require(all(k in seg for k in ("counts", "sigma", "left", "right")), self.name, "missing segment")
        counts = seg["counts"].tolist()
        require(len(counts) == len(p.tensors), self.name, "counts do not match the table")
        require(bool((seg["sigma"] >= 0).all()), self.name, "negative singular value")
        out, s_pos, l_pos, r_pos = {}, 0, 0, 0
        for (name, shape), k in zip(p.tensors, counts):
            require(len(shape) == 2 and 0 <= k <= min(shape), self.name, f"bad count {k} for {name!r} {shape}")
            a, b = shape
            require(s_pos + k <= seg["sigma"].numel() and l_pos + k * a <= seg["left"].numel()
                    and r_pos + k * b <= seg["right"].numel(), self.name, "segments shorter than the counts say")
            out[name] = outer_sum((a, b), seg["sigma"][s_pos:s_pos + k],
                                  seg["left"][l_pos:l_pos + k * a].reshape(k, a),
                                  seg["right"][r_pos:r_pos + k * b].reshape(k, b))
            s_pos, l_pos, r_pos = s_pos + k, l_pos + k * a, r_pos + k * b
        require((s_pos, l_pos, r_pos) == (seg["sigma"].numel(), seg["left"].numel(), seg["right"].numel()),
                self.name, "segments longer than the counts say")
        return out


def _spectra(m: dict[str, torch.Tensor]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Per factor: eigenvalues of the short-side Gram matrix (= sigma^2, descending) and its eigenvectors.

    Factors of equal shape are stacked so that one batched matmul + eigh serves them all.
    """
    groups: dict[tuple[int, ...], list[str]] = {}
    for name, t in m.items():
        groups.setdefault(tuple(t.shape), []).append(name)
    out = {}
    for (a, b), names in groups.items():
        mats = torch.stack([m[n] for n in names])                               # (g, a, b)
        gram = mats @ mats.transpose(1, 2) if a <= b else mats.transpose(1, 2) @ mats
        evals, evecs = torch.linalg.eigh(gram)                                  # ascending
        evals, evecs = evals.flip(-1).clamp_min(0), evecs.flip(-1)
        for i, n in enumerate(names):
            out[n] = (evals[i], evecs[i])
    return out
