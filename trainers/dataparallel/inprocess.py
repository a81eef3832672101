"""The data-parallel loop with every worker and the aggregator in one process: what the tests'
equivalences and the stagnation falsifier run (the wire adds bytes, never arithmetic: the dp
worker and the aggregator call the same step/combine/finish with the same tensors).

    trace = simulate("lordo-global", DPConfig(steps=64, k=8), workers=2)
    trace.losses[step - 1], trace.overlaps (one per sync), trace.heldout_ppl

`on_sync(step, ups, down, losses)`, if given, sees every sync's tables as exchanged: each worker's
upload, the aggregator's download, and each worker's losses since its previous sync (what the dp
worker puts in its SYNC frame's meta), e.g. to measure the bytes a method serialises per sync
(tests/benchmarks/lordo_bytes.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from trainers.dataparallel.corpus import Corpus, lm_loss, perplexity
from trainers.dataparallel import get_method
from trainers.dataparallel.base import DataParallelMethod, DPConfig
from trainers.model.models import LoraSpec, attach_lora, build_base_model, lora_parameters

CLIP_NORM = 1.0   # global gradient-norm clip of every local gradient (ALGORITHMS.md: G = clip(gradient))


def trainable(model) -> dict[str, torch.nn.Parameter]:
    """Full-parameter training: every parameter, in the model's order."""
    model.requires_grad_(True)
    return dict(model.named_parameters())


def replica(model: str, seed: int = 0, train: str = "full", lora_rank: int = 8):
    """(model, the tensors it trains and synchronises): the same on every worker and the aggregator.

    train="full": every parameter. train="lora": the seeded base frozen, plus a PEFT LoRA adapter of
    `lora_rank` on the attention + MLP projections (identical initialisation everywhere); only the
    adapter's factors train, so a sync carries them alone and lordo/lowrank-ddp project a factor
    only where their rank is below the factor's short side (base.is_lowrank).
    """
    base = build_base_model(model, seed=seed)
    if train == "full":
        return base, trainable(base)
    if train != "lora":
        raise ValueError(f"data-parallel training mode must be 'full' or 'lora', got {train!r}")
    wrapped = attach_lora(base, LoraSpec(rank=lora_rank, seed=seed))
    return wrapped, lora_parameters(wrapped)


def gradients(model, params: dict[str, torch.nn.Parameter], ids: torch.Tensor,
              clip: float = CLIP_NORM) -> tuple[float, dict[str, torch.Tensor]]:
    """(loss, clipped gradients) of the LM loss on `ids`."""
    loss = lm_loss(model, ids)
    grads = torch.autograd.grad(loss, list(params.values()))
    norm = torch.sqrt(sum((g.float() * g.float()).sum() for g in grads))
    scale = min(1.0, clip / (float(norm) + 1e-6)) if clip else 1.0
    return float(loss.detach()), {n: g * scale if scale < 1.0 else g for n, g in zip(params, grads)}


def tensor_bytes(table: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in table.values())


@dataclass
class Trace:
    losses: list[float] = field(default_factory=list)       # mean over workers, one per step
    overlaps: list[float] = field(default_factory=list)     # one per sync that refreshed Q
    claimed: list[tuple[int, int]] = field(default_factory=list)     # (up, down) per step, per worker
    data_bytes: list[tuple[int, int]] = field(default_factory=list)  # the tensors actually exchanged
    methods: list[DataParallelMethod] = field(default_factory=list)
    models: list = field(default_factory=list)
    heldout_ppl: float | None = None


def simulate(name: str, cfg: DPConfig, model: str = "micro", workers: int = 2, batch: int = 4,
             seq_len: int = 32, same_data: bool = False, heldout: int = 0, train: str = "full",
             lora_rank: int = 8,
             on_sync: Callable[[int, list[dict], dict, list[list[float]]], None] | None = None) -> Trace:
    """Train `workers` replicas of `model` with method `name` for cfg.steps steps; see the module docstring."""
    torch.set_num_threads(1)  # one thread: the same bits as the services, and 2 threads on this shared box ran 30x slower
    trace = Trace()
    replicas = [replica(model, cfg.seed, train, lora_rank) for _ in range(workers)]
    trace.models = [m for m, _ in replicas]
    params = [p for _, p in replicas]
    trace.methods = [get_method(name, p, cfg, w + 1) for w, p in enumerate(params)]
    aggregator = get_method(name, replica(model, cfg.seed, train, lora_rank)[1], cfg).make_aggregator()
    corpus = Corpus(cfg.seed, seq_len)
    window: list[list[float]] = [[] for _ in range(workers)]   # each worker's losses since its last sync
    for step in range(1, cfg.steps + 1):
        ups, losses = [], []
        for w in range(workers):
            loss, grads = gradients(trace.models[w], params[w], corpus.batch(0 if same_data else w + 1, step, batch))
            losses.append(loss)
            window[w].append(loss)
            ups.append(trace.methods[w].step(step, grads))
        trace.losses.append(sum(losses) / workers)
        trace.claimed.append(trace.methods[0].claimed_bytes(step))
        if ups[0] is None:
            trace.data_bytes.append((0, 0))
            continue
        down = aggregator.combine(step, ups)
        trace.data_bytes.append((tensor_bytes(ups[0]), tensor_bytes(down)))
        if on_sync is not None:
            on_sync(step, ups, down, window)
        window = [[] for _ in range(workers)]
        metrics = [m.finish(step, down) for m in trace.methods]
        if "overlap" in metrics[0]:
            trace.overlaps.append(metrics[0]["overlap"])
    if heldout:
        trace.heldout_ppl = perplexity(trace.models[0], corpus.heldout(heldout))
    return trace
