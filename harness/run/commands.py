"""Bodies of `harness run`, `harness sweep`, `harness report` and `harness plot`, kept out of
cli.py so that file stays a thin list of commands. Usage errors raise ConfigError (cli.py turns
them into one line and exit code 2).

The results modules (pandas: ~0.4 s to import) are imported in the functions that read results, so
that `harness run` reaches launch.execute, where its fork server starts, without them."""
from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import itertools
import json
import secrets
import shutil
import shlex
import statistics
import sys
from pathlib import Path
from typing import Any

from harness import units
from harness.net import backend, plan
from harness.projection import commratio
from harness.run import config, fixed_cost, launch, presets, regime
from harness.run.config import ConfigError, RunConfig
from harness.signals import exit_code
from trainers import cards, spec
from trainers.events import atomic_write_json, tail_events

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130  # interrupted: 128 + the signal (SIGTERM 143)


# ---- live progress ---------------------------------------------------------------------------

class Live:
    """A rich progress display: one bar per cell, with updates done, s/update and bytes per update."""

    def __init__(self, cfg: RunConfig, enabled: bool):
        self.cfg, self.enabled = cfg, enabled
        self.offsets: dict[str, int] = {}
        self.rows: dict[str, list[dict]] = {}
        self.tasks: dict[str, Any] = {}
        self.progress = None
        if enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(TextColumn("{task.description:<22}"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
                                     console=Console(stderr=True, width=None if sys.stderr.isatty() else 160),
                                     transient=False)   # a log file gets whole lines, not 80 columns

    def start(self) -> None:
        if self.progress is not None and not self.progress.live.is_started:
            self.progress.start()

    def stop(self) -> None:
        """Stop the display, and its refresh thread with it (finalize forks its figure writer only where
        no other thread runs: style.save_all)."""
        if self.progress is not None and self.progress.live.is_started:
            refresher = getattr(self.progress.live, "_refresh_thread", None)   # rich sets it None, unjoined
            self.progress.stop()
            if refresher is not None:
                refresher.join(timeout=1.0)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def _new_rows(self, cell: config.Cell, cell_dir: Path) -> list[dict]:

        rows, self.offsets[cell.name] = tail_events(cell_dir / "events-learner.jsonl", self.offsets.get(cell.name, 0))
        return [r for r in rows if r.get("kind") == "update"]

    def __call__(self, cell: config.Cell, cell_dir: Path) -> None:
        rows = self.rows.setdefault(cell.name, [])
        rows += self._new_rows(cell, cell_dir)
        if self.progress is None:
            return
        if cell.name not in self.tasks:
            self.tasks[cell.name] = self.progress.add_task(cell.name, total=self.cfg.updates, info="starting")
        info = "waiting for workers"
        if rows:
            spu = statistics.median(r["seconds_per_update"] for r in rows)   # the report's median (even counts too)
            # the mean over the updates so far: a data-parallel method sends nothing on most steps and a sync
            # on some, so the last update's bytes swing between 0 and a whole sync (the report's figure is the mean)
            down = sum(sum((r.get("update_frame_bytes") or {}).values()) for r in rows) / len(rows)
            info = f"{spu:.3f} s/update (median), {down:,.0f} B/update down (mean)"
        self.progress.update(self.tasks[cell.name], completed=len(rows), info=info)


# ---- run -------------------------------------------------------------------------------------

def dry_run_text(cfg: RunConfig) -> str:
    """The resolved config, the shaping plan and the processes that would start; touches nothing."""
    lines = ["config:", json.dumps(cfg.to_json(), indent=1, default=str)]
    if cfg.comm_ratio_target is not None:
        cached = regime.cache_file(cfg)
        lines.append(f"regime: worker link rates scaled so that full sync's link/compute ratio is "
                     f"{cfg.comm_ratio_target:.2f}, from its compute per update measured "
                     + (f"earlier ({cached})" if cached.is_file() else "by a pilot before the cells")
                     + "; the plan below is at the profile's own rates")
    if cfg.emulation:
        from harness.net import topology   # pyroute2: a run imports it once its fork server is on its way

        topo = topology.Topology.plan("0000", cfg.workers)
        chosen = backend.decide(cfg.backend, create=False)  # a dry run creates nothing to probe
        lines += [f"shaping plan (run id 0000, backend {chosen.name}"
                  f"{': kernel config unreadable, assumed' if chosen.assumed else ''}):",
                  plan.build_plan(cfg.load_profile(), topo, chosen.name).to_json()]
    if cfg.cpu_shares:   # applied as cgroup cpu.max quotas when the workers start (harness/net/cgroups.py)
        lines.append("CPU shares (cgroup cpu.max per worker): " + ", ".join(
            f"{w} {share:g} CPUs" for w, share in cfg.cpu_shares.items())
            + ("; the learner unlimited" if len(cfg.cpu_shares) == cfg.workers else "; the learner and the other workers unlimited"))
    for values in launch.models_to_build(cfg):   # before the first cell: a first build can take an hour
        teacher = cards.objective(values["objective"]).needs_teacher
        lines.append(f"models: before the first cell, the {values['model']} base for {values['task']} "
                     f"({values['base_steps']} supervised steps)"
                     + (f" and its {values['objective']} teacher ({values['teacher_steps']} steps)" if teacher else "")
                     + f" are built, or found cached under {launch.cache_dir(cfg)}; a first build runs minutes to "
                     "over an hour on a small CPU box (docs/MEASURED.md, per preset)")
    for cell in cfg.cells:
        centre = "aggregator" if spec.is_data_parallel(cell.variant.method) else "learner"
        lines.append(f"cell {cell.name}: {centre} + {cfg.workers} worker{'s' if cfg.workers != 1 else ''}: "
                     f"{shlex.join(cell.argv)}")   # quoted: an empty value (--task-options '') survives a paste
    rates = ("" if not cfg.emulation or cfg.comm_ratio_target is not None
             else "; the links at the plan's rates as given (a literal rate, or --comm-ratio off: no regime scaling)")
    lines.append(f"dry run: {len(cfg.cells)} cell{'s' if len(cfg.cells) != 1 else ''} planned{rates}; "
                 "nothing was built, started or written")
    return "\n".join(lines)


class CellLogger:
    """`--log`: hands each cell to the tracker (harness/results/tracking.py) once the next one starts,
    and the rest when the run ends; a tracker that fails is a warning, never a failed run."""

    def __init__(self, kind: str | None, run_dir: Path):
        self.tracker, self.current = None, None
        if kind is not None:
            from harness.results import tracking

            self.tracker = tracking.Tracker(kind, run_dir)

    def __call__(self, cell: config.Cell, cell_dir: Path) -> None:
        if self.tracker is not None and cell.name != self.current:
            if self.current is not None:
                self._log(lambda: self.tracker.log_cell(self.current))
            self.current = cell.name

    def finish(self) -> None:
        if self.tracker is not None:
            self._log(self.tracker.log_rest)

    def _log(self, step) -> None:
        try:
            step()
        except Exception as err:  # noqa: BLE001  (a tracker's own failure must not fail the run)
            print(f"warning: --log {self.tracker.kind}: {type(err).__name__}: {err}", file=sys.stderr)


def claim_run_id(cfg: RunConfig, name: str, advice: str) -> RunConfig:
    """`cfg` with its run id: a new one when none is given (time, first variant, workers, 16 random
    bits); a given one must name a new results folder, since a second run under it would overwrite
    the first's config.json and cells and mix their event files. `name` is the flag or variable the
    user set (--run-id, RUN_ID); ConfigError, one line, before anything is built."""
    if cfg.run_id is None:
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        return dataclasses.replace(cfg, run_id=f"{stamp}-{cfg.variants[0].slug}-w{cfg.workers}-{secrets.token_hex(2)}")
    run_dir = Path(cfg.run_dir)
    if run_dir.is_dir() and any(run_dir.iterdir()):
        raise ConfigError(f"{name}: {cfg.run_id!r} is taken: {run_dir} already holds a run ({advice})")
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"{name}: {cfg.run_id!r}: {run_dir} exists and is not a folder")
    return cfg


