"""What the learner and the workers of a HiLo run build from its parameters: one `build(params)`.

A run's parameters (`trainers/spec.py` RunParams) travel from the learner to each worker in the
WELCOME message, so that every replica builds the same model, adapter, optimizer and task from
one source of truth; a worker that was started with a flag contradicting them refuses to run.
Each process builds its stack once and hands the pieces down (the task, the tokenizer, the
method, the policy model with its Replica, and the learner's distillation teacher).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from trainers import tasks
from trainers.hilo import methods
from trainers.model.models import LoraSpec, attach_lora, build_tokenizer, lora_parameters
from trainers.model.replica import OptimConfig, Replica
from trainers.model.run_models import base_for, models_for
from trainers.tasks.heldout import rollout_seed  # noqa: F401  (re-exported: the worker and benchmarks import it here)
from trainers.spec import RunParams


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
