"""Data-parallel methods by name (one file each, `@register("name")` on the class; the contract is base.py).

`lordo-global` / `lordo-local` take the run's --lordo-qhm; a suffix names the QHM variant
instead (`lordo-global-none`, `-lowrank`, `-fullrank`), so that variants compare in one run;
after `-fullrank`, a reading of its term may follow (`lordo-global-fullrank-reapplied`: see
trainers/optim/lordo.py QHM_RESIDUALS).
A method from another package registers through the entry-point group `wan_harness.dataparallel`
(docs/PLUGINS.md).
"""
from __future__ import annotations

import dataclasses

from trainers import spec
from trainers.dataparallel.base import DataParallelMethod, DPConfig
from trainers.registry import Registry

_REGISTRY: Registry[DataParallelMethod] = Registry(
    "data-parallel method", "data-parallel methods",
    ("trainers.dataparallel.ddp", "trainers.dataparallel.diloco", "trainers.dataparallel.lordo",
     "trainers.dataparallel.lowrank_ddp"),
    plugin="dataparallel", base=DataParallelMethod)
register = _REGISTRY.register
available = _REGISTRY.available
in_tree = _REGISTRY.in_tree
QHM_SUFFIX = {"none": "none", "lowrank": "low-rank", "fullrank": "full-rank"}


def resolve(name: str, cfg: DPConfig) -> tuple[type[DataParallelMethod], DPConfig]:
    """(class, config) of method `name`; an unknown name fails with the list of valid ones."""
    m = spec.DP_METHOD.match(name)
    if m and spec.is_data_parallel(name):
        if m.group(2):
            cfg = dataclasses.replace(cfg, qhm=QHM_SUFFIX[m.group(2)])
        if m.group(3):  # lordo-*-fullrank-<reading>: what the full-rank QHM term applies
            cfg = dataclasses.replace(cfg, qhm_residual=m.group(3))
        return _REGISTRY.get_class(m.group(1)), cfg
    return _REGISTRY.get_class(name), cfg    # a plugin, or the unknown-name error


def get_method(name: str, params, cfg: DPConfig, worker: int = 1) -> DataParallelMethod:
    cls, cfg = resolve(name, cfg)
    return cls(params, cfg, worker)
