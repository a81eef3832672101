"""A seeded language-modelling corpus generated here (no downloads): sentences of a small
probabilistic grammar plus arithmetic facts, as bytes for the byte-level tokenizer.

The grammar has structure a tiny model can learn in a few hundred steps (agreement between
subject and verb, numbers that must add up), so held-out perplexity moves measurably.

    corpus = Corpus(seed=1, seq_len=64)
    x = corpus.batch(worker=2, step=7, size=8)   # (8, 64) int64 token ids: worker 2's shard
    h = corpus.heldout(n=64)                     # a split no worker ever trains on

Worker shards and the held-out split draw from disjoint random streams (the stream key holds
the split and the worker), so the same (seed, worker, step) gives the same batch everywhere.
"""
from __future__ import annotations

import random

import torch

SUBJECTS = {"sg": ["the cat", "a dog", "the bird", "my friend", "the robot", "a child"],
            "pl": ["the cats", "two dogs", "the birds", "my friends", "the robots", "some children"]}
VERBS = {"sg": ["sees", "likes", "follows", "paints", "finds"], "pl": ["see", "like", "follow", "paint", "find"]}
OBJECTS = ["the red ball", "a green box", "the old tree", "a small boat", "the blue door", "a bright star"]
PLACES = ["in the park", "near the river", "at home", "on the hill", "under the bridge"]


def sentence(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.3:
        a, b = rng.randrange(50), rng.randrange(50)
        return f"{a} plus {b} is {a + b}."
    n = rng.choice(("sg", "pl"))
    s = f"{rng.choice(SUBJECTS[n])} {rng.choice(VERBS[n])} {rng.choice(OBJECTS)}"
    if rng.random() < 0.5:
        s += " " + rng.choice(PLACES)
    return s + "."


class Corpus:
    """Fixed-length byte sequences from the grammar; see the module docstring."""

    def __init__(self, seed: int, seq_len: int = 64):
        if seq_len < 8:
            raise ValueError(f"seq_len must be >= 8, got {seq_len}")
        self.seed, self.seq_len = seed, seq_len

    def _sequence(self, rng: random.Random) -> list[int]:
        text = ""
        while len(text) < self.seq_len:
            text += sentence(rng) + " "
        start = rng.randrange(0, len(text) - self.seq_len + 1)   # windows start mid-sentence too
        return list(text[start:start + self.seq_len].encode())

    def _batch(self, key: str, size: int) -> torch.Tensor:
        rng = random.Random(f"{self.seed}/{key}")
        return torch.tensor([self._sequence(rng) for _ in range(size)], dtype=torch.long)

    def batch(self, worker: int, step: int, size: int) -> torch.Tensor:
        """(size, seq_len) token ids: worker `worker`'s batch at optimizer step `step`."""
        return self._batch(f"train/{worker}/{step}", size)

    def heldout(self, n: int) -> torch.Tensor:
        return self._batch("heldout", n)


def lm_loss(model, ids: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy (nats per token) of a causal LM on `ids`."""
    return model(input_ids=ids, labels=ids).loss


@torch.no_grad()
def perplexity(model, ids: torch.Tensor, batch: int = 32) -> float:
    """exp(mean token cross-entropy) over `ids`, in batches."""
    losses = [float(lm_loss(model, ids[i:i + batch])) * len(ids[i:i + batch]) for i in range(0, len(ids), batch)]
    return float(torch.tensor(sum(losses) / len(ids)).exp())
