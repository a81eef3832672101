"""The distillation teacher: a frozen model from a local path, or a tiny model trained here.

On a GPU box the teacher is a real checkpoint: `load_teacher("/models/Qwen2.5-7B")`.
On a CPU box there is nothing to download, so `build_teacher(task, "micro")` trains a tiny
model (all its weights, no LoRA) for a few hundred steps of supervised learning on the
task's gold completions. That gives the student something real to distil: a teacher that
writes the answer format and gets some answers right.

The trained weights are cached on disk under `cache_dir` (default `$WAN_CACHE_DIR/teachers`,
else `~/.cache/wan-harness/teachers`) in a file named by the hash of everything that
determines them (task name and options, model name, seed, steps, batch, lr, data size, this
module's recipe version), stored with safetensors (never pickle), written atomically.
Every replica that asks for the same config gets bit-identical weights.

CPU recipe (tests/benchmarks/heldout_curves.py measures it):
- A LoRA-only student on a *random* base cannot fit a sharp teacher: the frozen random LM
  head caps the logits (about +-1.3 for "micro"). A run's policy therefore starts from a
  pre-trained base (`trainers.model.pretrained.build_base`, spec `base_steps`), and a run's teacher
  is the same recipe run longer (`trainers.hilo.stack.teacher_for`, spec `teacher_steps`):
  both "tiny", lr 1e-3, batch 32, seed 0 (one base and one teacher for every run seed).
- "micro" (hidden 64) learns very little through LoRA in a few hundred steps; use "tiny"
  for quality curves and "micro" for plumbing (runs never pre-train a micro base).
- GRPO learns nothing on prompts where all G samples fail (zero advantage), so reward
  curves on CPU need a base that already solves a fair share of the problems.
- Cost of the warm-up is tokens: a step is 32 prompt+gold rows; on one
  thread of a loaded 2-core CPU: digits (~20 tokens) 1.4 s/step, countdown with 3 numbers (~100)
  ~6 s/step; knights_knaves in prose (~260 tokens even with 2 people) ~13x digits, which is
  why the hilo-kk preset uses `names=letters,style=compact` (~85 tokens, ~0.9 s/step alone).
- Distillation on digits barely moves held-out quality in 20 updates (pass@1 +0.014, pass@4
  within noise); GRPO on small countdown does (pass@4 +0.10 in 30 updates); lr 3e-3 made the
  reverse KL worse. Curves: docs/DESIGN.md ("The CPU student").
"""
from __future__ import annotations

import os
from pathlib import Path

import torch

from trainers.model.models import build_base_model, build_tokenizer
# The supervised recipe, its version and the cache live in trainers/model/pretrained.py (shared with the base).
from trainers.model.pretrained import RECIPE_VERSION, default_cache_dir, load_or_train, train_on_gold


def load_teacher(path: str, dtype: torch.dtype = torch.float32):
    """A frozen teacher from a local Hugging Face checkpoint directory."""
    if not os.path.isdir(path):
        raise ValueError(f"teacher path {path!r} is not a directory")
    return build_base_model(path, dtype=dtype).eval()


def teacher_config(task, model: str, seed: int, steps: int, batch_size: int, lr: float,
                   n_train: int) -> dict:
    return {"task": task.name, "task_options": task.options(), "model": model, "seed": seed,
            "steps": steps, "batch_size": batch_size, "lr": lr, "n_train": n_train,
            "recipe": RECIPE_VERSION}


def build_teacher(task, model: str = "micro", seed: int = 0, steps: int = 300, batch_size: int = 32,
                  lr: float = 3e-3, n_train: int = 2000, cache_dir: str | os.PathLike | None = None):
    """A frozen tiny teacher for `task`: loaded from the cache, or trained and cached (under a file
    lock, so concurrent callers train it once; see `trainers.model.pretrained.load_or_train`)."""
    config = teacher_config(task, model, seed, steps, batch_size, lr, n_train)
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir("teachers")
    train = lambda m: train_on_gold(m, build_tokenizer(model), task, seed, steps, batch_size, lr,  # noqa: E731
                                    n_train, label=f"teacher {task.name} {model}")
    return load_or_train(build_base_model(model, seed=seed), folder, config, train)


