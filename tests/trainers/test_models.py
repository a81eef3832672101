"""Model builder: named tiny configs, seeded identical replicas, LoRA-only training."""
from __future__ import annotations

import pytest
import torch

from trainers.models import LoraSpec, available_models, build_model, build_tokenizer, lora_parameters


def test_same_seeds_build_identical_replicas_and_other_seeds_do_not():
    a, b = build_model("micro", LoraSpec(rank=4, seed=7), seed=3), build_model("micro", LoraSpec(rank=4, seed=7), seed=3)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    c = build_model("micro", LoraSpec(rank=4, seed=8), seed=3)
    assert any(not torch.equal(x, y) for x, y in zip(a.state_dict().values(), c.state_dict().values()))


def test_lora_on_all_seven_projections_and_only_lora_trains():
    model = build_model("micro", LoraSpec(rank=4))
    names = list(lora_parameters(model))
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"):
        assert any(f"{proj}.lora_A" in n for n in names) and any(f"{proj}.lora_B" in n for n in names)
    ids = torch.randint(0, 256, (2, 12))
    model(input_ids=ids, labels=ids).loss.backward()
    for n, p in model.named_parameters():
        assert (p.grad is not None) == ("lora_" in n), n


def test_rank_sets_the_factor_shapes():
    model = build_model("micro", LoraSpec(rank=3))
    shapes = {tuple(p.shape) for p in lora_parameters(model).values()}
    assert all(3 in s for s in shapes)


def test_unknown_model_and_bad_spec_are_clear_errors():
    with pytest.raises(ValueError, match=r"unknown model 'huge'.*micro"):
        build_model("huge")
    with pytest.raises(ValueError, match="rank"):
        LoraSpec(rank=0)
    assert "tiny" in available_models()


def test_byte_tokenizer_round_trip():
    tok = build_tokenizer("tiny")
    ids = tok.encode("(1) Ann is a knight", add_bos=True, add_eos=True)
    assert ids[0] == tok.bos_token_id and ids[-1] == tok.eos_token_id
    assert tok.decode(ids[1:]) == "(1) Ann is a knight"


def test_a_local_hugging_face_folder_loads_like_a_named_config(tmp_path):
    from trainers.models import build_base_model

    named = build_base_model("micro", seed=4)
    named.save_pretrained(tmp_path)
    loaded = build_base_model(str(tmp_path))
    assert all(torch.equal(a, b) for a, b in zip(named.state_dict().values(), loaded.state_dict().values()))
    assert not any(p.requires_grad for p in loaded.parameters())
