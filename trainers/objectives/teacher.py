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

CPU recipe (measured on this 2-core box; see the closing note of the tasks issue):
- A LoRA-only student on a *random* base cannot fit a sharp teacher: the frozen random LM
  head caps the logits (about +-1.3 for "micro"). Start the policy from a weakly trained
  base instead, e.g. `attach_lora(build_teacher(task, "tiny", steps=60, lr=1e-3), spec)`,
  and distil from `build_teacher(task, "tiny", steps=300, lr=1e-3)`.
- "micro" (hidden 64) learns very little through LoRA in a few hundred steps; use "tiny"
  for quality curves and "micro" for plumbing.
- GRPO learns nothing on prompts where all G samples fail (zero advantage), so reward
  curves on CPU need a base that already solves a fair share of the problems.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from trainers.models import build_base_model, build_tokenizer
from trainers.rollout import encode_prompt

# Bump when the training recipe below changes, so old caches are not reused.
RECIPE_VERSION = 1


def default_cache_dir() -> Path:
    root = os.environ.get("WAN_CACHE_DIR")
    return Path(root) / "teachers" if root else Path.home() / ".cache" / "wan-harness" / "teachers"


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


def config_key(config: dict) -> str:
    blob = json.dumps(config, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def build_teacher(task, model: str = "micro", seed: int = 0, steps: int = 300, batch_size: int = 32,
                  lr: float = 3e-3, n_train: int = 2000, cache_dir: str | os.PathLike | None = None):
    """A frozen tiny teacher for `task`: loaded from the cache, or trained and cached."""
    config = teacher_config(task, model, seed, steps, batch_size, lr, n_train)
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    path = folder / f"{task.name}-{model}-{config_key(config)}.safetensors"
    teacher = build_base_model(model, seed=seed)
    if path.exists():
        teacher.load_state_dict(load_file(str(path)))
    else:
        train_on_gold(teacher, build_tokenizer(model), task, seed, steps, batch_size, lr, n_train)
        _save_atomic(teacher, path, config)
    return teacher.eval().requires_grad_(False)


def gold_batch(tokenizer, task, problems) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded prompt + gold + EOS rows: (ids (B, T), attention (B, T), target mask (B, T-1))."""
    rows, starts = [], []
    for p in problems:
        prompt = encode_prompt(tokenizer, task.prompt(p))
        answer = list(tokenizer.encode(task.gold(p))) + [tokenizer.eos_token_id]
        rows.append(prompt + answer)
        starts.append(len(prompt))
    width = max(len(r) for r in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    attn = torch.zeros_like(ids)
    mask = torch.zeros((len(rows), width - 1))
    for i, (r, s) in enumerate(zip(rows, starts)):
        ids[i, :len(r)] = torch.tensor(r)
        attn[i, :len(r)] = 1
        mask[i, s - 1:len(r) - 1] = 1
    return ids, attn, mask


def gold_nll(model, ids, attn, mask) -> torch.Tensor:
    """Mean negative log-likelihood per answer token (nats)."""
    logits = model(input_ids=ids, attention_mask=attn, use_cache=False).logits[:, :-1].float()
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
    return (nll * mask).sum() / mask.sum()


def train_on_gold(model, tokenizer, task, seed: int, steps: int, batch_size: int, lr: float,
                  n_train: int) -> list[float]:
    """Supervised training of every weight of `model` on gold completions; returns the losses."""
    problems = task.generate(n_train, seed=seed + 1_000_003)  # disjoint from the usual seeds
    model.requires_grad_(True).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20) * (1 - s / steps))
    g = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        idx = torch.randint(len(problems), (batch_size,), generator=g).tolist()
        loss = gold_nll(model, *gold_batch(tokenizer, task, [problems[i] for i in idx]))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
    model.requires_grad_(False).eval()
    return losses


def _save_atomic(model, path: Path, config: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(fd)
    try:
        save_file(state, tmp, metadata={"config": json.dumps(config, sort_keys=True, default=str)})
        os.replace(tmp, path)  # atomic: a concurrent reader sees the old state or the whole file
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
