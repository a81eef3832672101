"""Replica state: stepping, hashing, snapshots, and the errors a wrong input gets."""
from __future__ import annotations

import pytest
import torch

from tests.trainers.compress.common import gradient, new_replica
from trainers.model.replica import OptimConfig, Replica, clip_by_global_norm


def test_equal_builds_hash_equal_and_steps_change_the_hash():
    (_, a), (_, b) = new_replica(), new_replica()
    assert a.state_hash() == b.state_hash() and a.policy_hash() == b.policy_hash()
    model, c = new_replica()
    before = (c.policy_hash(), c.optimizer_hash(), c.state_hash())
    c.step(gradient(model, 0))
    after = (c.policy_hash(), c.optimizer_hash(), c.state_hash())
    assert c.version == 1 and all(x != y for x, y in zip(before, after))


def test_snapshot_restore_round_trip_then_replay_stays_equal():
    model, learner = new_replica()
    for t in range(3):
        learner.step(gradient(model, t))
    snap = learner.snapshot()
    _, late = new_replica()
    late.restore(snap)
    assert late.version == 3 and late.state_hash() == learner.state_hash()
    g = gradient(model, 3)
    learner.step(g)
    late.step(g)
    assert late.state_hash() == learner.state_hash()


def test_restore_refuses_garbage_and_foreign_snapshots():
    _, r = new_replica()
    for blob in (b"", b"\x00" * 64, b"\xff" * 8 + b"{}"):
        with pytest.raises(ValueError, match="snapshot"):
            r.restore(blob)
    other = Replica({"x": torch.nn.Parameter(torch.zeros(3))}, r.optim_config)
    with pytest.raises(ValueError, match="does not match the adapter"):
        r.restore(other.snapshot())
    different_lr = Replica(r.params, OptimConfig(lr=0.5))
    with pytest.raises(ValueError, match="optimizer config"):
        r.restore(different_lr.snapshot())


def test_step_refuses_a_gradient_of_another_layout():
    model, r = new_replica()
    g = gradient(model, 0)
    name = next(iter(g))
    with pytest.raises(ValueError, match="missing"):
        r.step({n: t for n, t in g.items() if n != name})
    with pytest.raises(ValueError, match="wrong shape"):
        r.step({**g, name: torch.zeros(1)})
    assert r.version == 0


def test_load_adapter_sets_policy_and_version():
    model, learner = new_replica()
    learner.step(gradient(model, 0))
    _, worker = new_replica()
    worker.load_adapter(learner.adapter(), learner.version)
    assert worker.policy_hash() == learner.policy_hash() and worker.version == 1


def test_lr_schedule():
    c = OptimConfig(lr=1.0, warmup_steps=4, schedule="cosine", total_steps=10)
    assert [round(c.lr_at(s), 4) for s in (0, 3)] == [0.25, round(0.5 * (1 + __import__("math").cos(0.3 * __import__("math").pi)), 4)]
    assert c.lr_at(10) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="lr"):
        OptimConfig(lr=0)
    with pytest.raises(ValueError, match="schedule"):
        OptimConfig(schedule="linear")


def test_clip_by_global_norm():
    g = {"a": torch.tensor([3.0, 0.0]), "b": torch.tensor([0.0, 4.0])}
    clipped, norm = clip_by_global_norm(g, 1.0)
    assert norm == pytest.approx(5.0)
    total = torch.sqrt(sum((t ** 2).sum() for t in clipped.values()))
    assert float(total) == pytest.approx(1.0, rel=1e-4)
    same, _ = clip_by_global_norm(g, 10.0)
    assert same is g
