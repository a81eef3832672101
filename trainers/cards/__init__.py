"""One card per implementation: what the controller, the cost model, the reports and the plots know of
a method without importing it (torch-free).

A card holds a name, the `module:Class` that implements it (imported only by the services and
`harness check`), its options with defaults and ranges (each becomes a run parameter,
`--<name>-<option>`), whether it runs at every --budget, its byte rule for an adapter's layout (what
the cost model calls) and its plot style. In-tree cards are the `Card(...)` entries of the modules in
`IN_TREE`; an installed package adds its own through the entry-point group `wan_harness.cards` (a
`Card` object in a torch-free module: docs/PLUGINS.md), the same kind of object found the same way.
Adding a compressor is then its file and its card: the spec's flags, the registry, the CLI's checks,
the cost model and the figures read the card.
"""
from __future__ import annotations

import functools
import importlib
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from trainers import plugins

Tensors = tuple[tuple[str, tuple[int, ...]], ...]
# (layout, options, cap) -> payload bytes: `options` are the card's defaults under the run's values,
# `cap` the budget in bytes for a budgeted card (None otherwise).
ByteRule = Callable[[Tensors, Mapping[str, Any], "int | None"], int]

IN_TREE = ("trainers.cards.compressors",)   # the modules whose module-level Card objects are this package's


@dataclass(frozen=True)
class Option:
    """One option of an implementation; the run spec turns it into `--<card>-<option>`."""
    default: Any
    help: str
    type: type = str
    unit: str = ""
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] | None = None
    optional: bool = False       # None is a valid value ("not set")


@dataclass(frozen=True)
class Card:
    kind: str                                  # "compressor" (a plugins.GROUPS key)
    name: str                                  # the interface: command line, results, legends
    impl: str                                  # "module:Class", imported on use only
    options: Mapping[str, Option] = field(default_factory=dict)
    budgeted: bool = False                     # runs at every --budget (equal bytes)
    payload_bytes: ByteRule | None = None      # None: the cost model asks the class (stated_bytes)
    style: tuple[str, str] | None = None       # (colour, marker) in every figure; None: picked from the name

    @property
    def defaults(self) -> dict[str, Any]:
        return {k: o.default for k, o in self.options.items()}

    def load(self) -> type:
        """The implementing class (imports it: torch for compressors)."""
        module, _, attr = self.impl.partition(":")
        return getattr(importlib.import_module(module), attr)


class CardError(ValueError):
    """A card that is malformed or names itself twice (one line)."""


_IN_TREE: set[tuple[str, str]] = set()


@functools.lru_cache(maxsize=None)
def _all() -> tuple[Card, ...]:
    found: dict[tuple[str, str], Card] = {}
    _IN_TREE.clear()
    for module in IN_TREE:   # in-tree first: a plugin may not take an in-tree name
        for card in vars(importlib.import_module(module)).values():
            if isinstance(card, Card):
                _add(found, card, module)
                _IN_TREE.add((card.kind, card.name))
    for name in plugins.names("card"):
        try:
            card = plugins.load("card", name)
            if not isinstance(card, Card) or card.name != name:
                raise CardError(f"card plugin {name!r} is {card!r}, not a Card named {name!r}")
            _add(found, card, f"plugin {name}")
        except (plugins.PluginError, CardError) as err:
            # a broken plugin is its author's bug: one line, and its name stays unknown (never a traceback
            # in every command, since the spec reads the cards when it loads)
            print(f"warning: {str(err)[:300]}; ignored", file=sys.stderr)
    return tuple(found.values())


def _add(found: dict, card: Card, where: str) -> None:
    key = (card.kind, card.name)
    if key in found:
        raise CardError(f"{card.kind} {card.name!r} has two cards (the second in {where})")
    found[key] = card


def of(kind: str) -> list[Card]:
    """Every card of one kind, in-tree and installed, sorted by name."""
    return sorted((c for c in _all() if c.kind == kind), key=lambda c: c.name)


def find(kind: str, name: str) -> Card | None:
    return next((c for c in _all() if c.kind == kind and c.name == name), None)


def in_tree(kind: str) -> list[Card]:
    """The cards of this package's own modules (IN_TREE)."""
    return [c for c in of(kind) if (kind, c.name) in _IN_TREE]


def refresh() -> None:
    """Forget the cards found (after installing a plugin in the same process: tests)."""
    _all.cache_clear()
