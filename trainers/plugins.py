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

A plugin's name must follow the in-tree grammar (`NAME`: it is a flag value, a column value and part
of a cell's label `NAME@1.6%`) and must not be an in-tree name (the owners of those declare them with
`reserve`): either kind of plugin is ignored everywhere, with one stderr warning per process naming
its distribution (`harness check` fails it). One name offered by two distributions is an error
naming both wherever that name is used.
"""
from __future__ import annotations

import difflib
import functools
import re
import sys
from importlib import metadata
from typing import Callable, Iterable

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


# The in-tree names' grammar: lower-case words of letters and digits joined by '-' or '_' (full-bf16,
# knights_knaves, lordo-global-fullrank-reapplied). '@' separates a cell's budget, ',' a flag's list.
NAME = re.compile(r"^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$")
OWN_DISTRIBUTION = "wan-harness"   # its own entry points are in-tree names, never a plugin's
_reserved: list[Callable[[str], bool]] = []   # the run spec's vocabulary (patterns too: rank-R)
_reserved_names: set[str] = set()              # the registries' decorated names
_warned: set[str] = set()


def reserve(is_in_tree: Callable[[str], bool] | str) -> None:
    """Declare in-tree names, by a test on a name (the run spec's vocabulary) or one name (a registry's
    decorator): a plugin that takes one is ignored with a warning."""
    if isinstance(is_in_tree, str):
        _reserved_names.add(is_in_tree)
    else:
        _reserved.append(is_in_tree)


def is_reserved(name: str) -> bool:
    return name in _reserved_names or any(test(name) for test in _reserved)


def distribution(ep: metadata.EntryPoint) -> str:
    """'name version' of the distribution that declares `ep` (its object reference where unknown)."""
    dist = getattr(ep, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else ep.value


def _own(ep: metadata.EntryPoint) -> bool:
    dist = getattr(ep, "dist", None)
    return dist is not None and dist.name == OWN_DISTRIBUTION


@functools.lru_cache(maxsize=None)
def _entry_points(group: str) -> dict[str, tuple[metadata.EntryPoint, ...]]:
    # Cached per process: the installed set does not change under a running harness, and a scan of
    # every distribution's metadata costs a few ms per call. Name -> every distinct distribution's
    # entry point of that name (more than one is a clash, see `clash`).
    found: dict[str, dict[str, metadata.EntryPoint]] = {}
    for ep in metadata.entry_points(group=group):
        found.setdefault(ep.name, {}).setdefault(distribution(ep).split()[0], ep)
    return {name: tuple(by_dist.values()) for name, by_dist in found.items()}


def _groups(kind: str) -> tuple[str, ...]:
    # a budgeted compressor is a compressor too
    return (GROUPS[kind], GROUPS["budgeted_compressor"]) if kind == "compressor" else (GROUPS[kind],)


def _offers(kind: str) -> dict[str, tuple[metadata.EntryPoint, ...]]:
    """Name -> the entry points of every distribution offering it, over the kind's groups (one
    distribution listing a name in two groups offers it once)."""
    out: dict[str, dict[str, metadata.EntryPoint]] = {}
    for group in _groups(kind):
        for name, eps in _entry_points(group).items():
            for ep in eps:
                out.setdefault(name, {}).setdefault(distribution(ep).split()[0], ep)
    return {name: tuple(by_dist.values()) for name, by_dist in out.items()}


def refusal(name: str, eps: tuple[metadata.EntryPoint, ...]) -> str | None:
    """Why plugin `name` is ignored (one line naming its distribution), or None."""
    if any(_own(ep) for ep in eps):
        return None
    dists = " and ".join(distribution(ep) for ep in eps)
    if not NAME.match(name):
        return (f"plugin {name!r} of {dists} is ignored: a name is lower-case letters and digits joined by "
                "'-' or '_', like the in-tree names")
    if is_reserved(name):
        return f"plugin {name!r} of {dists} is ignored: {name!r} is an in-tree name (the in-tree one is used)"
    return None


def clash(name: str, eps: tuple[metadata.EntryPoint, ...]) -> str | None:
    """One line naming both distributions when more than one offers `name`, else None."""
    if len(eps) < 2:
        return None
    return (f"plugin name {name!r} is offered by {len(eps)} distributions: "
            f"{' and '.join(f'{distribution(ep)} ({ep.value})' for ep in eps)}; uninstall all but one")


def _warn(message: str) -> None:
    if message not in _warned:   # once per process: every surface asks for the names
        _warned.add(message)
        print(f"warning: {message}", file=sys.stderr)


def _usable(kind: str) -> dict[str, tuple[metadata.EntryPoint, ...]]:
    out = {}
    for name, eps in _offers(kind).items():
        if (why := refusal(name, eps)) is not None:
            _warn(why)
        else:
            out[name] = eps
    return out


def names(kind: str) -> tuple[str, ...]:
    """Plugin names of one extension point (`GROUPS` key), sorted, the ignored ones left out (a
    clashing name stays: using it is the error); no plugin code is imported."""
    return tuple(sorted(_usable(kind)))


def check_unique(kind: str, name: str) -> None:
    """PluginError naming both distributions when two offer `name`."""
    if (why := clash(name, _offers(kind).get(name, ()))) is not None:
        raise PluginError(why)


def load(kind: str, name: str):
    """The object an entry point names (importing its package); PluginError in one line if it fails."""
    eps = _usable(kind).get(name)
    if eps is None:
        raise PluginError(f"no {kind} plugin named {name!r}")
    check_unique(kind, name)
    ep, = eps
    try:
        return ep.load()
    except Exception as err:   # a broken plugin is its author's bug: name it, do not crash the service
        raise PluginError(f"{kind} plugin {name!r} ({ep.value}) failed to load: {type(err).__name__}: {err}") from None


def source(kind: str, name: str) -> str | None:
    """'distribution version' of a plugin (for results and reports; both, joined by ' and ', for a
    clash), None for an in-tree name or an ignored plugin."""
    eps = _usable(kind).get(name)
    return " and ".join(distribution(ep) for ep in eps) if eps else None


def problems() -> list[tuple[str, str]]:
    """(name, one line) for every installed plugin that is ignored or clashes, every extension point."""
    out = {}
    for kind in GROUPS:
        for name, eps in _offers(kind).items():
            why = refusal(name, eps) or clash(name, eps)
            if why is not None:
                out[why] = name
    return sorted((name, why) for why, name in out.items())


def refresh() -> None:
    """Forget the cached entry points (after a `pip install` in the same process: tests)."""
    _entry_points.cache_clear()
