"""The cost model's bytes: what each method ships per update, from the adapter's factor shapes alone
(pure, torch-free).

`full`/`full-bf16`/`rank-R` ship a wire tensor table (`trainers/protocol/wire.py pack_tensors`);
`delta` its changed elements; every compressor one `HLOC` container, counted by the byte rule on its
card (trainers/cards); a plugin compressor without one states its own (`Compressor.stated_bytes`,
wired in by harness/projection/inputs.py). The shapes are read by `trainers.model.models.lora_shapes`
from the model instantiated on the meta device; this module only takes the list.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from trainers import cards, spec
from trainers.cards.sizes import DTYPE_BYTES, tensor_table_bytes

DELTA_HEADER_BYTES = 48        # trainers/compress/delta.py HEADER
DELTA_INDEX_BYTES = 4          # trainers/compress/delta.py GAP: one uint32 gap per changed element
# delta's bytes depend on the training run, so they are parameters (--opt delta_density=...,
# delta_compression=...): the fraction of the shipped adapter's elements that change per update and
# the codec's compressed / raw ratio. Defaults: the worst case (every element changes, no codec gain);
# harness run's updates table measures both (delta_density; payload_bytes_down / the raw pairs).
MODEL_OPTIONS = {"delta_density": 1.0, "delta_compression": 1.0}
# A version number in the full methods' tensor-table meta ({"version": v}): its digits count, so
# one typical width stands in for every update.
TYPICAL_VERSION = 100

Tensors = tuple[tuple[str, tuple[int, ...]], ...]
# A plugin compressor's own statement of its payload bytes for a layout at a budget (label or None):
# the cost model has no byte rule of its own for a compressor it has never seen, so it asks the
# compressor (`Compressor.stated_bytes`, wired in by harness/projection/inputs.py; this module stays pure).
StatedBytes = Callable[[Tensors, "str | None"], int]


@dataclass(frozen=True)
class Adapter:
    """A LoRA adapter's factors as (PEFT parameter name, shape), in registration order; A factors
    are (rank, d_in), B factors (d_out, rank). `stated`: plugin compressor name -> its StatedBytes."""
    tensors: Tensors
    rank: int
    model: str = ""
    stated: Mapping[str, StatedBytes] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_shapes(cls, shapes: Iterable[tuple[str, Iterable[int]]], rank: int, model: str = "",
                    stated: Mapping[str, StatedBytes] | None = None) -> "Adapter":
        return cls(tuple((n, tuple(int(d) for d in s)) for n, s in shapes), int(rank), model, dict(stated or {}))

    @property
    def n_params(self) -> int:
        return sum(math.prod(s) for _, s in self.tensors)

    def nbytes(self, dtype: str) -> int:
        return self.n_params * DTYPE_BYTES[dtype]

    def at_rank(self, rank: int) -> "Adapter":
        """The same adapter trained at another rank (the `rank-R` methods)."""
        def is_a(name: str, shape: tuple[int, ...]) -> bool:    # A: (rank, d_in); B: (d_out, rank)
            return ".lora_A." in name or ".lora_B." not in name and shape[0] == self.rank

        return Adapter(tuple((n, (rank, s[1]) if is_a(n, s) else (s[0], rank)) for n, s in self.tensors),
                       rank, self.model, self.stated)


def method_options(method: str, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A compressor's options: its card's defaults (and the common ones) under `options`, which may
    name them bare (`rank`) or as run parameters (`powersgd_rank`)."""
    card = cards.find("compressor", method)
    if card is None:
        return {}
    out = {**spec.COMMON_OPTIONS, **(spec.BUDGET_OPTIONS if card.budgeted else {}), **card.defaults}
    for key, value in (options or {}).items():
        bare = key[len(method) + 1:] if key.startswith(method + "_") else key
        if bare in out:
            out[bare] = value
    return out


def budget_bytes(adapter: Adapter, options: Mapping[str, Any]) -> int:
    """A budgeted compressor's payload cap (`BudgetedCompressor.budget_for`)."""
    if options.get("budget_bytes") is not None:
        return int(options["budget_bytes"])
    return int(spec.parse_budget(options["budget"]) * adapter.nbytes(options["reference_dtype"]))


def payload_bytes(method: str, adapter: Adapter, budget: str | None = None,
                  options: Mapping[str, Any] | None = None) -> int:
    """The update body one worker receives per update under `method`: the HiLo methods' tensor tables
    and delta's changed elements here, a compressor's by the byte rule on its card (exact for every
    in-tree one but spar, whose payload is its budget to within one triplet)."""
    spec.check_method(method)
    if method in spec.FULL_METHODS or spec.RANK_METHOD.match(method):
        rank = spec.RANK_METHOD.match(method)
        shipped = adapter.at_rank(int(rank.group(1))) if rank else adapter
        dtype = "fp32" if method == "full" else "bf16"     # full-bf16 and rank-R ship bf16 (hilo/methods.py)
        return tensor_table_bytes(shipped.tensors, dtype, {"version": TYPICAL_VERSION})
    if method in spec.DELTA_METHODS:   # header + codec(uint32 gaps + values) of the changed elements
        opts = {**MODEL_OPTIONS, "delta_dtype": spec.get("delta_dtype").default, **(options or {})}
        changed = opts["delta_density"] * adapter.n_params
        raw = changed * (DELTA_INDEX_BYTES + DTYPE_BYTES[opts["delta_dtype"]])
        return DELTA_HEADER_BYTES + math.ceil(raw * opts["delta_compression"])
    card = cards.find("compressor", method)
    if card is not None and card.payload_bytes is not None:   # the compressor's own rule, on its card
        opts = method_options(method, options)
        if budget is not None:
            opts["budget"] = budget
        return int(card.payload_bytes(adapter.tensors, opts, budget_bytes(adapter, opts) if card.budgeted else None))
    if method in adapter.stated:      # a compressor without a rule on its card: its own statement, at this budget
        return int(adapter.stated[method](adapter.tensors, budget))
    raise ValueError(f"no byte rule for method {method!r}")  # a compressor added without one
