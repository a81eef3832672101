"""What the learner and the workers of a HiLo run build from its parameters: one `build(params)`.

A run's parameters (`trainers/spec.py` RunParams) travel from the learner to each worker in the
WELCOME message, so that every replica builds the same model, adapter, optimizer and task from
one source of truth; a worker that was started with a flag contradicting them refuses to run.
Each process builds its stack once and hands the pieces down (the task, the tokenizer, the
method, the policy model with its Replica, and the learner's distillation teacher).

The base and the teacher a run's parameters name are built (or found in the cache) once: `harness run`
builds them before its first cell, with every core (harness/run/launch.py), by
    python -m trainers.hilo.stack --run-params '<RunParams JSON>' --threads 2
and one base ahead of a run by
    python -m trainers.hilo.stack --task knights_knaves --task-options max_people=2 --steps 300
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

import torch

from trainers import cards, tasks
from trainers.hilo import methods
from trainers.model.models import TINY_CONFIGS, LoraSpec, attach_lora, build_base_model, build_tokenizer, lora_parameters
from trainers.model.pretrained import build_base
from trainers.model.replica import OptimConfig, Replica
from trainers.model.teacher import build_teacher
from trainers.tasks.heldout import rollout_seed  # noqa: F401  (re-exported: the worker and benchmarks import it here)
from trainers.spec import PRETRAINED_MODELS, RunParams


@dataclass
class Stack:
    """Everything a HiLo service process builds from RunParams, built once."""
    params: RunParams
    task: tasks.Task
    tokenizer: object
    method: methods.Method
    model: torch.nn.Module  # the base with the run's LoRA adapter attached
    replica: Replica
    teacher: torch.nn.Module | None = None  # the learner's distillation teacher (distill only)


def build(params: RunParams, teacher: bool = False) -> Stack:
    """The stack of `params`; an unknown method or task, or bad compressor options, fail first
    (ValueError), before any model is built. `teacher`: the learner's, for distill (cached, one
    for every seed); workers build none."""
    method = methods.get_method(params.method, **params.compressor_options())
    task, base, scorer = models_for(params, teacher)  # the task, the pre-trained base (cached), the teacher
    model, replica = _attach(params, method, base)
    return Stack(params, task, build_tokenizer(params.model), method, model, replica, scorer)


def build_replica(params: RunParams, method: methods.Method, task: tasks.Task | None = None):
    """The policy model and its Replica, identical on every process built from `params`."""
    task = task if task is not None else tasks.build_task(params.task, params.task_options)
    return _attach(params, method, base_for(params, task))  # base: pre-trained, cached


def _attach(params: RunParams, method: methods.Method, base: torch.nn.Module):
    """The run's LoRA adapter on `base` (seeded) and the Replica that trains it."""
    rank = method.lora_rank or params.lora_rank
    model = attach_lora(base, LoraSpec(rank=rank, seed=params.seed))
    return model, Replica(lora_parameters(model), OptimConfig(lr=params.lr, weight_decay=params.weight_decay,
                                                               max_grad_norm=params.max_grad_norm))


def shipped_policy_hash(adapter: dict[str, torch.Tensor], dtype: torch.dtype) -> str:
    """The policy hash a worker will report after loading `adapter` shipped in `dtype`."""
    params = {n: torch.nn.Parameter(t.to(dtype).to(t.dtype), requires_grad=True) for n, t in adapter.items()}
    return Replica(params).policy_hash()


# ---- the base and the teacher a run names ------------------------------------------------------

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
    p = argparse.ArgumentParser(prog="python -m trainers.hilo.stack",
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
