"""Build a causal LM and attach LoRA with PEFT.

`--model` names one of three things:

- a named config: a tiny Llama-style model (`micro`, `tiny`, `small`, built here) or a real
  model's shape (`qwen2.5-1.5b`, ...: a Hugging Face config.json in `trainers/model/model_configs/`,
  taken from the public model card), randomly initialised;
- a local folder holding only `config.json`: the same, random init;
- a local folder with weights (`model.safetensors`, shards, ...): loaded.

A randomly initialised real-shape model has the right sizes, shapes and compute, not the
right outputs: quality numbers from it mean nothing (a warning says so). Without tokenizer
files the byte-level tokenizer is used (its 259 ids fit every vocabulary).

Every replica (learner, workers) must build the *same* base model and the *same* adapter, so
both are initialised from explicit seeds, never from ambient RNG state.

Sizing (`model_config`, `count_parameters`, `lora_shapes`) instantiates the model on the meta
device: shapes without memory for weights, so a 7B model sizes in about a second.
"""
from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

from trainers.model.tokenizer import ByteTokenizer

# The seven projections of a Llama/Qwen block: LoRA on all of them, as in the HiLo paper.
ALL_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

# Named tiny configs: Llama-style, built from scratch on the CPU. Sizes in parameters are
# approximate and include the (untied) embedding and LM head over the 259 byte tokens.
TINY_CONFIGS: dict[str, dict] = {
    # ~0.14 M parameters: unit tests, CI end-to-end runs.
    "micro": dict(hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2),
    # ~3.0 M parameters: the default CPU model; learns the synthetic tasks in minutes.
    "tiny": dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                 num_attention_heads=8, num_key_value_heads=2),
    # ~13 M parameters: CPU benchmarks that want more compute per update.
    "small": dict(hidden_size=384, intermediate_size=1024, num_hidden_layers=8,
                  num_attention_heads=6, num_key_value_heads=2),
}


@dataclass(frozen=True)
class LoraSpec:
    """What adapter every replica attaches; `seed` makes the initialisation identical everywhere."""

    rank: int = 8
    alpha: float = 16.0
    target_modules: tuple[str, ...] = ALL_PROJECTIONS
    dropout: float = 0.0
    seed: int = 0
    # "default": PEFT's init (A Kaiming-uniform, B zero: the adapter starts as a no-op).
    # "random": both factors random (tests that need non-zero gradients for A at step 0).
    init: str = "default"

    def __post_init__(self):
        if self.rank < 1:
            raise ValueError(f"LoRA rank must be >= 1, got {self.rank}")
        if self.init not in ("default", "random"):
            raise ValueError(f"LoRA init must be 'default' or 'random', got {self.init!r}")
        if not self.target_modules:
            raise ValueError("LoRA target_modules is empty")


# Real models' shapes: one Hugging Face config.json per name (the file name is the name).
CONFIG_DIR = Path(__file__).resolve().parent / "model_configs"
# Files that mean "this folder holds weights" (anything else with a config.json is config-only).
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


def named_configs() -> list[str]:
    """Names of the real-model shapes in trainers/model/model_configs/ (trainers.spec lists the same, torch-free)."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.json"))


def available_models() -> list[str]:
    return sorted(TINY_CONFIGS) + named_configs()


def _unknown(name: str) -> ValueError:
    return ValueError(f"unknown model {name!r}: not a directory and not one of {available_models()}")


def has_weights(folder: str | os.PathLike) -> bool:
    return any((Path(folder) / f).is_file() for f in WEIGHT_FILES)


def _config_from_dict(doc: dict):
    from transformers import AutoConfig

    doc = {k: v for k, v in doc.items() if not k.startswith("_")}   # "_source": provenance, not config
    model_type = doc.pop("model_type", None)
    if not model_type:
        raise ValueError("model config has no model_type")
    doc.pop("torch_dtype", None)  # the harness chooses the dtype
    return AutoConfig.for_model(model_type, **doc)


def model_config(name_or_path: str):
    """The transformers config of a named model (tiny or real shape) or of a local folder."""
    if name_or_path in TINY_CONFIGS:
        return tiny_config(name_or_path)
    if name_or_path in named_configs():
        return _config_from_dict(json.loads((CONFIG_DIR / f"{name_or_path}.json").read_text()))
    if os.path.isdir(name_or_path):
        if not (Path(name_or_path) / "config.json").is_file():
            raise ValueError(f"model folder {name_or_path!r} holds no config.json")
        return _config_from_dict(json.loads((Path(name_or_path) / "config.json").read_text()))
    raise _unknown(name_or_path)


def tiny_config(name: str, vocab_size: int = ByteTokenizer.vocab_size, max_positions: int = 1024) -> LlamaConfig:
    if name not in TINY_CONFIGS:
        raise _unknown(name)
    tok = ByteTokenizer()
    return LlamaConfig(vocab_size=vocab_size, max_position_embeddings=max_positions,
                       pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                       eos_token_id=tok.eos_token_id, tie_word_embeddings=False,
                       attn_implementation="eager", **TINY_CONFIGS[name])


class RandomInitWarning(UserWarning):
    """A real model's shape built without its weights: sizes and times hold, quality does not."""


