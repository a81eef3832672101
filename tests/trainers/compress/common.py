"""Shared fixtures of the compressor contract suite: real LoRA gradients from the micro model
(one implementation with `harness check`: trainers/compress/contract.py)."""
from __future__ import annotations

from trainers.compress.contract import (CHECK_BUDGET, LORA, MODEL, OPTIM, batch, gradient, new_replica,  # noqa: F401
                                        warm_gradients)

# Options that make every compressor meaningful on the micro adapter (~19 k elements, where a
# 1.6 % budget leaves little beyond the tensor-name table): the contract's own budget.
# powersgd and int8 run budgeted here (their default in a run); test_contract.py also covers
# powersgd at a fixed rank and int8's dense layout.
TEST_OPTIONS = {name: {"budget": CHECK_BUDGET} for name in ("spar", "topk", "powersgd", "int8")}


def options(name: str) -> dict:
    return dict(TEST_OPTIONS.get(name, {}))
