"""`spar`: spectral budget allocation across all LoRA factors, with error feedback (ALGORITHMS.md 2).

Per factor, M = G + E is thin (one side is the LoRA rank r). Its leading singular triplets come
from the small r x r Gram matrix (`svd="gram"`, the default: its 8 leading eigenpairs by subspace
iteration, the whole spectrum by eigh for a factor that takes all 8; on real gradients the sketch
of 8 lost to PowerSGD at equal bytes, docs/ALGORITHMS.md) or from a randomised sketch
(`svd="sketch"`: top `sketch` triplets, warm-started from the previous update). Every
candidate triplet of every factor is pooled, scored
by the energy it captures (sigma^2, or sigma^2 per byte), and taken greedily until the byte
budget is spent. A triplet costs (a + b) values in `dtype` plus an fp32 sigma; the per-factor
counts (int16) and the container header are reserved first, and the finished payload is
checked against the budget, so `len(payload) <= budget` always holds.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from trainers import spec

from trainers.compress.base import (BudgetedCompressor, check_wire_dtype, OptionError, ordered_state, rng_state,
                                    set_rng_state, take_ordered)
from trainers.compress.container import header_bytes, require, Segment, Unpacked
from trainers.compress.kernels import add_low_rank_, shape_groups, stacked, strided_view
from trainers.protocol.dtypes import DTYPES, itemsize

_SIGMA_BYTES = 4
_SELECTIONS = ("energy", "energy_per_byte")
_FULL_RANK = 1e-6   # a warm start is kept while its smallest sigma^2 exceeds this fraction of the largest


class SparCompressor(BudgetedCompressor):
    """Global greedy selection of singular triplets under one byte budget."""

    # svd: "gram" takes every factor's leading spectrum from its r x r Gram matrix (2r flops per
    # gradient element; `leading_eigenpairs`); "sketch" estimates the top `sketch` triplets with a randomised range
    # finder (~4 * sketch flops per element), warm-started from the previous update's directions
    # (subspace iteration across steps, as PowerSGD does), so error feedback absorbs what it misses.
    # The sketch caps a factor at `sketch` directions; a budget large enough to buy every
    # sketched triplet therefore switches that update to the exact path.
    options = spec.COMPRESSOR_OPTIONS["spar"]  # defaults and flags: trainers/spec.py

    def _validate(self) -> None:
        super()._validate()
        self.dtype = check_wire_dtype(self.name, self.config["dtype"])
        if self.config["select"] not in _SELECTIONS:
            raise OptionError(f"{self.name}: select must be one of {list(_SELECTIONS)}, got {self.config['select']!r}")
        if self.config["svd"] not in ("gram", "sketch"):
            raise OptionError(f"{self.name}: svd must be 'gram' or 'sketch', got {self.config['svd']!r}")
        sketch = self.config["sketch"]
        if not isinstance(sketch, int) or isinstance(sketch, bool) or sketch < 1:
            raise OptionError(f"{self.name}: sketch must be a positive integer, got {sketch!r}")
        self.omega: dict[str, torch.Tensor] = {}     # warm start of the sketch, per factor (b, p)
        self.generator = torch.Generator().manual_seed(int(self.config["seed"]))

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The residual, the sketch's warm starts (each W is the transpose of a row block of B, kept as
        that contiguous (p, b) block and transposed back on load: the same values and strides) and the
        generator that draws fresh starts."""
        return {**super().state_dict(), **ordered_state("omega", {n: w.T for n, w in self.omega.items()}),
                "rng": rng_state(self.generator)}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        state = dict(state)
        self.omega = {n: w.T for n, w in take_ordered(state, "omega").items()}
        set_rng_state(self.name, self.generator, state.pop("rng", None))
        super().load_state_dict(state)

    def _compress(self, m):
        layout = [(n, tuple(t.shape)) for n, t in m.items()]
        for name, shape in layout:
            if len(shape) != 2:
                raise ValueError(f"{self.name}: {name!r} is not a matrix (shape {shape})")
        budget = self.budget_for([s for _, s in layout])
        # A budget that could pay for every sketched triplet would be capped by the sketch:
        # such updates take the exact path.
        sketch_cost = sum(min(self.config["sketch"], *shape) * self._cost(shape) for _, shape in layout)
        exact = self.config["svd"] == "gram" or budget >= sketch_cost
        spectra = _gram_spectra(m) if exact else self._sketch_spectra(m)
        counts = self._select(layout, spectra, budget)
        # A factor that took every leading eigenpair found may deserve more: its whole spectrum, once.
        capped = [name for (name, _), k in zip(layout, counts)
                  if k and isinstance(spectra[name], _GramSpectrum) and spectra[name].partial
                  and k == len(spectra[name].energy)]
        if capped:
            for name in capped:
                spectra[name].complete()
            counts = self._select(layout, spectra, budget)
        while self._payload_size(layout, counts) > budget:
            self._drop_weakest(layout, spectra, counts)
        if all(isinstance(s, _GramSpectrum) for s in spectra.values()):
            # the residual's own buffer: E <- M - sent is done here, each chunk while it is in cache
            subtract = self.error_feedback and m is self.residuals
            self._subtracted = subtract
            return _gram_segments(m, layout, spectra, counts, self.dtype, subtract), {}
        return self._segments(m, layout, spectra, counts), {}

    def _payload_size(self, layout, counts: list[int]) -> int:
        """Bytes of the payload these counts make (header, counts, sigma, left and right)."""
        k = sum(counts)
        left = sum(c * shape[0] for c, (_, shape) in zip(counts, layout))
        right = sum(c * shape[1] for c, (_, shape) in zip(counts, layout))
        specs = [("counts", "int16", len(counts)), ("sigma", "fp32", k), ("left", self.dtype, left),
                 ("right", self.dtype, right)]
        return header_bytes(self.name, layout, specs) + sum(n * itemsize(d) for _, d, n in specs)

    def _cost(self, shape: tuple[int, int]) -> int:
        return (shape[0] + shape[1]) * itemsize(self.dtype) + _SIGMA_BYTES

    def _select(self, layout, spectra, budget: int) -> list[int]:
        n = len(layout)
        worst_specs = [("counts", "int16", n)] + [(k, d, 10**12) for k, d in
                                                  (("sigma", "fp32"), ("left", self.dtype), ("right", self.dtype))]
        left = budget - header_bytes(self.name, layout, worst_specs) - 2 * n
        if left < 0:
            raise ValueError(f"{self.name}: budget of {budget} bytes is below the payload's fixed overhead")
        energy = [spectra[name].energy.numpy() for name, _ in layout]
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
        taken = [(spectra[name].energy[counts[i] - 1].item(), i) for i, (name, _) in enumerate(layout) if counts[i]]
        if not taken:
            raise ValueError(f"{self.name}: budget too small for an empty payload")
        counts[min(taken)[1]] -= 1

    def _segments(self, m, layout, spectra, counts) -> list[Segment]:
        picked = [spectra[name].top(k) for (name, _), k in zip(layout, counts) if k]
        wire = DTYPES[self.dtype]
        cat = lambda xs, dt: torch.cat(xs).to(dt) if xs else torch.zeros(0, dtype=dt)  # noqa: E731
        return [Segment("counts", "int16", torch.tensor(counts, dtype=torch.int16)),
                Segment("sigma", "fp32", cat([s for s, _, _ in picked], torch.float32)),
                Segment("left", self.dtype, cat([u.reshape(-1) for _, u, _ in picked], wire)),
                Segment("right", self.dtype, cat([v.reshape(-1) for _, _, v in picked], wire))]

    def _sketch_spectra(self, m) -> dict[str, _SketchSpectrum]:
        """Randomised range finder per factor: Y = M W, Q = orth(Y), B = Q^T M, then B's SVD
        from its p x p Gram matrix. Factors of one shape go through each step together (one bmm,
        one batched QR and eigh per shape over strided views of M: a handful of calls instead of
        four per factor for 336 factors). W is last update's right vectors where there are any:
        one subspace iteration per update."""
        starts = {name: self._start(name, t) for name, t in m.items()}   # random draws in factor order
        out = {}
        for names in shape_groups(m):
            mats = stacked([m[n] for n in names])                        # (g, a, b)
            q = torch.linalg.qr(torch.bmm(mats, torch.stack([starts[n] for n in names]))).Q   # (g, a, p)
            bmat = torch.bmm(q.transpose(1, 2), mats)                    # (g, p, b)
            evals, evecs = torch.linalg.eigh(torch.bmm(bmat, bmat.transpose(1, 2)))
            for name, qi, bi, w2, z in zip(names, q, bmat, evals.flip(-1).clamp_min(0), evecs.flip(-1)):
                out[name] = _SketchSpectrum(qi, bi, w2, z)
                if self.config["warm_start"] and w2[-1] > _FULL_RANK * w2[0]:
                    # B's rows span the right singular subspace found: next update's sketch
                    # starts there (no need to orthonormalise: the QR of M W does that).
                    self.omega[name] = bi.T
                else:
                    # A zero or rank-deficient B (a factor whose gradient was zero, e.g. every
                    # lora_A at step 0) would start the next sketch in a degenerate subspace and
                    # under-select that factor: draw a fresh random start instead.
                    self.omega.pop(name, None)
        return out

    def _start(self, name: str, t: torch.Tensor) -> torch.Tensor:
        """W (b, p) of one factor's sketch: the warm start, or a fresh Gaussian draw."""
        p = min(self.config["sketch"], *t.shape)
        w = self.omega.get(name)
        return w if w is not None and w.shape == (t.shape[1], p) else torch.randn(t.shape[1], p, generator=self.generator)

    def _reconstruct(self, p: Unpacked):
        out = self.output_zeros(p.tensors, zero=False)    # every factor is written (overwrite)
        self._accumulate(p, out, 1.0, overwrite=True)
        return out

    _subtracted = False     # `_compress` already took what it sent out of the residual (`_gram_segments`)

    def _subtract_sent(self, p: Unpacked, residuals) -> None:
        if self._subtracted:
            self._subtracted = False
            return
        self._accumulate(p, residuals, -1.0, portable=False)     # the encoder's own E: BLAS is fine

    def _accumulate(self, p: Unpacked, out, alpha: float, overwrite: bool = False, portable: bool = True) -> None:
        seg = p.segments
        require(all(k in seg for k in ("counts", "sigma", "left", "right")), self.name, "missing segment")
        counts = seg["counts"].tolist()
        require(len(counts) == len(p.tensors), self.name, "counts do not match the table")
        require(bool((seg["sigma"] >= 0).all()), self.name, "negative singular value")
        s_pos = l_pos = r_pos = 0
        terms = {}
        # fp32 once per segment (~the payload's size): per-factor slices then need no conversion
        sigma, left, right = (seg[key].to(torch.float32) for key in ("sigma", "left", "right"))
        for (name, shape), k in zip(p.tensors, counts):
            require(len(shape) == 2 and 0 <= k <= min(shape), self.name, f"bad count {k} for {name!r} {shape}")
            a, b = shape
            require(s_pos + k <= sigma.numel() and l_pos + k * a <= left.numel() and r_pos + k * b <= right.numel(),
                    self.name, "segments shorter than the counts say")
            if k:
                terms[name] = (sigma[s_pos:s_pos + k], left[l_pos:l_pos + k * a].view(k, a),
                               right[r_pos:r_pos + k * b].view(k, b))
            s_pos, l_pos, r_pos = s_pos + k, l_pos + k * a, r_pos + k * b
        require((s_pos, l_pos, r_pos) == (sigma.numel(), left.numel(), right.numel()),
                self.name, "segments longer than the counts say")
        add_low_rank_(out, terms, alpha, overwrite, portable)


