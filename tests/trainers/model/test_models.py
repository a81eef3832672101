"""Model builder: named tiny configs, seeded identical replicas, LoRA-only training."""
from __future__ import annotations

import pytest
import torch

from trainers.model.models import LoraSpec, available_models, build_model, build_tokenizer, lora_parameters


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
    from trainers.model.models import build_base_model

    named = build_base_model("micro", seed=4)
    named.save_pretrained(tmp_path)
    loaded = build_base_model(str(tmp_path))
    assert all(torch.equal(a, b) for a, b in zip(named.state_dict().values(), loaded.state_dict().values()))
    assert not any(p.requires_grad for p in loaded.parameters())


# ---- real models' shapes from their configs (trainers/model/model_configs/), sized on the meta device ----

import json
import warnings

from trainers.model import models

# Published totals, and what they count. `total` counts unique tensors: a tied LM head once.

from trainers import spec
#   Qwen2.5-0.5B: 0.49 B (model card), embedding tied: 494,032,768 = 136.1 M embedding + 357.9 M rest.
#   Qwen2.5-1.5B: 1.54 B (model card), tied: 1,543,714,304; non-embedding 1.31 B (card: 1.31 B).
#   Qwen2.5-7B:   7.61 B (card; 7.62 B on the hub page), untied: 7,615,616,512; non-embedding 6.53 B (card: 6.53 B).
#   Llama-3.2-1B: 1.23 B (card; 1.24 B on the hub page), tied: 1,235,814,400.
#   Qwen3-1.7B:   1.7 B (card), non-embedding 1.4 B (card); tied: 1,720,574,976 unique; 2.03 B only if the
#                 LM head is counted apart from the embedding it shares (`untied_total`).
PUBLISHED = {  # name: (total in B, rounding of the published figure, tied, non-embedding in B or None)
    "qwen2.5-0.5b": (0.494, 0.0005, True, 0.36),
    "qwen2.5-1.5b": (1.54, 0.005, True, 1.31),
    "qwen2.5-7b": (7.62, 0.005, False, 6.53),
    "llama-3.2-1b": (1.24, 0.005, True, None),
    "qwen3-1.7b": (1.72, 0.005, True, 1.41),
}


def test_the_run_spec_lists_every_named_model():
    assert sorted(spec.MODEL_NAMES) == sorted(models.available_models())
    assert set(PUBLISHED) <= set(models.named_configs())


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_match_the_published_totals(name):
    total_b, tol, tied, non_emb = PUBLISHED[name]
    count = models.count_parameters(name)
    assert count.tied is tied
    assert abs(count.total / 1e9 - total_b) <= tol, count
    if non_emb is not None:
        assert abs(count.non_embedding / 1e9 - non_emb) <= 0.005, count
    if name == "qwen3-1.7b":
        assert abs(count.untied_total / 1e9 - 2.03) <= 0.005      # the "2.03 B incl. embeddings" figure


@pytest.mark.parametrize("name,params", [("qwen2.5-0.5b", 35_192_832), ("qwen2.5-1.5b", 73_859_072)])
def test_rank64_all_projection_adapters_have_the_issue_sizes(name, params):
    # 0.5B: 24 layers x 64 x (2*(896+896) + 2*(896+128) + 3*(896+4864)) = 35.2 M (70.4 MB in bf16)
    # 1.5B: 28 layers x 64 x (2*(1536+1536) + 2*(1536+256) + 3*(1536+8960)) = 73.9 M (147.7 MB in bf16)
    shapes = models.lora_shapes(name, 64)
    assert sum(a * b for _, (a, b) in shapes) == params
    assert len(shapes) == 2 * 7 * models.model_config(name).num_hidden_layers


def test_qwen3_query_width_is_heads_times_head_dim_not_the_hidden_size():
    shapes = dict(models.lora_shapes("qwen3-1.7b", 8))
    layer = "base_model.model.model.layers.0.self_attn"
    assert shapes[f"{layer}.q_proj.lora_B.default.weight"] == (16 * 128, 8)     # = 2048 = hidden here
    assert shapes[f"{layer}.k_proj.lora_B.default.weight"] == (8 * 128, 8)      # GQA: 8 kv heads of 128
    assert shapes[f"{layer}.o_proj.lora_A.default.weight"] == (8, 16 * 128)


TINY_QWEN3 = dict(model_type="qwen3", hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=300,
                  tie_word_embeddings=True, max_position_embeddings=256)


def test_a_config_only_folder_builds_with_random_weights_and_a_warning(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY_QWEN3))
    with pytest.warns(models.RandomInitWarning, match="quality numbers mean nothing"):
        a = models.build_base_model(str(tmp_path), seed=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", models.RandomInitWarning)
        b = models.build_base_model(str(tmp_path), seed=5)
        peft = models.build_model(str(tmp_path), LoraSpec(rank=4))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    tok = build_tokenizer(str(tmp_path))
    assert tok.vocab_size <= TINY_QWEN3["vocab_size"]
    ids = torch.tensor([tok.encode("hello", add_bos=True)])
    assert a(input_ids=ids).logits.shape == (1, ids.shape[1], 300)
    # q_proj's width (4 heads x 32 = 128) differs from the hidden size (64): the meta sizing sees it.
    built = [(n, tuple(p.shape)) for n, p in lora_parameters(peft).items()]
    assert built == models.lora_shapes(str(tmp_path), 4)
    assert ("base_model.model.model.layers.0.self_attn.q_proj.lora_B.default.weight", (128, 4)) in built
    assert models.count_parameters(str(tmp_path)).total == sum(p.numel() for p in a.parameters())


def test_a_named_shape_builds_like_a_config_folder_of_the_same_config(tmp_path, monkeypatch):
    (tmp_path / "toy.json").write_text(json.dumps(TINY_QWEN3))
    monkeypatch.setattr(models, "CONFIG_DIR", tmp_path)
    assert "toy" in models.available_models()
    with pytest.warns(models.RandomInitWarning):
        model = models.build_base_model("toy", seed=1)
    assert not any(p.requires_grad for p in model.parameters())
    assert isinstance(build_tokenizer("toy"), type(build_tokenizer("micro")))


def test_meta_sizing_of_tiny_models_matches_the_built_adapter():
    peft = build_model("micro", LoraSpec(rank=3))
    assert [(n, tuple(p.shape)) for n, p in lora_parameters(peft).items()] == models.lora_shapes("micro", 3)
    with pytest.raises(ValueError, match="unknown model"):
        models.lora_shapes("huge", 3)
