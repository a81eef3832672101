"""Paired in-process comparisons of LoRDO variants (trainers/dataparallel/inprocess.py), same seeds,
same data, one variable changed:

- `stagnation` (the review's falsifier for LoRDO's global projection): without the full-rank QHM
  term the pseudo-gradient lies in span(Q), so the next Q spans the same subspace and the overlap
  mean(sigma^2(Q_{t+1}^T Q_t)) stays at 1; with it, Q keeps moving. QHM none vs full-rank.
- `qhm-residual`: the full-rank QHM term before the fix (`reapplied`: G + E with E kept,
  the same residual applied at every step) vs after it (`reduced`: G + E, E reduced by what the
  term applied), and the other reading (`gradient`: this step's gradient only).

    python -m trainers.dataparallel.falsifier --out results/falsifier --seeds 1,2,3 [--compare qhm-residual]
                                              [--initial-q random]   # lordo-global's first Q (DPConfig.initial_q)
    python -m harness.results.dataparallel_plots results/falsifier          # figures/falsifier.pdf + .png,
                                                                           # paired.md (paired CIs over seeds)

Writes `falsifier.csv`: variant, seed, kind (overlap | loss), index (sync number | step), value;
and `heldout.csv`: variant, seed, heldout_ppl.
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path

from trainers.dataparallel.base import INITIAL_Q, DPConfig
from trainers.dataparallel.inprocess import simulate

COMPARISONS = {  # name -> variants, the reference first (paired differences are against it)
    "stagnation": ("lordo-global-none", "lordo-global-fullrank"),
    "qhm-residual": ("lordo-global-fullrank-reapplied", "lordo-global-fullrank-reduced",
                     "lordo-global-fullrank-gradient"),
}
VARIANTS = COMPARISONS["stagnation"]


def run(out: Path, seeds: list[int], steps: int = 96, k: int = 4, rank: int = 4, workers: int = 2,
        model: str = "micro", omega: float = 0.97, lr: float = 3e-3, variants: tuple[str, ...] = VARIANTS,
        initial_q: str = "pseudo-gradient") -> list[dict]:
    rows, held = [], []
    out.mkdir(parents=True, exist_ok=True)
    for seed in seeds:  # seed by seed: a paired comparison is readable from the first seed on
        for variant in variants:
            cfg = DPConfig(steps=steps, k=k, k_states=k, rank=rank, omega=omega, lr=lr, seed=seed, initial_q=initial_q)
            t = simulate(variant, cfg, model=model, workers=workers, batch=4, seq_len=32, heldout=64)
            rows += [dict(variant=variant, seed=seed, kind="overlap", index=i, value=v) for i, v in enumerate(t.overlaps, 1)]
            rows += [dict(variant=variant, seed=seed, kind="loss", index=i, value=v) for i, v in enumerate(t.losses, 1)]
            held.append(dict(variant=variant, seed=seed, heldout_ppl=t.heldout_ppl))
            write(out, rows, held)  # as the runs go (small tables: rewritten whole)
    return rows


def write(out: Path, rows: list[dict], held: list[dict]) -> None:
    for name, table in (("falsifier.csv", rows), ("heldout.csv", held)):
        tmp = out / (name + ".tmp")
        with open(tmp, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(table[0]))
            w.writeheader()
            w.writerows(table)
        tmp.replace(out / name)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m trainers.dataparallel.falsifier", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--steps", type=int, default=96)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--rank", type=int, default=4)
    ap.add_argument("--model", default="micro")
    ap.add_argument("--compare", default="stagnation", choices=sorted(COMPARISONS),
                    help="which paired comparison (the module docstring)")
    ap.add_argument("--initial-q", default="pseudo-gradient", choices=INITIAL_Q,
                    help="lordo-global's first Q: from the first averaged pseudo-gradient, or a seeded random basis")
    args = ap.parse_args(argv)
    run(Path(args.out), [int(s) for s in args.seeds.split(",")], steps=args.steps, k=args.k, rank=args.rank,
        model=args.model, variants=COMPARISONS[args.compare], initial_q=args.initial_q)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
