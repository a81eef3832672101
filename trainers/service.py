"""What the learner and the workers share: the training stack, seeds, socket helpers.

A run's parameters (`trainers/spec.py` RunParams) travel from the learner to each worker in the
WELCOME message, so that every replica builds the same model, adapter, optimizer and task from
one source of truth; a worker that was started with a flag contradicting them refuses to run.
"""
from __future__ import annotations

import os
import socket
import sys
import time
import torch

from trainers import methods
from trainers.models import LoraSpec, attach_lora, build_tokenizer, lora_parameters
from trainers.replay import OptimConfig, Replica
from trainers.spec import RunParams

RUN_TOKEN_ENV = "RUN_TOKEN"


def build_replica(params: RunParams, method: methods.Method):
    """The policy model and its Replica, identical on every process built from `params`."""
    from trainers.pretrained import base_for

    rank = method.lora_rank or params.lora_rank
    model = attach_lora(base_for(params), LoraSpec(rank=rank, seed=params.seed))  # base: pre-trained, cached
    optim = OptimConfig(lr=params.lr)
    return model, Replica(lora_parameters(model), optim)


def build_tokenizer_for(params: RunParams):
    return build_tokenizer(params.model)


def build_task(params: RunParams):
    from trainers.tasks import get_task, parse_task_options

    return get_task(params.task, **parse_task_options(params.task, params.task_options))


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
