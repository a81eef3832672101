"""Tensor kernels the compressors share: one flat fp32 buffer per layout, strided views over the
factors of one shape (a bmm per group instead of a call per factor), the finite check, and the
low-rank sums a decode writes bit-reproducibly at any thread count.
"""
from __future__ import annotations

import functools
import math
import re

import torch

def flatten(m: dict[str, torch.Tensor]) -> torch.Tensor:
    """All tensors as one 1-D vector, in dict order: a view, no copy, when they already lie back to back
    in one buffer (the error-feedback residuals, `zeros_for`); else a concatenated copy."""
    flat = contiguous_span(list(m.values()))
    return flat if flat is not None else torch.cat([t.reshape(-1) for t in m.values()])


def contiguous_span(ts: list[torch.Tensor]) -> torch.Tensor | None:
    """The 1-D view over `ts` when they are contiguous views of one storage, each starting where the
    previous one ends (same dtype); None otherwise."""
    if not ts or any(not t.is_contiguous() or t.dtype != ts[0].dtype for t in ts):
        return None
    base = ts[0].untyped_storage().data_ptr()
    pos = ts[0].storage_offset()
    for t in ts:
        if t.untyped_storage().data_ptr() != base or t.storage_offset() != pos:
            return None
        pos += t.numel()
    first = ts[0]
    return first.new_empty(0).set_(first.untyped_storage(), first.storage_offset(), (pos - first.storage_offset(),))


def unflatten(flat: torch.Tensor, tensors: list[tuple[str, tuple[int, ...]]]) -> dict[str, torch.Tensor]:
    """Inverse of `flatten` for the layout `tensors` (views into `flat`)."""
    out, pos = {}, 0
    for name, shape in tensors:
        n = math.prod(shape)
        out[name] = flat[pos:pos + n].reshape(shape)
        pos += n
    return out


def shape_groups(m: dict[str, torch.Tensor]) -> list[list[str]]:
    """Names of `m` grouped by shape and by name with its numbers blanked (`layers.#.q_proj.lora_A`):
    one group per projection and factor, which lie equally spaced in a flat buffer of the model's
    layout, so `stacked` views them without a copy. Groups and names keep `m`'s order."""
    return [list(names) for names in _shape_groups(tuple((name, tuple(t.shape)) for name, t in m.items()))]


@functools.lru_cache(maxsize=16)
def _shape_groups(layout: tuple[tuple[str, tuple[int, ...]], ...]) -> tuple[tuple[str, ...], ...]:
    """`shape_groups` of a layout, kept: a model's 336 names through a regex cost ~1 memcpy of its
    adapter per update."""
    groups: dict[tuple, list[str]] = {}
    for name, shape in layout:
        groups.setdefault((shape, re.sub(r"\d+", "#", name)), []).append(name)
    return tuple(tuple(names) for names in groups.values())


def stacked(ts: list[torch.Tensor]) -> torch.Tensor:
    """(g, *shape) over g tensors of one shape: a strided view, no copy, when they lie equally spaced
    in one storage (the error-feedback residuals: every layer of a model has the same layout, so a
    factor's i-th layer sits i x the layer's size further on); else a stacked copy."""
    view = strided_view(ts)
    return view if view is not None else torch.stack(ts)


def zeros_for(tensors: list[tuple[str, tuple[int, ...]]], reuse: torch.Tensor | None = None,
              zero: bool = True) -> dict[str, torch.Tensor]:
    """fp32 zeros for a layout, as views into ONE flat buffer (`reuse` zeroed in place when it has
    exactly the layout's size: writing zeros over pages already mapped costs ~0.5 memcpy, a fresh
    141 MB buffer 5-9 memcpy in page faults on these machines).

    One large allocation instead of hundreds of ~1 MB ones: glibc serves each of those with a
    fresh mmap, and their page faults cost ~10 ms per factor on these machines.
    """
    n = sum(math.prod(s) for _, s in tensors)
    if reuse is not None and reuse.numel() == n and reuse.dtype == torch.float32:
        return unflatten(reuse.zero_() if zero else reuse, tensors)
    return unflatten(torch.zeros(n, dtype=torch.float32) if zero else torch.empty(n, dtype=torch.float32), tensors)


