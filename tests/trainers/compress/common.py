"""Shared fixtures of the compressor contract suite: real LoRA gradients from the micro model."""
from __future__ import annotations

import torch

from trainers.model.models import LoraSpec, build_model, lora_gradients, lora_parameters
from trainers.model.replica import OptimConfig, Replica

# Options that make every compressor meaningful on the micro adapter (~19 k elements, where a
# 1.6 % budget leaves little beyond the tensor-name table). A new compressor runs with defaults.
# powersgd and int8 run budgeted here (their default in a run); test_contract.py also covers
# powersgd at a fixed rank and int8's dense layout.
TEST_OPTIONS = {"spar": {"budget": "10%"}, "topk": {"budget": "10%"}, "powersgd": {"budget": "10%"},
                "int8": {"budget": "10%"}}
LORA = LoraSpec(rank=8, seed=1)
OPTIM = OptimConfig(lr=5e-3)
MODEL = "micro"


def options(name: str) -> dict:
    return dict(TEST_OPTIONS.get(name, {}))


def batch(step: int, size: int = 4, length: int = 24) -> torch.Tensor:
    """Token ids for training step `step`: a fixed function of the step, identical in every process."""
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randint(0, 256, (size, length), generator=g)


def gradient(model, step: int) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    ids = batch(step)
    model(input_ids=ids, labels=ids).loss.backward()
    return lora_gradients(model)


def new_replica(seed: int = 0):
    model = build_model(MODEL, LORA, seed=seed)
    return model, Replica(lora_parameters(model), OPTIM)


def warm_gradients(n: int) -> list[dict[str, torch.Tensor]]:
    """`n` real gradients taken along a short exact-gradient trajectory (so both A and B get signal)."""
    model, replica = new_replica()
    out = []
    for step in range(n):
        g = gradient(model, step)
        out.append(g)
        replica.step(g)
    return out[1:] if n > 1 else out  # the first has lora_A grads of exactly zero (B starts at zero)
