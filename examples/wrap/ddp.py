"""torch.distributed DDP on gloo (CPU), a tiny MLP, with one of torch's own communication hooks.

    harness wrap --bw 20mbit --nodes 2 -- .venv/bin/python examples/wrap/ddp.py --hook powersgd --steps 12

(the Python that has torch: the command runs as given, in each node's namespace).

Reads nothing but the torch.distributed env:// variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT);
marks each step (wan_steps.py) when $WAN_EVENTS is set. --hook: allreduce (default_hooks.allreduce_hook),
fp16 (default_hooks.fp16_compress_hook: half the bytes) or powersgd (powerSGD_hook.powerSGD_hook, rank
--powersgd-rank, error feedback on; its first two iterations are plain all-reduces). The first
--warmup steps are not marked. Each rank's data is its own seeded random batch of a fixed linear task.
"""
import argparse
import contextlib
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wan_steps import Steps  # noqa: E402


def hooked(model: DDP, hook: str, rank: int) -> DDP:
    if hook == "allreduce":
        model.register_comm_hook(None, default_hooks.allreduce_hook)
    elif hook == "fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=ARGS.powersgd_rank,
                                            start_powerSGD_iter=2, random_seed=0)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    return model


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")          # env://
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)                     # every replica starts from the same weights
    w = ARGS.width
    net = torch.nn.Sequential(torch.nn.Linear(w, w), torch.nn.ReLU(), torch.nn.Linear(w, w), torch.nn.ReLU(),
                              torch.nn.Linear(w, 1))
    model = hooked(DDP(net), ARGS.hook, rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(1000 + rank)
    target = torch.Generator().manual_seed(7)
    true_w = torch.randn(w, 1, generator=target) / w ** 0.5
    steps = Steps()
    for i in range(ARGS.warmup + ARGS.steps):
        x = torch.randn(ARGS.batch, w, generator=gen)
        y = x @ true_w
        marked = steps.step(i - ARGS.warmup, hook=ARGS.hook) if i >= ARGS.warmup else contextlib.nullcontext()
        with marked:
            with steps.phase("forward"):
                loss = torch.nn.functional.mse_loss(model(x), y)
            with steps.phase("backward+sync"):  # DDP's hook runs its all-reduce inside backward
                loss.backward()
            with steps.phase("optimizer"):
                opt.step()
                opt.zero_grad()
    if rank == 0:
        params = sum(p.numel() for p in net.parameters())
        print(f"ddp hook={ARGS.hook} world={world} params={params} fp32_bytes={4 * params} final_loss={loss.item():.5f}")
    # every rank reaches teardown before any closes its connections: gloo aborts a rank whose peer
    # hangs up while its own threads still read ("terminate called without an active exception")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--hook", choices=("allreduce", "fp16", "powersgd"), default="allreduce")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--width", type=int, default=384)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--powersgd-rank", type=int, default=4)
    ARGS = parser.parse_args()
    main()
