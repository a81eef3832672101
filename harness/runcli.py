"""Bodies of `harness run`, `harness sweep`, `harness report` and `harness plot`, kept out of
cli.py so that file stays a thin list of commands. Usage errors raise ConfigError (cli.py turns
them into one line and exit code 2)."""
from __future__ import annotations

import contextlib
import itertools
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from harness import config, launch
from harness.config import ConfigError, RunConfig

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


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
                                     console=Console(stderr=True), transient=False)

    def __enter__(self):
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc):
        if self.progress is not None:
            self.progress.stop()

    def _new_rows(self, cell: launch.Cell, cell_dir: Path) -> list[dict]:
        path = cell_dir / "events-learner.jsonl"
        if not path.exists():
            return []
        with path.open() as fh:
            fh.seek(self.offsets.get(cell.name, 0))
            text = fh.read()
        complete = text[: text.rfind("\n") + 1]  # a half-written last line waits for the next poll
        self.offsets[cell.name] = self.offsets.get(cell.name, 0) + len(complete.encode())
        rows = [json.loads(line) for line in complete.splitlines() if line.strip()]
        return [r for r in rows if r.get("kind") == "update"]

    def __call__(self, cell: launch.Cell, cell_dir: Path) -> None:
        rows = self.rows.setdefault(cell.name, [])
        rows += self._new_rows(cell, cell_dir)
        if self.progress is None:
            return
        if cell.name not in self.tasks:
            self.tasks[cell.name] = self.progress.add_task(cell.name, total=self.cfg.updates, info="starting")
        info = "waiting for workers"
        if rows:
            spu = sorted(r["seconds_per_update"] for r in rows)[len(rows) // 2]
            down = sum((rows[-1].get("update_frame_bytes") or {}).values())
            info = f"{spu:.3f} s/update (median), {down:,} B/update down"
        self.progress.update(self.tasks[cell.name], completed=len(rows), info=info)


# ---- run -------------------------------------------------------------------------------------

def dry_run_text(cfg: RunConfig) -> str:
    """The resolved config, the shaping plan and the processes that would start; touches nothing."""
    from harness import shaper, topology

    lines = ["config:", json.dumps(cfg.to_json(), indent=1, default=str)]
    if cfg.emulation:
        topo = topology.Topology.plan("0000", cfg.workers)
        known = shaper._netem_from_config()  # the kernel config; a dry run creates nothing to probe
        backend = cfg.backend or ("fallback" if known is None else "netem" if known else "fallback")
        lines += [f"shaping plan (run id 0000, backend {backend}"
                  f"{'' if cfg.backend or known is not None else ': kernel config unreadable, assumed'}):",
                  shaper.build_plan(cfg.load_profile(), topo, backend).to_json()]
    for cell in launch.cells(cfg):
        lines.append(f"cell {cell.name}: learner + {cfg.workers} workers: {' '.join(launch.run_flags(cfg, cell))}")
    return "\n".join(lines)


def run(cfg: RunConfig, quiet: bool, as_json: bool, dry_run: bool) -> int:
    if dry_run:
        print(dry_run_text(cfg))
        return EXIT_OK
    try:
        launch.check_privileges(cfg)
    except launch.NeedsRoot as err:
        print(str(err), file=sys.stderr)
        return EXIT_USAGE
    if cfg.run_id is None:
        import dataclasses

        cfg = dataclasses.replace(cfg, run_id=launch.new_run_id(cfg))
    if not quiet and not as_json:
        print(f"run {cfg.run_id}: {', '.join(v.label for v in cfg.variants)} x seeds {list(cfg.seeds)}, "
              f"{cfg.workers} workers, {cfg.updates} updates, "
              f"{'profile ' + cfg.profile_name if cfg.emulation else 'localhost, unshaped'} -> {cfg.run_dir}",
              file=sys.stderr)
    try:
        with Live(cfg, enabled=not quiet and not as_json) as live:
            run_dir = launch.execute(cfg, progress=live)
    except (KeyboardInterrupt, SystemExit):
        print(f"interrupted: network torn down; partial results (marked incomplete) in {cfg.run_dir}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (RuntimeError, OSError) as err:  # a service or the network failed: torn down, partial results kept
        print(f"harness run failed: {err}; network torn down, partial results in {cfg.run_dir}", file=sys.stderr)
        return EXIT_FAILED
    return finish(run_dir, quiet, as_json)


def finish(run_dir: Path, quiet: bool, as_json: bool) -> int:
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").exists() else {}
    ok = bool(summary.get("complete")) and all(m.get("consistent") for m in summary.get("methods", []))
    if as_json:
        print(json.dumps({"run_dir": str(run_dir), **summary}, default=str))
    elif quiet:
        print(run_dir)
    else:
        print((run_dir / "report.md").read_text() if (run_dir / "report.md").exists() else "")
        print(f"results: {run_dir}  (report.md, updates.parquet, figures/)", file=sys.stderr)
    return EXIT_OK if ok else EXIT_FAILED


# ---- sweep -----------------------------------------------------------------------------------

GRID_KEYS = ("bw", "delay", "loss", "workers")


def load_grid(path: str | None, flags: dict[str, str | None]) -> dict[str, Any]:
    """Grid axes and fixed options from a YAML file, overridden by flags (comma lists)."""
    doc: dict[str, Any] = {}
    if path:
        import yaml

        try:
            doc = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as err:
            raise ConfigError(f"--grid: {path!r} cannot be read as YAML ({str(err).splitlines()[0]})") from None
        if not isinstance(doc, dict):
            raise ConfigError(f"--grid: {path!r} must be a mapping of option -> value or list")
        allowed = set(GRID_KEYS) | {"method", "budget", "seeds", "updates", "profile", "pipeline", "model", "task",
                                    "objective", "problems_per_worker", "group_size", "max_new_tokens"}
        unknown = sorted(set(doc) - allowed)
        if unknown:
            raise ConfigError(f"--grid: unknown key {unknown[0]!r} (valid: {', '.join(sorted(allowed))})")
    for k, v in flags.items():
        if v is not None:
            doc[k] = v
    return doc


def _axis(value: Any) -> list:
    if value is None:
        return [None]
    if isinstance(value, (list, tuple)):
        return list(value)
    return [x.strip() for x in str(value).split(",") if x.strip()] if isinstance(value, str) else [value]


def _joined(value: Any) -> str | None:
    return None if value is None else ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def sweep_configs(grid: dict[str, Any], emulation: bool, out: Path) -> list[RunConfig]:
    """One validated RunConfig per grid point (all validated before anything runs)."""
    fixed = {k: v for k, v in grid.items() if k not in GRID_KEYS}
    cfgs = []
    for bw, delay, loss, workers in itertools.product(*(_axis(grid.get(k)) for k in GRID_KEYS)):
        coords = "-".join(f"{k}{v}".replace("%", "pct") for k, v in
                          (("bw", bw), ("delay", delay), ("loss", loss), ("w", workers)) if v is not None) or "default"
        kwargs = dict(method=_joined(fixed.get("method", "spar")), budget=_joined(fixed.get("budget", "1.6%")),
                      seeds=_joined(fixed.get("seeds", "1,2")), updates=int(fixed.get("updates", 20)),
                      pipeline=int(fixed.get("pipeline", 0)), model=str(fixed.get("model", "tiny")),
                      task=str(fixed.get("task", "digits")), objective=str(fixed.get("objective", "distill")),
                      profile=fixed.get("profile"), bw=bw, delay=delay, loss=loss,
                      workers=int(workers) if workers is not None else 2, emulation=emulation,
                      run_id=coords, out_dir=str(out / "runs"))
        for key in ("problems_per_worker", "group_size", "max_new_tokens"):
            if key in fixed:
                kwargs[key] = int(fixed[key])
        try:
            cfgs.append(config.build(**kwargs))
        except ValueError as err:
            raise ConfigError(f"grid point {coords}: {err}") from None
    return cfgs


def is_complete(run_dir: Path) -> bool:
    from harness import results

    return bool((results.read_json(run_dir / "meta.json", {}) or {}).get("complete"))


def sweep(cfgs: list[RunConfig], out: Path, quiet: bool, as_json: bool) -> int:
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps({"runs": [c.run_id for c in cfgs],
                                                "configs": [c.to_json() for c in cfgs]}, indent=1, default=str))
    failed = 0
    for cfg in cfgs:
        if is_complete(cfg.run_dir):
            if not quiet and not as_json:
                print(f"sweep: {cfg.run_id} already complete, skipped", file=sys.stderr)
            continue
        if cfg.run_dir.exists():
            shutil.rmtree(cfg.run_dir)  # an incomplete earlier attempt: run the grid point again from scratch
        with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
            code = run(cfg, quiet=quiet or as_json, as_json=False, dry_run=False)  # --json: stdout holds one document
        if code == EXIT_INTERRUPTED:
            return code
        failed += code != EXIT_OK
    from harness import plots, report

    report.write(out)
    plots.write(out)
    if as_json:
        print(json.dumps({"sweep_dir": str(out), "runs": [str(c.run_dir) for c in cfgs], "failed": failed}))
    elif not quiet:
        print((out / "report.md").read_text())
    return EXIT_OK if not failed else EXIT_FAILED


# ---- report / plot ---------------------------------------------------------------------------

def report_cmd(paths: list[str], quiet: bool) -> int:
    from harness import report, results

    try:
        results.find_runs(paths)
    except FileNotFoundError as err:
        raise ConfigError(str(err)) from None
    target = report.write(paths[0], extra=paths[1:])
    if not quiet:
        print(target.read_text())
    return EXIT_OK


def plot_cmd(paths: list[str], quiet: bool) -> int:
    from harness import plots, results

    try:
        results.find_runs(paths)
        files = plots.write(paths[0], extra=paths[1:])
    except (FileNotFoundError, ValueError) as err:
        raise ConfigError(str(err)) from None
    if not quiet:
        print("\n".join(map(str, files)))
    return EXIT_OK
