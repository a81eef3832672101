"""The `harness` command line: one entry point, one subcommand per user task."""
from __future__ import annotations

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Benchmark communication-efficient LoRA training over an emulated WAN.")


# ---- link emulation: profiles, calibrate, clean (harness/profiles.py, shaper.py, calibrate.py, clean.py)

def _usage_error(err: Exception) -> typer.Exit:
    typer.echo(f"error: {err}", err=True)
    return typer.Exit(2)


@app.command()
def profiles(name: str = typer.Argument(None, help="a profile name or YAML path; omit to list them"),
             plan: bool = typer.Option(False, "--plan", "--dry-run", help="print the shaping plan, apply nothing"),
             workers: int = typer.Option(2, help="workers for --plan"),
             backend: str = typer.Option("fallback", help="backend for --plan: netem | fallback"),
             live: str = typer.Option(None, help="read a live run's shaping back from the kernel (run id)")):
    """List the WAN profiles, show one, print its plan (--plan), or read a live run back (--live)."""
    import yaml
    from harness import linkcli
    try:
        typer.echo(linkcli.profiles_text(name, plan, workers, backend, live, yaml))
    except ValueError as err:
        raise _usage_error(err) from None


@app.command()
def calibrate(profile: str = typer.Option(..., help="profile name or YAML path"),
              workers: int = typer.Option(1, help="worker links to measure"),
              secs: float = typer.Option(3.0, help="seconds per goodput measurement"),
              backend: str = typer.Option(None, help="force netem | fallback (default: probe the kernel)"),
              rate: str = typer.Option(None, help="override the worker rate, e.g. 10mbit"),
              delay: str = typer.Option(None, help="override the worker one-way delay, e.g. 20ms"),
              jitter: str = typer.Option(None, help="override the worker jitter, e.g. 1ms"),
              loss: str = typer.Option(None, help="override the worker loss, e.g. 0.1%"),
              out: str = typer.Option("results/calibration", help="folder for calibration.json"),
              dry_run: bool = typer.Option(False, "--dry-run", help="print the plan, touch nothing")):
    """Build the topology, apply a profile and measure goodput, RTT and loss per link."""
    from harness import linkcli
    try:
        prof = linkcli.load_with_overrides(profile, rate=rate, delay=delay, jitter=jitter, loss=loss)
        if backend is not None and backend not in ("netem", "fallback"):
            raise ValueError(f"backend: {backend!r} is unknown (valid: netem, fallback)")
        if not 1 <= workers <= 250:
            raise ValueError(f"workers: {workers!r} must be within 1 and 250")
    except ValueError as err:
        raise _usage_error(err) from None
    raise typer.Exit(linkcli.calibrate_cmd(prof, workers, secs, backend, out, dry_run))


@app.command()
def clean(run_id: str = typer.Option(None, help="only this run's leftovers"),
          list_only: bool = typer.Option(False, "--list", help="list leftovers, remove nothing")):
    """Remove every namespace, link, qdisc, netfilter rule and delay line a harness run left behind."""
    from harness import clean as cleaner
    if list_only:
        typer.echo("\n".join(cleaner.leftovers(run_id)) or "nothing to clean")
        return
    typer.echo("\n".join(cleaner.clean(run_id).lines()))


# ---- compression benchmark (trainers/compress/bench.py): the main job until `harness run` lands

@app.command("bench-compress")
def bench_compress(
        gradients: str = typer.Option("synthetic,real", help="comma list of: synthetic (Qwen2.5-0.5B-shaped "
                                      "rank-64 adapter, power-law spectra), real (tiny model's LoRA gradient)"),
        budgets: str = typer.Option("0.78%,1.6%,6.25%", help="comma list of budgets, % of the bf16 full adapter"),
        repeats: int = typer.Option(5, min=1, help="timed runs per cell; the median is reported"),
        threads: int = typer.Option(2, min=1, help="torch threads"),
        shape: str = typer.Option("qwen0.5b", help="synthetic adapter shape: qwen0.5b | small (a quick check)"),
        json_out: str = typer.Option(None, "--json", help="also write the rows to this JSON file")):
    """Relative error, payload bytes and encode + decode time of every compressor at each budget."""
    import json
    import sys

    from rich.console import Console
    from rich.table import Table

    from trainers.compress import parse_budget
    from trainers.compress import bench

    shapes = {"qwen0.5b": bench.QWEN05B, "small": dict(hidden=128, layers=2, mlp=256, kv_dim=32, rank=16)}
    try:
        kinds = [k for k in gradients.split(",") if k]
        bad = [k for k in kinds if k not in ("synthetic", "real")] or ([] if kinds else ["(none)"])
        if bad:
            raise ValueError(f"--gradients: {bad[0]!r} is not one of synthetic, real")
        fracs = [parse_budget(b.strip()) for b in budgets.split(",") if b.strip()]
        if shape not in shapes:
            raise ValueError(f"--shape: {shape!r} is not one of {sorted(shapes)}")
    except ValueError as err:
        raise _usage_error(err) from None
    console = Console(width=None if sys.stdout.isatty() else 150)   # pipes get the whole table
    table = Table(title="compressors: first-step error, bytes and time (median of %d)" % repeats)
    for col in ("gradients", "compressor", "budget", "payload bytes", "% of bf16 full", "rel. error",
                "encode s", "decode s", "total s"):
        table.add_column(col, justify="left" if col in ("gradients", "compressor") else "right")
    rows = bench.run(kinds, fracs, repeats, threads, shape=shapes[shape], real_model="tiny" if shape != "small" else "micro",
                     progress=lambda r: console.log(f"{r.gradients} {r.compressor} {r.budget}: "
                                                    f"{r.payload_bytes} B, err {r.rel_error:.3f}, {r.total_s:.3f} s"))
    for r in rows:
        table.add_row(r.gradients, r.compressor, r.budget, f"{r.payload_bytes:,}", f"{100 * r.fraction_of_full:.2f}",
                      f"{r.rel_error:.4f}", f"{r.encode_s:.3f}", f"{r.decode_s:.3f}", f"{r.total_s:.3f}")
    console.print(table)
    if json_out:
        with open(json_out, "w") as fh:
            json.dump(bench.as_dicts(rows), fh, indent=1)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
