"""Methods by name: which protocol the learner and workers run, and with what options.

The name is the interface: the same string is the CLI choice, the results column and the
plot legend.

- `full`: the learner trains on the exact gradient and ships the whole adapter in its
  training dtype (fp32 here), so that every replica holds the learner's adapter bit for bit.
- `full-bf16`: the same, shipped in bfloat16 (half the bytes); workers then sample with the
  bf16-rounded adapter, and that rounded adapter is the policy whose hash is compared.
- `delta`: full sync, lossless: ship only the elements of the bf16 adapter that changed since
  the last shipped version (indices + values, zstd or lz4: trainers/compress/delta.py); every
  replica then holds what `full-bf16` would have shipped, bit for bit.
- `rank-R` (or `rankR`, e.g. `rank-1`): train at LoRA rank R and ship the whole small
  adapter like `full-bf16` (the lower-rank baseline, in the dtype the full-sync baseline and RL
  frameworks ship): the learner keeps its fp32 master, workers hold and sample with the
  bf16-rounded adapter, and that rounded adapter is the policy whose hash is compared.
- every registered compressor (`identity`, `spar`, `powersgd`, `topk`, `int8`, ...): HiLo
  replay. The learner ships `compressor.encode(G)`; every replica, the learner included,
  runs the same AdamW step on `compressor.decode(payload)`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from trainers import compress, spec
from trainers.plugins import unknown_name
from trainers.registry import Registry
from trainers.compress.delta import DeltaSync
from trainers.protocol import dtypes

FULL_DTYPES = {"full": torch.float32, "full-bf16": torch.bfloat16}   # names: spec.FULL_METHODS
RANK_DTYPE = torch.bfloat16   # rank-R ships like full-bf16 (harness/projection/costmodel.py counts it so)


@dataclass(frozen=True)
class Method:
    name: str
    protocol: str  # "full" (ship the adapter) or "replay" (ship a compressed gradient, replay AdamW)
    compressor: str | None = None
    compressor_options: dict = field(default_factory=dict)
    ship_dtype: torch.dtype | None = None  # full protocol: dtype of the shipped adapter
    lora_rank: int | None = None  # rank-R: overrides the run's LoRA rank
    delta_codec: str | None = None  # delta: the shipped adapter's changed elements, in this codec

    @property
    def delta(self) -> bool:
        return self.delta_codec is not None

    @property
    def replay(self) -> bool:
        return self.protocol == "replay"

    def make_compressor(self):
        return compress.get_compressor(self.compressor, **self.compressor_options)

    def make_delta(self, adapter: dict[str, torch.Tensor]) -> DeltaSync:
        """delta: the shipped adapter's tracker, from the version-0 adapter every replica builds."""
        return DeltaSync(adapter, dtype=dtypes.NAMES[self.ship_dtype], codec=self.delta_codec)


def available() -> list[str]:
    return spec.method_names()


def method_for(params: spec.RunParams) -> Method:
    """The method of a run's parameters, with its compressor options."""
    return get_method(params.method, **params.compressor_options())


# The named methods of the full protocol, one registered factory each (options: the run's
# compressor_options for that name). rank-R (a pattern) and every compressor (replay) are resolved
# in get_method: their names come from spec.RANK_METHOD and the compressor registry.
_REGISTRY: Registry[Method] = Registry("method", "methods", ())
register = _REGISTRY.register


@register("full")
def _full() -> Method:
    return Method("full", "full", ship_dtype=FULL_DTYPES["full"])


@register("full-bf16")
def _full_bf16() -> Method:
    return Method("full-bf16", "full", ship_dtype=FULL_DTYPES["full-bf16"])


@register("delta")
def _delta(**options) -> Method:
    opts = {"codec": spec.get("delta_codec").default, "dtype": spec.get("delta_dtype").default, **options}
    return Method("delta", "full", ship_dtype=dtypes.DTYPES[opts["dtype"]], delta_codec=opts["codec"])


def get_method(name: str, **compressor_options) -> Method:
    """The method called `name`; an unknown name fails with the valid ones and the close matches."""
    if name in _REGISTRY.in_tree():
        return _REGISTRY.get(name, **compressor_options)
    m = spec.RANK_METHOD.match(name)
    if m:
        return Method(name, "full", ship_dtype=RANK_DTYPE, lora_rank=int(m.group(1)))
    if name in compress.available():   # in-tree or a plugin (entry point wan_harness.compressors)
        method = Method(name, "replay", compressor=name, compressor_options=dict(compressor_options))
        method.make_compressor()  # bad options fail here, before any process starts
        return method
    if spec.is_data_parallel(name):  # not a learner/worker protocol: trainers/dataparallel/aggregator.py + trainers/dataparallel/worker.py
        raise ValueError(f"method {name!r} is data-parallel: it runs as python -m trainers.dataparallel.aggregator / trainers.dataparallel.worker")
    raise ValueError(unknown_name("method", "methods", name, available()))
