"""`lordo-global` / `lordo-local` (arXiv 2602.04396): K local steps of LoRDO's low-rank Adam
(trainers/optim/lordo.py), then the pseudo-gradients are averaged (outer lr 1), the optimizer
states averaged on their own period (k_states), and Q refreshed, with moment rotation.

First global Q (`initial_q`, --lordo-initial-q): `pseudo-gradient` (default; the review's): the first
window runs with Q = I (dense: Adam plus the full-rank term, s x l moments, no error feedback yet), the
first sync ships dense pseudo-gradients (and dense moments when states are due), and the aggregator's
top-r of their average is the first Q, which every worker receives and moves its moments into
(trainers/optim/lordo.py "Dense first window"); `random`: a seeded random basis, the same on every
worker and on the aggregator, no bytes (an earlier version of this code).

Uploads (per low-rank p x q matrix, s = min(p, q), l = max(p, q), fp32):
- without the full-rank QHM term theta moves only inside span(Q) between syncs, so the
  pseudo-gradient is exactly Q X: global sends X = Q^T Delta (r l); local sends Q_m and X_m (s r + r l);
- with the full-rank QHM term (omega < 1) Delta is dense: s l;
- global, at a state sync: u and v (2 r l). Local variant: low-rank moments live in private bases
  and are not averaged;
- global, first sync after a dense first window: Delta dense (s l), and u, v dense (2 s l) at a
  state sync.
Downloads: global: the averaged X (r l) or dense Delta (s l), the averaged moments (2 r l) and the new
Q (s r), computed once by the aggregator as the top-r singular vectors of the averaged pseudo-gradient;
local: the averaged dense Delta (s l: the mean of M rank-r terms is not rank r); Q is refreshed on
each worker from its own last gradient. Dense parameters (embeddings, norms, head) ship their
pseudo-gradient at every sync and their Adam moments at state syncs.
"""
from __future__ import annotations

from typing import ClassVar

import torch

from trainers.dataparallel.base import ELEMENT_BYTES, Aggregator, DataParallelMethod, mean_tables
from trainers.optim.lordo import MatrixAdam, adam_step, random_projection, top_r


