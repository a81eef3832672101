"""Training objectives, registered by name: `get_objective("grpo")`,
`get_objective("distill", teacher=model)`.

The contract every objective implements is in `trainers/objectives/base.py`; an in-tree objective is its
file and its card (trainers/cards/objectives.py); an objective from another package registers through the
entry-point group `wan_harness.cards` (its card) or `wan_harness.objectives` (its class: docs/PLUGINS.md).
A run names its objective's options as text (`--objective-options kl_coef=0.05`): `parse_objective_options`
checks them against the card's options (trainers/card_options.py; the harness's own torch-free check of a
run's values is `card_options.check_carded`).
"""
from __future__ import annotations

from typing import Any

from trainers import card_options, cards
from trainers.objectives.base import Objective
from trainers.registry import Registry

_REGISTRY: Registry[Objective] = Registry("objective", "objectives", plugin="objective", base=Objective,
                                          carded=True)
register = _REGISTRY.register
available = _REGISTRY.available
in_tree = _REGISTRY.in_tree
get_objective = _REGISTRY.get


def parse_objective_options(name: str, text: str) -> dict[str, Any]:
    """'key=value,key=value' -> the keywords objective `name` is built with: checked against its card's
    options without importing it; an objective whose card declares none, against its constructor's
    keywords (the teacher aside). Raises ValueError (one line)."""
    card = cards.find("objective", name)
    if card is not None and card.options:
        return card_options.parse(name, text, card.options)
    return card_options.parse(name, text, card_options.keyword_options(_REGISTRY.get_class(name), teacher=True))


__all__ = ["Objective", "available", "get_objective", "in_tree",
           "parse_objective_options", "register"]
