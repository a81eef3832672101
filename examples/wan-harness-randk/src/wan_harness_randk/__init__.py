"""`randk`: k gradient elements chosen at random, under the run's byte budget, with error feedback.

Random-k sparsification (Stich, Cordonnier and Jaggi, "Sparsified SGD with Memory", NeurIPS 2018):
the positions are drawn from a seed, so only the seed and the k values go on the wire (no
indices, unlike top-k: twice the values for the same bytes). The values are sent unscaled;
error feedback (the harness's base class) carries the unsent rest into the next update, which is
what makes random-k converge (the "memory" of the paper).

Payload: the harness's HLOC container with one segment, `values` (k elements in `dtype`), and the
draw's seed and the adapter's element count in the table's meta. Decode is pure: it redraws the same
positions from the seed. The count is checked against the shape table: the positions are a function
of the total alone, so without it a forged table of another size would decode without a word.
"""
from __future__ import annotations

import math

import torch

from trainers.compress.base import BudgetedCompressor, check_wire_dtype
from trainers.compress.container import header_bytes, require, Segment, Unpacked
from trainers.compress.kernels import flatten, unflatten
from trainers.protocol.dtypes import DTYPES, itemsize

SEED_STRIDE = 1_000_003   # seed of update t: seed * SEED_STRIDE + t (distinct draws per run seed and update)


class RandKCompressor(BudgetedCompressor):
    """k random elements of the error-corrected gradient per update, k filling the byte budget."""

    name = "randk"   # the entry point's name wins; set here too for use without the harness's registry
    options = {"dtype": "fp16", "seed": 0}

    def _validate(self) -> None:
        super()._validate()
        self.dtype = check_wire_dtype(self.name, self.config["dtype"])
        if not isinstance(self.config["seed"], int) or self.config["seed"] < 0:
            raise ValueError(f"{self.name}: seed must be a non-negative integer, got {self.config['seed']!r}")
        self.updates = 0

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The residual (the base class's) and the update counter that seeds the next draw: a learner
        restarted from its snapshot draws the positions the original would have drawn."""
        return {**super().state_dict(), "updates": torch.tensor(self.updates, dtype=torch.int64)}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        state = dict(state)
        updates = state.pop("updates", None)
        if updates is None or updates.dtype != torch.int64 or updates.numel() != 1 or int(updates) < 0:
            raise ValueError(f"{self.name}: compressor state holds no update counter (a non-negative int64)")
        self.updates = int(updates)
        super().load_state_dict(state)

    def _compress(self, m):
        layout = [(n, tuple(t.shape)) for n, t in m.items()]
        flat = flatten(m)
        seed = self.config["seed"] * SEED_STRIDE + self.updates
        self.updates += 1
        k = self._k(layout, flat.numel(), seed)
        values = flat[positions(flat.numel(), k, seed)].to(DTYPES[self.dtype])
        return [Segment("values", self.dtype, values)], {"seed": seed, "numel": flat.numel()}

    def _k(self, layout, numel: int, seed: int) -> int:
        """The most elements whose payload fits the budget (the header counted exactly)."""
        budget = self.budget_for([s for _, s in layout])
        size = lambda k: header_bytes(self.name, layout, [("values", self.dtype, k)], {"seed": seed, "numel": numel}) \
            + k * itemsize(self.dtype)  # noqa: E731
        k = min(numel, max(0, (budget - size(0)) // itemsize(self.dtype)))
        while k > 1 and size(k) > budget:    # the count's digits grow the header by a byte or two
            k -= 1
        if k < 1:
            raise ValueError(f"{self.name}: budget of {budget} bytes cannot hold one value after the header")
        return int(k)

    def _reconstruct(self, p: Unpacked):
        total = sum(math.prod(s) for _, s in p.tensors)
        values, seed = p.segments.get("values"), p.meta.get("seed")
        require(values is not None and 0 < values.numel() <= total, self.name, "values segment missing or too long")
        require(isinstance(seed, int) and 0 <= seed < 2**63, self.name, "meta holds no valid seed")
        require(p.meta.get("numel") == total, self.name, "the shape table does not hold the encoded element count")
        flat = torch.zeros(total, dtype=torch.float32)
        flat[positions(total, values.numel(), seed)] = values.to(torch.float32)
        return unflatten(flat, p.tensors)


def positions(n: int, k: int, seed: int) -> torch.Tensor:
    """k distinct positions in [0, n), a pure function of (n, k, seed) on every machine and thread count."""
    g = torch.Generator().manual_seed(seed)
    return torch.randperm(n, generator=g)[:k]
