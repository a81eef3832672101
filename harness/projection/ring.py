"""A ring all-reduce over the emulated links: how long one takes, from the cost model's link terms.

N nodes, each with its own access link (the wrapped job's nodes w1..wN; every path goes through
the router: node i's uplink, node i+1's downlink). A ring all-reduce of B payload bytes runs
2(N-1) steps (N-1 reduce-scatter, N-1 all-gather); in each, every node sends B/N bytes to its
successor at once, and a step ends when the slowest hop has delivered its chunk::

    T(B) = 2(N-1) * max_i [ (B/N) / goodput(i -> i+1) + one-way delay(i -> i+1) ]
         = 2(N-1)/N * B / rate  +  2(N-1) * latency            (identical links)

goodput and delay are the cost model's (harness/projection/network.py): a TCP flow's payload
rate on the path (line rate x the headers' share, loss and window ceilings) and the sum of the two
access links' one-way delays. Each node sends 2(N-1)/N * B payload bytes per all-reduce, which is
how a measured job's bytes give B back (`payload_from_sent`). Slow-start restarts after idle gaps
and the CPU's reduce are left out: the wrapped job's compute is measured, not modelled.
"""
from __future__ import annotations

import math

from harness.projection.network import Network, flow_rate_Bps, path


def payload_from_sent(sent_bytes_per_node: float, n: int) -> float:
    """B: the all-reduced bytes whose ring sends `sent_bytes_per_node` from every node (N > 1)."""
    return sent_bytes_per_node * n / (2 * (n - 1))


def ring_allreduce_s(nbytes: float, net: Network) -> dict:
    """Seconds of one ring all-reduce of `nbytes` over `net.workers` (in ring order), with the terms:
    {"seconds", "bandwidth_s", "latency_s", "bottleneck"}; 0 s for one node or no bytes."""
    nodes = net.workers
    n = len(nodes)
    if n < 2 or nbytes <= 0:
        return {"seconds": 0.0, "bandwidth_s": 0.0, "latency_s": 0.0, "bottleneck": "-"}
    chunk = nbytes / n
    worst = (-1.0, 0.0, 0.0, "-")
    for i in range(n):
        p = path(nodes[i], nodes[(i + 1) % n])
        rate = flow_rate_Bps(p, net)
        send = 0.0 if math.isinf(rate) else chunk / rate
        if send + p.delay_s > worst[0]:
            worst = (send + p.delay_s, send, p.delay_s, f"w{i + 1} -> w{(i + 1) % n + 1}")
    steps = 2 * (n - 1)
    return {"seconds": steps * worst[0], "bandwidth_s": steps * worst[1], "latency_s": steps * worst[2],
            "bottleneck": worst[3]}
