"""The held-out split: which problems may be trained on, and which are only ever evaluated.

A problem belongs to the held-out side when the SHA-256 of its task name and prompt falls in
one of `HELDOUT_BUCKETS` buckets (1 in 8). The split is a property of the problem itself, not
of a seed or a count, so it holds for every stream at once: the workers' rollout batches, the
supervised warm-up of the student's base and of the teacher, and any seed. Training streams
drop held-out problems and top up; the held-out set keeps only held-out problems, deduplicated
by prompt. Disjointness is therefore by construction (tests/trainers/tasks/test_heldout.py checks it
on every task).
"""
from __future__ import annotations

import hashlib
from typing import Any

HELDOUT_BUCKETS = 8
HELDOUT_SEED = 0x5EED_0E7A  # the held-out set's generator seed (any fixed value; no run seed)
# The held-out evaluation's sampling seed: one for every method AND every run seed (common random
# numbers), so version 0, a policy every seed shares, scores the same in each, and the seed-to-seed
# spread of an improvement is training's, not the evaluator's dice (issue 10's "3 sd" measure).
EVAL_SAMPLING_SEED = 0xE7A1
MAX_ROUNDS = 10_000  # top-up rounds before a task is judged too small to split


def is_heldout(task, problem: Any) -> bool:
    """Whether `problem` is held out (never trained on)."""
    digest = hashlib.sha256(f"{task.name}\0{task.prompt(problem)}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % HELDOUT_BUCKETS == 0


def training_problems(task, n: int, seed: int) -> list[Any]:
    """`n` training problems, deterministic in `(task options, n, seed)`, none of them held out."""
    return _collect(task, n, seed, keep=lambda p: not is_heldout(task, p), unique=False)


def heldout_problems(task, n: int, seed: int = HELDOUT_SEED) -> list[Any]:
    """`n` distinct held-out problems (distinct prompts); the same on every process."""
    return _collect(task, n, seed, keep=lambda p: is_heldout(task, p), unique=True)


def _collect(task, n: int, seed: int, keep, unique: bool) -> list[Any]:
    out, seen = [], set()
    for round_ in range(MAX_ROUNDS):
        # Round 0 is the plain stream, so a task whose first n problems are all kept is unchanged.
        for p in task.generate(n, seed if round_ == 0 else _round_seed(seed, round_)):
            if not keep(p):
                continue
            if unique:
                prompt = task.prompt(p)
                if prompt in seen:
                    continue
                seen.add(prompt)
            out.append(p)
            if len(out) == n:
                return out
    raise ValueError(f"{task.name} {task.options()}: only {len(out)} of {n} "
                     f"{'distinct held-out' if unique else 'training'} problems in {MAX_ROUNDS} rounds; "
                     "the task's problem space is too small for this split (use larger options)")


def _round_seed(seed: int, round_: int) -> int:
    return (seed * 1_000_003 + round_ * 7_919 + 0xA5A5) % (2**63 - 1)
