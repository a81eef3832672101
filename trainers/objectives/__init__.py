"""Training objectives, registered by name: `get_objective("grpo")`,
`get_objective("distill", teacher=model)`.

The contract every objective implements is in `trainers/objectives/base.py`; an objective from
another package registers through the entry-point group `wan_harness.objectives` (docs/PLUGINS.md).
"""
from __future__ import annotations

from trainers.objectives.base import Objective
from trainers.registry import Registry

_REGISTRY: Registry[Objective] = Registry("objective", "objectives", ("trainers.objectives.distill",
                                                                     "trainers.objectives.grpo"),
                                          plugin="objective", base=Objective)
register = _REGISTRY.register
available = _REGISTRY.available
in_tree = _REGISTRY.in_tree
get_objective = _REGISTRY.get

__all__ = ["Objective", "available", "get_objective", "in_tree", "register"]
