"""Name -> implementation registries for the extension points (tasks, objectives).

The name is the interface: the same string on the command line, in results and in plots.
Implementations register with a class decorator; an unknown name lists the valid ones.
"""
from __future__ import annotations

import importlib
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """`kind` names what is registered ("task"); `modules` are imported on first use so that
    their decorators run (lazily: the implementations import this package's `register`)."""

    def __init__(self, kind: str, plural: str, modules: tuple[str, ...]):
        self.kind, self.plural, self.modules = kind, plural, modules
        self._entries: dict[str, Callable[..., T]] = {}

    def register(self, name: str):
        """Class decorator: make `cls` constructible by `get(name, **options)`."""
        def wrap(cls):
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            cls.name = name
            self._entries[name] = cls
            return cls
        return wrap

    def available(self) -> list[str]:
        self._load_all()
        return sorted(self._entries)

    def get(self, name: str, **options) -> T:
        """The implementation called `name`, built with `options`."""
        self._load_all()
        if name not in self._entries:
            raise ValueError(f"unknown {self.kind} {name!r}; valid {self.plural}: {', '.join(sorted(self._entries))}")
        try:
            return self._entries[name](**options)
        except TypeError as e:  # an unknown or missing option keyword: name it, not a stack trace
            raise ValueError(f"{self.kind} {name!r}: bad options {sorted(options)}: {e}") from None

    def _load_all(self) -> None:
        for module in self.modules:
            importlib.import_module(module)
