"""The contract every registered compressor must meet (one suite, parametrized over the registry;
the shared checks live in trainers/compress/contract.py, which `harness check` runs too)."""
from __future__ import annotations

import pytest
import torch

from tests.trainers.compress.common import gradient, new_replica, options, warm_gradients
from trainers import compress, spec
from trainers.compress import OptionError, available, contract, get_compressor
from trainers.compress.base import full_adapter_bytes
from trainers.compress.bench import rel_error

NAMES = available()


@pytest.fixture(scope="module")
def grads():
    return warm_gradients(9)


def test_registry_lists_every_method():
    assert {"identity", "spar", "powersgd", "topk", "int8"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_shapes_and_error(name, grads):
    g = grads[0]
    c = get_compressor(name, **options(name))
    payload = c.encode(g)
    assert isinstance(payload, bytes)
    out = c.decode(payload)
    assert list(out) == list(g)
    for n in g:
        assert out[n].shape == g[n].shape and out[n].dtype == torch.float32
        assert torch.isfinite(out[n]).all()
    err = rel_error(out, g)
    if name == "identity":
        assert err == 0.0
    else:
        assert 0.0 <= err < 1.0, f"{name} reconstructs worse than sending nothing ({err:.3f})"


# The contract's own checks (trainers/compress/contract.py, also run by `harness check`): None = kept.

@pytest.mark.parametrize("check", ["fresh_decode", "deterministic", "bytes", "error_feedback", "state"])
@pytest.mark.parametrize("name", NAMES)
def test_contract_check(name, check, grads):
    assert contract.CHECKS[check](name, options(name), grads) is None


@pytest.mark.parametrize("name, extra, keys", [
    ("spar", {"svd": "sketch", "sketch": 2}, {"residual", "omega", "rng"}),   # warm starts + fresh draws
    ("powersgd", {}, {"residual", "q", "rng"}),
    ("topk", {}, {"residual"}),
    ("identity", {"dtype": "fp32"}, {"residual"}),                               # fp32: zeros, but kept
    ("topk", {"error_feedback": False}, set()),                                  # stateless
])
def test_state_dict_holds_what_the_next_payload_depends_on(name, extra, keys, grads):
    opts = {**options(name), **extra}
    assert contract.state(name, opts, grads) is None
    c = get_compressor(name, **opts)
    for g in grads[:3]:
        c.encode(g)
    assert {k.split("/")[0] for k in c.state_dict()} == keys


def test_a_compressor_that_forgets_its_state_fails_the_state_check(grads):
    """Teeth: PowerSGD whose state_dict holds only the residual (not its warm-start Q and generator)."""
    cls, base = compress.compressor_class("powersgd"), compress.Compressor

    class Forgetful(cls):
        state_dict, load_state_dict = base.state_dict, base.load_state_dict

    compress._REGISTRY._loaded["forgetful-test"] = Forgetful
    try:
        got = contract.run("forgetful-test", options("powersgd"), ("state",), grads)["state"]
    finally:
        del compress._REGISTRY._loaded["forgetful-test"]
    assert got.startswith("update 3: an instance restored from state_dict() encodes other bytes")


def test_load_state_dict_refuses_what_it_does_not_know(grads):
    c = get_compressor("topk", **options("topk"))
    c.encode(grads[0])
    with pytest.raises(ValueError, match="unknown compressor state entries"):
        get_compressor("topk", **options("topk")).load_state_dict({**c.state_dict(), "q/000000/x": torch.zeros(1)})
    with pytest.raises(ValueError, match="no generator state"):
        get_compressor("powersgd", **options("powersgd")).load_state_dict(c.state_dict())


@pytest.mark.parametrize("name", NAMES)
def test_error_feedback_off_keeps_no_residual(name, grads):
    c = get_compressor(name, error_feedback=False, **options(name))
    c.encode(grads[0])
    assert c.residual() == {}


def test_two_replicas_stay_bit_identical_across_processes(tmp_path):
    """Learner steps from decode(encode(g)); a worker in another process replays the payloads
    (contract.replay for every compressor, one peer process for all of them)."""
    expected = {}
    for name in NAMES:
        model, learner = new_replica()
        compressor = get_compressor(name, **options(name))
        payloads = []
        for t in range(contract.REPLAY_STEPS):
            payloads.append(compressor.encode(gradient(model, t)))
            learner.step(compressor.decode(payloads[-1]))
        contract._write(tmp_path, name, options(name), payloads, replay=True)
        expected[name] = learner.state_hash()
        assert learner.version == contract.REPLAY_STEPS
    assert contract.peer_hashes(tmp_path, threads=2) == expected


def test_decode_bits_do_not_depend_on_the_thread_count(tmp_path):
    """Factors of more than 32k elements (where torch splits elementwise kernels across threads)
    decode to the same bits at 1 and at 3 threads, each in a process of its own."""
    g = torch.Generator().manual_seed(7)
    grads = [{n: torch.randn(s, generator=g) for n, s in contract.THREAD_SHAPES.items()} for _ in range(2)]
    expected = {}
    for name in NAMES:
        compressor = get_compressor(name, **options(name))
        payloads = [compressor.encode(grad) for grad in grads]
        contract._write(tmp_path, name, options(name), payloads, replay=False)
        expected[name] = contract.decoded_hash([get_compressor(name, **options(name)).decode(p) for p in payloads])
    assert contract.peer_hashes(tmp_path, threads=1) == expected
    assert contract.peer_hashes(tmp_path, threads=3) == expected


def test_a_broken_compressor_fails_the_checks_that_catch_it(grads):
    """The checks have teeth: a compressor that drops its residual, states wrong bytes and decodes
    with per-instance noise fails error_feedback, bytes and fresh_decode."""
    cls = compress.compressor_class("identity")

    class Broken(cls):
        def stated_bytes(self, tensors):
            return super().stated_bytes(tensors) + 1

        def _reconstruct(self, p):
            out = super()._reconstruct(p)
            return {n: t + 1e-3 * torch.rand(t.shape) for n, t in out.items()}

    compress._REGISTRY._loaded["broken-test"] = Broken
    try:
        got = contract.run("broken-test", {"dtype": "fp32"}, ("fresh_decode", "bytes", "error_feedback"), grads)
    finally:
        del compress._REGISTRY._loaded["broken-test"]
    assert got["bytes"].startswith("update 0: payload of") and "stated (exact)" in got["bytes"]
    assert "fresh instance" in got["fresh_decode"]
    assert "misses the inputs' sum" in got["error_feedback"]


def test_identity_replay_equals_exact_gradient_training():
    """Replaying identity(fp32) payloads gives the adapter of a plain torch training loop, bit for bit."""
    model_ref, _ = new_replica()
    params = [p for p in model_ref.parameters() if p.requires_grad]
    from tests.trainers.compress.common import OPTIM, batch
    opt = torch.optim.AdamW(params, lr=OPTIM.lr, betas=(OPTIM.beta1, OPTIM.beta2), eps=OPTIM.eps,
                            weight_decay=OPTIM.weight_decay, foreach=False)
    model, replica = new_replica()
    compressor = get_compressor("identity")
    for t in range(10):
        opt.zero_grad(set_to_none=True)
        ids = batch(t)
        model_ref(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        replica.step(compressor.decode(compressor.encode(gradient(model, t))))
    ref = {n: p for n, p in model_ref.named_parameters() if p.requires_grad}
    assert all(torch.equal(ref[n], p) for n, p in replica.params.items())


def test_value_dtypes_are_floating_names_of_the_one_table():
    from trainers.spec import FLOAT_DTYPES
    from trainers.protocol.dtypes import DTYPES

    assert all(DTYPES[name].is_floating_point for name in FLOAT_DTYPES)
    for name in FLOAT_DTYPES:
        assert get_compressor("identity", dtype=name).config["dtype"] == name


def test_unknown_compressor_lists_valid_names():
    with pytest.raises(OptionError, match=r"unknown compressor 'nope'.*spar"):
        get_compressor("nope")
    with pytest.raises(OptionError, match=r"unknown compressor 'sapr'; valid compressors: .* \(did you mean spar\?\)"):
        get_compressor("sapr")


@pytest.mark.parametrize("name", NAMES)
def test_unknown_option_lists_valid_options(name):
    with pytest.raises(OptionError, match=r"unknown option 'bogus'; valid options: \["):
        get_compressor(name, bogus=1)


@pytest.mark.parametrize("bad", ["0%", "150%", "-1%", "abc", 0, 1.5, "nan%", "0.016", 0.016])
@pytest.mark.parametrize("name", sorted(spec.BUDGETED))
def test_bad_budget_is_rejected(name, bad):
    with pytest.raises(OptionError, match="budget"):
        get_compressor(name, budget=bad)


@pytest.mark.parametrize("name,opts", [("identity", {"dtype": "int7"}), ("spar", {"dtype": "fp64"}),
                                       ("powersgd", {"rank": 0}), ("int8", {"block_size": 0}),
                                       ("spar", {"select": "random"}), ("topk", {"budget_bytes": -5})])
def test_bad_option_values_are_rejected(name, opts):
    with pytest.raises(OptionError, match=f"^{name}: "):
        get_compressor(name, **opts)


@pytest.mark.parametrize("name", NAMES)
def test_non_finite_gradients_are_refused(name, grads):
    g = {n: t.clone() for n, t in grads[0].items()}
    next(iter(g.values()))[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN or inf"):
        get_compressor(name, **options(name)).encode(g)


# ---- equal bytes: every budgeted compressor fills its budget (trainers/spec.py BUDGETED) ------------

def _shapes(model: str, rank: int) -> dict:
    from trainers.compress.bench import model_shapes

    return model_shapes(model, rank)


@pytest.mark.parametrize("shape", [("tiny", 8), ("tiny", 64)], ids=["tiny-r8", "tiny-r64"])
@pytest.mark.parametrize("budget", ["0.78%", "1.6%", "6.25%"])
@pytest.mark.parametrize("name", sorted(spec.BUDGETED))
def test_budgeted_payload_is_within_10_percent_of_the_budget_never_over(name, budget, shape):
    """The tiny run's adapter (rank 8) and the paper's rank 64, over 3 updates (error feedback moves
    the selection): every payload in [0.9, 1] x the budget's bytes, the container header included."""
    from trainers.compress.bench import synthetic_gradients

    shapes = _shapes(*shape)
    cap = int(spec.parse_budget(budget) * full_adapter_bytes(list(shapes.values()), "bf16"))
    c = get_compressor(name, budget=budget)
    for seed in range(3):
        size = len(c.encode(synthetic_gradients(shapes, seed=seed)))
        assert 0.9 * cap <= size <= cap, f"{name}@{budget}: {size} B for a {cap}-B budget"


@pytest.mark.parametrize("cap", [900, 3000, 12000])
@pytest.mark.parametrize("name", sorted(spec.BUDGETED))
def test_budget_bytes_is_met_within_10_percent(name, cap, grads):
    c = get_compressor(name, budget_bytes=cap)
    for g in grads[:3]:
        assert 0.9 * cap <= len(c.encode(g)) <= cap


@pytest.mark.parametrize("name,needle", [
    ("int8", r"^int8: budget of 300 bytes cannot hold one block \(9 bytes\) after the \d+-byte header$"),
    ("powersgd", r"^powersgd: budget of 300 bytes cannot hold one direction \(\d+ bytes\) after the \d+-byte header$")])
def test_a_budget_that_cannot_be_met_is_refused_in_one_line(name, needle, grads):
    with pytest.raises(ValueError, match=needle):
        get_compressor(name, budget_bytes=300).encode(grads[0])


def test_powersgd_rank_wins_over_the_budget_and_keeps_its_bytes(grads):
    """A set rank is PyTorch's hook at equal rank: every factor at that rank, whatever the budget."""
    from trainers.compress.container import unpack

    a, b = get_compressor("powersgd", rank=2, budget="1.6%"), get_compressor("powersgd", rank=2, budget="50%")
    for g in grads[:3]:
        pa, pb = a.encode(g), b.encode(g)
        assert pa == pb
        assert unpack("powersgd", pa, 1 << 28).meta["ranks"] == [min(2, *t.shape) for t in g.values()]


def test_powersgd_budget_spends_directions_where_the_energy_is(grads):
    """A factor scaled up 100x gets at least as many directions as any other."""
    from trainers.compress.container import unpack

    g = {n: t.clone() for n, t in grads[0].items()}
    loud = list(g)[3]
    g[loud] *= 100
    ranks = unpack("powersgd", get_compressor("powersgd", budget="10%").encode(g), 1 << 28).meta["ranks"]
    assert ranks[3] == max(ranks) > 0 and 0 in ranks


def test_int8_dense_layout_when_the_budget_holds_every_block(grads):
    from trainers.compress.container import unpack

    dense = unpack("int8", get_compressor("int8", budget="100%").encode(grads[0]), 1 << 28)
    sparse = unpack("int8", get_compressor("int8", budget="10%").encode(grads[0]), 1 << 28)
    assert "blocks" not in dense.segments and dense.segments["q"].numel() == sum(t.numel() for t in grads[0].values())
    assert "blocks" in sparse.segments and sparse.meta["block_size"] <= 256


@pytest.mark.parametrize("name,opts", [("powersgd", {"rank": 2}), ("int8", {"budget": "100%"}),
                                       ("powersgd", {"budget": "3%", "warm_start": False})])
def test_unbudgeted_layouts_keep_the_contract(name, opts, grads):
    """Fixed-rank powersgd and dense int8: exact error feedback, fresh-instance decode, determinism."""
    c, twin = get_compressor(name, **opts), get_compressor(name, **opts)
    sent = {n: torch.zeros_like(t, dtype=torch.float64) for n, t in grads[0].items()}
    given = {n: torch.zeros_like(t, dtype=torch.float64) for n, t in grads[0].items()}
    for g in grads:
        payload = c.encode(g)
        assert payload == twin.encode(g)
        out = get_compressor(name, **opts).decode(payload)
        for n in g:
            sent[n] += out[n].double()
            given[n] += g[n].double()
    scale = max(float(t.abs().max()) for t in given.values())
    for n, r in c.residual().items():
        assert float((sent[n] + r.double() - given[n]).abs().max()) <= 1e-5 * scale
