"""The compressor contract: what every method of the HiLo family ships on the wire.

A compressor turns the gradients of the LoRA factors into bytes and back.

- ``encode(grads) -> bytes`` is *stateful*: the compressor owns its error-feedback buffers
  (``M = G + E``; ``E <- M - decode(payload)``) and any warm-start state (PowerSGD's Q).
  Only the learner encodes.
- ``decode(payload) -> grads`` is *pure*: a fresh instance built with the same options, in
  another process, decodes the same payload to the same bits. Every replica, the learner
  included, steps its optimizer from ``decode(encode(G))``.
- The payload is exactly what goes on the wire as the body of an update message:
  ``len(payload)`` is the byte count the harness reports. Nothing is pickled.
- ``stated_bytes(layout) -> int`` states the payload's size for gradients of that layout: exact, or
  (``exact_bytes = False``, every budgeted compressor) the cap each payload fills to within 10 %.
  `harness project` asks a plugin compressor this; `harness check` holds every compressor to it.
- From a writable payload (the wire's receive buffer) ``decode`` builds its segments as views
  over it where aligned, and the gradients may alias it (no copy); from ``bytes`` it copies.
- ``state_dict() -> {name: tensor}`` is everything the next payloads depend on besides the options
  (the error-feedback residual; warm starts such as PowerSGD's Q or spar's sketch; random
  generators' states; counters as 0-dim tensors), as named tensors only, owned copies: the
  learner writes it into its snapshot with safetensors (never pickle). ``load_state_dict(state)``
  puts it back into an instance built with the same options, which then encodes the same bytes
  as the original would have (a learner restarted from a snapshot continues bit-identically;
  `harness check`'s ``state`` check). A stateless compressor returns ``{}``. Subclasses with
  state of their own add their keys to the base's and take them out before calling the base's
  ``load_state_dict``, which refuses any key it does not know.

Payload container (shared by every compressor, little-endian)::

    magic      4s   b"HLOC"
    version    u8   FORMAT_VERSION
    name_len   u8   then the compressor name (ascii): a payload of one compressor is
                    never decoded by another
    table_len  u32  then `table`: zlib-compressed JSON
                    {"tensors": [[name, [dim, ...]], ...],        the gradients' layout
                     "segments": [[key, dtype, count], ...],       the body's arrays, in order
                                                                   (dtype: a name of trainers.protocol.dtypes)
                     "meta": {...}}                                 compressor-specific, small
    body            the segments' raw little-endian bytes, back to back; nothing may follow

``decode`` validates every field before it allocates anything: lengths are checked against
the bytes actually present, decompression is capped, shapes are bounded by
``max_decoded_elements``, and float segments must be finite. Any violation raises
``PayloadError`` with a one-line reason; it never crashes the process.
"""
from __future__ import annotations

import functools
import json
import math
import re
import struct
import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from trainers.protocol.dtypes import DTYPES, byte_view, itemsize, over_bytes
from trainers import spec
from trainers.spec import FLOAT_DTYPES  # what a compressor may ship its values in (names of trainers.protocol.dtypes)

MAGIC = b"HLOC"
FORMAT_VERSION = 1
_PREFIX = struct.Struct("<4sBB")  # magic, version, name length
_U32 = struct.Struct("<I")

# Caps that bound what a hostile payload can make the decoder allocate.
MAX_TABLE_BYTES = 1 << 20          # compressed table, bytes
MAX_TABLE_JSON_BYTES = 16 << 20    # decompressed table, bytes (zip-bomb guard)



class PayloadError(ValueError):
    """A payload that is malformed, truncated, foreign or otherwise not decodable."""


class OptionError(ValueError):
    """An unknown or invalid compressor option."""


def check_wire_dtype(owner: str, value: str, option: str = "dtype", allowed: tuple[str, ...] = FLOAT_DTYPES) -> str:
    if value not in allowed:
        raise OptionError(f"{owner}: {option} {value!r} is not one of {list(allowed)}")
    return value


@dataclass(frozen=True)
class Segment:
    """One array of the payload body."""

    key: str
    dtype: str
    array: torch.Tensor  # 1-D, contiguous, of dtype DTYPES[dtype]


