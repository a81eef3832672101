"""Benchmark: `delta`'s codecs (zstd vs lz4, trainers/compress/delta.py) on a real LoRA Adam trajectory.

    .venv/bin/python -m pytest tests/benchmarks/test_delta_codecs.py -m benchmark -s

The trajectory: the `tiny` model's LoRA adapter (rank 16, the seven projections) trained with AdamW
(lr 2e-3, as in the default HiLo run) on the data-parallel corpus's LM loss for STEPS steps; after each step the adapter is encoded as a delta of its bf16
rounding against the previous step's, with each codec. Prints per codec: density (changed / total,
the same for both), bytes (median over steps) and their share of the bf16 adapter, encode and apply
milliseconds (median over REPEATS per step). Asserts only what is not a time: both codecs round-trip
to the bf16 adapter and both ship fewer bytes than the raw (index, value) pairs.
"""
import statistics
import time

import pytest
import torch

from trainers.compress.delta import CODECS, HEADER, DeltaSync
from trainers.dataparallel.corpus import Corpus, lm_loss
from trainers.dataparallel.inprocess import replica

STEPS = 12
REPEATS = 3
pytestmark = pytest.mark.benchmark


def trajectory() -> list[dict[str, torch.Tensor]]:
    """The fp32 adapter at versions 0..STEPS: AdamW (lr 2e-3, the default HiLo run's) on the LM loss."""
    model, params = replica("tiny", seed=0, train="lora", lora_rank=16)
    opt = torch.optim.AdamW(params.values(), lr=2e-3)
    corpus = Corpus(0, 32)
    adapters = [{n: p.detach().clone() for n, p in params.items()}]
    for step in range(1, STEPS + 1):
        lm_loss(model, corpus.batch(1, step, 4)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        adapters.append({n: p.detach().clone() for n, p in params.items()})
    return adapters


def test_zstd_vs_lz4_on_a_lora_adam_trajectory():
    adapters = trajectory()
    total = sum(t.numel() for t in adapters[0].values())
    print(f"\nadapter: {total} elements, bf16 {2 * total} bytes; {len(adapters) - 1} deltas")
    for codec in CODECS:
        learner, worker = DeltaSync(adapters[0], codec=codec), DeltaSync(adapters[0], codec=codec)
        sizes, densities, enc, dec = [], [], [], []
        for v, a in enumerate(adapters[1:], 1):
            times = []
            for _ in range(REPEATS):  # encode is stateful: time it on a fresh copy at the same base
                probe = DeltaSync(adapters[0], codec=codec)
                probe.reference, probe.version = learner.reference.clone(), learner.version
                t0 = time.perf_counter()
                probe.encode(a, v)
                times.append(time.perf_counter() - t0)
            payload, changed = learner.encode(a, v)
            t0 = time.perf_counter()
            held, _ = worker.apply(payload)
            dec.append(time.perf_counter() - t0)
            assert all(torch.equal(held[n], a[n].to(torch.bfloat16)) for n in a)
            assert len(payload) - HEADER.size < 6 * changed
            enc.append(statistics.median(times))
            sizes.append(len(payload))
            densities.append(changed / total)
        print(f"{codec}: density median {100 * statistics.median(densities):.1f}% "
              f"[{100 * min(densities):.1f}, {100 * max(densities):.1f}], bytes median {statistics.median(sizes):,.0f} "
              f"= {100 * statistics.median(sizes) / (2 * total):.1f}% of bf16 "
              f"({statistics.median(sizes) / (6 * statistics.median(densities) * total):.2f} of the raw pairs), "
              f"encode {1e3 * statistics.median(enc):.2f} ms, apply {1e3 * statistics.median(dec):.2f} ms")
