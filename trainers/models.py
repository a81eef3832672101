"""Build a causal LM (a named tiny config, or a local Hugging Face path) and attach LoRA with PEFT.

Every replica (learner, workers) must build the *same* base model and the *same* adapter, so
both are initialised from explicit seeds, never from ambient RNG state.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from trainers.tokenizer import ByteTokenizer

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


def available_models() -> list[str]:
    return sorted(TINY_CONFIGS)


def tiny_config(name: str, vocab_size: int = ByteTokenizer.vocab_size, max_positions: int = 1024) -> LlamaConfig:
    if name not in TINY_CONFIGS:
        raise ValueError(f"unknown model {name!r}: not a directory and not one of {available_models()}")
    tok = ByteTokenizer()
    return LlamaConfig(vocab_size=vocab_size, max_position_embeddings=max_positions,
                       pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                       eos_token_id=tok.eos_token_id, tie_word_embeddings=False,
                       attn_implementation="eager", **TINY_CONFIGS[name])


def build_base_model(name_or_path: str, seed: int = 0, dtype: torch.dtype = torch.float32):
    """A causal LM: a named tiny config initialised from `seed`, or a local Hugging Face path."""
    if os.path.isdir(name_or_path):
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=dtype, local_files_only=True)
    elif name_or_path in TINY_CONFIGS:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = LlamaForCausalLM(tiny_config(name_or_path)).to(dtype)
    else:
        raise ValueError(f"unknown model {name_or_path!r}: not a directory and not one of {available_models()}")
    model.requires_grad_(False)
    return model


def build_tokenizer(name_or_path: str):
    if os.path.isdir(name_or_path):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(name_or_path, local_files_only=True)
    if name_or_path in TINY_CONFIGS:
        return ByteTokenizer()
    raise ValueError(f"unknown model {name_or_path!r}: not a directory and not one of {available_models()}")


def attach_lora(model, spec: LoraSpec):
    """Wrap `model` with a PEFT LoRA adapter; only the adapter is trainable."""
    from peft import LoraConfig, get_peft_model

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
