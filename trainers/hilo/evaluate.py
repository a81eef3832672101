"""Held-out evaluation: sample n completions per problem, report pass@1, pass@k, mean reward;
and P(gold), computed exactly rather than sampled.

pass@k per problem uses the unbiased estimator of Chen et al. (2021),
    pass@k = 1 - C(n - c, k) / C(n, k)
for n samples of which c are correct, computed as a stable product; the reported figure is
its mean over problems. pass@1 is then the mean fraction correct.

P(gold) per problem is the probability that ONE sample at the run's temperature is exactly the
task's gold answer followed by EOS: the product of the policy's tempered next-token probabilities
along prompt + gold (one teacher-forced forward pass; 0 when gold + EOS is longer than
max_new_tokens, which the sampler cannot emit). The sampler draws from exactly those tempered
softmaxes (trainers/model/rollout.py: no top-k or top-p), so P(gold) is a lower bound of the
expected pass@1 (the scorer may accept other spellings of a right answer), with no sampling noise:
where a policy writes its right answers in the gold's form, as a student distilled from a teacher
trained on gold does (knights_knaves, digits), it moves with pass@1 and its only noise across seeds
is the training's. Countdown accepts every expression that reaches the target, so there P(gold)
says little.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import torch

from trainers.model.pretrained import gold_batch
from trainers.model.rollout import generate_rollouts
from trainers.objectives.base import Packed, completion_logprobs, model_device
from trainers.objectives.distill import Distill


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples, drawn without replacement from n with c
    correct, is correct."""
    if not (isinstance(n, int) and isinstance(c, int) and isinstance(k, int)):
        raise ValueError(f"pass_at_k needs ints, got n={n!r} c={c!r} k={k!r}")
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    prob_all_wrong = 1.0
    for i in range(n - c + 1, n + 1):  # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i)
        prob_all_wrong *= 1.0 - k / i
    return 1.0 - prob_all_wrong


@dataclass
class EvalResult:
    """Figures over the held-out problems; `correct[i]` counts correct samples of problem i."""

    n: int
    k: int
    pass_at_1: float
    pass_at_k: float
    mean_reward: float
    num_problems: int
    reverse_kl: float | None = None  # per completion token, to the teacher (when one was given)
    gold_prob: float | None = None  # mean over problems of P(one sample is the gold answer): exact
    correct: list[int] = field(default_factory=list)
    gold_probs: list[float] = field(default_factory=list)  # per problem

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for per_problem in ("correct", "gold_probs"):
            d.pop(per_problem)
        return d


def evaluate(model, tokenizer, task, problems: Sequence[Any], n: int = 4, k: int = 4,
             max_new_tokens: int = 64, temperature: float = 1.0, seed: int = 0,
             batch_problems: int = 8, teacher=None) -> EvalResult:
    """Sample `n` completions for each problem, `batch_problems` problems at a time. With a
    `teacher`, also the full-vocabulary reverse KL(policy || teacher) per completion token on
    those samples (distillation's own held-out metric). P(gold) per problem comes with it
    (`gold_probabilities`: one forward pass, no sampling)."""
    if not problems:
        raise ValueError("evaluate: no problems")
    if not (1 <= k <= n):
        raise ValueError(f"evaluate: need 1 <= k <= n, got k={k}, n={n}")
    if batch_problems < 1:
        raise ValueError(f"evaluate: batch_problems must be >= 1, got {batch_problems}")
    correct, rewards, kl_sum, kl_tokens = [], [], 0.0, 0.0
    for start in range(0, len(problems), batch_problems):
        chunk = problems[start:start + batch_problems]
        with torch.no_grad():
            r = generate_rollouts(model, tokenizer, task, chunk, group_size=n, max_new_tokens=max_new_tokens,
                                  temperature=temperature, seed=seed + start)
            if teacher is not None:
                kl, tokens = _reverse_kl(model, teacher, r)
                kl_sum, kl_tokens = kl_sum + kl * tokens, kl_tokens + tokens
        for g, problem in enumerate(chunk):
            texts = r.texts[g * n:(g + 1) * n]
            correct.append(sum(task.is_correct(problem, t) for t in texts))
        rewards += r.rewards
    gold = gold_probabilities(model, tokenizer, task, problems, temperature, max_new_tokens, batch_problems)
    return EvalResult(n=n, k=k, pass_at_1=_mean([pass_at_k(n, c, 1) for c in correct]),
                      pass_at_k=_mean([pass_at_k(n, c, k) for c in correct]),
                      mean_reward=_mean(rewards), num_problems=len(problems), correct=correct,
                      reverse_kl=kl_sum / kl_tokens if kl_tokens else None,
                      gold_prob=_mean(gold), gold_probs=gold)


def gold_probabilities(model, tokenizer, task, problems: Sequence[Any], temperature: float = 1.0,
                       max_new_tokens: int = 64, batch_problems: int = 8) -> list[float]:
    """Per problem, the exact probability that one sample (at `temperature`, at most `max_new_tokens`
    tokens) is the gold answer + EOS (the module docstring): the rows of the base's supervised
    warm-up (`gold_batch`), one forward pass per `batch_problems` problems."""
    out: list[float] = []
    device = model_device(model)
    for start in range(0, len(problems), batch_problems):
        ids, attn, mask = (t.to(device) for t in gold_batch(tokenizer, task, problems[start:start + batch_problems]))
        with torch.no_grad():  # the objectives' own tempered log-probs of each target, 0 off the answer
            logp = completion_logprobs(model, Packed(ids, attn, ids[:, 1:], mask, torch.zeros_like(mask)), temperature)
        # float64 for the sum: ~50 answer tokens of log-probs near 0 each
        totals = logp.double().sum(1).tolist()
        out += [math.exp(t) if n <= max_new_tokens else 0.0 for t, n in zip(totals, mask.sum(1).tolist())]
    return out


def _reverse_kl(model, teacher, rollouts) -> tuple[float, float]:
    """(mean reverse KL per completion token, completion tokens) of `rollouts`; the distillation
    loss's own full-vocabulary estimator, without its gradient."""
    _, metrics = Distill(teacher).loss(model, rollouts)
    return float(metrics["kl"]), float(metrics["tokens"])


def _mean(xs: Sequence[float]) -> float:
    return float(sum(xs) / len(xs)) if xs else 0.0
