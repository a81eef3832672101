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
Each of these four is a card (trainers/cards/methods.py: name, the settings it fixes, delta's options,
byte rule, plot style) naming its factory below.
- every registered compressor (`identity`, `spar`, `powersgd`, `topk`, `int8`, ...): HiLo
  replay. The learner ships `compressor.encode(G)`; every replica, the learner included,
  runs the same AdamW step on `compressor.decode(payload)`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from trainers import cards, compress, spec
from trainers.plugins import unknown_name
from trainers.compress.delta import DeltaSync
from trainers.protocol import dtypes


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


# The methods of the full protocol: their cards (trainers/cards/methods.py) name these factories with the
# settings each name implies (the shipped dtype; rank-R: the training rank) and delta's options.
def full_sync(name: str, ship_dtype: str, lora_rank: int | None = None) -> Method:
    return Method(name, "full", ship_dtype=dtypes.DTYPES[ship_dtype], lora_rank=lora_rank)


def delta_sync(name: str, codec: str, dtype: str) -> Method:
    return Method(name, "full", ship_dtype=dtypes.DTYPES[dtype], delta_codec=codec)


def get_method(name: str, **compressor_options) -> Method:
    """The method called `name`; an unknown name fails with the valid ones and the close matches."""
    found = cards.match("method", name)
    if found is not None:
        card, implied = found
        return card.load()(name, **{**card.defaults, **implied, **compressor_options})
    if name in compress.available():   # in-tree or a plugin (a card, or entry point wan_harness.compressors)
        method = Method(name, "replay", compressor=name, compressor_options=dict(compressor_options))
        method.make_compressor()  # bad options fail here, before any process starts
        return method
    if spec.is_data_parallel(name):  # not a learner/worker protocol: trainers/dataparallel/aggregator.py + worker.py
        raise ValueError(f"method {name!r} is data-parallel: it runs as python -m trainers.dataparallel.aggregator / trainers.dataparallel.worker")
    raise ValueError(unknown_name("method", "methods", name, available()))
