"""PyTorch's own `powerSGD_hook` (torch.distributed.algorithms.ddp_comm_hooks) on the benchmark's
gradients, as an external reference row of `harness bench-compress`: its relative error, the bytes
it all-reduces (fp32 P and Q, and any tensor it leaves uncompressed) and its CPU time per step.

The hook runs as DDP runs it: a one-process gloo group (world size 1: the all-reduce moves nothing,
so the time is the hook's compression and decompression), a module whose parameters have the
gradients' shapes and whose backward yields exactly the gradients, one bucket per DDP's default
bucketing. Only the hook's own call (to its future's completion) is timed.
"""
from __future__ import annotations

import contextlib
import gc
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd


@dataclass
class HookFigures:
    rank: int
    payload_bytes: int      # fp32 values all-reduced per step (P, Q and uncompressed tensors)
    rel_error: float        # of the first compressed step (fresh error feedback, as the other rows)
    cpu_s: list[float]      # CPU seconds of each timed step's hook calls (steady state)


class _Sink(torch.nn.Module):
    """Parameters shaped like the gradients; loss = sum_i <p_i, g_i>, so p_i.grad = g_i exactly."""

    def __init__(self, grads: dict[str, torch.Tensor]):
        super().__init__()
        self.names = list(grads)
        self.params = torch.nn.ParameterList(torch.nn.Parameter(torch.zeros_like(g)) for g in grads.values())
        self.grads = [g.detach().to(torch.float32) for g in grads.values()]

    def forward(self) -> torch.Tensor:
        return sum((p * g).sum() for p, g in zip(self.params, self.grads))


@contextlib.contextmanager
def _one_process_group():
    if dist.is_initialized():
        yield
        return
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def run_hook(grads: dict[str, torch.Tensor], rank: int, repeats: int, between=lambda: None) -> HookFigures:
    """`repeats` timed steps of powerSGD_hook at `rank` after its two vanilla steps and one
    compressed warm-up step; `between()` runs before each timed step (the benchmark's side-by-side
    memcpy)."""
    with _one_process_group():
        figures = _measure(grads, rank, repeats, between)
        gc.collect()          # DDP's reducer goes before its process group does (else abort at exit)
        return figures


def _measure(grads: dict[str, torch.Tensor], rank: int, repeats: int, between) -> HookFigures:
    """`run_hook` inside the process group: DDP and its reducer live only in this call."""
    sink = _Sink(grads)
    ddp = torch.nn.parallel.DistributedDataParallel(sink)
    state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=rank, start_powerSGD_iter=2,
                               min_compression_rate=1, use_error_feedback=True, warm_start=True)
    cpu: list[float] = []
    timing = {"on": False}

    def hook(st, bucket):
        t0 = time.process_time()
        fut = psgd.powerSGD_hook(st, bucket)
        fut.wait()
        if timing["on"]:
            cpu[-1] += time.process_time() - t0
        return fut

    ddp.register_comm_hook(state, hook)

    def step() -> list[torch.Tensor]:
        ddp.zero_grad(set_to_none=True)
        ddp().backward()
        return [p.grad for p in sink.params]

    step(), step()                                       # vanilla all-reduce until start_powerSGD_iter
    before = state.total_numel_after_compression
    out = step()                                         # the first compressed step
    numel = state.total_numel_after_compression - before
    ref = sink.grads
    err = (sum(float((o - g).double().norm() ** 2) for o, g in zip(out, ref))
           / sum(float(g.double().norm() ** 2) for g in ref)) ** 0.5
    timing["on"] = True
    for _ in range(repeats):
        between()
        cpu.append(0.0)
        step()
    del ddp
    return HookFigures(rank, int(numel) * 4, err, cpu)
