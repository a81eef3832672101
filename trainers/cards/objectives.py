"""The in-tree objectives' cards (trainers/objectives/*.py implement them; the contract is
trainers/objectives/base.py). Their options are the constructor's keywords with the same names and defaults
(tests/trainers/test_cards.py holds the two equal), the teacher aside; a run sets them with
`--objective-options key=value,...` (trainers/hilo/learner.py build_objective)."""
from __future__ import annotations

from trainers.cards import Card, Option

# implies: samples per problem when --group-size is unset (and the least it may be). distill scores the
# student's samples with the run's teacher; on held-out problems its figure is the reverse KL to it, in
# training its loss.
DISTILL = Card("objective", "distill", "trainers.objectives.distill:Distill", {
    "estimator": Option("full", "reverse-KL estimator: full (exact, full vocabulary) or sampled (one token)",
                        choices=("full", "sampled"))},
    implies={"group_size": 1}, needs_teacher=True, heldout_metric="reverse_kl", train_metric="distill_loss")
# advantages are normalised within a group: a group of one has none
GRPO = Card("objective", "grpo", "trainers.objectives.grpo:GRPO", {
    "clip_eps": Option(0.2, "PPO clip range below 1 (ratio floor 1 - clip_eps)", type=float, lo=1e-9),
    "clip_eps_high": Option(None, "clip range above 1 (unset: clip_eps)", type=float, lo=1e-9, optional=True),
    "kl_coef": Option(0.0, "weight of the k3 KL to the base model", type=float, lo=0),
    "aggregation": Option("token", "loss mean over all tokens, or per sequence first",
                          choices=("token", "sequence")),
    "std_eps": Option(1e-6, "added to a group's reward std before dividing", type=float, lo=1e-12),
    "scale_by_std": Option(True, "divide advantages by the group's std (false: Dr. GRPO)", type=bool)},
    implies={"group_size": 2, "min_group_size": 2})
