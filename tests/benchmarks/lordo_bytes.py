"""LoRDO's byte reduction in its regime, measured: bytes per optimizer step per worker of
`lordo-global` (full-rank QHM term, the default) and `lordo-global-none` (no full-rank term) at
several K, against both low-rank-DDP readings (`lowrank-ddp-dense`: dense gradients every step, the
review's 2pq baseline; `lowrank-ddp-projected`: Q^T G every step) and `ddp`, with each method's
held-out perplexity gap (paired over seeds) beside its bytes (docs/ALGORITHMS.md section 4).

    python -m tests.benchmarks.lordo_bytes [--ks 8,16,32,64] [--steps 256] [--seeds 1,2,3,4,5] [--out F.json]

Every method trains the same replicas on the same shards for the same steps (in process:
trainers/dataparallel/inprocess.py, the arithmetic of the services, no sockets), K_states = K.
Bytes are measured from what each method hands over at each sync (`simulate(on_sync=...)`): the
tensor tables' data (4 bytes per fp32 element), and the SYNC frame the services would write for it
(wire.pack_tensors with the same meta as the dp worker / aggregator, plus the 44-byte header).

- steady: a sync window after the first (and, for lowrank-ddp-projected, not a refresh step), per
  step: what a long run pays; compared with the review's formula per projected p x q matrix
  (p = short side s, q = long side l, r = --rank): lordo full-rank QHM at a state sync up pq + 2rq,
  down pq + pr + 2rq; without the term up rq + 2rq, down rq + pr + 2rq; both plus 3n for the n
  dense elements (the parameters not projected: embeddings, head, norms; pseudo-gradient + Adam
  moments), over K steps; lowrank-ddp-dense and ddp every element each way every step (2pq per
  matrix per step, up + down); lowrank-ddp-projected n + sum rq each way.
- run: the mean over the whole run, the first sync after lordo-global's dense first window and the
  projected reading's refresh steps included; compared with the cost model's rule
  (harness/projection/dpbytes.py `bytes_per_step`).
Reductions are baseline bytes / method bytes, up + down. Perplexity gaps: method - baseline per
seed, mean ± Student's t 95 % half-width over seeds (harness/results/quality.py `paired`).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from datetime import datetime, timezone

BASELINES = ("ddp", "lowrank-ddp-dense", "lowrank-ddp-projected")   # sync every step: K plays no part
LORDO = ("lordo-global", "lordo-global-none")
REFERENCES = ("lowrank-ddp-dense", "ddp")                            # the perplexity gaps' baselines


def parse(argv=None):
    p = argparse.ArgumentParser(prog="python -m tests.benchmarks.lordo_bytes", description=__doc__.split("\n")[0])
    p.add_argument("--ks", default="8,16,32,64", help="LoRDO's local steps between syncs (K_states = K)")
    p.add_argument("--steps", type=int, default=256, help="optimizer steps of every run (a multiple of every K)")
    p.add_argument("--seeds", default="1,2,3,4,5")
    p.add_argument("--rank", type=int, default=4, help="LoRDO's / low-rank DDP's projection rank")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--refresh", type=int, default=200, help="low-rank DDP's steps between Q refreshes (GaLore's 200)")
    p.add_argument("--model", default="micro")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--heldout", type=int, default=64, help="held-out sequences of the perplexity")
    p.add_argument("--out", default=None, help="write every figure as JSON")
    a = p.parse_args(argv)
    a.ks = [int(k) for k in a.ks.split(",")]
    a.seeds = [int(s) for s in a.seeds.split(",")]
    if any(a.steps % k or a.steps < 2 * k for k in a.ks):
        p.error(f"--steps {a.steps} must be a multiple of every K and hold at least two syncs of each")
    return a


def shapes(a) -> dict[str, tuple[int, ...]]:
    from trainers.dataparallel.inprocess import replica

    return {n: tuple(t.shape) for n, t in replica(a.model, 0)[1].items()}


def split(a, table: dict[str, tuple[int, ...]]) -> tuple[int, list[tuple[int, int]]]:
    """(n dense elements, (s, l) of every projected matrix)."""
    from trainers.dataparallel.base import is_lowrank

    low = [(min(s), max(s)) for name, s in table.items() if is_lowrank(name, s, a.rank)]
    n = sum(math.prod(s) for name, s in table.items() if not is_lowrank(name, s, a.rank))
    return n, low


def review_formula(method: str, k: int, n: int, low: list[tuple[int, int]], r: int) -> tuple[float, float]:
    """(up, down) bytes per step per worker in a steady window, by the review's per-matrix rules (module docstring)."""
    every = n + sum(s * l for s, l in low)
    if method in ("ddp", "lowrank-ddp-dense"):
        up = down = every
    elif method == "lowrank-ddp-projected":
        up = down = n + sum(r * l for _, l in low)
    else:
        body = sum((s * l if method == "lordo-global" else r * l) + 2 * r * l for s, l in low)   # pq | rq, + 2rq
        up, down = (3 * n + body) / k, (3 * n + body + sum(s * r for s, _ in low)) / k             # down + pr (Q)
    return up * 4, down * 4


def finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None   # trainers/dataparallel/worker.py finite: what the frame carries


def categories(up: dict, down: dict, lowrank: set[str]) -> dict[str, int]:
    """A sync's tensor bytes (up + down) by what they carry."""
    out: dict[str, int] = {}
    for table in (up, down):
        for key, t in table.items():
            kind, name = key.split("/", 1) if "/" in key else ("g", key)
            if name not in lowrank:
                what = "dense parameters"
            elif kind in ("u", "v"):
                what = "projected: moments"
            elif kind == "q":
                what = "projected: Q"
            else:
                what = "projected: gradient / pseudo-gradient"
            out[what] = out.get(what, 0) + t.numel() * t.element_size()
    return out


def run_one(a, method: str, k: int, seed: int) -> dict:
    """One training run: its held-out perplexity and its measured bytes, steady and over the run."""
    from trainers.dataparallel.base import DPConfig, is_lowrank
    from trainers.dataparallel.inprocess import simulate, tensor_bytes
    from trainers.protocol import wire

    syncs = []
    lowrank = {name for name, shape in shapes(a).items() if is_lowrank(name, shape, a.rank)}

    def on_sync(step, ups, down, losses):   # the frames as the dp worker (1) and the aggregator pack them
        up_meta = {"step": step, "losses": [finite(x) for x in losses[0]]}
        up_frame = wire.HEADER_BYTES + len(wire.pack_tensors(ups[0], meta=up_meta))
        down_frame = wire.HEADER_BYTES + len(wire.pack_tensors(down, meta={"step": step}))
        syncs.append(dict(step=step, window=len(losses[0]), up=tensor_bytes(ups[0]), down=tensor_bytes(down),
                          up_frame=up_frame, down_frame=down_frame, parts=categories(ups[0], down, lowrank)))

    cfg = DPConfig(steps=a.steps, k=k, k_states=k, rank=a.rank, lr=a.lr, refresh=a.refresh, seed=seed)
    t0 = time.monotonic()
    trace = simulate(method, cfg, model=a.model, workers=a.workers, batch=a.batch, seq_len=a.seq_len,
                     heldout=a.heldout, on_sync=on_sync)
    m = trace.methods[0]
    steady = [s for s in syncs[1:] if not (hasattr(m, "refresh") and m.refresh(s["step"]))]
    per_step = {(s["up"] / s["window"], s["down"] / s["window"]) for s in steady}
    if len(per_step) != 1:
        raise AssertionError(f"{method} K={k}: steady windows differ: {sorted(per_step)}")
    last = steady[-1]
    w = last["window"]
    return dict(method=method, k=k, seed=seed, heldout_ppl=trace.heldout_ppl, s=time.monotonic() - t0,
                syncs=len(syncs), steady_up=last["up"] / w, steady_down=last["down"] / w,
                steady_frame_up=last["up_frame"] / w, steady_frame_down=last["down_frame"] / w,
                steady_parts={key: v / w for key, v in last["parts"].items()},
                run_up=sum(u for u, _ in trace.data_bytes) / a.steps,
                run_down=sum(d for _, d in trace.data_bytes) / a.steps,
                run_claimed=sum(u + d for u, d in trace.claimed) / a.steps)