class LoRDO(DataParallelMethod):
    projection: ClassVar[str]

    def __init__(self, params, cfg, worker=1):
        super().__init__(params, cfg, worker)
        low = cfg.adam(rank=cfg.rank, qhm=cfg.qhm, omega=cfg.omega, error_feedback=cfg.error_feedback,
                       rotation=cfg.rotation, qhm_residual=cfg.qhm_residual)
        dense_first = self.dense_first_window
        self.states = {n: MatrixAdam(s, low, dense_first) if n in self.lowrank else MatrixAdam(s, cfg.adam())
                       for n, s in self.shapes.items()}
        self.anchor = {n: p.detach().clone() for n, p in params.items()}
        self.last_grad: dict[str, torch.Tensor] = {}
        if self.projection == "global" and cfg.initial_q == "random":
            for n in self.lowrank:
                self.states[n].set_projection(self.initial_q(n))

    @property
    def dense_first_window(self) -> bool:
        """Global with the first Q from the first averaged pseudo-gradient: Q = I until the first sync."""
        return self.projection == "global" and self.cfg.initial_q == "pseudo-gradient"

    def first_sync(self, step: int) -> bool:
        return step == min(self.cfg.k, self.cfg.steps)

    @property
    def factored(self) -> bool:
        """Pseudo-gradients lie in span(Q): no full-rank QHM term (or omega = 1)."""
        return self.cfg.qhm != "full-rank" or self.cfg.omega >= 1.0

    def initial_q(self, name: str) -> torch.Tensor:
        """Global, --lordo-initial-q random: a seeded random basis, the same on every worker and on the aggregator."""
        s, _ = self.sl(name)
        return random_projection(s, self.states[name].r, self.cfg.seed * 1_000_003 + self.lowrank.index(name))

    def states_due(self, step: int) -> bool:
        return step % self.cfg.k_states == 0 or step == self.cfg.steps

    def step(self, step, grads):
        for n, p in self.params.items():
            st = self.states[n]
            if st.needs_projection:  # local: the first Q from this worker's first gradient
                st.set_projection(top_r(st.orient(grads[n].float()), st.r))
            adam_step(p, st, grads[n])
        if self.projection == "local":
            self.last_grad = {n: grads[n].detach().float() for n in self.lowrank}
        return self.upload(step) if self.is_sync(step) else None

    def upload(self, step: int) -> dict[str, torch.Tensor]:
        up = {}
        for n in self.dense:
            up["d/" + n] = (self.anchor[n] - self.params[n].detach()).contiguous()
        for n in self.lowrank:
            st = self.states[n]
            delta = st.orient(self.anchor[n] - self.params[n].detach())
            if not self.factored or st.q is None:   # full-rank QHM, or the dense first window
                up["d/" + n] = delta.contiguous()
                continue
            up["x/" + n] = (st.q.T @ delta).contiguous()
            if self.projection == "local":
                up["q/" + n] = st.q.contiguous()
        if self.states_due(step):
            for n in self.dense + (self.lowrank if self.projection == "global" else []):
                up["u/" + n], up["v/" + n] = self.states[n].u.contiguous(), self.states[n].v.contiguous()
        return up

    def finish(self, step, down):
        overlaps = []
        for n, p in self.params.items():
            st = self.states[n]
            delta = down.get("d/" + n)
            if delta is None:  # global, factored: Delta = Q_old X
                delta = st.q @ down["x/" + n]
            p.data.copy_(self.anchor[n] - st.orient(delta).reshape(self.shapes[n]))
            if "u/" + n in down:
                st.u, st.v = down["u/" + n].clone(), down["v/" + n].clone()
            if n in self.lowrank:
                q_new = down["q/" + n] if self.projection == "global" else top_r(st.orient(self.last_grad[n]), st.r)
                overlaps.append(st.set_projection(q_new))
            self.anchor[n] = p.detach().clone()
        overlaps = [o for o in overlaps if o is not None]
        return {"overlap": sum(overlaps) / len(overlaps)} if overlaps else {}

    def claimed_bytes(self, step):
        if not self.is_sync(step):
            return 0, 0
        states = self.states_due(step)
        n = self.dense_elements() * (3 if states else 1)
        up = down = n
        for m in self.lowrank:
            s, l, r = *self.sl(m), self.states[m].r
            if self.projection == "global":
                dense = self.dense_first_window and self.first_sync(step)   # s x l Delta and moments
                body = (r * l if self.factored and not dense else s * l) + (2 * (s if dense else r) * l if states else 0)
                up, down = up + body, down + body + s * r
            else:
                up, down = up + (s * r + r * l if self.factored else s * l), down + s * l
        return up * ELEMENT_BYTES, down * ELEMENT_BYTES

    def make_aggregator(self) -> "LordoAggregator":
        return LordoAggregator(self)


class LordoAggregator(Aggregator):
    """Averages; global: reconstructs the averaged pseudo-gradient and computes the next Q once;
    local: sums the workers' rank-r pseudo-gradients into one dense average."""

    def __init__(self, method: LoRDO):
        self.m = method
        self.q = {n: method.states[n].q for n in method.lowrank} if method.projection == "global" else {}

    def combine(self, step, ups):
        if self.m.projection == "local" and self.m.factored:
            return self._combine_local(ups)
        down = mean_tables(ups)
        for n in (self.m.lowrank if self.m.projection == "global" else []):
            delta = down["d/" + n] if "d/" + n in down else self.q[n] @ down["x/" + n]
            self.q[n] = down["q/" + n] = top_r(delta, self.m.states[n].r)
        return down

    def _combine_local(self, ups):
        down = mean_tables([{k: v for k, v in u.items() if k[:2] != "x/" and k[:2] != "q/"} for u in ups])
        for n in self.m.lowrank:
            acc = ups[0]["q/" + n] @ ups[0]["x/" + n]
            for u in ups[1:]:
                acc.add_(u["q/" + n] @ u["x/" + n])
            down["d/" + n] = acc.div_(len(ups))
        return {k: down[k] for k in sorted(down)}


class LordoGlobal(LoRDO):
    projection = "global"


class LordoLocal(LoRDO):
    projection = "local"
