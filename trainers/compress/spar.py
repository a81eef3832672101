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
from trainers.compress.container import header_bytes, pack, require, Segment, Unpacked
from trainers.compress.kernels import add_low_rank_, shape_groups, stacked, strided_view
from trainers.protocol.dtypes import DTYPES, itemsize

_SIGMA_BYTES = 4
_SELECTIONS = ("energy", "energy_per_byte")
_FULL_RANK = 1e-6   # a warm start is kept while its smallest sigma^2 exceeds this fraction of the largest
_FINITE_BOUND = 1e37  # a decode whose terms are bounded below this is finite without a look (fp32 max 3.4e38)


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

    def encode(self, grads: dict[str, torch.Tensor]) -> bytes:
        """The exact (Gram) path in two passes over M = G + E (`_GramPass`), what was sent taken out of E
        in the second; the sketch through the base class (`_compress`, then E <- M - sent)."""
        self._check_kinds(grads)
        layout = [(n, tuple(t.shape)) for n, t in grads.items()]
        for name, shape in layout:
            if len(shape) != 2:
                raise ValueError(f"{self.name}: {name!r} is not a matrix (shape {shape})")
        budget = self.budget_for([s for _, s in layout])
        if not self._exact(layout, budget):
            return super().encode(grads)
        self._check_inputs(grads)
        with torch.no_grad():
            m = self._error_corrected(grads)
            work = _GramPass(m, layout)
            spectra = _GramSpectra(work)
            counts = self._select(layout, *spectra.flat(), budget)
            # A factor that took every leading eigenpair found may deserve more: its whole spectrum, once.
            capped = [i for i, k in enumerate(counts) if k and spectra.partial(i) and k == spectra.found(i)]
            if capped:
                for i in capped:
                    spectra.complete(i)
                counts = self._select(layout, *spectra.flat(), budget)
            while self._payload_size(layout, counts) > budget:
                self._drop_weakest(spectra.flat(), counts)
            # E <- M - sent is done here, each chunk while it is in cache
            segments = work.segments(spectra, counts, self.dtype, subtract=self.error_feedback)
        return pack(self.name, layout, segments, {})

    def _exact(self, layout, budget: int) -> bool:
        """The Gram path: the default, and a sketch whose budget could pay for every sketched triplet
        (the sketch would cap it)."""
        if self.config["svd"] == "gram":
            return True
        return budget >= sum(min(self.config["sketch"], *shape) * self._cost(shape) for _, shape in layout)

    def _compress(self, m):
        """The sketch path (`encode` takes the exact one): M = G + E is the residual buffer itself."""
        layout = [(n, tuple(t.shape)) for n, t in m.items()]
        budget = self.budget_for([s for _, s in layout])
        spectra = self._sketch_spectra(m)
        energy = [spectra[name].energy.numpy() for name, _ in layout]
        flat = (np.concatenate(energy).astype(np.float64), np.array([len(e) for e in energy]))
        counts = self._select(layout, *flat, budget)
        while self._payload_size(layout, counts) > budget:
            self._drop_weakest(flat, counts)
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

    def _select(self, layout, energy: np.ndarray, lengths: np.ndarray, budget: int) -> list[int]:
        """Counts per factor from every factor's candidate energies (sigma^2 descending), `energy` the
        factors' lists back to back in layout order, `lengths` their sizes."""
        n = len(layout)
        worst_specs = [("counts", "int16", n)] + [(k, d, 10**12) for k, d in
                                                  (("sigma", "fp32"), ("left", self.dtype), ("right", self.dtype))]
        left = budget - header_bytes(self.name, layout, worst_specs) - 2 * n
        if left < 0:
            raise ValueError(f"{self.name}: budget of {budget} bytes is below the payload's fixed overhead")
        factor = np.repeat(np.arange(n), lengths)
        index = np.arange(len(energy)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        cost = np.repeat(np.array([self._cost(shape) for _, shape in layout]), lengths)
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

    def _drop_weakest(self, flat: tuple[np.ndarray, np.ndarray], counts: list[int]) -> None:
        """One direction less for the factor whose last one taken is the weakest (the first such factor)."""
        energy, lengths = flat
        k = np.array(counts)
        taken = np.flatnonzero(k)
        if not len(taken):
            raise ValueError(f"{self.name}: budget too small for an empty payload")
        last = energy[(np.cumsum(lengths) - lengths)[taken] + k[taken] - 1]
        counts[int(taken[np.argmin(last)])] -= 1

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

    def _subtract_sent(self, p: Unpacked, residuals) -> None:
        """The sketch path's E <- M - sent (the exact path takes it out in `_GramPass.segments`)."""
        self._accumulate(p, residuals, -1.0, portable=False)     # the encoder's own E: BLAS is fine

    def _nonfinite_output(self, unpacked: Unpacked, grads) -> str | None:
        """No pass over the output where the payload bounds it: every decoded element is a sum of at
        most max(counts) products sigma_j u_j[x] v_j[y] of finite values (the container refuses
        non-finite segments), so it is finite, each rounding included, while that sum's bound stays
        well below fp32's largest value (3.4e38)."""
        seg = unpacked.segments
        peaks = [_peak(seg[key]) for key in ("sigma", "left", "right")]
        bound = math.prod(peaks) * max([int(seg["counts"].max())] if seg["counts"].numel() else [0])
        if bound < _FINITE_BOUND:
            return None
        return super()._nonfinite_output(unpacked, grads)

    def _accumulate(self, p: Unpacked, out, alpha: float, overwrite: bool = False, portable: bool = True) -> None:
        seg = p.segments
        require(all(k in seg for k in ("counts", "sigma", "left", "right")), self.name, "missing segment")
        counts = seg["counts"].tolist()
        require(len(counts) == len(p.tensors), self.name, "counts do not match the table")
        require(bool((seg["sigma"] >= 0).all()), self.name, "negative singular value")
        for (name, shape), k in zip(p.tensors, counts):
            require(len(shape) == 2 and 0 <= k <= min(shape), self.name, f"bad count {k} for {name!r} {shape}")
        # fp32 once per segment (~the payload's size): per-factor slices then need no conversion
        sigma, left, right = (seg[key].to(torch.float32) for key in ("sigma", "left", "right"))
        need = (sum(counts), sum(k * s[0] for k, (_, s) in zip(counts, p.tensors)),
                sum(k * s[1] for k, (_, s) in zip(counts, p.tensors)))
        have = (sigma.numel(), left.numel(), right.numel())
        require(all(n <= h for n, h in zip(need, have)), self.name, "segments shorter than the counts say")
        require(need == have, self.name, "segments longer than the counts say")
        s_pos = l_pos = r_pos = 0
        terms = {}
        for (name, (a, b)), k in zip(p.tensors, counts):
            if k:
                terms[name] = (sigma[s_pos:s_pos + k], left[l_pos:l_pos + k * a].view(k, a),
                               right[r_pos:r_pos + k * b].view(k, b))
            s_pos, l_pos, r_pos = s_pos + k, l_pos + k * a, r_pos + k * b
        add_low_rank_(out, terms, alpha, overwrite, portable)


def _peak(t: torch.Tensor) -> float:
    """max |t| (0 for an empty tensor), from its extremes: no copy of t as abs() makes."""
    if not t.numel():
        return 0.0
    lo, hi = t.aminmax()
    return max(-float(lo), float(hi))


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


# Factor bytes per chunk of `_GramPass`: a chunk's M, its products and its residual update stay in the
# core's L2 cache (2 MiB here) between the steps of one pass, so each pass reads the adapter from memory once.
_CHUNK_BYTES = 1 << 20


class _GramPass:
    """The exact path over M = G + E (the residual buffer itself) or M = G (no error feedback), one
    shape group (a projection's factors across layers, `shape_groups`) at a time, over strided views
    of M (`strided_view`: a bmm per group or chunk, not a call per factor):

    1. here: each factor's short-side Gram matrix (s x s, s = min(a, b)), one bmm per group into a
       (factors, s, s) stack per short side s (`_GramSpectra` takes every factor's eigenpairs from
       it in one call);
    2. `segments`, one cache-sized chunk of a group at a time: each selected direction's long-side
       vector M^T u (or M v) with its norm and, with error feedback, E <- M - sent while the chunk is
       in cache (M is read from memory once for both)."""

    def __init__(self, m: dict[str, torch.Tensor], layout):
        self.names = [n for n, _ in layout]
        index = {n: i for i, n in enumerate(self.names)}
        self.rows: dict[int, list[int]] = {}            # short side s -> layout indices, in Gram-stack order
        self.groups = []                                 # (layout indices, s, first Gram row, (g, a, b) view of M, chunk)
        for names in shape_groups(m):
            a, b = m[names[0]].shape
            rows = self.rows.setdefault(min(a, b), [])
            view = strided_view([m[n] for n in names])
            if view is not None:
                self.groups.append(([index[n] for n in names], min(a, b), len(rows), view,
                                    max(1, _CHUNK_BYTES // (4 * a * b))))
            else:                                        # not equally spaced in M: each factor's own view
                self.groups += [([index[n]], min(a, b), len(rows) + j, m[n][None], 1) for j, n in enumerate(names)]
            rows.extend(index[n] for n in names)
        self.row = {i: (s, r) for s, idx in self.rows.items() for r, i in enumerate(idx)}
        self.grams = {s: torch.empty(len(idx), s, s) for s, idx in self.rows.items()}
        for _, s, r0, x, _ in self.groups:
            out = self.grams[s][r0:r0 + len(x)]
            if x.shape[1] <= x.shape[2]:
                torch.bmm(x, x.transpose(1, 2), out=out)
            else:
                torch.bmm(x.transpose(1, 2), x, out=out)

    def segments(self, spectra: "_GramSpectra", counts: list[int], dtype: str, subtract: bool) -> list[Segment]:
        """The payload's segments for `counts` directions per factor; `subtract`: M <- M - what was sent,
        of the values as sent (the wire's rounding included: the residual keeps exactly what was not
        sent). sigma is each long-side vector's norm, measured on M itself (not the root of a Gram
        eigenvalue). The products are (k, s) @ (s, long side), rows out: the (long, s) @ (s, k) product
        with its tall, k-wide output ran ~10x slower in MKL."""
        wire = DTYPES[dtype]
        picked: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        for idx, s, r0, view, step in self.groups:
            ks = [counts[i] for i in idx]
            if not any(ks):
                continue
            short = spectra.short(s, r0, idx, ks, max(ks))                           # (g, km, s); rows past k: 0
            short_w = short.to(wire)
            short_sent = short_w.to(torch.float32) if subtract else None              # as sent, once per group
            left_is_short = view.shape[1] <= view.shape[2]
            for i0, i1 in _runs(ks, step):                                            # factors that send something
                km, x = max(ks[i0:i1]), view[i0:i1]
                long = torch.bmm(short[i0:i1, :km], x if left_is_short else x.transpose(1, 2))   # (c, km, long side)
                norms = torch.linalg.vector_norm(long, dim=2)
                # A row whose norm is 0 is sent as 0 (sigma 0, so the residual keeps it whole): dividing by inf
                # zeroes it. That row need not be 0: below ~4e-23 per element every square underflows, and a
                # tiny positive divisor would blow it up to inf in a 16-bit wire dtype (a run of zero gradients
                # left such a residual after ~30 updates).
                long /= torch.where(norms > 0, norms, torch.inf)[:, :, None]
                long_w = long.to(wire)
                left, right = (short_w[i0:i1, :km], long_w) if left_is_short else (long_w, short_w[i0:i1, :km])
                if subtract:
                    long_sent = long_w.to(torch.float32)
                    if left_is_short:                                                 # (c, a, km) @ (c, km, b)
                        x.baddbmm_((short_sent[i0:i1, :km] * norms[:, :, None]).transpose(1, 2), long_sent,
                                   alpha=-1.0)
                    else:
                        x.baddbmm_((long_sent * norms[:, :, None]).transpose(1, 2), short_sent[i0:i1, :km],
                                   alpha=-1.0)
                for c in range(i1 - i0):
                    k = ks[i0 + c]
                    picked[idx[i0 + c]] = (norms[c, :k], left[c, :k], right[c, :k])
        order = [picked[i] for i in range(len(counts)) if i in picked]
        cat = lambda xs, dt: torch.cat(xs).to(dt) if xs else torch.zeros(0, dtype=dt)  # noqa: E731
        return [Segment("counts", "int16", torch.tensor(counts, dtype=torch.int16)),
                Segment("sigma", "fp32", cat([sg for sg, _, _ in order], torch.float32)),
                Segment("left", dtype, cat([u.reshape(-1) for _, u, _ in order], wire)),
                Segment("right", dtype, cat([v.reshape(-1) for _, _, v in order], wire))]


def _runs(ks: list[int], step: int):
    """(start, end) of the runs of consecutive nonzero `ks`, each cut into pieces of at most `step`."""
    i, n = 0, len(ks)
    while i < n:
        if not ks[i]:
            i += 1
            continue
        j = i
        while j < n and ks[j] and j - i < step:
            j += 1
        yield i, j
        i = j


class _GramSpectra:
    """Each factor's leading spectrum from its Gram matrix: the top `_GRAM_TOP` eigenpairs, one
    `leading_eigenpairs` call for every factor of one short side s, and the whole spectrum (an exact
    eigh) of a factor `complete` was asked for."""

    def __init__(self, work: _GramPass):
        self.work = work
        self.values, self.vectors = {}, {}              # s -> (n_s, p) sigma^2 descending, (n_s, s, p)
        for s, grams in work.grams.items():
            self.values[s], self.vectors[s] = leading_eigenpairs(grams, _GRAM_TOP)
        self.whole: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}   # layout index -> (s,), (s, s)
        self._flat = None

    def found(self, i: int) -> int:
        s, _ = self.work.row[i]
        return len(self.whole[i][0]) if i in self.whole else self.values[s].shape[1]

    def partial(self, i: int) -> bool:
        return self.found(i) < self.work.row[i][0]

    def complete(self, i: int) -> None:
        """The whole spectrum of factor i, by an exact eigh of its Gram matrix (for a factor whose leading
        eigenpairs were all selected: it may deserve more than were computed)."""
        s, r = self.work.row[i]
        evals, evecs = torch.linalg.eigh(self.work.grams[s][r])
        self.whole[i] = (evals.flip(-1).clamp_min(0), evecs.flip(-1))
        self._flat = None

    def flat(self) -> tuple[np.ndarray, np.ndarray]:
        """(every factor's energies back to back in layout order, float64; their counts), as `_select` takes them."""
        if self._flat is None:
            n = len(self.work.names)
            lengths = np.array([self.found(i) for i in range(n)])
            start = np.cumsum(lengths) - lengths
            energy = np.empty(int(lengths.sum()), dtype=np.float64)
            for s, idx in self.work.rows.items():
                idx = np.array(idx)
                values = self.values[s].numpy()
                keep = np.array([i not in self.whole for i in idx.tolist()], dtype=bool)
                energy[start[idx[keep]][:, None] + np.arange(values.shape[1])] = values[keep]
            for i, (values, _) in self.whole.items():
                energy[start[i]:start[i] + len(values)] = values.numpy()
            self._flat = (energy, lengths)
        return self._flat

    def short(self, s: int, r0: int, idx: list[int], ks: list[int], km: int) -> torch.Tensor:
        """(c, km, s): the first k eigenvectors (rows) of each of a chunk's factors (Gram rows r0...),
        zero rows past each factor's k."""
        vectors = self.vectors[s][r0:r0 + len(idx)]                                 # (c, s, p)
        if km <= vectors.shape[2] and not any(i in self.whole for i in idx):
            taken = torch.arange(km)[None, :] < torch.tensor(ks)[:, None]           # (c, km)
            return torch.where(taken[:, :, None], vectors[:, :, :km].transpose(1, 2), 0.0).contiguous()
        short = torch.zeros(len(idx), km, s)
        for c, (i, k) in enumerate(zip(idx, ks)):
            if k:
                short[c, :k] = (self.whole[i][1] if i in self.whole else vectors[c])[:, :k].T
        return short


# Leading eigenpairs per Gram matrix before a full eigh is needed, and the subspace iterations that
# find them. A batched 64 x 64 eigh cost ~4x a memcpy of the adapter (Qwen2.5-0.5B rank 64, 336
# factors, 1 thread), as much as the Gram products; 2 iterations on 8 vectors cost ~0.6x and gave the
# top 4 eigenvalues to 2e-4 of the largest (power-law spectra). At ~1 direction per factor (1.6 %)
# hardly a factor takes all 8; one that does gets the exact spectrum (`_GramSpectra.complete`).
_GRAM_TOP = 8
_GRAM_ITERATIONS = 2


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
