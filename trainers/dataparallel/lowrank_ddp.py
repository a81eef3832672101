"""Low-rank DDP, the two readings; names say which one a result used.

`lowrank-ddp-projected` (GaLore-style communication; `lowrank-ddp` is its name in results written
before the split and stays valid): every step each worker uploads Q^T G of the low-rank matrices
(r x l) and the dense gradients of the rest; Adam moments live in the projected space. Every
`refresh` steps (from step 1) the full gradient is exchanged instead, and every replica computes the
same Q from the same averaged bits (top_r is deterministic; tested bit-equal across workers). No rotation.

`lowrank-ddp-dense` (the LoRDO review's baseline, whose ~10x claim is counted against it): dense
gradients all-reduced every step (N elements each way), the low-rank part in the optimizer state
only: every replica projects the same averaged gradient with Q (Q^T G drives r x l Adam moments,
the update is Q (u_hat / den)), and refreshes Q from it every `refresh` steps (from step 1).
"""
from __future__ import annotations

from trainers.dataparallel.base import ELEMENT_BYTES, DataParallelMethod
from trainers.optim.lordo import MatrixAdam, adam_step, top_r


class LowRankDDP(DataParallelMethod):
    """Q^T G on the wire (r x l per low-rank matrix per step), the full gradient at refresh steps."""

    def __init__(self, params, cfg, worker=1):
        super().__init__(params, cfg, worker)
        low = cfg.adam(rank=cfg.rank, rotation=False)
        self.states = {n: MatrixAdam(s, low if n in self.lowrank else cfg.adam()) for n, s in self.shapes.items()}
        self.overlaps: list[float] = []

    def is_sync(self, step):
        return True

    def refresh(self, step: int) -> bool:
        return (step - 1) % self.cfg.refresh == 0

    def step(self, step, grads):
        if self.refresh(step):
            return {n: grads[n].float().contiguous() for n in self.shapes}
        up = {n: grads[n].float().contiguous() for n in self.dense}
        for n in self.lowrank:
            st = self.states[n]
            up[n] = (st.q.T @ st.orient(grads[n].float())).contiguous()
        return up

    def finish(self, step, down):
        metrics = {}
        for n, p in self.params.items():
            st = self.states[n]
            if n in self.lowrank and self.refresh(step):
                ov = st.set_projection(top_r(st.orient(down[n]), st.r))
                if ov is not None:
                    metrics.setdefault("overlaps", []).append(ov)
                adam_step(p, st, down[n])
            else:
                adam_step(p, st, down[n], projected=n in self.lowrank)
        if "overlaps" in metrics:
            metrics["overlap"] = sum(metrics.pop("overlaps")) / len(self.lowrank)
        return metrics

    def claimed_bytes(self, step):
        if self.refresh(step):
            n = self.all_elements() * ELEMENT_BYTES
            return n, n
        n = self.dense_elements() + sum(self.cfg.rank * self.sl(m)[1] for m in self.lowrank)
        return n * ELEMENT_BYTES, n * ELEMENT_BYTES


class LowRankDDPLegacyName(LowRankDDP):
    """`lowrank-ddp-projected` under its name before the split (old results and flags read the same)."""


class LowRankDDPDense(LowRankDDP):
    """The review's low-rank DDP: the dense gradient on the wire every step, Q only in the optimizer."""

    def step(self, step, grads):
        return {n: grads[n].float().contiguous() for n in self.shapes}

    def finish(self, step, down):
        metrics, overlaps = {}, []
        for n, p in self.params.items():
            st = self.states[n]
            if n in self.lowrank and self.refresh(step):
                ov = st.set_projection(top_r(st.orient(down[n]), st.r))
                if ov is not None:
                    overlaps.append(ov)
            adam_step(p, st, down[n])  # low-rank matrices: Q^T G, moments r x l, update Q (u_hat / den)
        if overlaps:
            metrics["overlap"] = sum(overlaps) / len(self.lowrank)
        return metrics

    def claimed_bytes(self, step):
        n = self.all_elements() * ELEMENT_BYTES
        return n, n
