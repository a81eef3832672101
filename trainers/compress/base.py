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

The container format lives in `trainers/compress/container.py`; the tensor kernels the
compressors share (flat buffers, strided group views, bit-reproducible low-rank sums) in
`trainers/compress/kernels.py`.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch

from trainers import spec
from trainers.compress.container import PayloadError, Segment, Unpacked, pack, unpack
from trainers.compress.kernels import all_finite, contiguous_span, zeros_for
from trainers.protocol.dtypes import itemsize

# Plugin compressors written against this module before the container and the kernels had files of
# their own import these helpers from here (docs/PLUGINS.md); in-tree code imports them from their homes.
from trainers.compress.container import container_head, header_bytes, require  # noqa: E402,F401
from trainers.compress.kernels import flatten, stacked, shape_groups, unflatten  # noqa: E402,F401
from trainers.protocol.dtypes import DTYPES, byte_view  # noqa: E402,F401
from trainers.spec import FLOAT_DTYPES  # what a compressor may ship its values in (names of trainers.protocol.dtypes)


class OptionError(ValueError):
    """An unknown or invalid compressor option."""


def check_wire_dtype(owner: str, value: str, option: str = "dtype", allowed: tuple[str, ...] = FLOAT_DTYPES) -> str:
    if value not in allowed:
        raise OptionError(f"{owner}: {option} {value!r} is not one of {list(allowed)}")
    return value


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
        self._residual_buffers([(n, tuple(g.shape)) for n, g in grads.items()])
        # one call for every factor (the optimizers' foreach kernels): ~5 us of Python per factor saved
        torch._foreach_add_([self.residuals[name] for name in grads], [g.detach() for g in grads.values()])
        return self.residuals

    def _residual_buffers(self, layout: list[tuple[str, tuple[int, ...]]]) -> dict[str, torch.Tensor]:
        """E for this layout: zeros (one flat buffer) at the first update, then the same buffers."""
        if self._layout is None:
            self.residuals, self._layout = zeros_for(layout), layout
        elif layout != self._layout:
            raise ValueError(f"{self.name}: gradient layout changed between updates; use a fresh compressor")
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
        # for every compressor, plugins included.
        bad = self._nonfinite_output(unpacked, grads)
        if bad is not None:
            raise PayloadError(f"{self.name}: the payload decodes to non-finite values (NaN or inf) in {bad}; refused")
        return grads

    def _nonfinite_output(self, unpacked: Unpacked, grads: dict[str, torch.Tensor]) -> str | None:
        """The name of a decoded tensor holding NaN or inf, or None: one pass over the decoded adapter.
        A compressor that can bound its output from the payload alone (spar) overrides this."""
        return next((n for n, t in grads.items() if not bool(torch.isfinite(t).all())), None)

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
        self._check_kinds(grads)
        # every factor's norm in one call: finite norms mean finite gradients; a norm that is not (a NaN or
        # inf, or squares of large finite values overflowing) sends its factor to the elementwise test
        norms = torch.stack(torch._foreach_norm([g.detach() for g in grads.values()])).to(torch.float32)
        if not bool(torch.isfinite(norms).all()):
            self._refuse_nonfinite(grads, [n for n, ok in zip(grads, torch.isfinite(norms).tolist()) if not ok])

    def _check_kinds(self, grads: dict[str, torch.Tensor]) -> None:
        """Something to encode, and every gradient floating point."""
        if not grads:
            raise ValueError(f"{self.name}: nothing to encode")
        for n, g in grads.items():
            if not torch.is_floating_point(g):
                raise ValueError(f"{self.name}: gradient {n!r} is not floating point ({g.dtype})")

    def _refuse_nonfinite(self, grads: dict[str, torch.Tensor], suspects: list[str]) -> None:
        """Raise for the first of `suspects` (names whose summary, a norm, came out non-finite) that holds
        NaN or inf; a suspect whose elements are all finite (a summary that overflowed) passes."""
        for n in suspects:
            if not all_finite(grads[n]):
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