def cost_model(a, method: str, k: int, table: dict[str, tuple[int, ...]]) -> float:
    """The cost model's mean bytes per step over the run, up + down (harness/projection/dpbytes.py)."""
    from harness.projection.dpbytes import Sync, bytes_per_step

    up, down = bytes_per_step(method, tuple(table.items()),
                              Sync(steps=a.steps, k=k, k_states=k, refresh=a.refresh, rank=a.rank))
    return up + down


def measure(a, log=print) -> dict:
    import torch

    torch.set_num_threads(1)   # as every service; and a shared 2-core box
    table = shapes(a)
    n, low = split(a, table)
    total = sum(math.prod(s) for s in table.values())
    runs = []
    cells = [(m, a.ks[0]) for m in BASELINES] + [(m, k) for k in a.ks for m in LORDO]
    for seed in a.seeds:
        for method, k in cells:
            row = run_one(a, method, k, seed)
            runs.append(row)
            log(f"[lordo-bytes] seed {seed} {method} K={k if method in LORDO else '-'}: held-out ppl "
                f"{row['heldout_ppl']:.4f}, {row['syncs']} syncs, {row['s']:.1f} s")
    return dict(n=n, total=total, low=low, runs=runs, cells=cells)


def summarise(a, got: dict) -> dict:
    from harness.results.quality import ci95, paired

    runs, n, low = got["runs"], got["n"], got["low"]
    table = shapes(a)

    def of(method, k):
        return [r for r in runs if r["method"] == method and (method not in LORDO or r["k"] == k)]

    def by_seed(method, k):
        return {r["seed"]: r["heldout_ppl"] for r in of(method, k)}

    rows = []
    for method, k in got["cells"]:
        first = of(method, k)[0]   # bytes do not depend on the seed (asserted below)
        for r in of(method, k)[1:]:
            assert (r["steady_up"], r["steady_down"], r["run_up"], r["run_down"]) == \
                (first["steady_up"], first["steady_down"], first["run_up"], first["run_down"]), (method, k)
        formula = review_formula(method, k, n, low, a.rank)
        row = dict(method=method, k=k if method in LORDO else None,
                   steady_up=first["steady_up"], steady_down=first["steady_down"],
                   formula_up=formula[0], formula_down=formula[1],
                   steady_frame=first["steady_frame_up"] + first["steady_frame_down"],
                   steady_parts=first["steady_parts"],
                   run=first["run_up"] + first["run_down"], run_claimed=first["run_claimed"],
                   run_cost_model=cost_model(a, method, k, table))
        ppl = [r["heldout_ppl"] for r in of(method, k)]
        row["ppl"], row["ppl_ci"] = ci95(ppl)
        for ref in REFERENCES:
            mine, theirs = by_seed(method, k), by_seed(ref, None)
            row["gap_" + ref] = paired([mine[s] - theirs[s] for s in sorted(mine) if s in theirs], lower=True)
        rows.append(row)
    steady = {r["method"]: r["steady_up"] + r["steady_down"] for r in rows if r["k"] is None}
    run = {r["method"]: r["run"] for r in rows if r["k"] is None}
    for r in rows:
        mine = r["steady_up"] + r["steady_down"]
        r["reduction"] = {b: steady[b] / mine for b in BASELINES}
        r["reduction_run"] = {b: run[b] / r["run"] for b in BASELINES}
    return dict(dense_share=n / got["total"], dense=n, total=got["total"], projected=len(low), rows=rows)


