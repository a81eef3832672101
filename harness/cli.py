"""The `harness` command line: one entry point, one subcommand per user task."""
from __future__ import annotations

import inspect

import typer

from harness.run.flags import extra, spec_command, usage_error
from harness.projection import params as projection_params
from trainers import spec

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Benchmark communication-efficient LoRA training over an emulated WAN.")


def version_text() -> str:
    """'harness (wan-harness) 0.1.0, commit 1a2b3c4d5e6f': the package's version and the code's commit
    (git in a checkout; WAN_GIT_SHA in the container image, which has no .git)."""
    import importlib.metadata
    import os
    import subprocess
    from pathlib import Path

    try:
        version = importlib.metadata.version("wan-harness")
    except importlib.metadata.PackageNotFoundError:
        version = "(not installed)"
    root = Path(__file__).resolve().parents[1]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        sha = ""
    sha = sha or os.environ.get("WAN_GIT_SHA", "")
    return f"harness (wan-harness) {version}" + (f", commit {sha[:12]}" if sha else "")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(version_text())
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="print the version (and the code's git commit) and exit")) -> None:
    """Benchmark communication-efficient LoRA training over an emulated WAN."""


# ---- link emulation: profiles, calibrate, clean (harness/net/profiles.py, shaper.py, calibrate.py, clean.py)

@app.command()
def profiles(name: str = typer.Argument(None, help="a profile name or YAML path; omit to list them"),
             plan: bool = typer.Option(False, "--plan", "--dry-run", help="print the shaping plan, apply nothing"),
             tc: bool = typer.Option(False, "--tc", help="with --plan: print it as the equivalent ip/tc/iptables "
                                     "commands"),
             workers: int = typer.Option(2, help="workers for --plan"),
             backend: str = typer.Option(None, help="backend for --plan: netem | fallback (default: the kernel config's)"),
             live: str = typer.Option(None, help="read a live run's shaping back from the kernel (run id)")):
    """List the WAN profiles, show one, print its plan (--plan), or read a live run back (--live)."""
    import yaml
    from harness.net import commands
    try:
        typer.echo(commands.profiles_text(name, plan, workers, backend, live, yaml, tc=tc))
    except ValueError as err:
        raise usage_error(err) from None


@app.command()
def calibrate(profile: str = typer.Option(..., help="profile name or YAML path"),
              workers: int = typer.Option(1, help="worker links to measure"),
              secs: float = typer.Option(3.0, help="seconds per goodput measurement"),
              backend: str = typer.Option(None, help="force netem | fallback (default: probe the kernel)"),
              bw: str = typer.Option(None, help="override the worker link rate, tc units, e.g. 10mbit (as on run)"),
              delay: str = typer.Option(None, help="override the worker one-way delay, e.g. 20ms"),
              jitter: str = typer.Option(None, help="override the worker jitter, e.g. 1ms"),
              loss: str = typer.Option(None, help="override the worker loss, e.g. 0.1%"),
              trace: str = typer.Option(None, help="play a trace on every worker link (file or shipped name; "
                                        "harness traces list); use --secs 20 or more"),
              trace_step: str = typer.Option(None, help="with --trace: the playback step, one HTB rate change per "
                                             "step (default 1s; e.g. 100ms where the trace swings within a second)"),
              out: str = typer.Option("results/calibration", help="folder for calibration.json"),
              dry_run: bool = typer.Option(False, "--dry-run", help="print the plan, touch nothing")):
    """Build the topology, apply a profile and measure goodput, RTT and loss per link."""
    from harness.net import commands
    try:
        if trace_step is not None and trace is None:
            raise ValueError("--trace-step: the step of a --trace; give --trace too (a profile's trace states its own "
                             "interval)")
        prof = commands.load_with_overrides(profile, rate=bw, delay=delay, jitter=jitter, loss=loss,
                                           trace=trace if trace_step is None else {"file": trace, "interval": trace_step})
        from harness.net.backend import validate
        validate(backend)
        if not 1 <= workers <= 250:
            raise ValueError(f"workers: {workers!r} must be within 1 and 250")
    except ValueError as err:
        raise usage_error(err) from None
    raise typer.Exit(commands.calibrate_cmd(prof, workers, secs, backend, out, dry_run))


traces_app = typer.Typer(add_completion=False, no_args_is_help=True,
                         help="Link traces: list the shipped ones, show one, generate, convert (harness/net/traces.py).")
