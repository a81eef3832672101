"""What the learner and the workers share: run parameters, the training stack, seeds, socket helpers.

A run's parameters travel from the learner to each worker in the WELCOME message, so that
every replica builds the same model, adapter, optimizer and task from one source of truth;
a worker that was started with a flag contradicting them refuses to run.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import sys
import time
from dataclasses import dataclass

import torch

from trainers import methods
from trainers.models import LoraSpec, build_model, build_tokenizer, lora_parameters
from trainers.replay import OptimConfig, Replica

RUN_TOKEN_ENV = "RUN_TOKEN"


@dataclass(frozen=True)
class RunParams:
    """Everything every replica must agree on. Units: seconds, tokens, counts."""

    method: str = "full"
    budget: str | None = None  # compressor "budget" option (spar, ...), e.g. "1.6%"
    model: str = "micro"
    lora_rank: int = 8
    seed: int = 0
    task: str = "digits"
    objective: str = "grpo"
    teacher_steps: int = 300  # distill: supervised steps of the tiny teacher trained here (cached on disk)
    updates: int = 5
    workers: int = 1
    problems_per_worker: int = 2  # problems per worker per update
    group_size: int = 2  # samples per problem (the GRPO group)
    max_new_tokens: int = 8
    temperature: float = 1.0
    lr: float = 1e-3
    depth: int = 0  # pipelining depth: 0 synchronous, 1 one-step overlap
    hash_every: int = 1  # compare replica hashes every K versions (and always at the end)
    snapshot_every: int = 10  # the learner snapshots adapter + optimizer every S versions

    def __post_init__(self):
        if self.depth not in (0, 1):
            raise ValueError(f"depth must be 0 or 1, got {self.depth}")
        for name in ("updates", "workers", "problems_per_worker", "group_size", "hash_every",
                     "snapshot_every", "lora_rank"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, obj: dict) -> "RunParams":
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(obj) - fields)
        if unknown:
            raise ValueError(f"unknown run parameters {unknown}")
        return cls(**obj)

    def get_method(self) -> methods.Method:
        return methods.get_method(self.method, **({"budget": self.budget} if self.budget else {}))


def add_run_args(p: argparse.ArgumentParser, required: bool) -> None:
    """Flags for RunParams; on a worker they are optional checks against the learner's values."""
    d = RunParams() if required else None
    for f in dataclasses.fields(RunParams):
        typ = {"int": int, "float": float}.get(str(f.type).split(" ")[0], str)
        p.add_argument("--" + f.name.replace("_", "-"), type=typ,
                       default=getattr(d, f.name) if d else None)


def run_params_from_args(args) -> RunParams:
    return RunParams(**{f.name: getattr(args, f.name) for f in dataclasses.fields(RunParams)})


def build_replica(params: RunParams, method: methods.Method):
    """The policy model and its Replica, identical on every process built from `params`."""
    rank = method.lora_rank or params.lora_rank
    model = build_model(params.model, LoraSpec(rank=rank, seed=params.seed), seed=params.seed)
    optim = OptimConfig(lr=params.lr)
    return model, Replica(lora_parameters(model), optim)


def build_tokenizer_for(params: RunParams):
    return build_tokenizer(params.model)


def build_task(params: RunParams):
    from trainers.tasks import get_task

    return get_task(params.task)


def rollout_seed(seed: int, worker: int, batch: int) -> int:
    """The sampling seed of worker `worker`'s rollouts for batch `batch` (= update batch + 1)."""
    return ((seed * 1_000_003 + worker) * 1_000_003 + batch) % (2**63 - 1)


def shipped_policy_hash(adapter: dict[str, torch.Tensor], dtype: torch.dtype) -> str:
    """The policy hash a worker will report after loading `adapter` shipped in `dtype`."""
    params = {n: torch.nn.Parameter(t.to(dtype).to(t.dtype), requires_grad=True) for n, t in adapter.items()}
    return Replica(params).policy_hash()


def parse_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"address {addr!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def run_token(explicit: str | None = None) -> str:
    token = explicit or os.environ.get(RUN_TOKEN_ENV)
    if not token:
        raise ValueError(f"no run token: set ${RUN_TOKEN_ENV}")
    return token


def connect(addr: tuple[str, int], deadline_s: float) -> socket.socket:
    """Connect, retrying until `deadline_s` seconds have passed (the learner may start later)."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            sock = socket.create_connection(addr, timeout=5)
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.2)


def log(process: str, msg: str) -> None:
    print(f"[{process}] {msg}", file=sys.stderr, flush=True)


def set_threads(n: int) -> None:
    # Bit-exact replay needs the same op order everywhere; one thread also keeps a 2-core box usable.
    torch.set_num_threads(max(1, n))
