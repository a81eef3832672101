"""RunParams -> the data-parallel config (trainers/dataparallel/base.py DPConfig): one place."""
from __future__ import annotations

from trainers.dataparallel.base import DPConfig
from trainers.spec import RunParams


def dp_config(p: RunParams) -> DPConfig:
    return DPConfig(steps=p.updates, lr=p.lr, k=p.lordo_k, refresh=p.lowrank_ddp_refresh, k_states=p.lordo_k_states or p.lordo_k,
                    rank=p.lordo_rank, qhm=p.lordo_qhm, omega=p.lordo_omega,
                    error_feedback=p.lordo_error_feedback, rotation=p.lordo_rotation,
                    outer_lr=p.diloco_outer_lr, outer_momentum=p.diloco_outer_momentum, seed=p.seed)