def fmt_gap(g: dict) -> str:
    if g["mean"] is None:
        return "-"
    half = f" ± {g['ci95']:.3f}" if g["ci95"] is not None else ""
    return f"{g['mean']:+.3f}{half}" + (f" ({g['verdict']})" if g["verdict"] else "")


def markdown(a, s: dict) -> str:
    kb = 1000.0
    lines = [f"model {a.model}: {s['total']} parameters, {s['dense']} not projected (embeddings, head, norms) = "
             f"dense share {100 * s['dense_share']:.1f} %; {s['projected']} projected matrices at rank {a.rank}; "
             f"{a.workers} workers, {a.steps} steps, K_states = K, seeds {','.join(map(str, a.seeds))}",
             "",
             "Bytes per optimizer step per worker (kB, up + down; steady = a sync window after the first):",
             "",
             "| K | method | measured steady up / down | review formula up / down | SYNC frames | run mean "
             "(cost model) | ÷ lowrank-ddp-dense | ÷ lowrank-ddp-projected | ÷ ddp | ÷ dense, run mean |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in s["rows"]:
        red, run = r["reduction"], r["reduction_run"]
        lines.append(
            f"| {r['k'] or '-'} | {r['method']} | {r['steady_up'] / kb:.2f} / {r['steady_down'] / kb:.2f} | "
            f"{r['formula_up'] / kb:.2f} / {r['formula_down'] / kb:.2f} | {r['steady_frame'] / kb:.2f} | "
            f"{r['run'] / kb:.2f} ({r['run_cost_model'] / kb:.2f}) | {red['lowrank-ddp-dense']:.2f}x | "
            f"{red['lowrank-ddp-projected']:.2f}x | {red['ddp']:.2f}x | {run['lowrank-ddp-dense']:.2f}x |")
    lines += ["", "Held-out perplexity (mean ± 95 % CI over seeds) and paired gaps (method - baseline; "
              "negative is better):", "", "| K | method | perplexity | gap vs lowrank-ddp-dense | gap vs ddp |", "|---|---|---|---|---|"]
    for r in s["rows"]:
        half = f" ± {r['ppl_ci']:.3f}" if r["ppl_ci"] is not None else ""
        lines.append(f"| {r['k'] or '-'} | {r['method']} | {r['ppl']:.3f}{half} | "
                     f"{fmt_gap(r['gap_lowrank-ddp-dense'])} | {fmt_gap(r['gap_ddp'])} |")
    lines += ["", "Steady bytes per step of one LoRDO sync window by what they carry (kB, up + down):", ""]
    for r in s["rows"]:
        if r["k"] is not None:
            parts = ", ".join(f"{key} {v / kb:.2f}" for key, v in sorted(r["steady_parts"].items()))
            lines.append(f"- K = {r['k']}, {r['method']}: {parts}")
    return "\n".join(lines)


def main(argv=None) -> int:
    a = parse(argv)
    started, t0, load0 = datetime.now(timezone.utc), time.monotonic(), os.getloadavg()
    got = measure(a, log=lambda line: print(line, file=sys.stderr, flush=True))
    s = summarise(a, got)
    elapsed, load1 = time.monotonic() - t0, os.getloadavg()
    for r in s["rows"]:   # measured = formula: steady by the review's rule, the run by the cost model's
        steady, formula = (r["steady_up"], r["steady_down"]), (r["formula_up"], r["formula_down"])
        if steady != formula or r["run"] != r["run_cost_model"]:
            print(f"MISMATCH {r['method']} K={r['k']}: measured != formula", file=sys.stderr)
    print(markdown(a, s))
    print(f"\n{started:%Y-%m-%d %H:%M} UTC; {elapsed:.0f} s; load average (1, 5, 15 min) at start "
          f"{', '.join(f'{x:.2f}' for x in load0)}, at end {', '.join(f'{x:.2f}' for x in load1)}")
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"args": vars(a), "elapsed_s": elapsed, "load": [load0, load1], "summary": s,
                       "runs": got["runs"]}, fh, indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
