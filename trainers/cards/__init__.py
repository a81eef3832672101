"""One card per implementation: what the controller, the cost model, the reports and the plots know of
a method without importing it (torch-free).

A card holds a name (and, for a family of names such as `rank-R` or `lordo-global-none`, the test
that parses its names into the options each implies: `matches`), the `module:Class` that implements it
(imported only by the services and `harness check`), its options with defaults and ranges (a compressor's
or method's each become a run parameter, `--<name>-<option>`; a task's are what `--task-options` is
checked against, and with an objective's they are its constructor's keywords: `option_drift`), whether it
runs at every --budget, its byte rule for an adapter's layout (what the cost model calls) and its plot
style. Kinds: "compressor", "method" (the HiLo methods
that ship the adapter: full, full-bf16, delta, rank-R), "dataparallel", "task", "objective".

In-tree cards are the `Card(...)` entries of the modules in `IN_TREE`; an installed package adds its own
through the entry-point group `wan_harness.cards` (a `Card` object in a torch-free module:
docs/PLUGINS.md), the same kind of object found the same way. Adding an implementation is then its file
and its card: the spec's flags and name checks, the registry, the CLI's checks, the cost model and the
figures read the card.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from trainers import plugins

Tensors = tuple[tuple[str, tuple[int, ...]], ...]
# (layout, options, cap) -> payload bytes: `options` are the card's defaults under the run's values and
# what the method's name implies, `cap` the budget in bytes for a budgeted card (None otherwise).
ByteRule = Callable[[Tensors, Mapping[str, Any], "int | None"], int]
# data-parallel: (synchronised tensors, optimizer step (1-based), settings: harness/projection/dpbytes.py
# Sync, with what the name implies applied) -> (up, down) bytes one worker ships at that step.
SyncRule = Callable[[Tensors, int, Any], "tuple[int, int]"]
# A family's names: name -> the options the name implies ({} for the bare name), None when not its own.
NameParser = Callable[[str], "Mapping[str, Any] | None"]

# the modules whose module-level Card objects are this package's
IN_TREE = ("trainers.cards.compressors", "trainers.cards.methods", "trainers.cards.dataparallel",
           "trainers.cards.tasks", "trainers.cards.objectives")


# The figures the learner's held-out evaluation measures (the float fields of trainers/hilo/evaluate.py
# EvalResult; tests/trainers/test_cards.py holds the two equal): what an objective's card may name.
HELDOUT_FIGURES = ("mean_reward", "reverse_kl", "pass_at_1", "pass_at_k", "gold_prob")


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
    many: bool = False           # a comma list of values, each of `type` and `choices`, as a tuple (digits' ops)
    at_least: str = ""           # another option of the same card this one may not be below (max_len >= min_len)

    def describe(self, name: str) -> str:
        """`name=default` and its range or choices, as a listing shows it: `min_len=1 (1..32)`."""
        default = ",".join(map(str, self.default)) if self.many else self.default
        if self.choices is not None:
            limits = ("any of " if self.many else "") + "|".join(self.choices)
        elif self.lo is not None or self.hi is not None:
            limits = f"{_num(self.lo)}..{_num(self.hi)}" + (f" {self.unit}" if self.unit else "")
        else:
            limits = ""
        return f"{name}={default}" + (f" ({limits})" if limits else "")


def _num(x: float | None) -> str:
    return "" if x is None else f"{x:g}"


@dataclass(frozen=True)
class Card:
    kind: str                                  # compressor | method | dataparallel | task | objective
    name: str                                  # the interface: command line, results, legends
    impl: str                                  # "module:Class" (or factory), imported on use only
    options: Mapping[str, Option] = field(default_factory=dict)
    budgeted: bool = False                     # runs at every --budget (equal bytes)
    payload_bytes: ByteRule | None = None      # None: the cost model asks the class (stated_bytes)
    style: tuple[str, str] | None = None       # (colour, marker) in every figure; None: picked from the name
    implies: Mapping[str, Any] = field(default_factory=dict)    # fixed settings of the name (not flags)
    names: NameParser | None = None            # a family's names (rank-R); None: `name` alone
    spelled: tuple[str, ...] = ()              # how help and error lines list the family's other names
    styles: Mapping[str, tuple[str, str]] = field(default_factory=dict)   # the family's other names' styles
    sync_bytes: SyncRule | None = None         # data-parallel: bytes per step (the cost model's rule)
    every_k: bool = False                      # data-parallel: syncs every --lordo-k steps (else every step)
    rival: bool = False                        # HiLo method: a rival to the compressors (the report's section)
    needs_teacher: bool = False                # objective: built with the run's teacher (`teacher=`), cached
    heldout_metric: str = "mean_reward"        # objective: its held-out figure, one of HELDOUT_FIGURES
    train_metric: str = "reward_mean"          # objective: the training batch's figure in the results: the
    #                                            learner row's reward_mean, or under any other name its loss

    @property
    def defaults(self) -> dict[str, Any]:
        return {k: o.default for k, o in self.options.items()}

    def matches(self, name: str) -> dict[str, Any] | None:
        """The settings `name` implies when it is one of this card's names (`implies` and what the family's
        parser reads from it), else None."""
        found = self.names(name) if self.names is not None else ({} if name == self.name else None)
        return None if found is None else {**self.implies, **found}

    def style_of(self, name: str) -> tuple[str, str] | None:
        return self.styles.get(name) or (self.style if name == self.name else None)

    def load(self) -> type:
        """The implementing class (imports it: torch for compressors)."""
        module, _, attr = self.impl.partition(":")
        return getattr(importlib.import_module(module), attr)


def constructor_keywords(cls: type, teacher: bool = False) -> dict[str, Any]:
    """The keywords `cls(...)` takes, with their defaults (`inspect.Parameter.empty` where there is none):
    what a card's options must equal, and what a task without card options is parsed against. `teacher`:
    the run's teacher, passed by the learner, is no option."""
    params = inspect.signature(cls.__init__).parameters.values()
    return {p.name: p.default for p in params if p.name != "self" and not (teacher and p.name == "teacher")
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def option_drift(card: Card, cls: type) -> list[str]:
    """Where `card.options` and `cls`'s constructor keywords differ (names, defaults), one phrase each; [] when
    they agree. A card's options are what `--task-options` is checked against; the class still takes them."""
    keywords = constructor_keywords(cls, teacher=card.needs_teacher)
    out = [f"{k}: the constructor has it, the card not" for k in keywords if k not in card.options]
    out += [f"{k}: the card has it, the constructor not" for k in card.options if k not in keywords]
    out += [f"{k}: default {o.default!r} on the card, {keywords[k]!r} in the constructor"
            for k, o in card.options.items() if k in keywords and o.default != keywords[k]]
    return out


class CardError(ValueError):
    """A card that is malformed or names itself twice (one line)."""


@functools.lru_cache(maxsize=None)
def _own() -> tuple[Card, ...]:
    """The in-tree cards (what a plugin may not take: they are read before any plugin's)."""
    found: dict[tuple[str, str], Card] = {}
    for module in IN_TREE:
        for card in vars(importlib.import_module(module)).values():
            if isinstance(card, Card):
                _add(found, card, module)
    return tuple(found.values())


@functools.lru_cache(maxsize=None)
def _all() -> tuple[Card, ...]:
    found = {(c.kind, c.name): c for c in _own()}   # in-tree first: a plugin may not take an in-tree name
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
    if card.kind == "objective" and card.heldout_metric not in HELDOUT_FIGURES:
        raise CardError(f"objective {card.name!r} ({where}) names the held-out figure {card.heldout_metric!r}; "
                        f"the evaluation measures {', '.join(HELDOUT_FIGURES)}")
    if key in found:
        raise CardError(f"{card.kind} {card.name!r} has two cards (the second in {where})")
    found[key] = card


def of(kind: str) -> list[Card]:
    """Every card of one kind, in-tree and installed, sorted by name."""
    return sorted((c for c in _all() if c.kind == kind), key=lambda c: c.name)


def find(kind: str, name: str) -> Card | None:
    return next((c for c in _all() if c.kind == kind and c.name == name), None)


def match(kinds: str | tuple[str, ...], name: str) -> tuple[Card, dict[str, Any]] | None:
    """(the card of one of `kinds` that answers to `name`, the settings the name implies), or None."""
    kinds = (kinds,) if isinstance(kinds, str) else kinds
    for card in _all():
        if card.kind in kinds and (found := card.matches(name)) is not None:
            return card, found
    return None


def objective(name: str) -> Card:
    """The objective's card; an objective without one (a plugin's class, a name in an old results folder)
    gets a card's defaults: no teacher, and grpo's figures (docs/PLUGINS.md)."""
    return find("objective", name) or Card("objective", name, "")


def heldout_metrics() -> frozenset[str]:
    """The held-out figures the objectives' cards name (in-tree and installed; a card-less objective gets a
    card's default): what an eval row's `objective_metric` may be."""
    return frozenset({Card("objective", "", "").heldout_metric, *(c.heldout_metric for c in of("objective"))})


def is_in_tree(name: str) -> bool:
    """Whether an in-tree card of any kind answers to `name` (patterns too: rank-R): a plugin may not take it."""
    return any(c.matches(name) is not None for c in _own())


plugins.reserve(is_in_tree)   # a plugin that takes an in-tree card's name is ignored, in every process


def in_tree(kind: str) -> list[Card]:
    """The cards of this package's own modules (IN_TREE)."""
    return sorted((c for c in _own() if c.kind == kind), key=lambda c: c.name)


def refresh() -> None:
    """Forget the cards found (after installing a plugin in the same process: tests)."""
    _all.cache_clear()
    _own.cache_clear()
