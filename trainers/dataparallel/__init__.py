"""Data-parallel methods by name (one file each; the contract is base.py).

`lordo-global` / `lordo-local` take the run's --lordo-qhm; a suffix names the QHM variant
instead (`lordo-global-none`, `-lowrank`, `-fullrank`), so that variants compare in one run.
"""
from __future__ import annotations

import dataclasses

from trainers import spec
from trainers.dataparallel.base import DataParallelMethod, DPConfig
from trainers.dataparallel.ddp import DDP
from trainers.dataparallel.diloco import DiLoCo
from trainers.dataparallel.lordo import LordoGlobal, LordoLocal
from trainers.dataparallel.lowrank_ddp import LowRankDDP

METHODS: dict[str, type[DataParallelMethod]] = {c.name: c for c in (DDP, LowRankDDP, DiLoCo, LordoGlobal, LordoLocal)}
QHM_SUFFIX = {"none": "none", "lowrank": "low-rank", "fullrank": "full-rank"}


def available() -> list[str]:
    return sorted(METHODS)


def resolve(name: str, cfg: DPConfig) -> tuple[type[DataParallelMethod], DPConfig]:
    """(class, config) of method `name`; an unknown name fails with the list of valid ones."""
    m = spec.DP_METHOD.match(name)
    if not spec.is_data_parallel(name):
        raise ValueError(f"unknown data-parallel method {name!r}; valid: {', '.join(spec.dp_method_names())}")
    if m.group(2):
        cfg = dataclasses.replace(cfg, qhm=QHM_SUFFIX[m.group(2)])
    return METHODS[m.group(1)], cfg


def get_method(name: str, params, cfg: DPConfig, worker: int = 1) -> DataParallelMethod:
    cls, cfg = resolve(name, cfg)
    return cls(params, cfg, worker)