app.add_typer(traces_app, name="traces")


@traces_app.command("list")
def traces_list():
    """The shipped traces (netem_profiles/traces/) with their mean and percentiles."""
    from harness.net import commands
    typer.echo(commands.traces_list())


@traces_app.command("show")
def traces_show(file: str = typer.Argument(..., help="a trace file or a shipped trace's name"),
                interval: str = typer.Option("1s", help="step interval of the schedule it plays as"),
                steps: bool = typer.Option(False, "--steps", help="print every step of one loop")):
    """A trace's period, mean and percentiles (and its steps)."""
    from harness.net import commands
    try:
        typer.echo(commands.traces_show(file, interval, steps))
    except ValueError as err:
        raise usage_error(err) from None


@traces_app.command("generate")
def traces_generate(kind: str = typer.Argument(..., help="constant | normal | square | outages | diurnal"),
                    out: str = typer.Argument(..., help="file to write (.csv, or .mahi/.up/.down for Mahimahi)"),
                    mean: str = typer.Option("30mbit", help="mean rate, tc units"),
                    seconds: float = typer.Option(120.0, help="length of one loop"),
                    step: str = typer.Option("1s", help="step length"),
                    seed: int = typer.Option(0, help="random seed (normal, outages)"),
                    sd: float = typer.Option(0.3, help="normal: sd as a fraction of the mean"),
                    low: float = typer.Option(0.3, help="square, diurnal: the low level as a fraction of the mean"),
                    period: str = typer.Option("20s", help="square, diurnal: period"),
                    outage_every: str = typer.Option("30s", help="outages: mean time between outages"),
                    outage: str = typer.Option("2s", help="outages: mean outage length")):
    """Write a seeded synthetic trace."""
    from harness.net import commands
    try:
        typer.echo(commands.traces_generate(kind, out, mean=mean, seconds=seconds, step=step, seed=seed, sd=sd,
                                           low=low, period=period, outage_every=outage_every, outage=outage))
    except ValueError as err:
        raise usage_error(err) from None


@traces_app.command("convert")
def traces_convert(src: str = typer.Argument(..., help="trace to read (Mahimahi or CSV)"),
                   dst: str = typer.Argument(..., help="file to write; its suffix picks the format")):
    """Mahimahi <-> CSV (time_s,rate_mbit_s[,delay_ms,loss_pct])."""
    from harness.net import commands
    try:
        typer.echo(commands.traces_convert(src, dst))
    except ValueError as err:
        raise usage_error(err) from None


@app.command()
def clean(run_id: str = typer.Option(None, help="only this run's leftovers, whoever owns it "
                                     "(the namespace run id: meta.json netns_run_id)"),
          all_runs: bool = typer.Option(False, "--all", help="every harness run's, live ones included "
                                        "(kills their processes)"),
          list_only: bool = typer.Option(False, "--list", help="list leftovers and their owners, remove nothing")):
    """Remove the namespaces (with their links, qdiscs and netfilter rules), delay lines and CPU-share
    cgroups of harness runs whose owner process is dead; --run-id for one run, --all for every run."""
    from harness.net import clean as cleaner
    if run_id is not None and all_runs:
        raise usage_error(ValueError("--all and --run-id: give one of them"))
    if run_id is not None and not cleaner.topology.RUN_ID.fullmatch(run_id):   # no run has it: not "nothing to clean"
        raise usage_error(ValueError(f"--run-id: {run_id!r} is no namespace run id (4-8 hex digits: meta.json's "
                                     f"netns_run_id, or what follows '{cleaner.topology.PREFIX}' in `ip netns list`)"))
    if list_only:
        runs = cleaner.runs(run_id)
        typer.echo("\n".join(f"{name}\t{cleaner.owner_status(rid)[0]}" for rid, names in runs.items()
                             for name in names) or "nothing to clean")
        return
    typer.echo("\n".join(cleaner.clean(run_id, everything=all_runs).lines()))


@app.command()
def doctor(backend: str = typer.Option(None, help="check for netem | fallback (default: the one a run would get)"),
           workers: int = typer.Option(2, min=1, max=1024, help="the run's workers: the open-files, neighbour-table "
                                       "and task limits are checked for this many")):
    """Check what an emulated run needs here (root, kernel features, binaries, disk, the limits for its
    workers); print one line per missing piece saying what to install, and exit 2 if anything is missing."""
    from harness.net import doctor as doc
    from harness.net.backend import validate
    try:
        validate(backend, flag="--backend")
    except ValueError as err:
        raise usage_error(err) from None
    report = doc.check(backend, workers=workers)
    for line in report.ok:
        typer.echo(f"ok: {line}")
    if report.problems:
        typer.echo("\n".join(report.problems), err=True)
        raise typer.Exit(2)


