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


# ---- run / sweep / report / plot (harness/config.py, launch.py, runcli.py, results.py, report.py, plots.py)

@app.command()
def run(bw: str = typer.Option(None, help="worker link rate, tc units (e.g. 62.5mbit); overrides the profile"),
        workers: int = typer.Option(2, help="worker processes (one namespace each)"),
        delay: str = typer.Option(None, help="one-way delay per direction of each worker link, e.g. 20ms"),
        jitter: str = typer.Option(None, help="jitter, e.g. 2ms"),
        loss: str = typer.Option(None, help="random loss per direction, e.g. 0.1%"),
        profile: str = typer.Option(None, help="WAN profile name or YAML path (default paper-62.5mbit)"),
        method: str = typer.Option("spar", help="method(s) under test, comma list (full, spar, topk, ...)"),
        budget: str = typer.Option("1.6%", help="budget(s) of budgeted compressors, % of the bf16 full adapter"),
        updates: int = typer.Option(20, help="updates per method and seed"),
        seeds: str = typer.Option("1,2", help="comma list of seeds; every method runs every seed"),
        pipeline: int = typer.Option(0, help="pipelining depth: 0 synchronous, 1 one-step overlap"),
        model: str = typer.Option("tiny", help="micro | tiny | small (built on the CPU) or a model path"),
        task: str = typer.Option("digits", help="task name"),
        objective: str = typer.Option("distill", help="distill (to a small teacher trained here, cached; quality ="
                                      " distillation loss) | grpo (quality = reward)"),
        problems: int = typer.Option(2, help="problems per worker per update"),
        group_size: int = typer.Option(2, help="samples per problem"),
        max_new_tokens: int = typer.Option(8, help="tokens sampled per rollout"),
        no_baseline: bool = typer.Option(False, "--no-baseline", help="do not also run `full`"),
        no_emulation: bool = typer.Option(False, "--no-emulation", help="localhost, unshaped (no root needed)"),
        backend: str = typer.Option(None, help="force the shaping backend: netem | fallback"),
        run_id: str = typer.Option(None, help="results folder name (default: timestamp + method)"),
        out: str = typer.Option("results", help="parent folder of the run folder"),
        dry_run: bool = typer.Option(False, "--dry-run", help="print the config, plan and processes; run nothing"),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress; print only the run folder"),
        json_out: bool = typer.Option(False, "--json", help="print summary.json (machine-readable) at the end")):
    """Build the emulated network, run the method and `full` under the same link, write a results folder."""
    from harness import config, runcli
    try:
        cfg = config.build(method=method, budget=budget, workers=workers, updates=updates, seeds=seeds,
                           pipeline=pipeline, model=model, task=task, objective=objective, profile=profile,
                           bw=bw, delay=delay, jitter=jitter, loss=loss, baseline=not no_baseline,
                           emulation=not no_emulation, backend=backend, run_id=run_id, out_dir=out,
                           problems_per_worker=problems, group_size=group_size, max_new_tokens=max_new_tokens)
    except ValueError as err:
        raise _usage_error(err) from None
    raise typer.Exit(runcli.run(cfg, quiet=quiet, as_json=json_out, dry_run=dry_run))


@app.command()
def sweep(grid: str = typer.Option(None, help="YAML file: axes bw/delay/loss/workers (lists) + run options"),
          bw: str = typer.Option(None, help="comma list of rates, e.g. 10mbit,62.5mbit,1gbit"),
          delay: str = typer.Option(None, help="comma list of delays"),
          loss: str = typer.Option(None, help="comma list of losses"),
          workers: str = typer.Option(None, help="comma list of worker counts"),
          method: str = typer.Option(None, help="comma list of methods (each run adds `full`)"),
          budget: str = typer.Option(None, help="comma list of budgets"),
          seeds: str = typer.Option(None, help="comma list of seeds"),
          updates: str = typer.Option(None, help="updates per cell"),
          profile: str = typer.Option(None, help="base WAN profile"),
          no_emulation: bool = typer.Option(False, "--no-emulation", help="localhost, unshaped"),
          out: str = typer.Option(None, help="sweep folder (re-run the same folder to resume)"),
          quiet: bool = typer.Option(False, "--quiet", "-q"),
          json_out: bool = typer.Option(False, "--json")):
    """A grid of runs (bandwidth x delay x loss x workers; methods, budgets, seeds in each); resumable."""
    import datetime
    from pathlib import Path

    from harness import runcli
    folder = Path(out or f"results/sweep-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    try:
        spec = runcli.load_grid(grid, {"bw": bw, "delay": delay, "loss": loss, "workers": workers, "method": method,
                                       "budget": budget, "seeds": seeds, "updates": updates, "profile": profile})
        cfgs = runcli.sweep_configs(spec, emulation=not no_emulation, out=folder)
        if not no_emulation:
            from harness import launch
            launch.check_privileges(cfgs[0])
    except ValueError as err:
        raise _usage_error(err) from None
    except RuntimeError as err:
        typer.echo(str(err), err=True)
        raise typer.Exit(2) from None
    raise typer.Exit(runcli.sweep(cfgs, folder, quiet=quiet, as_json=json_out))


@app.command()
def report(paths: list[str] = typer.Argument(..., help="run or sweep folders"),
           quiet: bool = typer.Option(False, "--quiet", "-q", help="write report.md, print nothing")):
    """Rebuild report.md (+ report.html) from results folders alone; written into the first folder."""
    from harness import runcli
    try:
        raise typer.Exit(runcli.report_cmd(paths, quiet))
    except ValueError as err:
        raise _usage_error(err) from None


@app.command()
def plot(paths: list[str] = typer.Argument(..., help="run or sweep folders"),
         quiet: bool = typer.Option(False, "--quiet", "-q", help="print nothing")):
    """Rebuild the figures (PDF with Type-42 fonts + PNG) into <first folder>/figures/."""
    from harness import runcli
    try:
        raise typer.Exit(runcli.plot_cmd(paths, quiet))
    except ValueError as err:
        raise _usage_error(err) from None


def main() -> None:
    app()


if __name__ == "__main__":
    main()
