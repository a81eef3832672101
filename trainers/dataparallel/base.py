"""The data-parallel contract: what a worker does per local step, what it sends at a sync, how the
aggregator combines, and the analytic payload bytes per direction (docs/ALGORITHMS.md).

Every worker holds a full replica and calls, per optimizer step (1-based):

    up = method.step(step, grads)        # local work; the upload (name -> fp32 tensor) or None
    if up is not None:                   # a sync: the upload goes to the aggregator ...
        down = aggregator.combine(step, [up_1, ..., up_M])   # ... on the aggregator's node
        metrics = method.finish(step, down)                  # apply; returns e.g. {"overlap": ...}

`claimed_bytes(step)` is the analytic payload of that step per worker, (up, down), in bytes of the
tensor data alone (4 bytes per fp32 element): the paper-style formula, which the measured bytes
(the tensor-table body and the frame written to the socket) are compared with.

Parameters: 2-D weights of the targeted projections (attention + MLP) with rank < min(p, q) are
the "low-rank" matrices; everything else (embeddings, norms, LM head, full-rank matrices) is dense.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from trainers.optim.lordo import AdamConfig

ELEMENT_BYTES = 4                                 # everything on the wire here is fp32
INITIAL_Q = ("pseudo-gradient", "random")   # lordo-global's first Q (trainers/dataparallel/lordo.py)
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class DPConfig:
    """One data-parallel run's optimizer and sync settings (from the run spec's dp_/lordo_ params)."""
    steps: int = 20                   # optimizer steps in all; the last one always syncs
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.95)
    k: int = 8                        # local steps between parameter syncs (diloco, lordo)
    refresh: int = 200                # lowrank-ddp: steps between projection refreshes
    k_states: int = 8                 # steps between optimizer-state syncs (lordo; a multiple of k)
    rank: int = 8
    qhm: str = "full-rank"
    omega: float = 0.97
    qhm_residual: str = "reduced"     # lordo full-rank QHM: what the term applies (trainers/optim/lordo.py)
    error_feedback: bool = True
    rotation: bool = True
    initial_q: str = "pseudo-gradient"  # lordo-global's first Q: from the first averaged pseudo-gradient, or random
    outer_lr: float = 0.7             # diloco's outer Nesterov SGD
    outer_momentum: float = 0.9
    seed: int = 0

    def __post_init__(self):
        if self.k < 1 or self.k_states < 1 or self.k_states % self.k:
            raise ValueError(f"k_states ({self.k_states}) must be a positive multiple of k ({self.k})")
        if self.initial_q not in INITIAL_Q:
            raise ValueError(f"initial_q {self.initial_q!r} is not one of {', '.join(INITIAL_Q)}")

    def adam(self, **changes) -> AdamConfig:
        return AdamConfig(lr=self.lr, betas=self.betas, **changes)


def is_lowrank(name: str, shape: tuple[int, ...], rank: int) -> bool:
    return len(shape) == 2 and any(f"{t}." in name for t in TARGETS) and rank < min(shape)


def numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


class DataParallelMethod:
    """One method's worker side; subclasses implement step/finish/claimed_bytes (one file each)."""
    name: ClassVar[str]

    def __init__(self, params: dict[str, torch.nn.Parameter], cfg: DPConfig, worker: int = 1):
        self.params, self.cfg, self.worker = params, cfg, worker
        self.shapes = {n: tuple(p.shape) for n, p in params.items()}
        self.lowrank = [n for n, s in self.shapes.items() if is_lowrank(n, s, cfg.rank)]
        self.dense = [n for n in self.shapes if n not in self.lowrank]

    def is_sync(self, step: int) -> bool:
        return step % self.cfg.k == 0 or step == self.cfg.steps

    def step(self, step: int, grads: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
        raise NotImplementedError

    def finish(self, step: int, down: dict[str, torch.Tensor]) -> dict:
        raise NotImplementedError

    def claimed_bytes(self, step: int) -> tuple[int, int]:
        raise NotImplementedError

    def make_aggregator(self) -> "Aggregator":
        return Aggregator()

    def dense_elements(self) -> int:
        return sum(numel(self.shapes[n]) for n in self.dense)

    def all_elements(self) -> int:
        return sum(numel(s) for s in self.shapes.values())

    def sl(self, name: str) -> tuple[int, int]:
        """(short side s, long side l) of a low-rank matrix."""
        p, q = self.shapes[name]
        return min(p, q), max(p, q)


class Aggregator:
    """The star's centre: averages every uploaded tensor (sum in worker order, then divide, so the
    result is the same bits wherever it is computed)."""

    def combine(self, step: int, ups: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        return mean_tables(ups)


def mean_tables(ups: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    keys = list(ups[0])
    for u in ups[1:]:
        if list(u) != keys:
            raise ValueError("workers uploaded different tensor tables")
    out = {}
    for k in keys:
        acc = ups[0][k].float().clone()
        for u in ups[1:]:
            acc.add_(u[k].float())
        out[k] = acc.div_(len(ups))
    return out