def _table(tensors: list[tuple[str, tuple[int, ...]]], segment_specs: list[tuple[str, str, int]],
           meta: dict[str, Any] | None) -> bytes:
    table = {"tensors": [[n, list(s)] for n, s in tensors],
             "segments": [list(x) for x in segment_specs], "meta": meta or {}}
    return zlib.compress(json.dumps(table, sort_keys=True, separators=(",", ":")).encode(), 6)


def pack(name: str, tensors: list[tuple[str, tuple[int, ...]]], segments: list[Segment],
         meta: dict[str, Any] | None = None) -> bytes:
    """Serialise a payload. Deterministic: same arguments -> same bytes."""
    head = container_head(name, tensors, [(s.key, s.dtype, int(s.array.numel())) for s in segments], meta)
    return b"".join([head, *(byte_view(s.array) for s in segments)])  # views: the join is the one copy


def container_head(name: str, tensors: list[tuple[str, tuple[int, ...]]],
                   segment_specs: list[tuple[str, str, int]], meta: dict[str, Any] | None = None) -> bytes:
    """The payload's bytes before its body (prefix, name, table): `pack` without the segments, for a
    compressor that joins its body from buffers of its own (identity: the gradients themselves)."""
    table_bytes = _table(tensors, segment_specs, meta)
    name_b = name.encode("ascii")
    return _PREFIX.pack(MAGIC, FORMAT_VERSION, len(name_b)) + name_b + _U32.pack(len(table_bytes)) + table_bytes


def header_bytes(name: str, tensors: list[tuple[str, tuple[int, ...]]],
                 segment_specs: list[tuple[str, str, int]], meta: dict[str, Any] | None = None) -> int:
    """Bytes the payload spends before its body: what a budget must reserve up front."""
    return len(container_head(name, tensors, segment_specs, meta))


@dataclass
class Unpacked:
    tensors: list[tuple[str, tuple[int, ...]]]
    segments: dict[str, torch.Tensor]
    meta: dict[str, Any]


def unpack(name: str, payload: bytes, max_decoded_elements: int) -> Unpacked:
    """Parse and validate the container; raises PayloadError, never anything else."""
    try:
        return _unpack(name, memoryview(payload), max_decoded_elements)
    except PayloadError:
        raise
    except Exception as exc:  # any parsing surprise is the payload's fault, reported in one line
        raise PayloadError(f"{name}: malformed payload ({type(exc).__name__}: {exc})") from None


def _unpack(name: str, buf: memoryview, max_elements: int) -> Unpacked:
    if len(buf) < _PREFIX.size:
        raise PayloadError(f"{name}: payload truncated: {len(buf)} bytes, shorter than the {_PREFIX.size}-byte prefix")
    magic, version, name_len = _PREFIX.unpack_from(buf, 0)
    if magic != MAGIC:
        raise PayloadError(f"{name}: bad magic {bytes(magic)!r}, expected {MAGIC!r}")
    if version != FORMAT_VERSION:
        raise PayloadError(f"{name}: unsupported payload format version {version}, expected {FORMAT_VERSION}")
    pos = _PREFIX.size
    sender = bytes(buf[pos:pos + name_len]).decode("ascii", errors="replace")
    if sender != name:
        raise PayloadError(f"{name}: payload was written by compressor {sender!r}")
    pos += name_len
    if len(buf) < pos + _U32.size:
        raise PayloadError(f"{name}: payload truncated before the table length")
    (table_len,) = _U32.unpack_from(buf, pos)
    pos += _U32.size
    if table_len > MAX_TABLE_BYTES or pos + table_len > len(buf):
        raise PayloadError(f"{name}: table length {table_len} exceeds the {len(buf) - pos} bytes present (cap {MAX_TABLE_BYTES})")
    table = _read_table(name, bytes(buf[pos:pos + table_len]))
    pos += table_len
    tensors = _check_tensors(name, table.get("tensors"), max_elements)
    segments = _read_segments(name, table.get("segments"), buf[pos:])
    meta = table.get("meta")
    if not isinstance(meta, dict):
        raise PayloadError(f"{name}: table meta is not an object")
    return Unpacked(tensors, segments, meta)


