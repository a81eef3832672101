"""A DiLoCo-style loop in plain torch.distributed (gloo, CPU): H local inner steps, then one outer
all-reduce of the pseudo-gradient (start-of-round weights - local weights), averaged, applied with
Nesterov SGD on every replica.

    harness wrap --bw 20mbit --delay 20ms --nodes 2 -- python examples/wrap/diloco.py --inner 4 --rounds 3

One step mark per inner step (phase "inner"); the outer sync is marked on the step that ends a round
(phase "outer_sync"), so s/step is the amortised cost. Reads only the env:// variables.
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wan_steps import Steps  # noqa: E402


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    w = ARGS.width
    model = torch.nn.Sequential(torch.nn.Linear(w, w), torch.nn.ReLU(), torch.nn.Linear(w, 1))
    inner = torch.optim.AdamW(model.parameters(), lr=1e-3)
    glob = [p.detach().clone() for p in model.parameters()]          # the outer (global) weights
    outer = torch.optim.SGD(glob, lr=ARGS.outer_lr, momentum=0.9, nesterov=True)
    gen = torch.Generator().manual_seed(1000 + rank)
    true_w = torch.randn(w, 1, generator=torch.Generator().manual_seed(7)) / w ** 0.5
    steps, n = Steps(), 0
    for _ in range(ARGS.rounds):
        for h in range(ARGS.inner):
            with steps.step(n):
                with steps.phase("inner"):
                    x = torch.randn(ARGS.batch, w, generator=gen)
                    loss = torch.nn.functional.mse_loss(model(x), x @ true_w)
                    loss.backward()
                    inner.step()
                    inner.zero_grad()
                if h == ARGS.inner - 1:
                    with steps.phase("outer_sync"):
                        delta = [g - p.detach() for g, p in zip(glob, model.parameters())]
                        flat = torch.cat([d.flatten() for d in delta])
                        dist.all_reduce(flat)            # one message per round: every parameter, fp32
                        flat /= world
                        at = 0
                        for g, d in zip(glob, delta):
                            g.grad = flat[at:at + d.numel()].view_as(d)
                            at += d.numel()
                        outer.step()
                        with torch.no_grad():
                            for p, g in zip(model.parameters(), glob):
                                p.copy_(g)
            n += 1
    if rank == 0:
        print(f"diloco world={world} rounds={ARGS.rounds} inner={ARGS.inner} final_loss={loss.item():.5f}")
    # every rank reaches teardown before any closes its connections: gloo aborts a rank whose peer
    # hangs up while its own threads still read ("terminate called without an active exception")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--inner", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--outer-lr", type=float, default=0.7)
    ARGS = parser.parse_args()
    main()
