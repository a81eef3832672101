"""The cost model's bytes: what each method ships per update, from the adapter's factor shapes alone
(pure, torch-free).

Every method is counted by the byte rule on its card (trainers/cards): `full`/`full-bf16`/`rank-R` ship
a wire tensor table (`trainers/protocol/wire.py pack_tensors`), `delta` its changed elements, every
compressor one `HLOC` container; a method whose name implies another training rank (rank-R) is counted
on the adapter at that rank. A plugin compressor without a rule states its own (`Compressor.stated_bytes`,
wired in by harness/projection/inputs.py). The shapes are read by `trainers.model.models.lora_shapes`
from the model instantiated on the meta device; this module only takes the list.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from trainers import spec
from trainers.cards.methods import DELTA_HEADER_BYTES, DELTA_INDEX_BYTES, TYPICAL_VERSION  # noqa: F401 (re-exported)
from trainers.cards.sizes import DTYPE_BYTES

# The cost model's own options of a method, `<method>_<option>` (--opt delta_density=...): delta's bytes
# depend on the training run: the fraction of the shipped adapter's elements that change per update and
# the codec's compressed / raw ratio. Defaults: the worst case (every element changes, no codec gain);
# harness run's updates table measures both (delta_density; payload_bytes_down / the raw pairs).
MODEL_OPTIONS = {"delta_density": 1.0, "delta_compression": 1.0}

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
    """A method's options: its card's defaults (a compressor's: and the common ones), the cost model's
    own (MODEL_OPTIONS) and what its name implies, under `options`, which may name them bare (`rank`) or
    as run parameters (`powersgd_rank`)."""
    found = spec.method_card(method)
    if found is None:
        return {}
    card, implied = found
    common = {**spec.COMMON_OPTIONS, **(spec.BUDGET_OPTIONS if card.budgeted else {})} if card.kind == "compressor" else {}
    own = {k[len(card.name) + 1:]: v for k, v in MODEL_OPTIONS.items() if k.startswith(card.name + "_")}
    out = {**common, **own, **card.defaults}
    for key, value in (options or {}).items():
        bare = key[len(card.name) + 1:] if key.startswith(card.name + "_") else key
        if bare in out:
            out[bare] = value
    return {**out, **implied}   # what the name fixes (rank-R's rank) wins over a run's values


def budget_bytes(adapter: Adapter, options: Mapping[str, Any]) -> int:
    """A budgeted compressor's payload cap (`BudgetedCompressor.budget_for`)."""
    if options.get("budget_bytes") is not None:
        return int(options["budget_bytes"])
    return int(spec.parse_budget(options["budget"]) * adapter.nbytes(options["reference_dtype"]))


def payload_bytes(method: str, adapter: Adapter, budget: str | None = None,
                  options: Mapping[str, Any] | None = None) -> int:
    """The update body one worker receives per update under `method`, by the byte rule on its card (exact
    for every in-tree method but spar, whose payload is its budget to within one triplet, and delta,
    whose bytes are its measured density and codec ratio)."""
    spec.check_method(method)
    found = spec.method_card(method)
    card = found[0] if found is not None and found[0].kind != "dataparallel" else None
    if card is not None and card.payload_bytes is not None:   # the method's own rule, on its card
        opts = method_options(method, options)
        if budget is not None:
            opts["budget"] = budget
        shipped = adapter.at_rank(int(opts["lora_rank"])) if opts.get("lora_rank") is not None else adapter
        return int(card.payload_bytes(shipped.tensors, opts, budget_bytes(shipped, opts) if card.budgeted else None))
    if method in adapter.stated:      # a compressor without a rule on its card: its own statement, at this budget
        return int(adapter.stated[method](adapter.tensors, budget))
    raise ValueError(f"no byte rule for method {method!r}")  # a compressor added without one
