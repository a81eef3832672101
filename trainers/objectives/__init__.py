"""Training objectives, registered by name: `get_objective("grpo")`,
`get_objective("distill", teacher=model)`.

The contract every objective implements is in `trainers/objectives/base.py`.
"""
from __future__ import annotations

from typing import Callable

from trainers.objectives.base import Objective

_REGISTRY: dict[str, Callable[..., Objective]] = {}


def register(name: str):
    """Class decorator: make an objective constructible by `get_objective(name, **options)`."""
    def wrap(cls):
        if name in _REGISTRY:
            raise ValueError(f"objective {name!r} registered twice")
        cls.name = name
        _REGISTRY[name] = cls
        return cls
    return wrap


def available() -> list[str]:
    _load_all()
    return sorted(_REGISTRY)


def get_objective(name: str, **options) -> Objective:
    """The objective called `name`; an unknown name lists the valid ones."""
    _load_all()
    if name not in _REGISTRY:
        raise ValueError(f"unknown objective {name!r}; valid objectives: {', '.join(sorted(_REGISTRY))}")
    try:
        return _REGISTRY[name](**options)
    except TypeError as e:  # an unknown or missing option keyword: name it
        raise ValueError(f"objective {name!r}: bad options {sorted(options)}: {e}") from None


def _load_all() -> None:
    from trainers.objectives import distill, grpo  # noqa: F401


__all__ = ["Objective", "available", "get_objective", "register"]
