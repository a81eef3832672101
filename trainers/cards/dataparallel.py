"""The data-parallel methods' cards (trainers/dataparallel/*.py implement them): name (lordo-*: the QHM
readings its name may carry), class, whether it syncs every --lordo-k steps, its bytes per step and its
plot style.

The byte rules count what one worker ships per optimizer step, each direction, in bytes of tensor data (4
bytes per fp32 element: the methods' `claimed_bytes`, docs/ALGORITHMS.md "Bytes per sync per worker"),
for a replica whose synchronised tensors are `t` ((name, shape): the whole model under --dp-train full,
the LoRA factors under lora). Per matrix p x q: s = min(p, q), l = max(p, q); a "low-rank" matrix is an
attention/MLP weight with --lordo-rank < s; n = elements of the rest (dense). `sync` is the run's
settings (harness/projection/dpbytes.py Sync) with what the name implies applied.
tests/harness/projection/test_dpbytes.py holds every rule equal to the methods' `claimed_bytes`."""
from __future__ import annotations

import math
import re
from typing import Any

from trainers.cards import Card, Tensors

ELEMENT_BYTES = 4              # fp32 on the wire (trainers/dataparallel/base.py ELEMENT_BYTES)
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")  # base.py TARGETS
QHM_SUFFIX = {"none": "none", "lowrank": "low-rank", "fullrank": "full-rank"}   # name suffix -> --lordo-qhm
QHM_READINGS = ("gradient", "reduced", "reapplied")   # trainers/optim/lordo.py QHM_RESIDUALS


def _split(t: Tensors, rank: int) -> tuple[list[tuple[int, int]], int]:
    """([(s, l)] of the low-rank matrices, elements of the dense rest)."""
    def lowrank(name: str, shape: tuple[int, ...]) -> bool:
        return len(shape) == 2 and any(f"{x}." in name for x in TARGETS) and rank < min(shape)

    low = [(min(s), max(s)) for n, s in t if lowrank(n, s)]
    return low, sum(math.prod(s) for n, s in t if not lowrank(n, s))


def _bytes(up: int, down: int) -> tuple[int, int]:
    return up * ELEMENT_BYTES, down * ELEMENT_BYTES


def _syncs(step: int, sync: Any) -> bool:
    """A K-step method syncs every K steps and at the last step."""
    return step % sync.k == 0 or step == sync.steps


def dense_bytes(t: Tensors, step: int, sync: Any) -> tuple[int, int]:
    """ddp, lowrank-ddp-dense: every element each way, every step."""
    every = sum(math.prod(s) for _, s in t)
    return _bytes(every, every)


def projected_bytes(t: Tensors, step: int, sync: Any) -> tuple[int, int]:
    """lowrank-ddp(-projected): n + r l each way, every element at refresh steps (1, R + 1, ...)."""
    if (step - 1) % sync.refresh == 0:
        return dense_bytes(t, step, sync)
    low, n = _split(t, sync.rank)
    x = n + sum(sync.rank * l for _, l in low)
    return _bytes(x, x)


def diloco_bytes(t: Tensors, step: int, sync: Any) -> tuple[int, int]:
    """diloco: every element each way at a sync."""
    return dense_bytes(t, step, sync) if _syncs(step, sync) else (0, 0)


def lordo_bytes(projection: str):
    """lordo-global: up n + [r l without the full-rank QHM term | s l with it, or at the first sync after a
    dense first window], down the same + s r (the new Q); at a state sync (every K_states steps and the
    last) + 2 n and + 2 r l (2 s l after the dense first window) each way. lordo-local: up n + [s r + r l |
    s l], down n + s l; + 2 n each way at a state sync (trainers/dataparallel/lordo.py `claimed_bytes`)."""
    def rule(t: Tensors, step: int, sync: Any) -> tuple[int, int]:
        if not _syncs(step, sync):
            return 0, 0
        low, n = _split(t, sync.rank)
        states = step % sync.k_states == 0 or step == sync.steps
        factored = sync.qhm != "full-rank" or sync.omega >= 1.0      # pseudo-gradients lie in span(Q)
        r = sync.rank
        up = down = n * (3 if states else 1)                         # + the dense parameters' Adam moments
        for s, l in low:
            if projection == "global":
                dense = sync.initial_q == "pseudo-gradient" and step == min(sync.k, sync.steps)  # Q = I before
                body = (r * l if factored and not dense else s * l) + (2 * (s if dense else r) * l if states else 0)
                up, down = up + body, down + body + s * r
            else:
                up, down = up + (s * r + r * l if factored else s * l), down + s * l
        return _bytes(up, down)
    return rule


def lordo_names(base: str):
    """`base`, `base-none|lowrank|fullrank` (the QHM term, over --lordo-qhm) and, after -fullrank,
    `-gradient|reduced|reapplied` (what the term applies, over --lordo-qhm-residual)."""
    grammar = re.compile(rf"^{re.escape(base)}(?:-({'|'.join(QHM_SUFFIX)}))?(?:-({'|'.join(QHM_READINGS)}))?$")

    def parse(name: str) -> dict[str, Any] | None:
        m = grammar.match(name)
        if not m or m.group(2) and m.group(1) != "fullrank":
            return None
        return {**({"qhm": QHM_SUFFIX[m.group(1)]} if m.group(1) else {}),
                **({"qhm_residual": m.group(2)} if m.group(2) else {})}
    return parse


def _lordo(projection: str, styles: dict) -> Card:
    name = f"lordo-{projection}"
    return Card("dataparallel", name, f"trainers.dataparallel.lordo:Lordo{projection.title()}",
                names=lordo_names(name), every_k=True, sync_bytes=lordo_bytes(projection), styles=styles,
                spelled=(f"{name}-{{{','.join(QHM_SUFFIX)}}}", f"{name}-fullrank-{{{','.join(QHM_READINGS)}}}"))


DDP = Card("dataparallel", "ddp", "trainers.dataparallel.ddp:DDP", sync_bytes=dense_bytes, style=("#000000", "d"))
DILOCO = Card("dataparallel", "diloco", "trainers.dataparallel.diloco:DiLoCo", every_k=True, sync_bytes=diloco_bytes,
              style=("#009E73", "H"))
LORDO_GLOBAL = _lordo("global", {"lordo-global": ("#D55E00", "^"), "lordo-global-fullrank": ("#D55E00", "D"),
                                 "lordo-global-none": ("#E69F00", "v"), "lordo-global-lowrank": ("#F0E442", "<")})
LORDO_LOCAL = _lordo("local", {"lordo-local": ("#CC79A7", "s"), "lordo-local-none": ("#56B4E9", "o")})
# lowrank-ddp-projected: Q^T G on the wire (GaLore-style); `lowrank-ddp` is its name before the split (old
# results); lowrank-ddp-dense: the LoRDO review's baseline (dense gradients every step, Q in the optimizer only).
LOWRANK_DDP_PROJECTED = Card("dataparallel", "lowrank-ddp-projected", "trainers.dataparallel.lowrank_ddp:LowRankDDP",
                             sync_bytes=projected_bytes)
LOWRANK_DDP = Card("dataparallel", "lowrank-ddp", "trainers.dataparallel.lowrank_ddp:LowRankDDPLegacyName",
                   sync_bytes=projected_bytes, style=("#0072B2", "8"))
LOWRANK_DDP_DENSE = Card("dataparallel", "lowrank-ddp-dense", "trainers.dataparallel.lowrank_ddp:LowRankDDPDense",
                         sync_bytes=dense_bytes)
