"""The in-tree objectives' cards (trainers/objectives/*.py implement them; the contract is
trainers/objectives/base.py)."""
from __future__ import annotations

from trainers.cards import Card

# implies: samples per problem when --group-size is unset (and the least it may be). distill scores the
# student's samples with the run's teacher; on held-out problems its figure is the reverse KL to it, in
# training its loss.
DISTILL = Card("objective", "distill", "trainers.objectives.distill:Distill", implies={"group_size": 1},
               needs_teacher=True, heldout_metric="reverse_kl", train_metric="distill_loss")
# advantages are normalised within a group: a group of one has none
GRPO = Card("objective", "grpo", "trainers.objectives.grpo:GRPO", implies={"group_size": 2, "min_group_size": 2})
