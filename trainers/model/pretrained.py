"""Models trained here on gold completions, cached on disk: the student's base and the teacher.

A CPU box has no checkpoint to download, so the harness makes its own "pre-trained" models:
a tiny model whose every weight is trained by supervised learning on the task's gold
completions of TRAINING problems (`trainers.tasks.heldout.training_problems`; never a problem whose
logic, its canonical form, is held out).

- The student's base (`build_base`, spec param `base_steps`): trained to partial competence,
  then frozen; every replica attaches the same seeded LoRA adapter to it. It does not depend
  on the run seed (one "checkpoint" per task, model and recipe, like a downloaded one), so the
  seed-to-seed spread of a run is the spread of its RL, not of its base. `base_steps` 0 is the
  random base (plumbing tests with "micro").
- The teacher (`trainers.model.teacher.build_teacher`, `teacher_steps`): the same recipe
  run longer, so that distillation has somewhere to go.

Cache: one safetensors file per model under `$WAN_CACHE_DIR/<kind>` (else
`~/.cache/wan-harness/<kind>`), named by the SHA-256 of everything that determines the weights
(kind, task name and options, model, seed, steps, batch, lr, data size, `RECIPE_VERSION`),
written atomically. The first process to need a file trains it under an exclusive file lock
(`<file>.lock`, fcntl): the learner and the workers of a run may start at once, and only one
of them trains while the others wait and then load the same bytes. Training prints a progress
line to stderr every ~10 % of its steps.

Which base and teacher a run loads is `trainers/hilo/stack.py` (also the command that builds
them ahead of a run).
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import load_file, save_file

from trainers.tasks.heldout import training_problems
from trainers.model.models import build_base_model, build_tokenizer
from trainers.model.rollout import encode_prompt

# Bump when the training recipe changes, so that old cache files are not reused (bases and teachers).
# 3: the held-out split is by logic, so the warm-up pools changed.
RECIPE_VERSION = 3
BASE_SEED = 0            # the base's init and data seed: one base for every run seed
BASE_LR = 1e-3           # AdamW peak lr of the supervised warm-up (the teacher docstring's tiny recipe)
BASE_BATCH = 32          # gold completions per step
BASE_TRAIN = 4000        # distinct training problems the warm-up draws from
PROGRESS_LINES = 10      # progress lines per training run
CACHE_FILE_MODE = 0o644   # cached models: readable by every user (they are not secrets)


def default_cache_dir(kind: str) -> Path:
    """Where cached models of `kind` (\"bases\", \"teachers\") live: $WAN_CACHE_DIR/<kind>, else ~/.cache."""
    root = os.environ.get("WAN_CACHE_DIR")
    return (Path(root) if root else Path.home() / ".cache" / "wan-harness") / kind


def config_key(config: dict) -> str:
    blob = json.dumps(config, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def base_config(task, model: str, steps: int, seed: int = BASE_SEED, batch_size: int = BASE_BATCH,
                lr: float = BASE_LR, n_train: int = BASE_TRAIN) -> dict:
    return {"kind": "base", "task": task.name, "task_options": task.options(), "model": model, "seed": seed,
            "steps": steps, "batch_size": batch_size, "lr": lr, "n_train": n_train, "recipe": RECIPE_VERSION}


def build_base(task, model: str = "tiny", steps: int = 300, seed: int = BASE_SEED, batch_size: int = BASE_BATCH,
               lr: float = BASE_LR, n_train: int = BASE_TRAIN, cache_dir: str | os.PathLike | None = None,
               role: str = "base"):
    """The student's frozen base for `task`: random (steps 0), or trained on gold and cached.
    `role` names the model in the progress lines only ("teacher" when the same recipe, run
    longer, is a run's teacher: trainers/hilo/stack.py); the cache key does not depend on it."""
    if steps < 0:
        raise ValueError(f"base steps must be >= 0, got {steps}")
    model_ = build_base_model(model, seed=seed)
    if steps == 0:
        return model_.eval()
    config = base_config(task, model, steps, seed, batch_size, lr, n_train)
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir("bases")
    train = lambda m: train_on_gold(m, build_tokenizer(model), task, seed, steps, batch_size, lr, n_train,  # noqa: E731
                                    label=f"{role} {task.name} {model}, {steps} steps")
    return load_or_train(model_, folder, config, train)


def cache_path(folder: Path, config: dict) -> Path:
    """The file under `folder` that holds the model `config` describes (its "task" and "model", and the
    hash of the whole config)."""
    return folder / f"{config['task']}-{config['model']}-{config_key(config)}.safetensors"


def load_or_train(model, folder: Path, config: dict, train: Callable[[torch.nn.Module], object]):
    """`model` with the weights cached under `folder` for `config` (`cache_path`), or trained by
    `train(model)` and cached there. One process trains; concurrent callers wait on the lock and load
    the same file."""
    path = cache_path(folder, config)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        with _exclusive(path.with_name(path.name + ".lock")):
            if not path.exists():  # another process may have written it while we waited
                train(model)
                save_atomic(model, path, config)
    check_readable(path)
    model.load_state_dict(load_file(str(path)))  # also after training: every caller gets the file's bits
    return model.eval().requires_grad_(False)


def check_readable(path: Path) -> None:
    """PermissionError naming the file, its mode and owner when this process cannot read a cached model
    (safetensors reports an unreadable file as FileNotFoundError: a cache built by another user)."""
    if os.access(path, os.R_OK):
        return
    st = path.stat()
    raise PermissionError(f"cannot read the cached model {path} (mode {st.st_mode & 0o777:04o}, owner uid "
                          f"{st.st_uid}) as uid {os.getuid()}: make it readable (chmod a+r) or use another "
                          "cache (WAN_CACHE_DIR)")


@contextlib.contextmanager
def _exclusive(lock_path: Path):
    with open(lock_path, "a+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)  # released when the file closes (or the process dies)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def save_atomic(model, path: Path, config: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(fd)
    try:
        save_file(state, tmp, metadata={"config": json.dumps(config, sort_keys=True, default=str)})
        # mkstemp makes it 0600: other users' processes load the same cache (the containers' services
        # run as uid 1000 on a cache the root controller or a host run built)
        os.chmod(tmp, CACHE_FILE_MODE)
        os.replace(tmp, path)  # atomic: a concurrent reader sees no file or the whole file
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# ---- supervised training on gold completions ------------------------------------------------

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
                  n_train: int, label: str | None = None) -> list[float]:
    """Supervised training of every weight of `model` on gold completions; returns the losses.
    With `label`, a progress line goes to stderr every ~1/PROGRESS_LINES of the steps."""
    problems = training_problems(task, n_train, seed + 1_000_003)  # never a held-out problem
    model.requires_grad_(True).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    # 20 warm-up steps, then linear decay to 0 at `steps`.
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20) * (1 - s / steps))
    g = torch.Generator().manual_seed(seed)
    losses, start, every = [], time.monotonic(), max(1, steps // PROGRESS_LINES)
    for step in range(steps):
        idx = torch.randint(len(problems), (batch_size,), generator=g).tolist()
        loss = gold_nll(model, *gold_batch(tokenizer, task, [problems[i] for i in idx]))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if label and ((step + 1) % every == 0 or step + 1 == steps):
            _progress(label, step + 1, steps, losses, time.monotonic() - start)
    model.requires_grad_(False).eval()
    return losses


def _progress(label: str, done: int, steps: int, losses: list[float], elapsed: float) -> None:
    recent = losses[-min(len(losses), 10):]
    left = elapsed / done * (steps - done)
    print(f"[pretrain] {label}: step {done}/{steps}, gold NLL {sum(recent) / len(recent):.3f} nats/token, "
          f"{elapsed:.0f} s, ~{left:.0f} s left", file=sys.stderr, flush=True)
