"""What the data-parallel aggregator and workers share: RunParams -> DPConfig (one place), the lock
around the seeded replica build, and the parameter hash both sides report."""
from __future__ import annotations

import hashlib
import threading

import torch

from trainers.dataparallel.base import DPConfig
from trainers.spec import RunParams

BUILD_LOCK = threading.Lock()  # the seeded build uses torch's process-wide RNG: replicas in threads take turns


def dp_config(p: RunParams) -> DPConfig:
    return DPConfig(steps=p.updates, lr=p.lr, k=p.lordo_k, refresh=p.lowrank_ddp_refresh, k_states=p.lordo_k_states or p.lordo_k,
                    rank=p.lordo_rank, qhm=p.lordo_qhm, omega=p.lordo_omega, qhm_residual=p.lordo_qhm_residual,
                    error_feedback=p.lordo_error_feedback, rotation=p.lordo_rotation, initial_q=p.lordo_initial_q,
                    outer_lr=p.diloco_outer_lr, outer_momentum=p.diloco_outer_momentum, seed=p.seed)


def params_hash(params: dict[str, torch.Tensor]) -> str:
    """SHA-256 over (name, raw bytes) of every tensor, in order: equal on replicas that hold the same bits."""
    h = hashlib.sha256()
    for n, t in params.items():
        h.update(n.encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()