# ---- compression benchmark (trainers/compress/bench.py)

@app.command()
def check(names: list[str] = typer.Argument(None, help="compressors, tasks, objectives or data-parallel methods, "
                                            "in-tree or plugins (default: every compressor and task)"),
          budget: str = typer.Option(None, help="budget of budgeted compressors (default 10%: room beyond the "
                                     "micro adapter's table)"),
          timeout: float = typer.Option(600.0, min=1.0, help="seconds each plugin's checks may take (its own "
                                        "process, killed after)")):
    """Run the project's contract suite on registered implementations (docs/PLUGINS.md); exit 1 on a failure."""
    from trainers import check as contracts   # torch: only this command and bench-compress pay for it
    raise typer.Exit(contracts.main(list(names or []), budget, echo=typer.echo, timeout_s=timeout))


@app.command("bench-compress")
def bench_compress(
        gradients: str = typer.Option("synthetic,real", help="comma list of: synthetic (a rank-64 adapter shaped "
                                      "like --model's, power-law spectra), real (tiny model's LoRA gradient)"),
        budgets: str = typer.Option("0.78%,1.6%,6.25%", help="comma list of budgets, % of the bf16 full adapter"),
        repeats: int = typer.Option(5, min=1, help="timed runs per cell; the median is reported"),
        threads: int = typer.Option(1, min=1, help="torch threads (1: OpenMP's spin-waits at 2 slowed encode 7-30x on a busy box)"),
        shape: str = typer.Option(None, help="preset: qwen0.5b (= --model qwen2.5-0.5b) | small (micro at rank 16, "
                                  "a quick check)"),
        model: str = typer.Option(None, "--model", help="synthetic gradients shaped like this model's adapter: a name "
                                  "(qwen2.5-0.5b, qwen2.5-1.5b, qwen3-1.7b, ...) or a folder with config.json "
                                  "\\[default: qwen2.5-0.5b]"),
        rank: int = typer.Option(None, "--rank", min=1, help="LoRA rank of the synthetic adapter \\[default: 64]"),
        json_out: str = typer.Option(None, "--json", help="also write the rows to this JSON file")):
    """Relative error, payload bytes and encode + decode time of every compressor at each budget."""
    from trainers.compress import bench_command   # torch: only this command and check pay for it

    try:
        req = bench_command.request(gradients, budgets, shape, model, rank)
    except ValueError as err:
        raise usage_error(err) from None
    raise typer.Exit(bench_command.main(req, repeats, threads, json_out))


# ---- cost model (harness/projection/costmodel.py): what a method would do at a scale this box cannot run

def _project(values: dict, from_run: str | None, opt: list[str] | None, validate: list[str] | None, json_out: bool,
             figures_dir: str | None) -> int:
    from harness.projection import commands
    try:
        if validate:
            if not from_run:
                raise ValueError("--validate: needs --from RUN (the run the compute terms are fitted on)")
            return commands.validate_cmd(from_run, validate, figures_dir, json_out)
        return commands.main(json_out, figures_dir, values, from_run=from_run, opt=opt or [])
    except (ValueError, FileNotFoundError) as err:
        raise usage_error(err) from None


spec_command("project", _project, [
    extra("from_run", None, ("--from",), "one measured run folder: the compute is fitted on it, and each run "
          "parameter not given (model, workers, methods, baseline, depth, link) is that run's"),
    extra("opt", None, ("--opt",), "compressor option as NAME=VALUE, e.g. powersgd_rank=4 (repeatable)",
          list[str] | None),
    extra("validate", None, ("--validate",), "with --from: predict these measured runs (or sweeps) and print "
          "predicted vs measured (repeatable)", list[str] | None),
    extra("json_out", False, ("--json",), "print {\"methods\": [...]} as JSON", bool),
    extra("figures_dir", None, ("--figures",), "also write the figures (PDF + PNG) here")],
    "Project seconds per update, bytes and speedup of each method from the cost model (no run).", app,
    table=projection_params.PARAMS)


# ---- run / sweep / reproduce / data / power / report / plot (bodies in harness/run/; flags: harness/run/flags.py)

