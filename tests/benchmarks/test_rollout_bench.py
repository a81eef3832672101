"""Rollout throughput and training-step time for the tiny model on this CPU.

Run by hand:  .venv/bin/python -m pytest tests/benchmarks/test_rollout_bench.py -m benchmark -s -q
Prints a table; asserts nothing about time (other work shares the machine).
"""
import os
import time

import pytest
import torch

from trainers.model.models import LoraSpec, build_base_model, build_model, build_tokenizer, lora_parameters
from trainers.objectives import get_objective
from trainers.model.rollout import encode_prompt, generate_rollouts
from trainers.tasks import get_task

pytestmark = pytest.mark.benchmark
MODEL = os.environ.get("BENCH_MODEL", "tiny")


def timed(fn, repeats=2):
    """Best of `repeats` wall-clock seconds (the first call also warms caches)."""
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def train_step(model, objective, rollouts, opt):
    loss, _ = objective.loss(model, rollouts)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


@torch.no_grad()
def sample_without_cache(model, prompt, new_tokens, rows):
    """Baseline: re-run the whole sequence for every new token (what the KV cache saves)."""
    ids = torch.tensor([prompt] * rows)
    for _ in range(new_tokens):
        logits = model(input_ids=ids, use_cache=False).logits[:, -1].float()
        ids = torch.cat([ids, torch.multinomial(torch.softmax(logits, -1), 1)], dim=1)
    return ids


def test_rollout_and_train_step_bench():
    torch.manual_seed(0)
    task, tok = get_task("countdown"), build_tokenizer(MODEL)
    model = build_model(MODEL, LoraSpec(rank=8), seed=0)
    teacher = build_base_model(MODEL, seed=1)
    objectives = {"grpo": get_objective("grpo"), "distill": get_objective("distill", teacher=teacher)}
    opt = torch.optim.AdamW(lora_parameters(model).values(), lr=1e-4)
    print(f"\nmodel={MODEL} params={sum(p.numel() for p in model.parameters()) / 1e6:.2f}M "
          f"torch_threads={torch.get_num_threads()} task=countdown (prompt ~{len(encode_prompt(tok, task.prompt(task.generate(1, 0)[0])))} tokens), group 8")
    print(f"{'batch':>5} {'len':>4} {'rollout s':>9} {'tokens/s':>9} {'grpo step s':>11} {'distill step s':>14}")
    for rows in (8, 32):
        for length in (32, 128):
            problems = task.generate(rows // 8, seed=rows + length)
            secs, r = timed(lambda: generate_rollouts(model, tok, task, problems, group_size=8,
                                                      max_new_tokens=length, seed=0))
            steps = {name: timed(lambda o=o: train_step(model, o, r, opt))[0] for name, o in objectives.items()}
            print(f"{rows:>5} {length:>4} {secs:>9.3f} {r.num_completion_tokens() / secs:>9.0f} "
                  f"{steps['grpo']:>11.3f} {steps['distill']:>14.3f}")
    prompt = encode_prompt(tok, task.prompt(task.generate(1, 0)[0]))
    base = model.get_base_model()
    no_cache, _ = timed(lambda: sample_without_cache(base, prompt, 32, 8), repeats=1)
    cached, r = timed(lambda: generate_rollouts(base, tok, task, task.generate(1, 0), 8, 32, seed=0), repeats=1)
    print(f"KV cache vs full recompute, batch 8 x 32 tokens: {cached:.3f} s vs {no_cache:.3f} s "
          f"({no_cache / cached:.1f}x); cached run produced {r.num_completion_tokens()} tokens")
