"""Name -> implementation registries: one per extension point (compressors, tasks, objectives,
data-parallel methods, HiLo methods), one registration style.

The name is the interface: the same string on the command line, in results and in plots. An
in-tree implementation registers with its card (trainers/cards: one `Card(...)` line naming its class);
a plugin from another installed package is found through its entry point (trainers/plugins.py): a card
(`wan_harness.cards`) or a bare class. `@register("name")` stays for a registry of its own (tests). An
unknown name fails in one line that lists the valid names and the close matches.
"""
from __future__ import annotations

import importlib
from typing import Callable, Generic, TypeVar

from trainers import cards, plugins
from trainers.plugins import unknown_name

T = TypeVar("T")


class Registry(Generic[T]):
    """`kind` names what is registered ("task"); `modules` are the in-tree implementations, imported
    on first use so that their decorators run (lazily: they import their package's `register`);
    `plugin` is the trainers/plugins.py GROUPS key whose entry points extend it; `base` is the class
    a plugin must subclass; `error` is what an unknown name or bad options raise. A `carded` registry
    takes its names from the cards of that kind (trainers/cards; True: `kind`), in-tree and installed
    alike, and imports a card's class on first use."""

    def __init__(self, kind: str, plural: str, modules: tuple[str, ...] = (), plugin: str | None = None,
                 base: type | None = None, error: type[Exception] = ValueError, carded: bool | str = False):
        self.kind, self.plural, self.modules, self.plugin = kind, plural, modules, plugin
        # the implementations are named by their cards (trainers/cards) of this kind, not decorators
        self.card_kind = (kind if carded is True else carded) or None
        self.carded = bool(carded)
        self.base, self.error = base, error
        self._entries: dict[str, Callable[..., T]] = {}   # in-tree, by their decorators
        self._loaded: dict[str, Callable[..., T]] = {}    # plugins, once loaded

    def register(self, name: str):
        """Class decorator: make `cls` constructible by `get(name, **options)`."""
        def wrap(cls):
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            cls.name = name
            self._entries[name] = cls
            plugins.reserve(name)   # a plugin of this name is ignored, with a warning naming it
            return cls
        return wrap

    def in_tree(self) -> list[str]:
        """The names registered by this package's own modules (decorators or cards)."""
        self._load_all()
        return sorted({*self._entries, *self._in_tree_cards()})

    def plugin_names(self) -> list[str]:
        """Names offered by installed plugins (not loaded; an in-tree name is reserved: a plugin that
        takes one is left out, with a warning)."""
        if not self.plugin:
            return []
        self._load_all()   # the in-tree names reserve themselves as they register
        carded = {c.name for c in cards.of(self.card_kind)} if self.carded else set()
        return sorted({*plugins.names(self.plugin), *carded} - set(self._entries) - set(self._in_tree_cards()))

    def _in_tree_cards(self) -> list[str]:
        return [c.name for c in cards.in_tree(self.card_kind)] if self.carded else []

    def available(self) -> list[str]:
        """Every valid name: in-tree and plugins."""
        return sorted({*self.in_tree(), *self.plugin_names()})

    def get_class(self, name: str) -> Callable[..., T]:
        """The implementation called `name` (loading its plugin if it is one)."""
        self._load_all()
        found = self._entries.get(name) or self._loaded.get(name)
        if found is not None:
            return found
        card = cards.find(self.card_kind, name) if self.carded else None
        if card is None and name not in self.plugin_names():
            raise self.error(unknown_name(self.kind, self.plural, name, self.available()))
        try:
            cls = card.load() if card is not None else plugins.load(self.plugin, name)
        except plugins.PluginError as err:
            raise self.error(str(err)) from None
        except Exception as err:   # a card naming a class that does not import: one line, naming it
            raise self.error(f"{self.kind} {name!r} ({card.impl}) failed to load: {type(err).__name__}: {err}") from None
        if self.base is not None and not (isinstance(cls, type) and issubclass(cls, self.base)):
            raise self.error(f"{self.kind} plugin {name!r} is {cls!r}, not a subclass of {self.base.__name__}")
        cls.name = name   # the card's or entry point's name is the interface
        if card is not None and card.options and not callable(getattr(cls, "options", None)):
            cls.options = card.defaults   # a compressor's: the card states the defaults once (a task's or an
            #                               objective's `options()` reports an instance's own)
        self._loaded[name] = cls
        return cls

    def get(self, name: str, **options) -> T:
        """The implementation called `name`, built with `options`."""
        cls = self.get_class(name)
        try:
            return cls(**options)
        except TypeError as e:  # an unknown or missing option keyword: name it, not a stack trace
            raise self.error(f"{self.kind} {name!r}: bad options {sorted(options)}: {e}") from None

    def _load_all(self) -> None:
        for module in self.modules:
            importlib.import_module(module)