_OUTPUT = [extra("quiet", False, ("--quiet", "-q"), "no progress; stdout is the result folder alone (stderr "
                 "keeps warnings, a model build's progress and the overhead line)", bool),
           extra("json_out", False, ("--json",), "print the summary as one JSON document at the end", bool)]
RUN_EXTRA = [extra("run_id", None, ("--run-id",), "results folder name (default: timestamp + method)"),
             extra("out", "results", ("--out",), "parent folder of the run folder", str),
             extra("dry_run", False, ("--dry-run",), "print the config, plan and processes; run nothing", bool),
             extra("log", None, ("--log",), "also log each cell's per-update metrics to a local tracker in the run "
                    "folder: tensorboard, wandb (offline) or mlflow (file store); needs the [tracking] extra"),
             *_OUTPUT]
RUN_DOC = "Build the emulated network, run the method and the baseline under the same link, write a results folder."
RUN_BODY = "harness.run.commands:run_command"   # imported when the command runs: `--help` stays fast
spec_command("run", RUN_BODY, RUN_EXTRA, RUN_DOC, app)


def _grid_configs(grid, folder):
    """`harness reproduce`'s configs (`grid()` reads the grid); a bad value or a missing privilege is one
    line and exit 2, before anything runs."""
    from harness.run import commands
    try:
        return commands.grid_configs(grid(), folder)
    except ValueError as err:
        raise usage_error(err) from None
    except RuntimeError as err:
        typer.echo(str(err), err=True)
        raise typer.Exit(2) from None


spec_command("sweep", "harness.run.commands:sweep_command", [
    extra("grid", None, ("--grid",), "YAML file: run-spec parameters; a list is a grid axis"),
    extra("out", None, ("--out",), "sweep folder (re-run the same folder to resume)"),
    *_OUTPUT], "A grid of runs: any run-spec parameter given as a list (YAML) or comma list (flag) is an axis, "
    "except --method/--budget/--seeds, which every run holds; resumable.", app, as_list=True)


spec_command("wrap", "harness.run.wrap:main", [
    inspect.Parameter("command", inspect.Parameter.KEYWORD_ONLY, annotation=list[str],
                      default=typer.Argument(..., help="the job's command, after --, run once per node")),
    extra("nodes", None, ("--nodes",), "nodes (one process each: ranks 0..N-1 in nodes w1..wN)", int | None),
    extra("run_id", None, ("--run-id",), "results folder name (default: timestamp + nodes)"),
    extra("out", "results", ("--out",), "parent folder of the run folder", str),
    extra("label", None, ("--label",), "the run's name in comparisons (harness report; default: the command)"),
    extra("on_fail", "stop", ("--on-fail",), "a process that exits non-zero: stop the others, or wait for them", str),
    extra("calibrate_s", 1.0, ("--calibrate-s",), "seconds of goodput measured each way per link first "
           "(0: RTT and loss only)", float),
    extra("timeout_s", None, ("--timeout",), "stop the job after this many seconds", float | None),
    extra("master_port", 29500, ("--master-port",), "MASTER_PORT", int),
    extra("quiet", False, ("--quiet", "-q"), "print only the result folder", bool)],
    "Run your own distributed job (torch.distributed env://, or anything that reads RANK/WORLD_SIZE/MASTER_ADDR), "
    "unchanged, once per node over the emulated WAN; measure its links, sockets and steps (docs/WRAP.md).",
    app, where="link", hidden=("comm_ratio",))   # refused by wrap (no pilot to measure a ratio against)


