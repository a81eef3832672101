"""Training objectives, registered by name: `get_objective("grpo")`,
`get_objective("distill", teacher=model)`.

The contract every objective implements is in `trainers/objectives/base.py`; an in-tree objective is its
file and its card (trainers/cards/objectives.py); an objective from another package registers through the
entry-point group `wan_harness.cards` (its card) or `wan_harness.objectives` (its class: docs/PLUGINS.md).
"""
from __future__ import annotations

from trainers.objectives.base import Objective
from trainers.registry import Registry

_REGISTRY: Registry[Objective] = Registry("objective", "objectives", plugin="objective", base=Objective,
                                          carded=True)
register = _REGISTRY.register
available = _REGISTRY.available
in_tree = _REGISTRY.in_tree
get_objective = _REGISTRY.get

__all__ = ["Objective", "available", "get_objective", "in_tree", "register"]
