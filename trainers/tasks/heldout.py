"""The held-out split: which problems may be trained on, and which are only ever evaluated.

The split is by LOGIC, not wording: a problem is held out when the SHA-256 of its task name and
canonical form (`Task.canonical`: K&K the statements' truth tables, Countdown the multiset of
numbers and the target, digits the op and its operands) falls in one of `HELDOUT_BUCKETS` buckets
(1 in 8). Every wording of a held-out problem is therefore held out too. The split is a property
of the problem itself, not of a seed or a count, so it holds for every stream at once: the
workers' rollout batches, the supervised warm-up of the student's base and of the teacher, and
any seed. Training streams drop held-out problems and top up; the held-out set keeps one problem
per canonical form (distinct classes). Disjointness is by construction; tests/trainers/tasks/
test_heldout.py checks it over 20,000 training draws per task. (Formerly the key was the
prompt text: hilo-kk's 64 held-out puzzles all had a logically identical training puzzle.)
"""
from __future__ import annotations

import hashlib
from typing import Any

HELDOUT_BUCKETS = 8
HELDOUT_SEED = 0x5EED_0E7A  # the held-out set's generator seed (any fixed value; no run seed)
# The held-out evaluation's sampling seed: one for every method AND every run seed (common random
# numbers), so version 0, a policy every seed shares, scores the same in each, and the seed-to-seed
# spread of an improvement is training's, not the evaluator's dice (the report's "3 sd" measure).
EVAL_SAMPLING_SEED = 0xE7A1
MAX_ROUNDS = 10_000  # top-up rounds before a task is judged too small to split
# Rounds in a row that add nothing before a task is judged too small: 200 rounds of n draws found no
# new class (2 people of knights_knaves: 13 held-out classes, all seen in the first few rounds).
STALL_ROUNDS = 200


def is_heldout(task, problem: Any) -> bool:
    """Whether `problem` is held out (never trained on): a property of its canonical form."""
    digest = hashlib.sha256(f"{task.name}\0{task.canonical(problem)}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % HELDOUT_BUCKETS == 0


def training_problems(task, n: int, seed: int) -> list[Any]:
    """`n` training problems, deterministic in `(task options, n, seed)`, none of them held out."""
    return _collect(task, n, seed, keep=lambda p: not is_heldout(task, p), unique=False)


def rollout_seed(seed: int, worker: int, batch: int) -> int:
    """The seed of worker `worker`'s rollout batch `batch` in a run of seed `seed`: its problems are
    `training_problems(task, problems_per_worker, rollout_seed(...))`, and its sampling seed."""
    return ((seed * 1_000_003 + worker) * 1_000_003 + batch) % (2**63 - 1)


def run_stream(task, seed: int, workers: int, problems_per_worker: int, updates: int):
    """What a run of seed `seed` trains on, in order: (batch, worker, problem) for every rollout batch
    of every worker (trainers/hilo/worker.py draws exactly these)."""
    for batch in range(updates):
        for worker in range(1, workers + 1):
            for p in training_problems(task, problems_per_worker, rollout_seed(seed, worker, batch)):
                yield batch, worker, p


def heldout_problems(task, n: int, seed: int = HELDOUT_SEED) -> list[Any]:
    """`n` held-out problems of distinct canonical forms (classes); the same on every process."""
    return _collect(task, n, seed, keep=lambda p: is_heldout(task, p), unique=True)


def _collect(task, n: int, seed: int, keep, unique: bool) -> list[Any]:
    out, seen, stalled = [], set(), 0
    for round_ in range(MAX_ROUNDS):
        before = len(out)
        # Round 0 is the plain stream, so a task whose first n problems are all kept is unchanged.
        for p in task.generate(n, seed if round_ == 0 else _round_seed(seed, round_)):
            if not keep(p):
                continue
            if unique:
                form = task.canonical(p)
                if form in seen:
                    continue
                seen.add(form)
            out.append(p)
            if len(out) == n:
                return out
        stalled = 0 if len(out) > before else stalled + 1
        if stalled == STALL_ROUNDS:
            break
    raise ValueError(f"{task.name} {task.options()}: only {len(out)} of {n} "
                     f"{'held-out classes' if unique else 'training problems'} in {round_ + 1} rounds; "
                     "the task's problem space is too small for this split (use larger options)")


def _round_seed(seed: int, round_: int) -> int:
    return (seed * 1_000_003 + round_ * 7_919 + 0xA5A5) % (2**63 - 1)
