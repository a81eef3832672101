"""The cost model's byte rules for the data-parallel family (pure: shapes in, bytes out).

What one worker ships per optimizer step, each direction, in bytes of tensor data, for a replica whose
synchronised tensors are `tensors` ((name, shape), the whole model under --dp-train full, the LoRA
factors under lora): each method's rule is on its card (trainers/cards/dataparallel.py, which states
the formulas), applied to the run's settings (`Sync`) with what the method's name implies (the lordo-*
QHM readings). A method's bytes per step is the mean over the run's whole sync windows (a partial window
at the end is left out, as the report counts it: harness/results/windows.py `tail_steps`).
The test (tests/harness/projection/test_dpbytes.py) holds the rules equal to the methods' `claimed_bytes`
step by step.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from typing import Any, Mapping

from trainers import cards

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


def _card(method: str) -> tuple[cards.Card, dict[str, Any]]:
    found = cards.match("dataparallel", method)
    if found is None or found[0].sync_bytes is None:
        raise ValueError(f"no data-parallel byte rule for method {method!r} (a plugin states its own "
                         f"claimed_bytes; valid: {', '.join(c.name for c in cards.of('dataparallel'))} and "
                         "the lordo-* variants)")
    return found


def step_bytes(method: str, tensors: Tensors, step: int, sync: Sync) -> tuple[int, int]:
    """(up, down) payload bytes of tensor data one worker ships at optimizer step `step` (1-based)."""
    card, implied = _card(method)
    fields = {f.name for f in dataclasses.fields(Sync)}
    return card.sync_bytes(tensors, step, replace(sync, **{k: v for k, v in implied.items() if k in fields}))


def whole_windows(method: str, steps: int, k: int) -> int:
    """The steps the per-step bytes are counted over: a K-step method's whole sync windows."""
    found = cards.match("dataparallel", method)
    if found is not None and found[0].every_k and steps >= k:
        return steps // k * k
    return steps


def bytes_per_step(method: str, tensors: Tensors, sync: Sync) -> tuple[float, float]:
    """(up, down) mean bytes per optimizer step per worker over the run's whole sync windows."""
    counted = whole_windows(method, sync.steps, sync.k)
    per = [step_bytes(method, tensors, step, sync) for step in range(1, counted + 1)]
    return sum(u for u, _ in per) / counted, sum(d for _, d in per) / counted