def all_finite(t: torch.Tensor) -> bool:
    """No NaN and no inf in `t`: a sum first (no allocation), the elementwise test only if it trips.

    A sum is non-finite whenever an element is; it can also overflow on large finite values, and
    then the elementwise test decides. 16-bit inputs are summed in fp32 so that fp16's 65504
    ceiling does not send every large payload down the slow path.
    """
    total = t.sum(dtype=torch.float32) if t.element_size() == 2 else t.sum()
    if math.isfinite(float(total)):
        return True
    return bool(torch.isfinite(t).all())


def add_outer_(out: torch.Tensor, scale: torch.Tensor, u: torch.Tensor, v: torch.Tensor,
               alpha: float = 1.0) -> torch.Tensor:
    """out += alpha * sum_j scale_j * u_j v_j^T for u (k, a), v (k, b), in fp32, bit-reproducible.

    One rank-1 term at a time, formed by `torch.outer` (one rounded multiply per element) and
    then added (one rounded add): every output element sees the same sequence of roundings
    whatever the thread count. Neither a (a, k) @ (k, b) matmul nor `addr_` promises that
    (`addr_` gave different bits at 1 and 3 threads on factors of more than ~32k elements).
    """
    if u.shape[0] == 0:
        return out
    u, v, scale = u.to(torch.float32), v.to(torch.float32), scale.to(torch.float32)
    term = _scratch(tuple(out.shape))  # (a, b), reused for every j and every factor of this shape
    for j in range(u.shape[0]):
        out.add_(torch.outer(u[j] * (alpha * float(scale[j])), v[j], out=term))
    return out


