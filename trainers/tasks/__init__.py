"""Training tasks, registered by name: `get_task("countdown", exactly_once=True)`.

The contract every task implements is in `trainers/tasks/base.py`.
"""
from __future__ import annotations

from typing import Callable

from trainers.tasks.base import Score, Task

_REGISTRY: dict[str, Callable[..., Task]] = {}


def register(name: str):
    """Class decorator: make a task constructible by `get_task(name, **options)`."""
    def wrap(cls):
        if name in _REGISTRY:
            raise ValueError(f"task {name!r} registered twice")
        cls.name = name
        _REGISTRY[name] = cls
        return cls
    return wrap


def available() -> list[str]:
    _load_all()
    return sorted(_REGISTRY)


def get_task(name: str, **options) -> Task:
    """The task called `name`, built with `options`; an unknown name lists the valid ones."""
    _load_all()
    if name not in _REGISTRY:
        raise ValueError(f"unknown task {name!r}; valid tasks: {', '.join(sorted(_REGISTRY))}")
    try:
        return _REGISTRY[name](**options)
    except TypeError as e:  # an unknown option keyword: name it, not a stack trace
        raise ValueError(f"task {name!r}: bad options {options}: {e}") from None


def _load_all() -> None:
    # Importing the modules runs their @register decorators; kept lazy to avoid import cycles.
    from trainers.tasks import countdown, knights_knaves, synthetic  # noqa: F401


__all__ = ["Score", "Task", "available", "get_task", "register"]