def _read_table(name: str, raw: bytes) -> dict:
    inflater = zlib.decompressobj()
    text = inflater.decompress(raw, MAX_TABLE_JSON_BYTES)
    if inflater.unconsumed_tail:
        raise PayloadError(f"{name}: table inflates beyond {MAX_TABLE_JSON_BYTES} bytes")
    table = json.loads(text)
    if not isinstance(table, dict):
        raise PayloadError(f"{name}: table is not a JSON object")
    return table


def _check_tensors(name: str, entries: Any, max_elements: int) -> list[tuple[str, tuple[int, ...]]]:
    if not isinstance(entries, list):
        raise PayloadError(f"{name}: table has no tensor list")
    out, total = [], 0
    for entry in entries:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
                and isinstance(entry[1], list) and len(entry[1]) <= 8
                and all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d for d in entry[1])):
            raise PayloadError(f"{name}: bad tensor entry {str(entry)[:80]}")
        total += math.prod(entry[1])
        if total > max_elements:
            raise PayloadError(f"{name}: tensors hold more than max_decoded_elements={max_elements}")
        out.append((entry[0], tuple(entry[1])))
    if len({n for n, _ in out}) != len(out):
        raise PayloadError(f"{name}: duplicate tensor names in the table")
    return out


def _read_segments(name: str, specs: Any, body: memoryview) -> dict[str, torch.Tensor]:
    if not isinstance(specs, list):
        raise PayloadError(f"{name}: table has no segment list")
    segments, pos = {}, 0
    for spec in specs:
        if not (isinstance(spec, list) and len(spec) == 3 and isinstance(spec[0], str)
                and spec[1] in DTYPES and isinstance(spec[2], int) and spec[2] >= 0):
            raise PayloadError(f"{name}: bad segment entry {str(spec)[:80]}")
        key, dtype, count = spec
        size = count * itemsize(dtype)
        if pos + size > len(body):
            raise PayloadError(f"{name}: segment {key!r} needs {size} bytes, only {len(body) - pos} left (truncated)")
        array = over_bytes(body[pos:pos + size], dtype)  # no copy from a receive buffer (writable, aligned)
        if array.is_floating_point() and not all_finite(array):
            raise PayloadError(f"{name}: segment {key!r} holds NaN or inf")
        segments[key] = array
        pos += size
    if pos != len(body):
        raise PayloadError(f"{name}: {len(body) - pos} trailing bytes after the last segment")
    return segments


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
    term = _scratch(out)  # (a, b), reused for every j and every factor of this shape
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
    and an add per factor (~3 passes over the adapter and ~20 us of Python per factor)."""
    if not portable and not overwrite:
        for name, (scale, u, v) in terms.items():
            out[name].addmm_((u.to(torch.float32) * (alpha * scale.to(torch.float32))[:, None]).T, v.to(torch.float32))
        return
    done: set[str] = set()                                              # first term written
    if overwrite:
        for names in shape_groups(out):
            view = strided_view([out[n] for n in names])
            if view is None:
                continue                                                  # per factor, below
            g, (a, b) = len(names), view.shape[1:]
            rows = [i for i, n in enumerate(names) if n in terms]
            u0, v0 = torch.zeros(g, a), torch.zeros(g, b)
            if rows:
                picked = [terms[names[i]] for i in rows]
                scales = torch.tensor([alpha * float(scale[0]) for scale, _, _ in picked], dtype=torch.float32)
                u0[rows] = torch.stack([u[0] for _, u, _ in picked]).to(torch.float32) * scales[:, None]
                v0[rows] = torch.stack([v[0] for _, _, v in picked]).to(torch.float32)
            torch.mul(u0[:, :, None], v0[:, None, :], out=view)
            done.update(names)
        for name, t in out.items():                                       # factors outside a strided group
            if name not in done and name not in terms:
                t.zero_()
    for name, (scale, u, v) in terms.items():
        if overwrite and name not in done:                               # outside a strided group
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


_SCRATCH: dict[tuple[int, ...], torch.Tensor] = {}


def _scratch(like: torch.Tensor) -> torch.Tensor:
    """A per-shape fp32 buffer for one rank-1 term (a few shapes per model, each a factor's size):
    allocated once per process instead of once per factor per decode. Single-threaded use only
    (encode and decode run on one thread in every service)."""
    buf = _SCRATCH.get(tuple(like.shape))
    if buf is None:
        buf = _SCRATCH[tuple(like.shape)] = torch.empty(like.shape, dtype=torch.float32)
    return buf


def require(cond: bool, name: str, reason: str) -> None:
    """Raise a PayloadError unless `cond`: a payload's contents disagree with its own table."""
    if not cond:
        raise PayloadError(f"{name}: {reason}")


def parse_budget(owner: str, value: Any) -> float:
    """'1.6%' -> 0.016, through the run spec's one budget parser (one syntax everywhere)."""
    try:
        return spec.parse_budget(value)
    except spec.SpecError as err:
        raise OptionError(f"{owner}: budget {str(err).removeprefix('--budget: ')}") from None


class Compressor(ABC):
    """Base class: option checking, error feedback, and the encode/decode round trip.

    Subclasses declare `name` and `options` (option name -> default) and implement
    `_compress(M) -> (segments, meta)` and `_reconstruct(unpacked) -> grads`. Error feedback
    is handled here, from the *decoded* payload, so that over any number of steps
    sum(decoded) + residual == sum(inputs) holds up to float rounding.
    """

    name: ClassVar[str]
    options: ClassVar[dict[str, Any]] = {}
    # stated_bytes is the payload's exact size (True) or the cap every payload fills to within 10 %
    # and never passes (False: the budgeted compressors). `harness check` holds a compressor to it.
    exact_bytes: ClassVar[bool] = True
    # Options every compressor takes.
    common_options: ClassVar[dict[str, Any]] = spec.COMMON_OPTIONS   # defaults and flags: trainers/spec.py

    def __init__(self, **options: Any):
        allowed = {**self.common_options, **self.options}
        unknown = sorted(set(options) - set(allowed))
        if unknown:
            raise OptionError(f"{self.name}: unknown option {unknown[0]!r}; valid options: {sorted(allowed)}")
        self.config = {**allowed, **options}
        self.error_feedback = bool(self.config["error_feedback"])
        self.max_decoded_elements = int(self.config["max_decoded_elements"])
        self.residuals: dict[str, torch.Tensor] = {}
        self._layout: list[tuple[str, tuple[int, ...]]] | None = None
        self._reuse, self._out = False, None     # decode(reuse=True)'s output buffer (output_zeros)
        self._validate()

    def _validate(self) -> None:
        """Check option values; raise OptionError naming the option."""

    def encode(self, grads: dict[str, torch.Tensor]) -> bytes:
        self._check_inputs(grads)
        with torch.no_grad():
            m = self._error_corrected(grads)
            layout = [(n, tuple(t.shape)) for n, t in m.items()]
            segments, meta = self._compress(m)
            payload = pack(self.name, layout, segments, meta)
            if self.error_feedback:                      # E <- M - decode(payload), in place
                # from the segments the payload was packed from: the same bits as parsing the payload
                # back (pack copies them verbatim), without copying ~the payload again
                self._subtract_sent(Unpacked(layout, {seg.key: seg.array for seg in segments}, meta or {}),
                                    self.residuals)
        return payload

    def _error_corrected(self, grads: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """M = G + E. The residual buffers themselves become M (one flat fp32 buffer, updated in
        place): a fresh allocation per factor per step costs more than the compression here.
        `_compress` must treat M as read-only."""
        if not self.error_feedback:
            return {n: g.detach().to(torch.float32) for n, g in grads.items()}
        layout = [(n, tuple(g.shape)) for n, g in grads.items()]
        if self._layout is None:
            self.residuals, self._layout = zeros_for(layout), layout
        elif layout != self._layout:
            raise ValueError(f"{self.name}: gradient layout changed between updates; use a fresh compressor")
        for name, g in grads.items():
            self.residuals[name].add_(g.detach())
        return self.residuals

    def decode(self, payload: bytes, reuse: bool = False) -> dict[str, torch.Tensor]:
        """The gradients of `payload`. reuse=True: written into an output buffer this instance keeps,
        which the next decode(reuse=True) overwrites (a service that steps from each decode at once
        saves a fresh adapter-sized allocation per update); the bits are the same either way."""
        unpacked = unpack(self.name, payload, self.max_decoded_elements)
        self._reuse = reuse
        try:
            with torch.no_grad():
                grads = self._reconstruct(unpacked)
        except PayloadError:
            raise
        except Exception as exc:
            raise PayloadError(f"{self.name}: payload contents inconsistent ({type(exc).__name__}: {exc})") from None
        # A receiver never steps on NaN or inf (a replica would sample from a broken policy): refused here,
        # for every compressor, plugins included, at one pass over the decoded adapter.
        bad = next((n for n, t in grads.items() if not bool(torch.isfinite(t).all())), None)
        if bad is not None:
            raise PayloadError(f"{self.name}: the payload decodes to non-finite values (NaN or inf) in {bad}; refused")
        return grads

    def output_zeros(self, tensors: list[tuple[str, tuple[int, ...]]], zero: bool = True) -> dict[str, torch.Tensor]:
        """Zeros (zero=False: any values, the caller overwrites them all) for a decode's output, as
        views into one flat buffer (zeros_for): this instance's kept buffer under decode(reuse=True)."""
        if not self._reuse:
            return zeros_for(tensors, zero=zero)
        out = zeros_for(tensors, self._out, zero)
        self._out = contiguous_span(list(out.values())) if out else None
        return out

    def residual(self) -> dict[str, torch.Tensor]:
        """The error-feedback buffers E (what has been owed to the wire so far)."""
        return dict(self.residuals)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """What the next payloads depend on, as named tensors (owned copies; see the module doc): here
        the error-feedback residual, one entry per factor in encode order (`residual/<index>/<name>`).
        Subclasses with state of their own extend it."""
        return ordered_state("residual", self.residuals)

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Put `state_dict()`'s tensors back (into an instance built with the same options). The
        residual becomes one flat buffer again, as `encode` lays it out (its views' strides decide
        which kernels run on it, so the restored buffer must be laid out as the original)."""
        state = dict(state)
        residuals = take_ordered(state, "residual")
        if state:
            raise ValueError(f"{self.name}: unknown compressor state entries {sorted(state)[:3]}")
        if not residuals:
            self.residuals, self._layout = {}, None
            return
        layout = [(n, tuple(t.shape)) for n, t in residuals.items()]
        self.residuals, self._layout = zeros_for(layout), layout
        for n, t in residuals.items():
            if not t.is_floating_point():
                raise ValueError(f"{self.name}: residual {n!r} is {t.dtype}, not floating point")
            self.residuals[n].copy_(t)

    def stated_bytes(self, tensors: list[tuple[str, tuple[int, ...]]]) -> int:
        """Bytes of one payload for gradients of this layout ((name, shape) per factor, in order; the
        names count because the container's table holds them): exact, or the cap (`exact_bytes`).
        The cost model (`harness project`) asks a plugin compressor this; `harness check` tests it."""
        raise NotImplementedError(f"{self.name}: states no payload bytes (Compressor.stated_bytes)")

    def _check_inputs(self, grads: dict[str, torch.Tensor]) -> None:
        if not grads:
            raise ValueError(f"{self.name}: nothing to encode")
        for n, g in grads.items():
            if not torch.is_floating_point(g):
                raise ValueError(f"{self.name}: gradient {n!r} is not floating point ({g.dtype})")
            if not all_finite(g):
                raise ValueError(f"{self.name}: gradient {n!r} holds NaN or inf; refusing to ship it")

    @abstractmethod
    def _compress(self, m: dict[str, torch.Tensor]) -> tuple[list[Segment], dict[str, Any]]:
        """Error-corrected gradients -> body segments + table meta."""

    @abstractmethod
    def _reconstruct(self, p: Unpacked) -> dict[str, torch.Tensor]:
        """Validated container -> fp32 gradients, shaped as in `p.tensors`."""

    def _subtract_sent(self, p: Unpacked, residuals: dict[str, torch.Tensor]) -> None:
        """E <- M - what `p` decodes to. Only this encoder reads E, so its bits need not be the
        same on another machine or thread count (a decode's must): a compressor may override
        this with faster arithmetic than its decode's."""
        self._accumulate(p, residuals, -1.0)

    def _accumulate(self, p: Unpacked, out: dict[str, torch.Tensor], alpha: float) -> None:
        """out += alpha * decoded. Low-rank compressors override this to add their rank-1 terms
        straight into `out`, which spares error feedback a full-size decode buffer."""
        for name, t in self._reconstruct(p).items():
            out[name].add_(t, alpha=alpha)


def ordered_state(prefix: str, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`{prefix}/{index}/{name}` -> an owned contiguous copy, for a dict whose order matters (safetensors
    sorts its keys; the index brings the order back in `take_ordered`)."""
    return {f"{prefix}/{i:06d}/{n}": t.detach().contiguous().clone() for i, (n, t) in enumerate(tensors.items())}


def take_ordered(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """Remove `ordered_state(prefix, ...)`'s entries from `state`; returns them by name, in their order."""
    keys = sorted(k for k in state if k.startswith(prefix + "/"))
    out = {}
    for k in keys:
        index, _, name = k[len(prefix) + 1:].partition("/")
        if not index.isdigit() or not name:
            raise ValueError(f"compressor state entry {k!r} is not {prefix}/<index>/<name>")
        out[name] = state.pop(k)
    return out


def rng_state(generator: torch.Generator) -> torch.Tensor:
    """A generator's state as a tensor (uint8), for `state_dict`."""
    return generator.get_state().clone()


def set_rng_state(owner: str, generator: torch.Generator, state: torch.Tensor | None) -> None:
    if state is None or state.dtype != torch.uint8 or state.dim() != 1:
        raise ValueError(f"{owner}: compressor state holds no generator state (a 1-D uint8 tensor)")
    generator.set_state(state.clone())


def full_adapter_bytes(shapes: list[tuple[int, ...]], dtype: str) -> int:
    """Bytes of the whole adapter in `dtype`: the reference that budget fractions refer to."""
    return sum(math.prod(s) for s in shapes) * itemsize(dtype)


class BudgetedCompressor(Compressor):
    """A compressor whose payload size is set by a byte budget.

    `budget` is a fraction of the full adapter's bytes in `reference_dtype` ("1.6%" or 0.016);
    `budget_bytes`, when given, is an absolute cap and wins. The reference dtype defaults to
    bf16 because that is what full synchronisation ships in the HiLo paper, so "1.6 %" means the
    same thing here as there (about one direction per factor at rank 64).
    """

    budget_options: ClassVar[dict[str, Any]] = spec.BUDGET_OPTIONS   # defaults and flags: trainers/spec.py

    def __init__(self, **options: Any):
        self.options = {**self.budget_options, **self.options}
        super().__init__(**options)

    def _validate(self) -> None:
        self.budget_frac = parse_budget(self.name, self.config["budget"])
        check_wire_dtype(self.name, self.config["reference_dtype"], "reference_dtype")
        b = self.config["budget_bytes"]
        if b is not None and (not isinstance(b, int) or isinstance(b, bool) or b <= 0):
            raise OptionError(f"{self.name}: budget_bytes must be a positive integer, got {b!r}")

    exact_bytes: ClassVar[bool] = False   # payloads fill the budget to within 10 %, never past it

    def stated_bytes(self, tensors: list[tuple[str, tuple[int, ...]]]) -> int:
        return self.budget_for([tuple(s) for _, s in tensors])

    def budget_for(self, shapes: list[tuple[int, ...]]) -> int:
        """The payload's byte cap for an adapter of these shapes."""
        if self.config["budget_bytes"] is not None:
            return int(self.config["budget_bytes"])
        return int(self.budget_frac * full_adapter_bytes(shapes, self.config["reference_dtype"]))
