"""GRPO: reward-guided policy gradient with group-normalised advantages and a clipped ratio.

For every group (rows sharing a `problem_index`), advantage_i = (r_i - mean) / (std + std_eps),
std being the population standard deviation of the group's rewards (a group of one, or of
equal rewards, gets advantage 0: no signal). With `scale_by_std=False` the advantage is
r_i - mean (the "Dr. GRPO" variant).

Per completion token: ratio = exp(log p_policy - log p_sampler) and
    loss_t = -min(ratio * A, clip(ratio, 1 - clip_eps, 1 + clip_eps_high) * A)
plus, when `kl_coef > 0`, kl_coef * k3(policy || reference), where the reference is the
frozen base model (the adapter disabled) and k3 = exp(ref - pol) - (ref - pol) - 1.
Aggregation: `"token"` (default) averages over all completion tokens of the batch;
`"sequence"` averages within each row first, then over rows with at least one token.
"""
from __future__ import annotations

import torch

from trainers.objectives.base import Objective, completion_logprobs, masked_mean, pack_for
from trainers.model.rollout import Rollouts

AGGREGATIONS = ("token", "sequence")


class GRPO(Objective):
    """Group-relative advantages, PPO-style clipped ratio, optional KL to the base model."""

    def __init__(self, clip_eps: float = 0.2, clip_eps_high: float | None = None, kl_coef: float = 0.0,
                 aggregation: str = "token", std_eps: float = 1e-6, scale_by_std: bool = True):
        if aggregation not in AGGREGATIONS:
            raise ValueError(f"grpo: unknown aggregation {aggregation!r}; valid: {', '.join(AGGREGATIONS)}")
        if clip_eps <= 0 or (clip_eps_high is not None and clip_eps_high <= 0):
            raise ValueError("grpo: clip_eps must be > 0")
        if kl_coef < 0 or std_eps <= 0:
            raise ValueError("grpo: kl_coef must be >= 0 and std_eps > 0")
        self.clip_eps, self.clip_eps_high = clip_eps, clip_eps if clip_eps_high is None else clip_eps_high
        self.kl_coef, self.aggregation = kl_coef, aggregation
        self.std_eps, self.scale_by_std = std_eps, scale_by_std

    def options(self):
        return {"clip_eps": self.clip_eps, "clip_eps_high": self.clip_eps_high, "kl_coef": self.kl_coef,
                "aggregation": self.aggregation, "std_eps": self.std_eps, "scale_by_std": self.scale_by_std}

    def loss(self, model, rollouts):
        return self.loss_with_advantages(model, rollouts, advantages(rollouts, self.std_eps, self.scale_by_std))

    def loss_with_advantages(self, model, rollouts, adv: torch.Tensor):
        """The clipped surrogate for given per-row advantages (N,); `loss` normalises them first."""
        packed = pack_for(model, rollouts)
        adv = adv.to(packed.mask.device, torch.float32)
        logp = completion_logprobs(model, packed, rollouts.temperature)  # (N, T-1)
        ratio = torch.exp(logp - packed.old_logprobs)
        clipped = ratio.clamp(1 - self.clip_eps, 1 + self.clip_eps_high)
        per_token = -torch.minimum(ratio * adv[:, None], clipped * adv[:, None])
        metrics = {}
        if self.kl_coef > 0:
            kl = self._reference_kl(model, packed, logp, rollouts.temperature)
            per_token = per_token + self.kl_coef * kl
            metrics["kl_ref"] = masked_mean(kl.detach(), packed.mask).item()
        loss = self._aggregate(per_token, packed.mask)
        was_clipped = ((ratio - clipped).abs() > 0).float()
        rewards = torch.tensor(rollouts.rewards, dtype=torch.float64)
        metrics.update({"reward_mean": rewards.mean().item() if len(rewards) else 0.0,
                        "reward_std": rewards.std(unbiased=False).item() if len(rewards) else 0.0,
                        "adv_abs_mean": adv.abs().mean().item() if len(adv) else 0.0,
                        "clip_frac": masked_mean(was_clipped, packed.mask).item(),
                        "ratio_mean": masked_mean(ratio.detach(), packed.mask).item(),
                        "tokens": packed.mask.sum().item()})
        return loss, metrics

    def _reference_kl(self, model, packed, logp, temperature):
        if not hasattr(model, "disable_adapter"):
            raise ValueError("grpo: kl_coef > 0 needs a PEFT model (the reference is the base without the adapter)")
        with torch.no_grad(), model.disable_adapter():
            ref = completion_logprobs(model, packed, temperature)
        diff = (ref - logp) * packed.mask
        return (torch.exp(diff) - diff - 1) * packed.mask

    def _aggregate(self, per_token, mask):
        if self.aggregation == "token":
            return masked_mean(per_token, mask)
        counts = mask.sum(1)
        per_row = (per_token * mask).sum(1) / counts.clamp(min=1.0)
        has = (counts > 0).float()
        return (per_row * has).sum() / has.sum().clamp(min=1.0)


def advantages(rollouts: Rollouts, std_eps: float = 1e-6, scale_by_std: bool = True) -> torch.Tensor:
    """(N,) float32: each row's reward minus its group mean, over the group std + eps."""
    rewards = torch.tensor(rollouts.rewards, dtype=torch.float64)
    adv = torch.zeros(len(rollouts), dtype=torch.float64)
    for rows in rollouts.groups().values():
        r = rewards[rows]
        centred = r - r.mean()
        adv[rows] = centred / (r.std(unbiased=False) + std_eps) if scale_by_std else centred
    return adv.float()
