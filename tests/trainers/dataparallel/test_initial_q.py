"""LoRDO-global's first Q: from the first averaged pseudo-gradient (the review's choice,
the default), after a first window at Q = I, or a seeded random basis (--lordo-initial-q random).
Real micro-model gradients, the services' step/combine/finish in one process (inprocess.py)."""
import dataclasses

import pytest
import torch

from trainers.dataparallel import get_method
from trainers.dataparallel.base import DPConfig
from trainers.dataparallel.corpus import Corpus
from trainers.dataparallel.inprocess import gradients, replica, simulate
from trainers.optim.lordo import AdamConfig, MatrixAdam, random_projection, top_r

CFG = DPConfig(steps=4, k=2, k_states=2, rank=4, lr=3e-3, seed=1)


def first_sync(cfg: DPConfig, workers: int = 3):
    """Run to the first sync (step k) with `workers` replicas; (methods, uploads, download)."""
    torch.set_num_threads(1)
    reps = [replica("micro", cfg.seed) for _ in range(workers)]
    methods = [get_method("lordo-global", p, cfg, w + 1) for w, (_, p) in enumerate(reps)]
    aggregator = get_method("lordo-global", replica("micro", cfg.seed)[1], cfg).make_aggregator()
    corpus = Corpus(cfg.seed, 16)
    for step in range(1, cfg.k + 1):
        ups = []
        for w, (model, params) in enumerate(reps):
            _, grads = gradients(model, params, corpus.batch(w + 1, step, 2))
            ups.append(methods[w].step(step, grads))
    down = aggregator.combine(cfg.k, [dict(u) for u in ups])
    for m in methods:
        m.finish(cfg.k, down)
    return methods, ups, down


def test_first_q_is_the_top_r_of_the_averaged_first_pseudo_gradient_on_every_worker():
    methods, ups, down = first_sync(CFG)
    lowrank = methods[0].lowrank
    assert lowrank
    for n in lowrank:
        assert all(f"d/{n}" in u and f"x/{n}" not in u for u in ups)         # the first window ships dense
        s, l = methods[0].sl(n)
        assert ups[0][f"d/{n}"].shape == (s, l) and ups[0][f"u/{n}"].shape == (s, l)
        mean = sum(u[f"d/{n}"] for u in ups) / len(ups)
        want = top_r(mean, 4)
        for m in methods:                                                   # same bits on every worker
            st = m.states[n]
            assert torch.equal(st.q, down[f"q/{n}"]) and torch.allclose(st.q, want, atol=1e-5)
            assert st.u.shape == (4, l) and st.e is not None and not st.e.any()   # E starts at 0 there
        assert torch.allclose(want.T @ want, torch.eye(4), atol=1e-5)
        # the moments moved into Q: u <- Q^T mean(u_dense) (the rotation with Q_old = I)
        u_dense = sum(u[f"u/{n}"] for u in ups) / len(ups)
        assert torch.allclose(methods[0].states[n].u, down[f"q/{n}"].T @ u_dense, atol=1e-6)


def test_random_start_keeps_the_seeded_basis_and_ships_projected_from_the_first_sync():
    cfg = dataclasses.replace(CFG, initial_q="random", qhm="none")   # none: factored uploads (X = Q^T Delta)
    methods, ups, down = first_sync(cfg, workers=2)
    n = methods[0].lowrank[0]
    s, _ = methods[0].sl(n)
    assert f"x/{n}" in ups[0] and f"d/{n}" not in ups[0]
    q0 = random_projection(s, 4, cfg.seed * 1_000_003 + 0)
    assert not torch.allclose(down[f"q/{n}"], q0)                           # refreshed from Q0 X at step k


@pytest.mark.parametrize("initial_q", ["pseudo-gradient", "random"])
def test_both_starts_train_and_replicas_end_equal(initial_q):
    t = simulate("lordo-global", dataclasses.replace(CFG, initial_q=initial_q), workers=2, batch=2, seq_len=16)
    assert t.data_bytes == t.claimed
    a, b = ([p.detach() for p in m.parameters()] for m in t.models)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert len(t.overlaps) == (1 if initial_q == "pseudo-gradient" else 2)   # the first Q has no predecessor


def test_bad_initial_q_is_refused():
    with pytest.raises(ValueError, match="initial_q 'svd' is not one of pseudo-gradient, random"):
        DPConfig(initial_q="svd")


def test_dense_first_window_is_full_rank_adam_then_projects_the_moments():
    """MatrixAdam(dense_first): with QHM none its steps before the first Q are the full-rank state's, bit
    for bit; the first Q moves (u, v) with the rotation formula at C = Q^T and leaves E at 0."""
    torch.manual_seed(0)
    cfg = AdamConfig(lr=1e-2, rank=2, qhm="none", error_feedback=True)
    dense, full = MatrixAdam((6, 10), cfg, dense_first=True), MatrixAdam((6, 10), AdamConfig(lr=1e-2))
    assert dense.identity and not dense.needs_projection and dense.e is None and dense.u.shape == (6, 10)
    grads = [torch.randn(6, 10) for _ in range(3)]
    for g in grads:
        assert torch.equal(dense.direction(g), full.direction(g))
    q = top_r(torch.randn(6, 10), 2)
    u_before = dense.u.clone()
    assert dense.set_projection(q) is None
    assert not dense.identity and dense.u.shape == dense.v.shape == (2, 10)
    assert torch.allclose(dense.u, q.T @ u_before, atol=1e-7)
    assert (dense.v >= 0).all() and dense.e is not None and not dense.e.any()
    assert dense.direction(grads[0]).shape == (6, 10)
