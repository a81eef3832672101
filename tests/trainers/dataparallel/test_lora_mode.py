"""--dp-train lora: each replica trains a PEFT LoRA adapter on a frozen base; only the adapter's
factors are stepped, synchronised and counted, and every method still trains and agrees."""
import pytest
import torch

from trainers.dataparallel.base import DPConfig
from trainers.dataparallel.inprocess import replica, simulate
from trainers.model.models import build_base_model

CFG = DPConfig(steps=6, k=2, k_states=2, refresh=3, lr=1e-2, rank=4)


def test_replica_trains_only_the_adapter():
    _, full = replica("micro", seed=1, train="full")
    model, adapter = replica("micro", seed=1, train="lora", lora_rank=8)
    assert adapter and all(".lora_A." in n or ".lora_B." in n for n in adapter)
    assert sum(p.numel() for p in adapter.values()) < sum(p.numel() for p in full.values()) / 4
    # every attention + MLP projection carries an adapter (7 per layer, A and B)
    layers = build_base_model("micro").config.num_hidden_layers
    assert len(adapter) == 2 * 7 * layers
    frozen = [p for n, p in model.named_parameters() if n not in adapter]
    assert frozen and not any(p.requires_grad for p in frozen)


def test_unknown_mode_is_one_clear_error():
    with pytest.raises(ValueError, match="'full' or 'lora'"):
        replica("micro", train="qlora")


@pytest.mark.parametrize("method", ["ddp", "diloco", "lordo-global"])
def test_lora_mode_trains_syncs_the_adapter_and_keeps_the_base(method):
    t = simulate(method, CFG, workers=2, batch=2, seq_len=16, train="lora", lora_rank=8)
    assert t.losses[-1] < t.losses[0], (method, t.losses)
    base = dict(build_base_model("micro", seed=CFG.seed).named_parameters())
    for m in t.models:   # the frozen base is bit-identical to the seeded one on every replica
        for n, p in m.named_parameters():
            if not p.requires_grad:
                short = n.replace("base_model.model.", "").replace(".base_layer", "")
                assert torch.equal(p, base[short]), n
    names = list(t.methods[0].params)
    assert all(".lora_" in n for n in names)
    x, y = ([p.detach() for p in m.parameters() if p.requires_grad] for m in t.models)
    assert all(torch.equal(u, v) for u, v in zip(x, y)), method   # replicas agree after the last sync
    assert t.data_bytes == t.claimed
    # what is exchanged is the adapter, never the 4x larger full model
    n_adapter = sum(p.numel() for p in t.methods[0].params.values())
    assert max(up for up, _ in t.data_bytes) <= 4 * n_adapter * 4


def test_lordo_projects_adapter_factors_only_below_their_short_side():
    _, adapter = replica("micro", seed=0, train="lora", lora_rank=16)
    from trainers.dataparallel import get_method
    projected = get_method("lordo-global", adapter, DPConfig(rank=4)).lowrank
    assert projected and all(".lora_" in n for n in projected)
    assert not get_method("lordo-global", adapter, DPConfig(rank=16)).lowrank   # rank >= 16: nothing to project
