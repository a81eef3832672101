"""LoRDO's full-rank QHM term (trainers/optim/lordo.py): how much of one projection residual
it applies over many steps, in each reading. The default must never apply the same residual twice."""
import math

import pytest
import torch

from trainers.optim.lordo import AdamConfig, MatrixAdam, random_projection

OMEGA = 0.97


def applied_out_of_span(reading: str, steps: int = 200) -> tuple[float, float]:
    """One gradient, then zero gradients: (total the full-rank term applied outside span(Q), in
    gradient units, as a multiple of the first step's residual ||(I - QQ^T) G||; the residual's norm)."""
    cfg = AdamConfig(rank=2, qhm="full-rank", omega=OMEGA, error_feedback=True, qhm_residual=reading)
    st = MatrixAdam((8, 16), cfg)
    st.set_projection(random_projection(8, 2, seed=3))
    g = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
    out = torch.eye(8) - st.q @ st.q.T                      # the projector onto what Q cannot hold
    residual = out @ g
    total = torch.zeros(8, 16)
    for t in range(steps):
        d = st.direction(g if t == 0 else torch.zeros(8, 16))
        b2 = cfg.betas[1]
        mu = float((st.v.sqrt() / math.sqrt(1 - b2 ** st.t) + cfg.eps).mean())
        total += out @ d * (mu + cfg.eps)                   # back to gradient units: (1 - omega) R_out
    return float((total * residual).sum() / (residual * residual).sum()), float(residual.norm())


def test_gradient_reading_applies_the_residual_only_with_its_own_step():
    share, norm = applied_out_of_span("gradient")
    assert norm > 0.1 and share == pytest.approx(1 - OMEGA, rel=1e-4)


def test_reduced_reading_applies_each_residual_at_most_once_in_total():
    share, _ = applied_out_of_span("reduced")
    assert share == pytest.approx(1 - OMEGA ** 200, rel=1e-3) and share <= 1.0


def test_reapplied_reading_applies_the_same_residual_at_every_step():
    """The double-counting reading: E is applied by the term while it is also carried, every step."""
    share, _ = applied_out_of_span("reapplied")
    assert share == pytest.approx(200 * (1 - OMEGA), rel=1e-3)


def test_an_unknown_reading_fails_with_the_valid_ones():
    with pytest.raises(ValueError, match="reduced, gradient, reapplied"):
        AdamConfig(qhm_residual="twice")
