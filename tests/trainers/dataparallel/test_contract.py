"""One contract suite over every data-parallel method (peft's pattern): it trains, replicas agree
after every sync, and the tensors exchanged are exactly the analytic formula's bytes."""
import dataclasses

import pytest

from trainers import cards, spec
from trainers.dataparallel import available, get_method, resolve
from trainers.dataparallel.base import DPConfig
from trainers.dataparallel.inprocess import simulate
import torch

NAMES = available() + ["lordo-global-none", "lordo-local-none", "lordo-global-lowrank"]
CFG = DPConfig(steps=6, k=2, k_states=4, refresh=3, lr=3e-3, rank=4)


@pytest.fixture(scope="module", params=NAMES)
def trace(request):
    return request.param, simulate(request.param, CFG, workers=2, batch=2, seq_len=16)


def test_registry_matches_spec():
    assert available() == [c.name for c in cards.in_tree("dataparallel")]
    assert all(spec.is_data_parallel(n) for n in NAMES)
    assert not any(spec.is_data_parallel(n) for n in ("ddp-none", "lordo-global-none-reapplied", "lordo-global-x"))


def test_a_lordo_name_sets_its_qhm_reading():
    cls, cfg = resolve("lordo-local-fullrank-gradient", CFG)
    assert cls.__name__ == "LordoLocal" and (cfg.qhm, cfg.qhm_residual) == ("full-rank", "gradient")
    assert resolve("lordo-global", CFG)[1] == CFG


def test_unknown_name_lists_valid_ones():
    with pytest.raises(ValueError, match=r"valid data-parallel methods: ddp, .*\(did you mean lordo-global or lordo-local\?\)"):
        resolve("lordo-globl", CFG)


def test_trains(trace):
    name, t = trace
    assert t.losses[-1] < t.losses[0] - 0.5, (name, t.losses)


def test_replicas_agree_after_last_sync(trace):
    name, t = trace
    a, b = ([p.detach() for p in m.parameters()] for m in t.models)
    assert all(torch.equal(x, y) for x, y in zip(a, b)), name


def test_exchanged_bytes_are_the_formula(trace):
    name, t = trace
    assert t.data_bytes == t.claimed, name
    syncs = [s for s, (up, _) in enumerate(t.claimed, 1) if up]
    every = name in ("ddp", "lowrank-ddp", "lowrank-ddp-dense", "lowrank-ddp-projected")
    assert syncs == (list(range(1, 7)) if every else [2, 4, 6]), name


def test_fullrank_qhm_ships_dense_pseudo_gradients():
    """The review's point, in bytes: per sync the full-rank QHM variant ships s*l per matrix, the
    variant without it r*l (global) -- the formula and the exchanged tensors agree on both. The first
    sync (step 8) ends the dense first window (Q = I): both ship s*l and dense moments 2*s*l, and get
    the first Q (s*r); with --lordo-initial-q random it is a sync like the others."""
    params = dict(torch.nn.Linear(64, 176).named_parameters())
    params = {"layers.0.mlp.up_proj.weight": params["weight"]}
    cfg = DPConfig(steps=16, k=8, k_states=8, rank=4)
    full, none = (get_method(f"lordo-global-{q}", params, cfg) for q in ("fullrank", "none"))
    s, l, r = 64, 176, 4
    assert full.claimed_bytes(16) == (4 * (s * l + 2 * r * l), 4 * (s * l + s * r + 2 * r * l))
    assert none.claimed_bytes(16) == (4 * (r * l + 2 * r * l), 4 * (r * l + s * r + 2 * r * l))
    first = (4 * (s * l + 2 * s * l), 4 * (s * l + s * r + 2 * s * l))
    assert full.claimed_bytes(8) == none.claimed_bytes(8) == first
    random = get_method("lordo-global-none", params, dataclasses.replace(cfg, initial_q="random"))
    assert random.claimed_bytes(8) == random.claimed_bytes(16) == none.claimed_bytes(16)