def add_low_rank_(out: dict[str, torch.Tensor], terms: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
                  alpha: float = 1.0, overwrite: bool = False, portable: bool = True) -> None:
    """out[n] += alpha * sum_j scale_j u_j v_j^T for terms[n] = (scale (k,), u (k, a), v (k, b)), k >= 1
    (a factor with nothing sent has no entry), each rank-1 term rounded as `add_outer_` rounds it
    (bit-reproducible at any thread count).
    portable=False (an encoder's own residual, `Compressor._subtract_sent`): one BLAS addmm per factor
    instead, one pass over it where the outer + add make ~2 (bits may depend on the BLAS build).

    overwrite=True: out[n] = that sum, and out[n] = 0 for a factor with no terms: `out`'s old values
    are never read, so a decode's output buffer is not zeroed first. The first term of every factor of
    one shape group is then written by ONE broadcast multiply into the group's strided view
    (`strided_view`; rows of zeros for factors without terms): per element the one rounded product
    `torch.outer` makes, where 0 + term would have been added before (the same bits but for the sign
    of a zero, which no later arithmetic tells apart), instead of a zero fill, an outer into scratch
    and an add per factor (~3 passes over the adapter and ~20 us of Python per factor). Each later term
    j goes the same way, for a run of neighbouring factors that all have a j-th term: one broadcast
    multiply into a chunk-sized scratch and one add (the roundings of `add_outer_`, a few calls per
    group and term instead of two per factor and term)."""
    if not portable and not overwrite:
        for name, (scale, u, v) in terms.items():
            out[name].addmm_((u.to(torch.float32) * (alpha * scale.to(torch.float32))[:, None]).T, v.to(torch.float32))
        return
    done: set[str] = set()                                              # every term written
    if overwrite:
        for names in shape_groups(out):
            view = strided_view([out[n] for n in names])
            if view is None:
                continue                                                  # per factor, below
            g, (a, b) = len(names), view.shape[1:]
            ks = [terms[n][1].shape[0] if n in terms else 0 for n in names]
            km = max(1, max(ks))
            # every factor's terms as rows of one (g, km, a) and one (g, km, b) stack, u pre-scaled as
            # `add_outer_` scales it (alpha * scale_j rounded to fp32 once); zero rows past a factor's k
            us, vs = _rows("u", g * km, a).zero_(), _rows("v", g * km, b).zero_()
            sent = [n for n in names if n in terms]
            if sent:
                rows = torch.tensor([i * km + j for i, k in enumerate(ks) for j in range(k)])
                scales = (torch.cat([terms[n][0] for n in sent]).to(torch.float64) * alpha).to(torch.float32)
                us[rows] = torch.cat([terms[n][1] for n in sent]).to(torch.float32) * scales[:, None]
                vs[rows] = torch.cat([terms[n][2] for n in sent]).to(torch.float32)
            us, vs = us.view(g, km, a), vs.view(g, km, b)
            # chunk by chunk, so that a chunk's later terms are added while its first is still in cache;
            # term j of a run of factors that all have one: one broadcast multiply into scratch, one add
            step = max(1, _CHUNK_BYTES // (4 * a * b))
            scratch = _scratch((min(step, g), a, b))
            for c0 in range(0, g, step):
                c1 = min(g, c0 + step)
                torch.mul(us[c0:c1, 0, :, None], vs[c0:c1, 0, None, :], out=view[c0:c1])
                for j in range(1, max(ks[c0:c1])):
                    for r0, r1 in runs_over(ks, c0, c1, j):
                        term = scratch[:r1 - r0]
                        torch.mul(us[r0:r1, j, :, None], vs[r0:r1, j, None, :], out=term)
                        view[r0:r1].add_(term)
            done.update(names)
        for name, t in out.items():                                       # factors outside a strided group
            if name not in done and name not in terms:
                t.zero_()
    for name, (scale, u, v) in terms.items():
        if overwrite and name in done:
            continue                                                      # written with its group
        if overwrite:                                                     # outside a strided group
            torch.outer(u[0].to(torch.float32) * (alpha * float(scale[0])), v[0].to(torch.float32), out=out[name])
        skip = 1 if overwrite else 0                                     # the first term is written
        if u.shape[0] > skip:
            add_outer_(out[name], scale[skip:], u[skip:], v[skip:], alpha)


def strided_view(ts: list[torch.Tensor]) -> torch.Tensor | None:
    """`stacked`'s (g, *shape) view over `ts` where they lie equally spaced in one storage; None where
    they do not (a write into `stacked`'s copy would be lost)."""
    first = ts[0]
    step = ts[1].storage_offset() - first.storage_offset() if len(ts) > 1 else first.numel()
    ptr = first.untyped_storage().data_ptr()
    if step >= first.numel() and all(t.is_contiguous() and t.shape == first.shape and t.dtype == first.dtype
                                     and t.untyped_storage().data_ptr() == ptr
                                     and t.storage_offset() == first.storage_offset() + i * step
                                     for i, t in enumerate(ts)):
        return first.new_empty(0).set_(first.untyped_storage(), first.storage_offset(),
                                       (len(ts), *first.shape), (step, *first.stride()))
    return None


# Bytes of output per chunk of `add_low_rank_`'s group writes: about half the core's L2 cache (2 MiB here).
_CHUNK_BYTES = 1 << 20

_SCRATCH: dict[tuple[int, ...], torch.Tensor] = {}


def _scratch(shape: tuple[int, ...]) -> torch.Tensor:
    """A per-shape fp32 buffer for rank-1 terms (a few shapes per model: a factor's, or a chunk of a
    group's): allocated once per process instead of once per factor per decode. Single-threaded use
    only (encode and decode run on one thread in every service)."""
    buf = _SCRATCH.get(shape)
    if buf is None:
        buf = _SCRATCH[shape] = torch.empty(shape, dtype=torch.float32)
    return buf


_ROWS: dict[str, torch.Tensor] = {}


def _rows(role: str, n: int, width: int) -> torch.Tensor:
    """An (n, width) fp32 view of a flat buffer kept per role and grown to the largest size asked for
    (a decode's stacked terms per shape group: a fresh zeroed tensor of up to a few MB per group and
    decode costs its page faults each time). Single-threaded use only, as `_scratch`."""
    buf = _ROWS.get(role)
    if buf is None or buf.numel() < n * width:
        buf = _ROWS[role] = torch.empty(n * width, dtype=torch.float32)
    return buf[:n * width].view(n, width)


def runs_over(ks: list[int], start: int, end: int, j: int):
    """(r0, r1): the runs of consecutive factors in [start, end) with more than j terms."""
    r0 = None
    for i in range(start, end):
        if ks[i] > j and r0 is None:
            r0 = i
        elif ks[i] <= j and r0 is not None:
            yield r0, i
            r0 = None
    if r0 is not None:
        yield r0, end
