"""Replica state: stepping, hashing, snapshots, and the errors a wrong input gets."""
from __future__ import annotations

import pytest
import torch

from tests.trainers.compress.common import gradient, new_replica, options
from trainers import compress
from trainers.model.replica import OptimConfig, Replica, clip_by_global_norm, global_norm, snapshot_meta


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


def _big_replica(optim: OptimConfig) -> Replica:
    """Three factors of 131,072 elements: above torch's parallel grain, so 2 threads split the work."""
    g = torch.Generator().manual_seed(7)
    return Replica({f"f{i}": torch.nn.Parameter(torch.randn(256, 512, generator=g)) for i in range(3)}, optim)


def _big_grads(step: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    return {f"f{i}": torch.randn(256, 512, generator=g) * (1 + step) for i in range(3)}


def _stepped_hash(optim: OptimConfig, threads: int, steps: int = 3) -> str:
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        r = _big_replica(optim)
        for t in range(steps):
            r.step(_big_grads(t))
        return r.state_hash()
    finally:
        torch.set_num_threads(before)


def test_weight_decay_and_clipping_are_exercised_and_bit_identical_at_1_and_2_threads():
    norm = global_norm(_big_grads(0))  # ~627: clipping to 10 scales every step's gradient
    on = OptimConfig(lr=1e-2, weight_decay=0.1, max_grad_norm=10.0)
    assert norm > on.max_grad_norm
    assert _stepped_hash(on, 1) == _stepped_hash(on, 2)
    plain = _stepped_hash(OptimConfig(lr=1e-2), 1)
    assert _stepped_hash(OptimConfig(lr=1e-2, weight_decay=0.1), 1) != plain        # decay moved the weights
    assert _stepped_hash(OptimConfig(lr=1e-2, max_grad_norm=10.0), 1) != plain      # clipping moved them
    with pytest.raises(ValueError, match="max_grad_norm"):
        OptimConfig(max_grad_norm=-1.0)


def test_global_norm_is_the_same_bits_at_1_and_2_threads():
    grads = _big_grads(1)
    before = torch.get_num_threads()
    try:
        norms = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            norms.append(global_norm(grads))
    finally:
        torch.set_num_threads(before)
    assert norms[0] == norms[1]
    assert norms[0] == pytest.approx(float(torch.sqrt(sum((t.double() ** 2).sum() for t in grads.values()))))


@pytest.mark.parametrize("name", ["spar", "powersgd", "topk"])
def test_a_replica_and_compressor_restored_from_a_snapshot_continue_bit_identically(name):
    """Replica + compressor (error-feedback residual, warm starts, generators) in one snapshot: a
    learner rebuilt from it sends the same payload bytes and reaches the same state as one that ran on."""
    def step(model, replica, codec, t):
        payload = codec.encode(gradient(model, t))
        replica.step(codec.decode(payload))
        return payload

    model, straight = new_replica()
    codec = compress.get_compressor(name, **options(name))
    sent = [step(model, straight, codec, t) for t in range(6)]
    model2, first = new_replica()
    codec2 = compress.get_compressor(name, **options(name))
    for t in range(3):
        step(model2, first, codec2, t)
    snap = first.snapshot(extra=codec2.state_dict(), meta={"run": "r1"})
    assert snapshot_meta(snap)["run"] == "r1" and snapshot_meta(snap)["version"] == "3"
    model3, restarted = new_replica()
    codec3 = compress.get_compressor(name, **options(name))
    codec3.load_state_dict(restarted.restore(snap))
    with torch.no_grad():  # the restarted learner's model holds the restored adapter (it computes the gradients)
        for n, p in restarted.params.items():
            assert torch.equal(p, first.params[n])
    resent = [step(model3, restarted, codec3, t) for t in range(3, 6)]
    assert resent == sent[3:] and restarted.state_hash() == straight.state_hash()
    # the compressor state is what makes it exact: without it the payloads differ
    model4, forgetful = new_replica()
    forgetful.restore(snap)
    codec4 = compress.get_compressor(name, **options(name))
    assert [step(model4, forgetful, codec4, t) for t in range(3, 6)] != sent[3:]