def run(cfg: RunConfig, quiet: bool, as_json: bool, dry_run: bool, log: str | None = None,
        first_in_process: bool = True) -> int:
    """One run of `cfg`, its outcome as an exit code. `first_in_process`: its fixed cost includes the
    process's start-up (False: a sweep's later run, timed from its own start)."""
    if log is not None:
        from harness.results import tracking

        try:
            tracking.check(log)
        except ValueError as err:  # before anything is built or touched (a dry run too): one line, exit 2
            print(f"error: {err}", file=sys.stderr)
            return EXIT_USAGE
    if dry_run:
        print(dry_run_text(cfg))
        return EXIT_OK
    try:
        cfg = claim_run_id(cfg, "--run-id", "choose another --run-id, or remove the folder first")
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    live, logger = Live(cfg, enabled=not quiet and not as_json), CellLogger(log, cfg.run_dir)

    def started() -> None:  # launch's preflight passed (root, doctor): say what runs, show its progress
        if not quiet and not as_json:
            print(f"run {cfg.run_id}: {', '.join(v.label for v in cfg.variants)} x seeds {list(cfg.seeds)}, "
                  f"{cfg.workers} worker{'s' if cfg.workers != 1 else ''}, {cfg.updates} updates, "
                  f"{'profile ' + cfg.profile_name if cfg.emulation else 'localhost, unshaped'} -> {cfg.run_dir}",
                  file=sys.stderr)
        live.start()

    clock = fixed_cost.Stopwatch(from_import=first_in_process)   # the run's fixed cost by part (meta.json, report)
    try:
        try:
            say = (lambda line: None) if quiet or as_json else (lambda line: print(line, file=sys.stderr))
            run_dir = launch.execute(cfg, progress=lambda cell, d: (live(cell, d), logger(cell, d)), started=started,
                                     clock=clock, finishing=live.stop,
                                     place=None if cfg.comm_ratio_target is None else   # literal rates: nothing to place
                                     functools.partial(regime.place, say=say))
        finally:
            live.stop()
    except launch.PreflightFailed as err:  # nothing was built or written
        print(str(err), file=sys.stderr)
        return EXIT_USAGE
    except (KeyboardInterrupt, SystemExit) as err:  # SIGINT: 130; SIGTERM/SIGHUP (harness/signals.py): 143/129
        print(f"interrupted: network torn down; {_left_where(Path(cfg.run_dir))}", file=sys.stderr)
        return exit_code(err)
    except (RuntimeError, OSError) as err:  # a service or the network failed: torn down, partial results kept
        print(f"harness run failed: {err}; network torn down, {_left_where(Path(cfg.run_dir))}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        logger.finish()  # the last cell (and, when interrupted, whatever the cells left)
    return finish(run_dir, quiet, as_json)


def _left_where(run_dir: Path) -> str:
    """What a run that stopped early left: partial results, or plainly none when no cell had started
    (stopped in the preflight, the regime pilot, the models' build or the network's)."""
    if (run_dir / "cells").is_dir():
        return f"partial results (marked incomplete) in {run_dir}"
    if run_dir.is_dir():
        return f"no cell ran, so there are no results (its config.json and meta.json are in {run_dir})"
    return f"no cell ran, so there are no results ({run_dir} was not created)"


def run_command(values: dict[str, Any], run_id: str | None, out: str, dry_run: bool, quiet: bool, json_out: bool,
                log: str | None) -> int:
    """`harness run`: the spec's values (harness/run/flags.py) -> a RunConfig -> `run`; a bad value is one line, exit 2."""
    try:
        config.check_results_folder(Path(out))
        cfg = config.build(**values, run_id=run_id, out_dir=out)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    return run(cfg, quiet=quiet, as_json=json_out, dry_run=dry_run, log=log)


def finish(run_dir: Path, quiet: bool, as_json: bool) -> int:
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").exists() else {}
    ok = bool(summary.get("complete")) and all(m.get("consistent") for m in summary.get("methods", []))
    degraded = [c for c in summary.get("cells", []) if c.get("degraded")]
    if degraded:  # --on-drop continue: the run completes, but says so
        print(f"warning: {len(degraded)} degraded cell(s), a worker was lost: "
              + "; ".join(f"{c['cell']}: {c.get('degraded_note')}" for c in degraded) + " (see report.md)", file=sys.stderr)
    if as_json:
        print(json.dumps({"run_dir": str(run_dir), **summary}, default=str))
    elif quiet:
        print(run_dir)
    else:
        say_report(run_dir / "report.md", run_dir)
    return EXIT_OK if ok else EXIT_FAILED


def say_report(report_md: Path, folder: Path, what: str = "full report") -> None:
    """How `harness run` and `harness report` end: the report's first screen (the verdict, not the
    whole report, whose figure captions would be what the terminal keeps), then where all of it is."""
    print(first_screen(report_md.read_text()) if report_md.exists() else "")
    print(f"{what}: {report_md} and report.html (tables, figures: {folder})", file=sys.stderr)


def first_screen(md: str) -> str:
    """A report's first screen: its title and the `## Verdict` section, up to the next `## ` heading."""
    lines: list[str] = []
    for line in md.splitlines():
        if line.startswith("## ") and any(seen.startswith("## ") for seen in lines):
            break
        lines.append(line)
    return "\n".join(lines).rstrip()


# ---- sweep -----------------------------------------------------------------------------------

def load_grid(path: str | None, flags: dict[str, Any], doc: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run-spec values from a YAML file (or `doc`, already read: a reproduction's grid), overridden by
    the flags given (None: not given). Keys are spec names (`seeds` for the seed list, as on the
    command line, is accepted too)."""
    doc = dict(doc or {})
    if path:
        doc = presets.read_yaml(Path(path), "--grid", ConfigError)
        if doc is None or doc == {}:   # zero bytes or comments only: not the default job run by mistake
            raise ConfigError(f"--grid: the grid file {path} is empty; give run-spec parameters (a list is an axis)")
    if path or doc:
        if not isinstance(doc, dict):
            raise ConfigError(f"--grid: {path!r} must be a mapping of parameter -> value or list")
        aliases = {p.flag_name: p.name for p in spec.PARAMS if p.flag_name}
        doc = {aliases.get(k, k): v for k, v in doc.items()}
        allowed = sorted(p.name for p in spec.PARAMS)
        unknown = sorted(str(k) for k in doc if k not in allowed)
        if unknown:
            raise ConfigError(f"--grid: unknown key {unknown[0]!r} (valid: {', '.join(allowed)})")
    doc.update({k: v for k, v in flags.items() if v is not None})
    return doc


def _axis(value: Any) -> list:
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str):
        return [x.strip() for x in value.split(",") if x.strip()]
    return [value]


def _ratio(text: Any) -> float | None:
    return commratio.parse(text)


NORMALISE = {"bw": units.parse_rate, "delay": units.parse_delay, "jitter": units.parse_delay,
             "loss": units.parse_loss, "comm_ratio": _ratio}  # link values are text ('10Mbit'); what they mean is a number


def check_distinct(name: str, values: list) -> None:
    """ConfigError when two values of a grid axis mean the same (`workers: [1, 1]` collapsed into
    one run, `lr: [0.001, 1e-3]` and `bw: [10mbit, 10Mbit]` ran the same point twice)."""
    seen: dict[Any, Any] = {}
    for raw in values:
        try:
            value = NORMALISE[name](raw) if name in NORMALISE else spec.parse_value(name, raw)
        except (ValueError, units.UnitError):   # commratio.RatioError is a ValueError
            continue  # the grid point's own validation names it
        key = repr(value)
        if key in seen:
            raise ConfigError(f"--grid: {name}: {raw!r} and {seen[key]!r} are the same value; give each once")
        seen[key] = raw


def grid_points(grid: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(run id, values) per point. A `many` parameter (method, budget, seeds) is held by every
    run; any other parameter with several values is an axis, and names the runs by coordinates
    (link axes first: `bw10mbit-w2`)."""
    many = {p.name for p in spec.PARAMS if p.many}
    for k, v in grid.items():
        if isinstance(v, (list, tuple)) and not v:   # `bw: []`: no point to run, not a type error
            raise ConfigError(f"--grid: {k}: the axis is empty; give at least one value")
    axes = {k: _axis(v) for k, v in grid.items() if k not in many and len(_axis(v)) > 1}
    for k, values in axes.items():
        check_distinct(k, values)
    order = [p.name for p in spec.params("link")] + [p.name for p in spec.PARAMS if p.where != "link"]
    keys = sorted(axes, key=order.index)
    points = []
    for combo in itertools.product(*(axes[k] for k in keys)):
        coords = "-".join(f"{'w' if k == 'workers' else k}{v}".replace("%", "pct") for k, v in zip(keys, combo))
        points.append((coords or "default", {**{k: presets.one_value(k, v) for k, v in grid.items()},
                                             **dict(zip(keys, combo))}))
    return points


def sweep_configs(grid: dict[str, Any], out: Path) -> list[RunConfig]:
    """One validated RunConfig per grid point (all validated before anything runs)."""
    cfgs = []
    for run_id, values in grid_points(grid):
        try:
            cfgs.append(config.build(**values, run_id=run_id, out_dir=str(out / "runs")))
        except ValueError as err:
            raise ConfigError(f"grid point {run_id}: {err}") from None
    return cfgs


def is_complete(run_dir: Path) -> bool:
    from harness.results import files

    try:
        meta = files.read_json(run_dir / "meta.json", {})
    except files.ResultsError:  # unreadable: run the grid point again
        return False
    return isinstance(meta, dict) and bool(meta.get("complete"))


def check_sweep_folder(out: Path) -> None:
    """ConfigError unless `out` may hold this sweep: absent, empty, or an earlier sweep (its sweep.json);
    a file, a run folder or another folder with files in it is never written into."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out: {out} exists and is not a folder; name a new folder for the sweep")
    if out.is_dir() and not (out / "sweep.json").is_file() and any(out.iterdir()):
        what = "a run folder" if (out / "config.json").is_file() else "a folder with other files in it"
        raise ConfigError(f"--out: {out} is {what}, not a sweep folder (no sweep.json); name a new or empty "
                          "folder, or an earlier sweep's to resume it")


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(map(str, value))
    return "none" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _same(name: str, planned: Any, stored: Any) -> bool:
    """Whether a run parameter's planned and recorded values mean the same (`10Mbit` is `10mbit`)."""
    if planned == stored:
        return True
    try:
        return name in NORMALISE and planned is not None and NORMALISE[name](planned) == NORMALISE[name](stored)
    except (ValueError, units.UnitError):
        return False


def first_difference(cfg: RunConfig, recorded: dict[str, Any]) -> tuple[str, str, str] | None:
    """(flag, recorded value, planned value) of the first run parameter (spec order) on which the run
    recorded in a config.json differs from `cfg`; None when every one matches. Run ids, folders and
    what a run resolves as it goes (the regime, the profile's text) are not run parameters."""
    planned = json.loads(json.dumps(cfg.to_json(), default=str))   # as config.json holds it
    for p in spec.PARAMS:
        key = p.flag_name or p.name
        if key not in recorded:
            return p.flag, "(not recorded)", _shown(planned[key])
        if not _same(p.name, planned[key], recorded[key]):
            return p.flag, _shown(recorded[key]), _shown(planned[key])
    return None


def resume_plan(cfgs: list[RunConfig]) -> list[bool]:
    """Per grid point, whether its run is already complete (skipped). ConfigError, one line, when a
    run already there (complete or partial) was made with other values than the grid's: resuming would
    report the grid's values over that run's numbers."""
    from harness.results import files

    done = []
    for cfg in cfgs:
        if not (cfg.run_dir / "config.json").exists():   # nothing there, or an attempt stopped before its config
            done.append(False)
            continue
        try:
            recorded = files.read_doc(cfg.run_dir / "config.json")
        except files.ResultsError as err:
            raise ConfigError(f"{err}: cannot tell which values that run used; use another --out "
                              "(or delete that run)") from None
        diff = first_difference(cfg, recorded)
        if diff is not None:
            flag, was, now = diff
            raise ConfigError(f"{cfg.run_dir} was run with {flag} {was}; the grid now says {now}: use another "
                              "--out (or delete that run)")
        done.append(is_complete(cfg.run_dir))
    return done


def sweep_command(values: dict[str, Any], grid: str | None, out: str | None, quiet: bool, json_out: bool) -> int:
    """`harness sweep`: the grid (a YAML file, flags whose comma lists are axes) under `out`, then `sweep`."""
    folder = Path(out or f"results/sweep-{dt.datetime.now():%Y%m%d-%H%M%S}")
    try:
        cfgs = grid_configs(load_grid(grid, values), folder)
    except (ValueError, RuntimeError) as err:
        print(f"error: {err}" if isinstance(err, ValueError) else str(err), file=sys.stderr)
        return EXIT_USAGE
    return sweep(cfgs, folder, quiet=quiet, as_json=json_out)


def grid_configs(grid: dict[str, Any], folder: Path) -> list[RunConfig]:
    """The validated configs of a sweep's grid under `folder`, and the preflight of an emulated one:
    ValueError (a bad value) or RuntimeError (a missing privilege), one line, before anything runs."""
    cfgs = sweep_configs(grid, out=folder)
    if any(c.emulation for c in cfgs):
        launch.check_privileges(next(c for c in cfgs if c.emulation))
    return cfgs


def sweep(cfgs: list[RunConfig], out: Path, quiet: bool, as_json: bool) -> int:
    """Run each grid point not already complete in `out`, then one report over them all. A bad `out`
    or a run there made with other values: one line, exit 2, nothing written."""
    from harness.results import files, report, tables

    try:
        check_sweep_folder(out)
        done = resume_plan(cfgs)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "sweep.json").write_text(json.dumps({"runs": [c.run_id for c in cfgs],
                                                    "configs": [c.to_json() for c in cfgs]}, indent=1, default=str))
    except OSError as err:   # a file on the way (`--out notes.txt/s`), a read-only or full disk
        print(f"error: --out: cannot write the sweep into {out} ({err.strerror or type(err).__name__})", file=sys.stderr)
        return EXIT_USAGE
    failed = ran = 0
    for cfg, complete in zip(cfgs, done):
        if complete:
            if not quiet and not as_json:
                print(f"sweep: {cfg.run_id} already complete, skipped", file=sys.stderr)
            continue
        if cfg.run_dir.exists():
            shutil.rmtree(cfg.run_dir)  # an incomplete earlier attempt with the same values: run it again from scratch
        with contextlib.redirect_stdout(sys.stderr) if as_json or quiet else contextlib.nullcontext():
            # --json: stdout holds one document, -q the sweep's folder (not each point's); a later run's fixed
            # cost starts with it, not with the process
            code = run(cfg, quiet=quiet or as_json, as_json=False, dry_run=False, first_in_process=ran == 0)
        ran += 1
        if code > 128:  # interrupted (128 + the signal): stop the sweep too
            return code
        failed += code != EXIT_OK
    try:
        report.write(out, tables=tables.read([out]))  # parsed once, for the report and its figures
    except (FileNotFoundError, files.ResultsError) as err:  # no run got far enough, or a malformed file
        print(f"harness sweep: no combined report: {err}", file=sys.stderr)
        return EXIT_FAILED
    if as_json:
        print(json.dumps({"sweep_dir": str(out), "runs": [str(c.run_dir) for c in cfgs], "failed": failed}))
    elif quiet:   # the result folder, as `harness run -q` prints its own
        if not ran:
            print(f"sweep: all {len(cfgs)} points were already complete; report: {(out / 'report.md').resolve()}",
                  file=sys.stderr)
        print(out.resolve())
    else:
        say_report((out / "report.md").resolve(), out.resolve())
    return EXIT_OK if not failed else EXIT_FAILED


# ---- report / plot ---------------------------------------------------------------------------

def report_folder(paths: list[str], out: str | None, runs: list[Path]) -> Path:
    """Where `harness report` writes: `--out`, else the one folder given when it is a run or a sweep (its
    own report rebuilt in place), else a new `report-<time>` folder: inside the one folder of runs given,
    or beside the first of several (a combined report never lands in an input run)."""
    from harness.results import files

    inputs = {Path(p).resolve() for p in paths} | {r.resolve() for r in runs}
    if out is not None:
        target = Path(out)
        if len(paths) > 1 and target.resolve() in inputs:
            raise ConfigError(f"--out: {out!r} is one of the folders being combined; name a new folder")
        return target
    stamp = f"report-{dt.datetime.now():%Y%m%d-%H%M%S}"
    if len(paths) == 1:
        one = Path(paths[0])
        if files.is_run(one) or (one / "sweep.json").is_file():
            return one
        return one / stamp
    return Path(paths[0]).resolve().parent / stamp


def report_cmd(paths: list[str], quiet: bool, out: str | None = None) -> int:
    from harness.results import files, report, tables

    try:
        runs = files.find_runs(paths)
        folder = report_folder(paths, out, runs)
        target = report.write(paths[0], extra=paths[1:], tables=tables.read(paths), out=folder)
    except (FileNotFoundError, files.ResultsError) as err:  # a malformed file: one line naming it, exit 2
        raise ConfigError(str(err)) from None
    combined = folder.resolve() not in {Path(p).resolve() for p in paths}   # not a run's or sweep's own, rebuilt
    if combined:  # a folder of its own: say which runs it holds, and where it is
        atomic_write_json(folder / files.COMBINED_MARKER, {"runs": [str(r.resolve()) for r in runs]})
    if not quiet:
        say_report(target, folder, f"combined report of {len(runs)} run(s)" if combined else "full report")
    return EXIT_OK


def plot_cmd(paths: list[str], quiet: bool) -> int:
    from harness.results import files, plots   # matplotlib: only `harness plot` pays for it

    try:
        files.find_runs(paths)
        written = plots.write(paths[0], extra=paths[1:])
    except (FileNotFoundError, ValueError) as err:  # files.ResultsError (a malformed file) is a ValueError
        raise ConfigError(str(err)) from None
    if not quiet:
        print("\n".join(map(str, written)))
    return EXIT_OK
