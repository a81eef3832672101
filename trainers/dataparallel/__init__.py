"""Data-parallel methods by name (one file each and its card, trainers/cards/dataparallel.py; the contract
is base.py).

`lordo-global` / `lordo-local` take the run's --lordo-qhm; a suffix names the QHM variant
instead (`lordo-global-none`, `-lowrank`, `-fullrank`), so that variants compare in one run;
after `-fullrank`, a reading of its term may follow (`lordo-global-fullrank-reapplied`: see
trainers/optim/lordo.py QHM_RESIDUALS). The card parses its names into the settings they imply.
A method from another package registers through the entry-point group `wan_harness.cards` (its card) or
`wan_harness.dataparallel` (its class: docs/PLUGINS.md).
"""
from __future__ import annotations

import dataclasses

from trainers import cards
from trainers.dataparallel.base import DataParallelMethod, DPConfig
from trainers.registry import Registry

_REGISTRY: Registry[DataParallelMethod] = Registry(
    "data-parallel method", "data-parallel methods", plugin="dataparallel", base=DataParallelMethod,
    carded="dataparallel")
register = _REGISTRY.register
available = _REGISTRY.available
in_tree = _REGISTRY.in_tree


def resolve(name: str, cfg: DPConfig) -> tuple[type[DataParallelMethod], DPConfig]:
    """(class, config) of method `name`, with the settings its name implies; an unknown name fails with
    the list of valid ones."""
    found = cards.match("dataparallel", name)
    if found is not None:
        card, implied = found
        return _REGISTRY.get_class(card.name), dataclasses.replace(cfg, **implied)
    return _REGISTRY.get_class(name), cfg    # a class plugin, or the unknown-name error


def get_method(name: str, params, cfg: DPConfig, worker: int = 1) -> DataParallelMethod:
    cls, cfg = resolve(name, cfg)
    return cls(params, cfg, worker)
