"""Training tasks, registered by name: `get_task("countdown", exactly_once=True)`.

The contract every task implements is in `trainers/tasks/base.py`.
"""
from __future__ import annotations

from trainers.registry import Registry
from trainers.tasks.base import Score, Task

_REGISTRY: Registry[Task] = Registry("task", "tasks", ("trainers.tasks.countdown", "trainers.tasks.knights_knaves",
                                                       "trainers.tasks.digits"))
register = _REGISTRY.register
available = _REGISTRY.available
get_task = _REGISTRY.get

__all__ = ["Score", "Task", "available", "get_task", "register"]
