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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
