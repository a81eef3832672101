"""LoRDO's low-rank Adam for one matrix (arXiv 2602.04396; docs/ALGORITHMS.md "Data-parallel family").

For a weight of shape p x q the projection Q (s x r, orthonormal columns) acts on the shorter
side s = min(p, q); the gradient is oriented so that this side comes first (G is s x l), and the
Adam moments u, v live in the projected space (r x l). One local step:

    G' = G + E                 (error feedback on; E = 0 otherwise)
    g  = Q^T G';   E = G' - Q g
    u  = b1 u + (1 - b1) g;    v = b2 v + (1 - b2) g^2;    u_hat, v_hat bias-corrected
    den = sqrt(v_hat) + eps
    qhm none:      d = Q (u_hat / den)
    qhm low-rank:  d = Q ((omega u_hat + (1 - omega) g) / den)          (QHAdam inside the projection)
    qhm full-rank: d = omega Q (u_hat / den) + (1 - omega) R / (mu + eps),  mu = mean(den)
    theta -= lr * d

R, the full-rank term's input (`qhm_residual`; docs/ALGORITHMS.md says why the default):
    reduced    R = G' = G + E, and the carried residual loses what the term applied of it:
               E = omega (G' - Q g)  (the term delivered (1 - omega) of the out-of-span part), so
               every bit of gradient the projection drops reaches the weights once in total: by
               the term now or through Q later, never both (default)
    gradient   R = G, this step's (clipped) gradient: QHM's "(1 - nu) g_t"; E is applied only
               through the projection, but G's own out-of-span part is applied now by the term
               AND carried in E (so once more when Q captures it); Q barely moves (overlap ~0.99)
    reapplied  R = G' = G + E with E kept whole: an earlier version of this code, where the same residual
               (||E|| / ||G|| measured at 3-6) is applied by the term at every step while it is also
               carried to the next; kept as a named variant for the paired comparison

Dense first window (`dense_first`, LoRDO-global's default first Q): before its first projection the
matrix runs with Q = I (the formulas above with Q = I and E = 0: Adam, plus the full-rank term's
(1 - omega) G / mu), moments s x l; the first `set_projection` then moves the moments into the first
Q with the rotation below (C = Q^T, i.e. Q_old = I: u <- Q^T u), whatever `cfg.rotation` says
(unrotated r x l moments of an s x l state do not exist), and error feedback starts there from E = 0.

Full rank (r >= s) means Q = I: a full-rank projection carries no information, and Adam is not
rotation-invariant (its per-coordinate normalisation changes under any other orthogonal Q), so the
identity is the only full-rank Q for which the method reduces to Adam. With omega = 1, error
feedback off and Q = I the step is torch's Adam (tests/trainers/dataparallel/test_equivalence.py).

Refresh (`set_projection`): with rotation on, C = Q_new^T Q_old; u <- C u; with var =
max(v_hat - u_hat^2, 0): v_hat <- |(C o C) var + (C u_hat)^2|; rotation off keeps u, v as they are.
`overlap(Q_new, Q_old)` = mean(sigma^2(Q_new^T Q_old)) = ||Q_new^T Q_old||_F^2 / r: 1 when the
subspace did not move, r'/r when r' directions are new.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

QHM_MODES = ("none", "low-rank", "full-rank")
QHM_RESIDUALS = ("reduced", "gradient", "reapplied")  # what the full-rank QHM term applies (module docstring)


@dataclass(frozen=True)
class AdamConfig:
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    rank: int | None = None          # None: full rank (plain Adam, Q = I)
    qhm: str = "none"
    omega: float = 1.0               # weight of the low-rank momentum term (qhm none: ignored, 1)
    error_feedback: bool = False
    rotation: bool = True
    qhm_residual: str = "reduced"    # full-rank QHM: what its term applies (module docstring)

    def __post_init__(self):
        if self.qhm not in QHM_MODES:
            raise ValueError(f"qhm {self.qhm!r} is not one of {', '.join(QHM_MODES)}")
        if self.qhm_residual not in QHM_RESIDUALS:
            raise ValueError(f"qhm_residual {self.qhm_residual!r} is not one of {', '.join(QHM_RESIDUALS)}")
        if not 0.0 <= self.omega <= 1.0:
            raise ValueError(f"omega {self.omega} is outside [0, 1]")
        if self.rank is not None and self.rank < 1:
            raise ValueError(f"rank must be >= 1, got {self.rank}")


def top_r(matrix: torch.Tensor, r: int) -> torch.Tensor:
    """The top-r left singular vectors of `matrix` (s x l), signs canonicalised (the largest-magnitude
    entry of each column positive), so that every process computing it from the same bits agrees."""
    u = torch.linalg.svd(matrix.double(), full_matrices=False)[0][:, :r]
    idx = u.abs().argmax(dim=0)
    signs = torch.sign(u[idx, torch.arange(u.shape[1])])
    signs[signs == 0] = 1
    return (u * signs).to(matrix.dtype).contiguous()


def random_projection(s: int, r: int, seed: int) -> torch.Tensor:
    """A seeded random orthonormal s x r basis (identical wherever it is built from the same seed)."""
    g = torch.Generator().manual_seed(seed)
    return top_r(torch.randn(s, r, generator=g, dtype=torch.float64), r).float()


def overlap(q_new: torch.Tensor, q_old: torch.Tensor) -> float:
    """mean(sigma^2(Q_new^T Q_old)): 1 when the two bases span the same subspace."""
    c = q_new.T @ q_old
    return float((c * c).sum() / c.shape[1])


class MatrixAdam:
    """Adam state of one parameter (a matrix when `cfg.rank` is set, any tensor otherwise).
    `dense_first`: Q = I until the first `set_projection` (module docstring, "Dense first window")."""

    def __init__(self, shape: torch.Size | tuple[int, ...], cfg: AdamConfig, dense_first: bool = False):
        self.shape, self.cfg = tuple(shape), cfg
        lowrank = cfg.rank is not None and len(self.shape) == 2
        self.left = not lowrank or self.shape[0] <= self.shape[1]   # project the rows (shorter side first)
        s, l = self._oriented_shape()
        self.r = min(cfg.rank, s) if lowrank else s
        self.full = not lowrank or self.r >= s                       # Q = I
        self.dense_first = dense_first and not self.full
        self.q: torch.Tensor | None = None                           # s x r, set by set_projection
        self.e = torch.zeros(s, l) if cfg.error_feedback and not self.full and not self.dense_first else None
        rows = s if self.full or self.dense_first else self.r
        self.u = torch.zeros(rows, l) if lowrank else torch.zeros(self.shape)
        self.v = torch.zeros_like(self.u)
        self.t = 0

    def _oriented_shape(self) -> tuple[int, int]:
        if len(self.shape) != 2:
            return (0, 0)
        return self.shape if self.left else (self.shape[1], self.shape[0])

    def orient(self, t: torch.Tensor) -> torch.Tensor:
        return t if self.left or t.dim() != 2 else t.T

    @property
    def identity(self) -> bool:
        """Q = I now: a full-rank matrix, or the dense first window before the first projection."""
        return self.full or (self.dense_first and self.q is None)

    @property
    def needs_projection(self) -> bool:
        """No Q to step with yet (the dense first window steps with Q = I and needs none)."""
        return not self.identity and self.q is None

    def set_projection(self, q_new: torch.Tensor) -> float | None:
        """Refresh Q (s x r); rotates the moments when `cfg.rotation`; returns the overlap with the old Q
        (None for the first Q)."""
        if self.full:
            return None
        q_new = q_new.contiguous().float()
        if self.q is None:
            if self.dense_first:
                self._leave_dense_window(q_new)
            self.q = q_new
            return None
        ov = overlap(q_new, self.q)
        if self.cfg.rotation and self.t > 0:
            self.rotate(q_new.T @ self.q)
        self.q = q_new
        return ov

    def _leave_dense_window(self, q: torch.Tensor) -> None:
        """s x l moments into the first Q's r x l space (the rotation with Q_old = I); E starts at 0."""
        if self.t > 0:
            self.rotate(q.T)
        else:
            self.u, self.v = torch.zeros(self.r, self.u.shape[1]), torch.zeros(self.r, self.u.shape[1])
        if self.cfg.error_feedback:
            self.e = torch.zeros(q.shape[0], self.u.shape[1])

    def rotate(self, c: torch.Tensor) -> None:
        """Moments into the new basis: u <- C u; v_hat <- |(C o C) var + (C u_hat)^2|."""
        b1, b2 = self.cfg.betas
        bc1, bc2 = 1 - b1 ** self.t, 1 - b2 ** self.t
        m_hat, v_hat = self.u / bc1, self.v / bc2
        var = (v_hat - m_hat * m_hat).clamp_min(0)
        cm = c @ m_hat
        self.v = ((c * c) @ var + cm * cm).abs() * bc2
        self.u = c @ self.u

    def direction(self, grad: torch.Tensor, projected: bool = False) -> torch.Tensor:
        """One step's update direction (theta -= lr * direction), in the parameter's own shape.
        `projected`: `grad` is already Q^T G (r x l, e.g. an all-reduced projected gradient)."""
        cfg, (b1, b2) = self.cfg, self.cfg.betas
        omega = 1.0 if cfg.qhm == "none" else cfg.omega
        ident = self.identity                                           # Q = I
        if projected:
            g = grad.float()
            g_full = current = g if ident else self.q @ g
        else:
            g_full = current = self.orient(grad.float())
            if self.e is not None:
                g_full = g_full + self.e
            g = g_full if ident else self.q.T @ g_full                 # r x l
            if self.e is not None:
                self.e = g_full - self.q @ g
                if cfg.qhm == "full-rank" and cfg.qhm_residual == "reduced":
                    self.e.mul_(omega)                                  # the term applies (1 - omega) of it now
        self.t += 1
        self.u.mul_(b1).add_(g, alpha=1 - b1)
        self.v.mul_(b2).addcmul_(g, g, value=1 - b2)
        bc1, bc2 = 1 - b1 ** self.t, 1 - b2 ** self.t
        den = self.v.sqrt() / math.sqrt(bc2) + cfg.eps                  # torch Adam's order of operations
        if cfg.qhm == "low-rank":
            low = (omega * (self.u / bc1) + (1 - omega) * g) / den
        else:
            low = (self.u / bc1) / den
        d = low if ident else self.q @ low
        if cfg.qhm == "full-rank" and omega < 1.0:
            residual = current if cfg.qhm_residual == "gradient" else g_full
            d = omega * d + (1 - omega) * residual / (den.mean() + cfg.eps)
        return self.orient(d).reshape(self.shape)

    def state(self) -> dict[str, torch.Tensor]:
        out = {"u": self.u, "v": self.v}
        if self.q is not None:
            out["q"] = self.q
        if self.e is not None:
            out["e"] = self.e
        return out


def adam_step(param: torch.Tensor, state: MatrixAdam, grad: torch.Tensor, projected: bool = False) -> None:
    """theta -= lr * direction(grad), in place."""
    param.data.add_(state.direction(grad, projected), alpha=-state.cfg.lr)
