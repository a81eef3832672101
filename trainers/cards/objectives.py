"""The in-tree objectives' cards (trainers/objectives/*.py implement them; the contract is
trainers/objectives/base.py)."""
from __future__ import annotations

from trainers.cards import Card

DISTILL = Card("objective", "distill", "trainers.objectives.distill:Distill")
GRPO = Card("objective", "grpo", "trainers.objectives.grpo:GRPO")
