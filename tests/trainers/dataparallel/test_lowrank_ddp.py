"""Low-rank DDP's two readings (trainers/dataparallel/lowrank_ddp.py): what each puts on the wire
and where the low-rank part lives."""
import torch

from trainers.dataparallel import get_method
from trainers.dataparallel.base import DPConfig
from trainers.dataparallel.inprocess import simulate

CFG = DPConfig(steps=4, k=2, k_states=2, refresh=3, lr=3e-3, rank=4)


def test_dense_reading_ships_every_gradient_whole_and_projected_ships_q_t_g():
    params = {"layers.0.mlp.up_proj.weight": torch.nn.Parameter(torch.zeros(64, 176))}
    s, l, r = 64, 176, 4
    dense, projected = (get_method(n, params, CFG) for n in ("lowrank-ddp-dense", "lowrank-ddp-projected"))
    for step in (1, 2, 3, 4):  # refresh steps 1 and 4 exchange the full gradient in both
        assert dense.claimed_bytes(step) == (4 * s * l, 4 * s * l)
    assert projected.claimed_bytes(2) == (4 * r * l, 4 * r * l) and projected.claimed_bytes(4) == (4 * s * l,) * 2


def test_old_name_is_the_projected_reading():
    a, b = (simulate(n, CFG, workers=2, batch=2, seq_len=16) for n in ("lowrank-ddp", "lowrank-ddp-projected"))
    assert a.losses == b.losses and a.claimed == b.claimed


def test_dense_reading_without_low_rank_matrices_is_ddp():
    """At a rank no matrix is below, the optimizer has no low-rank part: the same bits as ddp."""
    cfg = DPConfig(steps=3, k=1, k_states=1, refresh=2, lr=3e-3, rank=4096)
    a, b = (simulate(n, cfg, workers=2, batch=2, seq_len=16) for n in ("lowrank-ddp-dense", "ddp"))
    assert a.losses == b.losses
    assert all(torch.equal(x, y) for x, y in zip(a.models[0].parameters(), b.models[0].parameters()))


def test_dense_reading_moves_low_rank_matrices_inside_span_q_between_refreshes():
    cfg = DPConfig(steps=3, k=1, k_states=1, refresh=10, lr=3e-3, rank=4)
    t = simulate("lowrank-ddp-dense", cfg, workers=2, batch=2, seq_len=16)
    m = t.methods[0]
    name = m.lowrank[0]
    st = m.states[name]
    start = simulate("lowrank-ddp-dense", DPConfig(steps=1, k=1, k_states=1, refresh=10, lr=3e-3, rank=4),
                     workers=2, batch=2, seq_len=16).methods[0].params[name].detach()
    moved = st.orient(m.params[name].detach() - start)
    outside = moved - st.q @ (st.q.T @ moved)
    assert float(moved.norm()) > 0 and float(outside.norm()) <= 1e-5 * float(moved.norm())


def test_the_two_readings_train_alike_and_differ_in_bytes_only():
    """Averaging commutes with the projection (mean of Q^T G_m = Q^T mean G_m), so both readings take the
    same Adam steps up to float rounding (measured: 2.8e-7 on the parameters after 8 steps); the review's
    low-rank DDP pays dense bytes for what the projected one ships as r x l."""
    cfg = DPConfig(steps=8, k=1, k_states=1, refresh=3, lr=3e-3, rank=4)
    a, b = (simulate(n, cfg, workers=2, batch=2, seq_len=16) for n in ("lowrank-ddp-dense", "lowrank-ddp-projected"))
    assert max(abs(x - y) for x, y in zip(a.losses, b.losses)) < 1e-5
    assert all(torch.allclose(x, y, atol=1e-5) for x, y in zip(a.models[0].parameters(), b.models[0].parameters()))
    assert sum(up for up, _ in a.claimed) > 1.5 * sum(up for up, _ in b.claimed)  # refresh steps are dense in both
