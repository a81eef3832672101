"""The equivalences of the data-parallel family, each against an independent oracle:
torch's own Adam, plain parameter averaging, the identity."""
import subprocess
import sys

import pytest
import torch

from trainers.dataparallel.base import DPConfig
from trainers.dataparallel.inprocess import simulate
from trainers.optim.lordo import AdamConfig, MatrixAdam, adam_step, overlap, random_projection, top_r

STEPS = 6


def test_full_rank_lordo_adam_is_torch_adam():
    """K = 1 local step, omega = 1, full rank (Q = I), error feedback off: the step is Adam's."""
    torch.manual_seed(0)
    w = torch.randn(12, 20)
    ours, ref = w.clone(), torch.nn.Parameter(w.clone())
    opt = torch.optim.Adam([ref], lr=1e-2, betas=(0.9, 0.95), eps=1e-8, foreach=False)
    state = MatrixAdam(w.shape, AdamConfig(lr=1e-2, rank=12, qhm="full-rank", omega=1.0, error_feedback=False))
    assert state.full
    for _ in range(20):
        g = torch.randn(12, 20)
        adam_step(ours, state, g)
        ref.grad = g.clone()
        opt.step()
    torch.testing.assert_close(ours, ref.detach(), rtol=0, atol=1e-6)


def _params(trace):
    return [torch.cat([p.detach().flatten() for p in m.parameters()]) for m in trace.models]


def test_lordo_k1_full_rank_equals_ddp():
    """The whole protocol (local step, sync, state averaging, refresh) at K = 1, omega = 1, r >= min(p, q),
    EF off gives DDP Adam's parameters. Every worker sees the same batch: with different batches
    K = 1 LoRDO averages Adam *updates*, DDP averages gradients, and Adam is not linear in them."""
    base = dict(steps=STEPS, k=1, k_states=1, lr=3e-3, rank=4096, omega=1.0, error_feedback=False)
    lordo = simulate("lordo-global", DPConfig(**base, qhm="full-rank"), same_data=True)
    ddp = simulate("ddp", DPConfig(**base), same_data=True)
    assert lordo.methods[0].lowrank == []  # rank 4096: every matrix full rank, Q = I
    for a, b in zip(_params(lordo), _params(ddp)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_diloco_k1_outer_lr1_momentum0_is_averaging():
    """diloco, K = 1, outer lr 1, momentum 0: after each sync every replica holds the mean of the
    workers' locally stepped parameters (checked step by step against an explicit average)."""
    cfg = DPConfig(steps=1, k=1, lr=3e-3, outer_lr=1.0, outer_momentum=0.0)
    from trainers.dataparallel.corpus import Corpus
    from trainers.dataparallel import get_method
    from trainers.dataparallel.inprocess import gradients, trainable
    from trainers.model.models import build_base_model

    models = [build_base_model("micro", seed=0) for _ in range(2)]
    params = [trainable(m) for m in models]
    methods = [get_method("diloco", p, cfg, w + 1) for w, p in enumerate(params)]
    corpus = Corpus(0, 32)
    ups = [m.step(1, gradients(models[w], params[w], corpus.batch(w + 1, 1, 4))[1]) for w, m in enumerate(methods)]
    stepped = [{n: p.detach().clone() for n, p in ps.items()} for ps in params]
    down = methods[0].make_aggregator().combine(1, ups)
    for m in methods:
        m.finish(1, down)
    for n in params[0]:
        mean = (stepped[0][n] + stepped[1][n]) / 2
        for ps in params:
            torch.testing.assert_close(ps[n].detach(), mean, rtol=0, atol=1e-6)


def test_rotation_with_identity_is_identity():
    st = MatrixAdam((8, 16), AdamConfig(rank=3, rotation=True))
    st.set_projection(random_projection(8, 3, seed=1))
    for _ in range(3):
        st.direction(torch.randn(8, 16))
    u, v = st.u.clone(), st.v.clone()
    st.rotate(torch.eye(3))
    torch.testing.assert_close(st.u, u, rtol=0, atol=0)
    torch.testing.assert_close(st.v, v, rtol=1e-6, atol=1e-12)  # |var + m^2| = v up to rounding
    ov = st.set_projection(st.q.clone())
    assert ov == pytest.approx(1.0, abs=1e-6)


def test_overlap_counts_new_directions():
    q = random_projection(10, 4, seed=2)
    assert overlap(q, q) == pytest.approx(1.0, abs=1e-6)
    other = top_r(torch.cat([q[:, :2], random_projection(10, 6, seed=3)], dim=1) @ torch.eye(8)[:, :4], 4)
    assert overlap(other, q) < 1.0


def test_global_q_bit_equal_on_all_workers():
    trace = simulate("lordo-global", DPConfig(steps=4, k=2, k_states=2, lr=3e-3, rank=4), workers=3)
    for n in trace.methods[0].lowrank:
        qs = [m.states[n].q for m in trace.methods]
        assert all(torch.equal(qs[0], q) for q in qs[1:]), n
    first = _params(trace)
    assert all(torch.equal(first[0], p) for p in first[1:])  # replicas identical after the last sync


TOP_R = ("import sys, torch; torch.set_num_threads(int(sys.argv[1])); from trainers.optim.lordo import top_r; "
         "g = torch.Generator().manual_seed(5); m = torch.randn(64, 176, generator=g); "
         "sys.stdout.write(top_r(m, 8).numpy().tobytes().hex())")


def test_top_r_same_bits_in_other_processes_and_thread_counts():
    """lowrank-ddp computes Q on every worker from the same averaged gradient: the bits must not depend
    on the process or its thread count (top_r works in float64 and canonicalises signs)."""
    outs = {subprocess.run([sys.executable, "-c", TOP_R, str(t)], capture_output=True, text=True,
                           check=True).stdout for t in (1, 2)}
    assert len(outs) == 1