@app.command()
def reproduce(name: str = typer.Argument(..., help="the figure: hilo-speed (presets/reproduce/*.yaml)"),
              seeds: str = typer.Option(None, "--seeds", help="seeds, comma list (wins over the figure's)"),
              updates: int = typer.Option(None, help="updates per cell (wins over the figure's)"),
              out: str = typer.Option(None, help="sweep folder (re-run the same folder to resume)"),
              quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress; print only the result folder"),
              json_out: bool = typer.Option(False, "--json", help="print the summary as one JSON document at the end")):
    """Re-measure a paper figure here as one sweep (`hilo-speed`: speedup per update against full sync's
    comm ratio, depth 0 and 1, with the cost model's curve and the paper's points); the sweep's report
    holds the figure."""
    import datetime
    from pathlib import Path

    from harness.run import commands, reproduce as repro
    folder = Path(out or f"results/reproduce-{name}-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    try:
        doc = repro.load(name)
    except ValueError as err:
        raise usage_error(err) from None
    cfgs = _grid_configs(lambda: commands.load_grid(None, {"seed": seeds, "updates": updates}, doc=doc["grid"]), folder)
    if not quiet and not json_out:
        typer.echo(f"harness reproduce {name}: {doc['description']}; {len(cfgs)} runs -> {folder}", err=True)
    raise typer.Exit(commands.sweep(cfgs, folder, quiet=quiet, as_json=json_out))


@app.command()
def data(preset: str = typer.Option(None, help="a preset's task and streams (harness run --preset)"),
         task: str = typer.Option(None, help="task name (wins over the preset's)"),
         task_options: str = typer.Option(None, "--task-options", help="the task's options, key=value comma list"),
         split: str = typer.Option("heldout", help="heldout (what evaluation scores) | train (what a run draws)"),
         count: int = typer.Option(10, help="problems to print (heldout: the set of --eval-problems COUNT)"),
         seed: int = typer.Option(None, help="train: the run seed whose draws to print (default: the first seed)"),
         workers: int = typer.Option(None, help="train: workers of the run"),
         problems_per_worker: int = typer.Option(None, "--problems-per-worker", help="train: problems per batch"),
         updates: int = typer.Option(None, help="train: updates of the run"),
         json_out: bool = typer.Option(False, "--json", help="one JSON object a line")):
    """Print a task's problems as a run sees them, one a line: canonical form (the held-out split's
    key), prompt, gold answer and structured fields."""
    from harness.run import data as datacmd
    flags = {"task": task, "task_options": task_options, "workers": workers,
             "problems_per_worker": problems_per_worker, "updates": updates}
    try:
        lines = [datacmd.line(r, json_out) for r in datacmd.rows(datacmd.resolve(preset, flags), split, count, seed)]
    except ValueError as err:
        raise usage_error(err) from None
    typer.echo("\n".join(lines))


@app.command()
def power(paths: list[str] = typer.Argument(..., help="a pilot run (or sweep) folder"),
          gap: str = typer.Option("0.016,0.03", help="quality gaps to resolve, comma list (0.016: the HiLo paper's)"),
          json_out: bool = typer.Option(False, "--json", help="one JSON object a line")):
    """Size a run from a pilot: the seeds each gap needs at the pilot's paired sd (80 % power, 5 % level)."""
    from harness.run import power as sizing
    try:
        out = sizing.lines(sizing.rows(paths, sizing.parse_gaps(gap)), json_out)
    except (ValueError, FileNotFoundError) as err:
        raise usage_error(err) from None
    typer.echo("\n".join(out))


@app.command()
def report(paths: list[str] = typer.Argument(..., help="run or sweep folders"),
           quiet: bool = typer.Option(False, "--quiet", "-q", help="write report.md, print nothing"),
           out: str | None = typer.Option(None, "--out", help="folder for report.md, report.html and figures/ "
                                          "(default: a run or sweep given alone, rebuilt in place; else a new report-<time>: in the "
                                          "one folder of runs given, or beside the first of several)"),
           label: str | None = typer.Option(None, "--label", help="wrapped runs (harness wrap): their labels in the "
                                            "comparison, a comma list, one per folder (default: each run's own)")):
    """Rebuild report.md, report.html (the whole report, figures inline) and figures/ from results folders
    alone; a combined report of several folders goes to a new folder, never into an input."""
    from harness.results import wrapped
    from harness.run import commands
    try:
        if runs := wrapped.find(paths):   # `harness wrap` folders: their own report and comparison
            raise typer.Exit(wrapped.report_cmd(runs, quiet, out, wrapped.labels(label, paths, runs)))
        if label is not None:
            raise ValueError("--label: names wrapped runs (harness wrap) in a comparison; these folders hold none")
        raise typer.Exit(commands.report_cmd(paths, quiet, out))
    except ValueError as err:
        raise usage_error(err) from None


@app.command()
def plot(paths: list[str] = typer.Argument(..., help="run or sweep folders"),
         quiet: bool = typer.Option(False, "--quiet", "-q", help="print nothing")):
    """Rebuild the figures (PDF with Type-42 fonts + PNG) into <first folder>/figures/."""
    from harness.run import commands
    try:
        raise typer.Exit(commands.plot_cmd(paths, quiet))
    except ValueError as err:
        raise usage_error(err) from None


def main() -> None:
    app()


if __name__ == "__main__":
    main()
