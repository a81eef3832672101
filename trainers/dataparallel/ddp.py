"""`ddp`: every step each worker uploads its whole gradient; the aggregator averages; every replica runs Adam."""
from __future__ import annotations

from trainers.dataparallel.base import ELEMENT_BYTES, DataParallelMethod
from trainers.optim.lordo import MatrixAdam, adam_step


class DDP(DataParallelMethod):

    def __init__(self, params, cfg, worker=1):
        super().__init__(params, cfg, worker)
        self.states = {n: MatrixAdam(s, cfg.adam()) for n, s in self.shapes.items()}

    def is_sync(self, step):
        return True

    def step(self, step, grads):
        return {n: grads[n].float().contiguous() for n in self.shapes}

    def finish(self, step, down):
        for n, p in self.params.items():
            adam_step(p, self.states[n], down[n])
        return {}

    def claimed_bytes(self, step):
        n = self.all_elements() * ELEMENT_BYTES
        return n, n
