"""The objective contract: turn a batch of rollouts into a differentiable loss.

    objective = get_objective("grpo", clip_eps=0.2)          # or "distill", teacher=<model>
    loss, metrics = objective.loss(model, rollouts)          # loss: 0-dim tensor, metrics: floats
    loss.backward()                                          # gradients reach LoRA tensors only

Contract (every objective in `trainers/objectives/` implements it):

- `loss(model, rollouts) -> (loss, metrics)`: `model` is the PEFT policy being trained (its
  base is frozen, so only LoRA parameters get gradients); `rollouts` is a
  `trainers.model.rollout.Rollouts` batch. The loss is a 0-dim float32 tensor attached to the
  graph; `metrics` is a flat dict of plain floats (names without the objective prefix,
  e.g. "kl", "reward_mean") for the per-update results rows. It does not step an optimizer
  and does not zero gradients: the learner owns that.
- Only completion tokens count: prompt and padding positions are masked out everywhere.
- Log-probs are computed under `softmax(logits / rollouts.temperature)`, the same
  distribution the sampler recorded in `rollouts.logprobs`, so importance ratios are 1 for
  on-policy data.
- `options() -> dict`: the constructor options (recorded in run configs).

Shared helpers here: `pack` (rows -> right-padded tensors and a completion mask) and
`completion_logprobs` (per-token log-probs of the completion tokens under a model).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import torch

from trainers.model.rollout import Rollouts


class Objective(ABC):
    """A loss over rollouts; see the module docstring for the contract."""

    name: str = ""

    @abstractmethod
    def loss(self, model, rollouts: Rollouts) -> tuple[torch.Tensor, dict[str, float]]:
        """A 0-dim loss attached to `model`'s graph, and float metrics."""

    def options(self) -> dict[str, Any]:
        return {}


@dataclass
class Packed:
    """Rollout rows as right-padded tensors. T = longest prompt + completion.

    `mask[i, j]` is 1 where `targets[i, j] = input_ids[i, j + 1]` is a completion token, so
    logits[:, :-1] line up with targets, mask and `old_logprobs` (all (N, T - 1)).
    """

    input_ids: torch.Tensor      # (N, T) int64
    attention_mask: torch.Tensor  # (N, T) int64, 1 on real tokens
    targets: torch.Tensor        # (N, T - 1) int64
    mask: torch.Tensor           # (N, T - 1) float32, 1 on completion targets
    old_logprobs: torch.Tensor   # (N, T - 1) float32, the sampler's log-probs, 0 elsewhere


def pack(rollouts: Rollouts, device: torch.device | str = "cpu", vocab_size: int | None = None) -> Packed:
    """Right-pad prompt + completion rows; pad positions are masked, so the pad id is moot.
    With `vocab_size`, ids outside the vocabulary raise ValueError (rows may come off the wire)."""
    if vocab_size is not None:
        rollouts.check_vocab(vocab_size)
    n = len(rollouts)
    lengths = [len(p) + len(c) for p, c in zip(rollouts.prompt_ids, rollouts.completion_ids)]
    width = max(2, max(lengths, default=2))
    ids = torch.zeros((n, width), dtype=torch.long)
    attn = torch.zeros((n, width), dtype=torch.long)
    mask = torch.zeros((n, width - 1))
    old = torch.zeros((n, width - 1))
    for i, (p, c, lp) in enumerate(zip(rollouts.prompt_ids, rollouts.completion_ids, rollouts.logprobs)):
        row = list(p) + list(c)
        ids[i, :len(row)] = torch.tensor(row, dtype=torch.long)
        attn[i, :len(row)] = 1
        # completion token k sits at input position len(p) + k, predicted from position len(p) + k - 1
        mask[i, len(p) - 1:len(p) - 1 + len(c)] = 1
        old[i, len(p) - 1:len(p) - 1 + len(c)] = torch.tensor(lp, dtype=torch.float32)
    return Packed(ids.to(device), attn.to(device), ids[:, 1:].to(device), mask.to(device), old.to(device))


def completion_logits(model, packed: Packed, temperature: float) -> torch.Tensor:
    """log_softmax(logits / temperature) at every target position: (N, T - 1, V) float32."""
    out = model(input_ids=packed.input_ids, attention_mask=packed.attention_mask, use_cache=False)
    return torch.log_softmax(out.logits[:, :-1, :].float() / temperature, dim=-1)


def completion_logprobs(model, packed: Packed, temperature: float) -> torch.Tensor:
    """Per-token log-prob of each target under `model`: (N, T - 1), 0 where mask is 0."""
    logp = completion_logits(model, packed, temperature)
    return logp.gather(2, packed.targets[..., None]).squeeze(2) * packed.mask


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of x over positions where mask is 1 (0 when the mask is empty)."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def model_device(model) -> torch.device:
    return next(model.parameters()).device


def pack_for(model, rollouts: Rollouts) -> Packed:
    """`pack` on the model's device, checked against the model's vocabulary."""
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    return pack(rollouts, model_device(model), vocab)
