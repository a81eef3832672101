"""The review's falsifier for LoRDO's global projection, run in-process (trainers/dataparallel/inprocess.py):
without the full-rank QHM term the pseudo-gradient lies in span(Q), so the next Q spans the same
subspace and the overlap mean(sigma^2(Q_{t+1}^T Q_t)) stays at 1; with it, Q keeps moving.

    python -m trainers.dataparallel.falsifier --out results/falsifier --seeds 1,2,3
    python -m harness.results.dataparallel_plots results/falsifier          # figures/falsifier.pdf + .png

Writes `falsifier.csv`: variant, seed, kind (overlap | loss), index (sync number | step), value;
and `heldout.csv`: variant, seed, heldout_ppl.
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path

from trainers.dataparallel.base import DPConfig
from trainers.dataparallel.inprocess import simulate

VARIANTS = ("lordo-global-none", "lordo-global-fullrank")


def run(out: Path, seeds: list[int], steps: int = 96, k: int = 4, rank: int = 4, workers: int = 2,
        model: str = "micro", omega: float = 0.97, lr: float = 3e-3) -> list[dict]:
    rows, held = [], []
    for variant in VARIANTS:
        for seed in seeds:
            cfg = DPConfig(steps=steps, k=k, k_states=k, rank=rank, omega=omega, lr=lr, seed=seed)
            t = simulate(variant, cfg, model=model, workers=workers, batch=4, seq_len=32, heldout=64)
            rows += [dict(variant=variant, seed=seed, kind="overlap", index=i, value=v) for i, v in enumerate(t.overlaps, 1)]
            rows += [dict(variant=variant, seed=seed, kind="loss", index=i, value=v) for i, v in enumerate(t.losses, 1)]
            held.append(dict(variant=variant, seed=seed, heldout_ppl=t.heldout_ppl))
    out.mkdir(parents=True, exist_ok=True)
    for name, table in (("falsifier.csv", rows), ("heldout.csv", held)):
        with open(out / name, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(table[0]))
            w.writeheader()
            w.writerows(table)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m trainers.dataparallel.falsifier", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--steps", type=int, default=96)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--rank", type=int, default=4)
    ap.add_argument("--model", default="micro")
    args = ap.parse_args(argv)
    run(Path(args.out), [int(s) for s in args.seeds.split(",")], steps=args.steps, k=args.k, rank=args.rank,
        model=args.model)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
