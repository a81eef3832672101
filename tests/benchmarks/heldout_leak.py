"""How much of the held-out set a run's training streams contain, by logic.

    .venv/bin/python -m tests.benchmarks.heldout_leak                 # the split as built (by canonical form)
    .venv/bin/python -m tests.benchmarks.heldout_leak --split prompt  # the older split, by prompt text

Per setting (the default run and each preset): the held-out set an evaluation uses
(`eval_problems` of them), and how many of those problems have their canonical form
(`Task.canonical`: the problem's logic) in (a) 20,000 RL training draws, drawn as the run's workers
draw them (seeds 1, 2, ... until 20,000 problems), and (b) the supervised warm-up's pool of the
base and the teacher (`pretrained.BASE_TRAIN` problems, seed `BASE_SEED + 1_000_003`); plus the
number of distinct classes among the held-out problems. Torch-free; ~1 min on one core.
"""
from __future__ import annotations

import argparse
import itertools

from harness.run import presets
from trainers import spec
from trainers.tasks import get_task, heldout, parse_task_options

DRAWS = 20_000
WARMUP_TRAIN, WARMUP_SEED = 4000, 0 + 1_000_003  # trainers/model/pretrained.py: BASE_TRAIN, BASE_SEED + 1_000_003


class PromptKeyed:
    """A task whose split key is its prompt text: the older split."""

    def __init__(self, task):
        self.task, self.name = task, task.name

    def __getattr__(self, attr):
        return getattr(self.task, attr)

    def canonical(self, problem):
        return self.task.prompt(problem)


def settings() -> dict[str, dict]:
    """Run-spec values of the default run and of every preset."""
    defaults = {p.name: p.default for p in spec.PARAMS}
    out = {"default": defaults}
    for name in presets.names():
        out[name] = {**defaults, **presets.load(name)["values"]}
    return out


def measure(values: dict, split: str) -> dict:
    task = get_task(values["task"], **parse_task_options(values["task"], values["task_options"]))
    keyed = PromptKeyed(task) if split == "prompt" else task
    held = heldout.heldout_problems(keyed, values["eval_problems"])
    forms = [task.canonical(p) for p in held]
    rl = set()
    for seed in itertools.count(1):
        for _, _, p in heldout.run_stream(keyed, seed, values["workers"], values["problems_per_worker"],
                                          values["updates"]):
            rl.add(task.canonical(p))
        if seed * values["workers"] * values["problems_per_worker"] * values["updates"] >= DRAWS:
            break
    warm = {task.canonical(p) for p in heldout.training_problems(keyed, WARMUP_TRAIN, WARMUP_SEED)}
    return {"held": len(held), "classes": len(set(forms)), "in_rl": sum(f in rl for f in forms),
            "in_warmup": sum(f in warm for f in forms), "rl_classes": len(rl)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", choices=("canonical", "prompt"), default="canonical")
    args = ap.parse_args()
    print(f"split by {args.split}; RL draws >= {DRAWS:,} per setting, warm-up pool {WARMUP_TRAIN:,}")
    for name, values in settings().items():
        try:
            m = measure(values, args.split)
        except ValueError as e:
            print(f"{name:16s} {values['task']} {values['task_options']!r}: {e}")
            continue
        print(f"{name:16s} {values['task']} {values['task_options']!r}: held-out {m['held']}, distinct classes "
              f"{m['classes']}, in RL draws {m['in_rl']}, in warm-up pool {m['in_warmup']} "
              f"(RL draws cover {m['rl_classes']} classes)")


if __name__ == "__main__":
    main()
