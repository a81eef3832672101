"""The base and the teacher that a run's parameters name: built (or found in the cache) once.

    python -m trainers.model.run_models --run-params '<RunParams JSON>' --threads 2
builds (or finds) the base and, for an objective whose card needs one (distill), the teacher that a run
with those parameters loads (`harness run` does this before its first cell, with every core:
see harness/run/launch.py);
    python -m trainers.model.run_models --task knights_knaves --task-options max_people=2 --steps 300
builds (or finds) one base ahead of a run.
"""
from __future__ import annotations

import argparse
import json

import torch

from trainers import cards, tasks
from trainers.model.models import TINY_CONFIGS, build_base_model
from trainers.model.pretrained import build_base
from trainers.model.teacher import build_teacher
from trainers.spec import PRETRAINED_MODELS, RunParams


def base_for(params: RunParams, task: tasks.Task):
    """The frozen base every replica of a run builds from its RunParams (same bits everywhere).

    Only `PRETRAINED_MODELS` are pre-trained here (the torch-free spec lists them, so the harness
    knows too). "micro" (the plumbing model of the tests: a warm-up in every end-to-end test's fresh
    cache would cost more than the test), a real shape or a folder is built as given (weights loaded,
    or random from the run seed), and so is any model with `base_steps` 0."""
    if params.base_steps == 0 or params.model not in PRETRAINED_MODELS:
        return build_base_model(params.model, seed=params.seed)
    return build_base(task, params.model, steps=params.base_steps)


def teacher_for(params: RunParams, task: tasks.Task):
    """The run's distillation teacher: the base's recipe run for `teacher_steps` (cached with the
    bases). Like the base it does not depend on the run seed: one teacher for every seed, built once."""
    if params.model not in TINY_CONFIGS:  # a real shape: trained from its random init, per seed
        return build_teacher(task, params.model, seed=params.seed, steps=params.teacher_steps)
    return build_base(task, params.model, steps=params.teacher_steps, role="teacher")


def models_for(params: RunParams, teacher: bool = True):
    """(task, base, teacher): what a run with `params` loads, each built (or found in the cache) once,
    in one call; an unknown task fails first. The teacher only for distill and when asked (None
    otherwise: workers score nothing)."""
    task = tasks.build_task(params.task, params.task_options)
    base = base_for(params, task)
    wanted = teacher and cards.objective(params.objective).needs_teacher
    return task, base, (teacher_for(params, task) if wanted else None)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainers.model.run_models",
                                description="build (or find) the cached base and teacher of a run")
    p.add_argument("--task", default="digits")
    p.add_argument("--task-options", default="", help="e.g. max_people=2 (as the run flag)")
    p.add_argument("--model", default="tiny")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--run-params", default=None,
                   help="a run's parameters (RunParams JSON): build its base and, for distill, its teacher")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    try:
        if args.run_params is not None:
            params = RunParams.from_json(json.loads(args.run_params))
            models_for(params)
            return 0
        task = tasks.build_task(args.task, args.task_options)
        build_base(task, args.model, steps=args.steps)
    except ValueError as e:  # SpecError and json.JSONDecodeError are ValueErrors too
        p.error(str(e))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
