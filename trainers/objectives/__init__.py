"""Training objectives, registered by name: `get_objective("grpo")`,
`get_objective("distill", teacher=model)`.

The contract every objective implements is in `trainers/objectives/base.py`.
"""
from __future__ import annotations

from trainers.objectives.base import Objective
from trainers.registry import Registry

_REGISTRY: Registry[Objective] = Registry("objective", "objectives", ("trainers.objectives.distill",
                                                                     "trainers.objectives.grpo"))
register = _REGISTRY.register
available = _REGISTRY.available
get_objective = _REGISTRY.get

__all__ = ["Objective", "available", "get_objective", "register"]
