"""The cost model's byte rules for the data-parallel family (pure: shapes in, bytes out).

What one worker ships per optimizer step, each direction, in bytes of tensor data (4 bytes per fp32
element: the methods' `claimed_bytes`, trainers/dataparallel/*.py, docs/ALGORITHMS.md "Bytes per
sync per worker"), for a replica whose synchronised tensors are `tensors` ((name, shape), the whole
model under --dp-train full, the LoRA factors under lora). Per matrix p x q: s = min(p, q),
l = max(p, q); a "low-rank" matrix is an attention/MLP weight with --lordo-rank < s; n = elements of
the rest (dense):
- ddp, lowrank-ddp-dense: every element each way, every step;
- lowrank-ddp(-projected): n + r l each way, every element at refresh steps (1, R + 1, ...);
- diloco: every element each way at a sync (every K steps and the last step);
- lordo-global: up n + [r l without the full-rank QHM term | s l with it, or at the first sync
  after a dense first window], down the same + s r (the new Q); at a state sync (every K_states
  steps and the last) + 2 n and + 2 r l (2 s l after the dense first window) each way;
- lordo-local: up n + [s r + r l | s l], down n + s l; + 2 n each way at a state sync.
A method's bytes per step is the mean over the run's whole sync windows (a partial window at the
end is left out, as the report counts it: harness/results/dataparallel_report.py `tail_steps`).
This module mirrors the methods' formulas so that the harness stays torch-free; the test
(tests/harness/projection/test_dpbytes.py) holds it equal to their `claimed_bytes` step by step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping

from trainers import spec

ELEMENT_BYTES = 4              # fp32 on the wire (trainers/dataparallel/base.py ELEMENT_BYTES)
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")  # base.py TARGETS
QHM_SUFFIX = {"none": "none", "lowrank": "low-rank", "fullrank": "full-rank"}         # dataparallel/__init__.py
K_STEP = ("diloco", "lordo-global", "lordo-local")   # sync every K steps (the rest: every step)

Tensors = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True)
class Sync:
    """The byte-relevant settings of a data-parallel run (trainers/dataparallel/base.py DPConfig)."""
    steps: int
    k: int = 8
    k_states: int = 8
    refresh: int = 200
    rank: int = 8
    qhm: str = "full-rank"
    omega: float = 0.97
    initial_q: str = "pseudo-gradient"

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> "Sync":
        """From a run's config.json values (the run spec's parameters)."""
        return cls(steps=int(cfg["updates"]), k=int(cfg["lordo_k"]),
                   k_states=int(cfg.get("lordo_k_states") or cfg["lordo_k"]),
                   refresh=int(cfg["lowrank_ddp_refresh"]), rank=int(cfg["lordo_rank"]), qhm=str(cfg["lordo_qhm"]),
                   omega=float(cfg["lordo_omega"]),
                   # absent from a run older than --lordo-initial-q, whose first Q was the seeded random basis
                   initial_q=str(cfg.get("lordo_initial_q") or "random"))


def _split(method: str, sync: Sync) -> tuple[str, Sync]:
    """(the method's family name, the settings with a QHM suffix applied): lordo-global-none -> lordo-global."""
    m = spec.DP_METHOD.match(method)
    if not (m and spec.is_data_parallel(method)):
        raise ValueError(f"no data-parallel byte rule for method {method!r} (a plugin states its own "
                         f"claimed_bytes; valid: {', '.join(spec.DP_METHODS)} and the lordo-* variants)")
    qhm = QHM_SUFFIX[m.group(2)] if m.group(2) else sync.qhm
    return m.group(1), replace(sync, qhm=qhm)


def _lowrank(name: str, shape: tuple[int, ...], rank: int) -> bool:
    return len(shape) == 2 and any(f"{t}." in name for t in TARGETS) and rank < min(shape)


def step_bytes(method: str, tensors: Tensors, step: int, sync: Sync) -> tuple[int, int]:
    """(up, down) payload bytes of tensor data one worker ships at optimizer step `step` (1-based)."""
    family, sync = _split(method, sync)
    low = [(min(s), max(s)) for n, s in tensors if _lowrank(n, s, sync.rank)]
    n = sum(math.prod(s) for name, s in tensors if not _lowrank(name, s, sync.rank))
    every = n + sum(s * l for s, l in low)
    r = sync.rank
    if family in ("ddp", "lowrank-ddp-dense"):
        up = down = every
    elif family in ("lowrank-ddp", "lowrank-ddp-projected"):
        up = down = every if (step - 1) % sync.refresh == 0 else n + sum(r * l for _, l in low)
    elif step % sync.k and step != sync.steps:     # diloco, lordo: no sync at this step
        up = down = 0
    elif family == "diloco":
        up = down = every
    else:
        up, down = _lordo(family, low, n, step, sync)
    return up * ELEMENT_BYTES, down * ELEMENT_BYTES


def _lordo(family: str, low: list[tuple[int, int]], n: int, step: int, sync: Sync) -> tuple[int, int]:
    """(up, down) elements of a LoRDO sync (trainers/dataparallel/lordo.py `claimed_bytes`)."""
    states = step % sync.k_states == 0 or step == sync.steps
    factored = sync.qhm != "full-rank" or sync.omega >= 1.0      # pseudo-gradients lie in span(Q)
    r = sync.rank
    up = down = n * (3 if states else 1)                         # + the dense parameters' Adam moments
    for s, l in low:
        if family == "lordo-global":
            dense = sync.initial_q == "pseudo-gradient" and step == min(sync.k, sync.steps)   # first sync, Q = I before
            body = (r * l if factored and not dense else s * l) + (2 * (s if dense else r) * l if states else 0)
            up, down = up + body, down + body + s * r
        else:
            up, down = up + (s * r + r * l if factored else s * l), down + s * l
    return up, down


def whole_windows(method: str, steps: int, k: int) -> int:
    """The steps the per-step bytes are counted over: a K-step method's whole sync windows."""
    family = spec.DP_METHOD.match(method)
    if family and family.group(1) in K_STEP and steps >= k:
        return steps // k * k
    return steps


def bytes_per_step(method: str, tensors: Tensors, sync: Sync) -> tuple[float, float]:
    """(up, down) mean bytes per optimizer step per worker over the run's whole sync windows."""
    counted = whole_windows(method, sync.steps, sync.k)
    per = [step_bytes(method, tensors, step, sync) for step in range(1, counted + 1)]
    return sum(u for u, _ in per) / counted, sum(d for _, d in per) / counted
