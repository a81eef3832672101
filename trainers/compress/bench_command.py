"""`harness bench-compress`: its flags checked, `bench.run` called, the rows printed as one table.

The timing itself is trainers/compress/bench.py's; this file only turns the command's flags into
its arguments (ValueError, one line, for a bad one: the CLI makes it a usage error) and its rows
into a rich table and, with --json, a file.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass

from trainers import spec
from trainers.compress import bench

COLUMNS = ("gradients", "compressor", "budget", "payload bytes", "% of bf16 full", "rel. error",
           "encode CPU s", "decode CPU s", "total CPU s", "encode x", "decode x", "x memcpy")


@dataclass(frozen=True)
class Request:
    """What one bench-compress invocation measures, its flags checked."""
    kinds: list[str]          # synthetic, real
    budgets: list[float]      # fractions of the bf16 full adapter
    model: str                # the synthetic adapter's model
    rank: int                 # its LoRA rank
    real_model: str           # the model the real gradients come from


def request(gradients: str, budgets: str, shape: str | None, model: str | None, rank: int | None) -> Request:
    """The flags as a Request; ValueError naming the flag for a bad value."""
    kinds = [k for k in gradients.split(",") if k]
    bad = [k for k in kinds if k not in ("synthetic", "real")] or ([] if kinds else ["(none)"])
    if bad:
        raise ValueError(f"--gradients: {bad[0]!r} is not one of synthetic, real")
    try:
        fracs = [spec.parse_budget(b.strip()) for b in budgets.split(",") if b.strip()]
    except ValueError as err:   # the spec names its own flag, --budget: this command's is --budgets
        raise ValueError("--budgets" + str(err).removeprefix("--budget")) from None
    if shape is not None and shape not in bench.SHAPES:
        raise ValueError(f"--shape: {shape!r} is not one of {', '.join(sorted(bench.SHAPES))}")
    preset_model, preset_rank = bench.SHAPES[shape or "qwen0.5b"]
    model, rank = model or preset_model, rank or preset_rank
    spec.check_model(model)
    return Request(kinds, fracs, model, rank, real_model="micro" if shape == "small" else "tiny")


def main(req: Request, repeats: int, threads: int, json_out: str | None) -> int:
    """Measure and print the table (and write --json); returns the exit code."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 150, log_path=False)   # pipes get the whole table
    table = Table(title=f"compressors on synthetic gradients of a rank-{req.rank} adapter shaped like {req.model}'s "
                        f"and on real LoRA gradients of a {req.real_model} model: first-step error and bytes; steady-state CPU "
                        f"seconds at {threads} thread(s) (warm-up excluded, median of {repeats}) and their ratio to "
                        f"a memcpy of the fp32 gradients measured beside them in this process (x memcpy); int8 at "
                        f"budget - is its dense layout")
    for col in COLUMNS:
        table.add_column(col, justify="left" if col in ("gradients", "compressor") else "right")
    rows = bench.run(req.kinds, req.budgets, repeats, threads, model=req.model, rank=req.rank,
                     real_model=req.real_model,
                     progress=lambda r: console.log(f"{r.gradients} {r.compressor} {r.budget}: "
                                                    f"{r.payload_bytes} B, err {r.rel_error:.3f}, {r.total_s:.4f} s "
                                                    f"CPU, {r.total_x:.1f}x memcpy"))
    for r in rows:
        table.add_row(r.gradients, r.compressor, r.budget, f"{r.payload_bytes:,}", f"{100 * r.fraction_of_full:.2f}",
                      f"{r.rel_error:.4f}", f"{r.encode_s:.4f}", f"{r.decode_s:.4f}", f"{r.total_s:.4f}",
                      f"{r.encode_x:.1f}", f"{r.decode_x:.1f}", f"{r.total_x:.1f}")
    console.print(table)
    if json_out:
        with open(json_out, "w") as fh:
            json.dump(bench.as_dicts(rows), fh, indent=1)
    return 0
