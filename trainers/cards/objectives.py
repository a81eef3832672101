"""The in-tree objectives' cards (trainers/objectives/*.py implement them; the contract is
trainers/objectives/base.py)."""
from __future__ import annotations

from trainers.cards import Card

# implies: samples per problem when --group-size is unset (and the least it may be)
DISTILL = Card("objective", "distill", "trainers.objectives.distill:Distill", implies={"group_size": 1})
# advantages are normalised within a group: a group of one has none
GRPO = Card("objective", "grpo", "trainers.objectives.grpo:GRPO", implies={"group_size": 2, "min_group_size": 2})