def build_base_model(name_or_path: str, seed: int = 0, dtype: torch.dtype = torch.float32):
    """A causal LM: a local folder with weights (loaded), or a named config / config-only folder
    (initialised from `seed`, identically on every replica)."""
    if os.path.isdir(name_or_path) and has_weights(name_or_path):
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=dtype, local_files_only=True)
    elif name_or_path in TINY_CONFIGS:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = LlamaForCausalLM(tiny_config(name_or_path)).to(dtype)
    elif name_or_path in named_configs() or os.path.isdir(name_or_path):
        from transformers import AutoModelForCausalLM

        config = model_config(name_or_path)
        config._attn_implementation = "eager"   # as the tiny configs: one attention path on every replica
        warnings.warn(f"model {name_or_path!r}: built from its config with random weights; times and bytes are "
                      "real, quality numbers mean nothing", RandomInitWarning, stacklevel=2)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    else:
        raise _unknown(name_or_path)
    model.requires_grad_(False)
    return model


def build_tokenizer(name_or_path: str):
    """The folder's own tokenizer where it has one; otherwise the byte-level tokenizer (named
    configs, config-only folders: no vocabulary download)."""
    if os.path.isdir(name_or_path) and any((Path(name_or_path) / f).is_file() for f in TOKENIZER_FILES):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(name_or_path, local_files_only=True)
    if name_or_path in TINY_CONFIGS or name_or_path in named_configs() or os.path.isdir(name_or_path):
        return ByteTokenizer()
    raise _unknown(name_or_path)


# ---- sizing on the meta device (no memory for weights) --------------------------------------

def meta_model(name_or_path: str):
    """The model's module tree on the meta device: every shape, no weight memory."""
    from transformers import AutoModelForCausalLM

    config = model_config(name_or_path)
    # torch's meta device rather than accelerate's init_empty_weights: under the latter,
    # transformers 5 leaves a tied LM head untied (and the count would double it).
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    model.tie_weights()
    return model


@dataclass(frozen=True)
class ParameterCount:
    """Parameters of a model, counted on its instantiated module tree."""
    total: int                 # unique tensors: a tied LM head counts once
    embedding: int             # the input embedding
    lm_head: int               # the output projection (0 extra when tied: see `tied`)
    tied: bool

    @property
    def non_embedding(self) -> int:
        return self.total - self.embedding - (0 if self.tied else self.lm_head)

    @property
    def untied_total(self) -> int:
        """Total with the LM head counted separately even when tied (how some model cards count)."""
        return self.total + (self.lm_head if self.tied else 0)


def count_parameters(name_or_path: str) -> ParameterCount:
    model = meta_model(name_or_path)
    emb, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    return ParameterCount(total=sum(p.numel() for p in model.parameters()), embedding=emb.numel(),
                          lm_head=head.numel(), tied=emb is head)


def parameter_shapes(name_or_path: str) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every parameter of the model (a tied head once), read from the meta device: what a
    data-parallel replica synchronises under --dp-train full."""
    return [(n, tuple(p.shape)) for n, p in meta_model(name_or_path).named_parameters()]


def lora_shapes(name_or_path: str, rank: int, target_modules: tuple[str, ...] = ALL_PROJECTIONS
                ) -> list[tuple[str, tuple[int, int]]]:
    """(parameter name, shape) of every LoRA factor, in registration order, as PEFT names them:
    A is (rank, in_features), B is (out_features, rank), read from each targeted Linear of the
    instantiated (meta) module, never from a formula (GQA, Qwen3's head_dim, ...)."""
    if rank < 1:
        raise ValueError(f"LoRA rank must be >= 1, got {rank}")
    out = []
    for name, module in meta_model(name_or_path).named_modules():
        if name.rsplit(".", 1)[-1] in target_modules and isinstance(module, torch.nn.Linear):
            out.append((f"base_model.model.{name}.lora_A.default.weight", (rank, module.in_features)))
            out.append((f"base_model.model.{name}.lora_B.default.weight", (module.out_features, rank)))
    if not out:
        raise ValueError(f"model {name_or_path!r} has no Linear module named {list(target_modules)}")
    return out


def attach_lora(model, spec: LoraSpec):
    """Wrap `model` with a PEFT LoRA adapter; only the adapter is trainable."""
    config = LoraConfig(r=spec.rank, lora_alpha=spec.alpha, lora_dropout=spec.dropout,
                        target_modules=list(spec.target_modules), bias="none",
                        init_lora_weights=spec.init == "default", task_type="CAUSAL_LM")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        peft_model = get_peft_model(model, config)
    return peft_model


def build_model(name_or_path: str = "tiny", lora: LoraSpec | None = None, seed: int = 0,
                dtype: torch.dtype = torch.float32):
    """Base model + LoRA adapter, identical on every replica built with the same arguments."""
    return attach_lora(build_base_model(name_or_path, seed=seed, dtype=dtype), lora or LoraSpec())


def lora_parameters(model) -> dict[str, torch.nn.Parameter]:
    """The trainable adapter tensors by name, in a fixed (module registration) order."""
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


def lora_gradients(model) -> dict[str, torch.Tensor]:
    """The gradients of the adapter tensors (zeros where autograd left none)."""
    return {n: (p.grad if p.grad is not None else torch.zeros_like(p)).detach().clone()
            for n, p in lora_parameters(model).items()}
