"""`diloco`: K local Adam steps, then the averaged pseudo-gradient drives an outer Nesterov SGD
(lr 0.7, momentum 0.9 by default), applied identically on every replica; inner states stay local."""
from __future__ import annotations

import torch

from trainers.dataparallel.base import ELEMENT_BYTES, DataParallelMethod
from trainers.optim.lordo import MatrixAdam, adam_step


class DiLoCo(DataParallelMethod):

    def __init__(self, params, cfg, worker=1):
        super().__init__(params, cfg, worker)
        self.states = {n: MatrixAdam(s, cfg.adam()) for n, s in self.shapes.items()}
        self.anchor = {n: p.detach().clone() for n, p in params.items()}
        self.momentum = {n: torch.zeros(s) for n, s in self.shapes.items()}

    def step(self, step, grads):
        for n, p in self.params.items():
            adam_step(p, self.states[n], grads[n])
        if not self.is_sync(step):
            return None
        return {n: (self.anchor[n] - p.detach()).contiguous() for n, p in self.params.items()}

    def finish(self, step, down):
        mu, lr = self.cfg.outer_momentum, self.cfg.outer_lr
        for n, p in self.params.items():
            buf = self.momentum[n].mul_(mu).add_(down[n])
            update = down[n] + mu * buf if mu else down[n]        # torch SGD's Nesterov form
            p.data.copy_(self.anchor[n] - lr * update)
            self.anchor[n] = p.detach().clone()
        return {}

    def claimed_bytes(self, step):
        if not self.is_sync(step):
            return 0, 0
        n = self.all_elements() * ELEMENT_BYTES
        return n, n