class _GramSpectrum:
    """Leading spectrum of a thin factor from its short-side Gram matrix: the top `len(energy)`
    eigenpairs (all s of them once `complete()` has run). Its triplets are formed per shape group
    by `_gram_segments`."""

    def __init__(self, mat: torch.Tensor, gram: torch.Tensor, evals: torch.Tensor, evecs: torch.Tensor):
        self.mat, self.gram, self.energy, self.evecs = mat, gram, evals, evecs   # sigma^2 descending; columns

    @property
    def partial(self) -> bool:
        return len(self.energy) < self.gram.shape[0]

    def complete(self) -> None:
        """The whole spectrum, by an exact eigh of the Gram matrix (for a factor whose leading
        eigenpairs were all selected: it may deserve more than were computed)."""
        evals, evecs = torch.linalg.eigh(self.gram)
        self.energy, self.evecs = evals.flip(-1).clamp_min(0), evecs.flip(-1)


class _SketchSpectrum:
    """Top-p triplets of Q Q^T M from the sketch B = Q^T M = Z diag(s) V^T (Z, s from B B^T)."""

    def __init__(self, q: torch.Tensor, bmat: torch.Tensor, evals: torch.Tensor, evecs: torch.Tensor):
        self.q, self.bmat, self.z = q, bmat, evecs
        self.energy = evals                                              # s^2 descending, (p,)

    def top(self, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        z = self.z[:, :k]
        sigma = self.energy[:k].sqrt()
        right = (z.T @ self.bmat) / torch.where(sigma > 0, sigma, torch.ones_like(sigma))[:, None]
        return sigma, z.T @ self.q.T, right                              # (k,), (k, a), (k, b)


# Factor bytes per chunk of `_gram_segments`: a chunk's long-side products and its residual update
# run while it sits in the core's L2 cache (2 MiB here), so M is read from memory once for both.
_CHUNK_BYTES = 1 << 20


def _gram_segments(m: dict[str, torch.Tensor], layout, spectra: dict[str, "_GramSpectrum"], counts: list[int],
                   dtype: str, subtract: bool) -> list[Segment]:
    """The payload's segments for `counts` directions per factor, batched per shape group (one bmm per
    chunk of factors instead of a product per factor): each direction's long-side vector M^T u (or
    M v) with its norm, sigma, measured on M itself (not the root of a Gram eigenvalue), the unit
    vectors in the wire dtype; `subtract`: M <- M - sum_j sigma_j left_j right_j^T of the values as sent (the
    wire's rounding included: the residual keeps exactly what was not sent), chunk by chunk, while
    the chunk is in cache. The products are (k, s) @ (s, long side), rows out: the (long, s) @ (s, k)
    product with its tall, k-wide output ran ~10x slower in MKL."""
    wire = DTYPES[dtype]
    k_of = {name: k for (name, _), k in zip(layout, counts)}
    picked: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
    for names in shape_groups(m):
        ks = [k_of[n] for n in names]
        kmax = max(ks)
        if kmax == 0:
            continue
        view = strided_view([m[n] for n in names])                                # (g, a, b) over M itself
        inplace = view is not None
        view = view if inplace else torch.stack([m[n] for n in names])             # a copy: subtract per factor
        a, b = view.shape[1:]
        left_is_short = a <= b
        step = max(1, _CHUNK_BYTES // (4 * a * b))
        for c0 in range(0, len(names), step):
            chunk, sub, kc = names[c0:c0 + step], view[c0:c0 + step], ks[c0:c0 + step]
            km = max(kc)
            if km == 0:
                continue
            short = torch.zeros(len(chunk), km, min(a, b))                        # rows past a factor's k stay 0
            for i, (n, k) in enumerate(zip(chunk, kc)):
                if k:
                    short[i, :k] = spectra[n].evecs[:, :k].T
            long = torch.bmm(short, sub if left_is_short else sub.transpose(1, 2))   # (c, km, long side)
            norms = torch.linalg.vector_norm(long, dim=2)
            long /= torch.where(norms > 0, norms, torch.ones_like(norms))[:, :, None]
            short_w, long_w = short.to(wire), long.to(wire)
            if subtract:
                left, right = (short_w, long_w) if left_is_short else (long_w, short_w)
                scaled = left.to(torch.float32) * norms[:, :, None]                 # (c, km, a)
                if inplace:
                    sub.baddbmm_(scaled.transpose(1, 2), right.to(torch.float32), alpha=-1.0)
                else:
                    for i, n in enumerate(chunk):
                        m[n].addmm_(scaled[i].T, right[i].to(torch.float32), alpha=-1.0)
            for i, (n, k) in enumerate(zip(chunk, kc)):
                if k:
                    picked[n] = (norms[i, :k], *((short_w[i, :k], long_w[i, :k]) if left_is_short
                                                 else (long_w[i, :k], short_w[i, :k])))
    order = [picked[n] for n, _ in layout if n in picked]
    cat = lambda xs, dt: torch.cat(xs).to(dt) if xs else torch.zeros(0, dtype=dt)  # noqa: E731
    return [Segment("counts", "int16", torch.tensor(counts, dtype=torch.int16)),
            Segment("sigma", "fp32", cat([s for s, _, _ in order], torch.float32)),
            Segment("left", dtype, cat([u.reshape(-1) for _, u, _ in order], wire)),
            Segment("right", dtype, cat([v.reshape(-1) for _, _, v in order], wire))]


# Leading eigenpairs per Gram matrix before a full eigh is needed, and the subspace iterations that
# find them. A batched 64 x 64 eigh cost ~4x a memcpy of the adapter (Qwen2.5-0.5B rank 64, 336
# factors, 1 thread), as much as the Gram products; 2 iterations on 8 vectors cost ~0.6x and gave the
# top 4 eigenvalues to 2e-4 of the largest (power-law spectra). At ~1 direction per factor (1.6 %)
# hardly a factor takes all 8; one that does gets the exact spectrum (`_GramSpectrum.complete`).
_GRAM_TOP = 8
_GRAM_ITERATIONS = 2


def _gram_spectra(m: dict[str, torch.Tensor]) -> dict[str, _GramSpectrum]:
    """One small Gram matrix per factor (reads the factor once, allocates s x s, s = min(a, b)), one
    bmm per factor shape over strided views of M (`stacked`: no copy of the adapter where M is the
    residual buffer), then the leading `_GRAM_TOP` eigenpairs of each (`leading_eigenpairs`, batched;
    the constant is read at each call, so a benchmark can raise it to time the exact eigh)."""
    out = {}
    for names in shape_groups(m):
        a, b = m[names[0]].shape
        mats = stacked([m[n] for n in names])
        grams = torch.bmm(mats, mats.transpose(1, 2)) if a <= b else torch.bmm(mats.transpose(1, 2), mats)
        evals, evecs = leading_eigenpairs(grams, _GRAM_TOP)
        for name, gram, w, z in zip(names, grams, evals, evecs):
            out[name] = _GramSpectrum(m[name], gram, w, z)
    return out


def leading_eigenpairs(grams: torch.Tensor, top: int, iterations: int = _GRAM_ITERATIONS):
    """(values (g, p) descending and >= 0, vectors (g, s, p)) of the p = min(top, s) largest
    eigenpairs of each symmetric positive semi-definite (s, s) matrix in `grams`: exact (eigh) when
    p = s, else subspace iteration from the p columns of largest diagonal (deterministic: no random
    state, so the encoder's state is unchanged), `iterations` products and QRs, then Rayleigh-Ritz."""
    s = grams.shape[-1]
    if top >= s:
        evals, evecs = torch.linalg.eigh(grams)                                   # ascending
        return evals.flip(-1).clamp_min(0), evecs.flip(-1)
    start = grams.diagonal(dim1=1, dim2=2).topk(top, dim=1).indices               # (g, p)
    x = torch.gather(grams, 2, start[:, None, :].expand(-1, s, -1))               # those columns, (g, s, p)
    for _ in range(iterations):
        x = torch.linalg.qr(torch.bmm(grams, x)).Q
    evals, z = torch.linalg.eigh(torch.bmm(x.transpose(1, 2), torch.bmm(grams, x)))  # (g, p, p), ascending
    return evals.flip(-1).clamp_min(0), torch.bmm(x, z.flip(-1))
