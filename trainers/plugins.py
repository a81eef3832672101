"""Extension points that other installed packages fill, through Python entry points (docs/PLUGINS.md),
and the one message for an unknown name.

One entry-point group per extension point:

    wan_harness.compressors          a Compressor subclass (HiLo replay methods; the method name is its name)
    wan_harness.budgeted_compressors the same kind of class, when it is a BudgetedCompressor: it then runs at
                                     every --budget, as the in-tree budgeted ones do (the controller learns
                                     that without importing it, so it cannot ask the class)
    wan_harness.tasks                a Task subclass
    wan_harness.objectives           an Objective subclass
    wan_harness.dataparallel         a DataParallelMethod subclass
    wan_harness.cards                a trainers.cards.Card in a torch-free module: the implementation's name,
                                     class, options, budget, byte rule and plot style, as in-tree cards are

Torch-free on purpose: the controller validates `--method NAME` from the entry points' NAMES
(importlib.metadata reads the installed distributions' metadata, no plugin code runs); only the
services and `harness check` load a plugin's class (`load`).
"""
from __future__ import annotations

import difflib
import functools
from importlib import metadata
from typing import Iterable

GROUPS = {
    "compressor": "wan_harness.compressors",
    "budgeted_compressor": "wan_harness.budgeted_compressors",
    "task": "wan_harness.tasks",
    "objective": "wan_harness.objectives",
    "dataparallel": "wan_harness.dataparallel",
    "card": "wan_harness.cards",
}


def unknown_name(kind: str, plural: str, name: str, valid: Iterable[str]) -> str:
    """The one message for an unknown name, plugins' or in-tree: the valid names and the close
    matches, e.g. "unknown compressor 'sapr'; valid compressors: identity, ..., topk (did you mean spar?)"."""
    valid = sorted(set(valid))
    close = difflib.get_close_matches(str(name), valid, n=3, cutoff=0.6)
    hint = f" (did you mean {' or '.join(close)}?)" if close else ""
    return f"unknown {kind} {name!r}; valid {plural}: {', '.join(valid)}{hint}"


class PluginError(ValueError):
    """A plugin that cannot be loaded or does not fit its extension point (one-line message)."""


@functools.lru_cache(maxsize=None)
def _entry_points(group: str) -> dict[str, metadata.EntryPoint]:
    # Cached per process: the installed set does not change under a running harness, and a scan of
    # every distribution's metadata costs a few ms per call.
    return {ep.name: ep for ep in metadata.entry_points(group=group)}


def names(kind: str) -> tuple[str, ...]:
    """Plugin names of one extension point (`GROUPS` key), sorted; no plugin code is imported."""
    found = _entry_points(GROUPS[kind])
    if kind == "compressor":   # a budgeted compressor is a compressor too
        found = {**found, **_entry_points(GROUPS["budgeted_compressor"])}
    return tuple(sorted(found))


def load(kind: str, name: str):
    """The object an entry point names (importing its package); PluginError in one line if it fails."""
    eps = {**_entry_points(GROUPS[kind]),
           **(_entry_points(GROUPS["budgeted_compressor"]) if kind == "compressor" else {})}
    ep = eps.get(name)
    if ep is None:
        raise PluginError(f"no {kind} plugin named {name!r}")
    try:
        return ep.load()
    except Exception as err:   # a broken plugin is its author's bug: name it, do not crash the service
        raise PluginError(f"{kind} plugin {name!r} ({ep.value}) failed to load: {type(err).__name__}: {err}") from None


def source(kind: str, name: str) -> str | None:
    """'distribution version' of a plugin (for results and reports), None for an in-tree name."""
    for group in (GROUPS[kind], GROUPS["budgeted_compressor"] if kind == "compressor" else None):
        ep = _entry_points(group).get(name) if group else None
        if ep is not None:
            dist = getattr(ep, "dist", None)
            return f"{dist.name} {dist.version}" if dist is not None else ep.value
    return None


def refresh() -> None:
    """Forget the cached entry points (after a `pip install` in the same process: tests)."""
    _entry_points.cache_clear()
