"""On-policy distillation: the student samples, a frozen teacher scores every sampled token.

Per completion token t the reverse KL  KL(p_student || p_teacher) at that position:
- `estimator="full"` (default): the exact full-vocabulary reverse KL
  sum_v p_s(v) (log p_s(v) - log p_t(v)), differentiated directly; loss = masked mean.
- `estimator="sampled"`: the single-sample estimator on the sampled token y_t, used as a
  per-token advantage A_t = log p_t(y_t) - log p_s(y_t) (detached) in a policy-gradient
  loss -A_t * ratio_t, ratio_t = exp(log p_s(y_t) - log p_sampler(y_t)) (= 1 on-policy).
  Its gradient is the reverse-KL gradient in expectation; it never materialises the
  teacher's vocabulary distribution for the loss, which matters for large vocabularies.

Both are 0 (to rounding) when student and teacher are the same model. Log-probs use the
rollouts' sampling temperature for both models. Teacher and student must share a tokenizer.
The teacher comes from `trainers.model.teacher` (a path, or a tiny model trained on the
task's gold completions and cached on disk).
"""
from __future__ import annotations

import torch

from trainers.objectives.base import Objective, completion_logits, masked_mean, pack_for
from trainers.model.teacher import build_teacher, load_teacher  # noqa: F401  (re-exported)

ESTIMATORS = ("full", "sampled")


class Distill(Objective):
    """Per-token reverse KL to a frozen teacher, on the student's own samples."""

    def __init__(self, teacher, estimator: str = "full"):
        if teacher is None:
            raise ValueError("distill needs a teacher model (see trainers.model.teacher.build_teacher)")
        if estimator not in ESTIMATORS:
            raise ValueError(f"distill: unknown estimator {estimator!r}; valid: {', '.join(ESTIMATORS)}")
        # Not put in eval mode or frozen here: the caller may share modules with the student.
        # The teacher only ever runs under no_grad below; the tiny models have no dropout.
        self.teacher = teacher
        self.estimator = estimator

    def options(self):
        return {"estimator": self.estimator}

    def loss(self, model, rollouts):
        packed = pack_for(model, rollouts)
        temp = rollouts.temperature
        student = completion_logits(model, packed, temp)  # (N, T-1, V)
        with torch.no_grad():
            t_packed = pack_for(self.teacher, rollouts)
            teacher = completion_logits(self.teacher, t_packed, temp).to(student.device)
        mask = packed.mask
        s_tok = student.gather(2, packed.targets[..., None]).squeeze(2)
        t_tok = teacher.gather(2, packed.targets[..., None]).squeeze(2)
        sampled_kl = masked_mean((s_tok - t_tok).detach(), mask)
        metrics = {"sampled_kl": sampled_kl.item(), "tokens": mask.sum().item(),
                   "reward_mean": _mean(rollouts.rewards)}
        if self.estimator == "full":
            kl = (student.exp() * (student - teacher)).sum(-1)  # (N, T-1)
            loss = masked_mean(kl, mask)
            metrics["kl"] = loss.item()
        else:
            advantage = (t_tok - s_tok).detach()
            ratio = torch.exp(s_tok - packed.old_logprobs) * mask
            loss = -masked_mean(advantage * ratio, mask)
            metrics["kl"] = sampled_kl.item()
        return loss, metrics


def _mean(xs) -> float:
    return float(sum(xs) / len(xs)) if xs else 0.0
