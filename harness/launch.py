"""Launch: one `harness run` from a RunConfig to a finished results folder.

    results/<run-id>/
      config.json  meta.json  summary.json  updates.parquet/.csv  phases.*  links.*  report.md  figures/
      cells/<method>-s<seed>/   events-learner.jsonl  events-w<i>.jsonl  summary.json  links.csv  *.log

Order of work: write config.json and meta.json (status "running"); build the topology and apply
the shaping once (every cell runs under the same link); for each seed, for each variant (the
method(s) first, `full` last) start the learner and the workers as processes inside their
namespaces, sample the link counters while they run, wait for them; then aggregate tables,
report and figures. Teardown (processes, shaping, namespaces) runs in `finally`, so Ctrl-C,
SIGTERM or a crash leave no namespace, qdisc, rule or process behind, and the partial results
are aggregated and marked incomplete.

With `emulation=False` the same processes run on 127.0.0.1, unshaped, and the run is recorded
as such (meta.json: "emulation": false, "backend": "none").
"""
from __future__ import annotations

import contextlib
import datetime as dt
import importlib.metadata
import json
import os
import platform
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from harness.config import RunConfig, Variant
from trainers.events import atomic_write_json  # torch-free; the one writer of polled JSON files
from trainers import spec

ROOT = Path(__file__).resolve().parent.parent
LEARNER_PORT = 29500
PACKAGES = ("torch", "peft", "transformers", "pyroute2", "numpy", "pandas", "pyarrow", "matplotlib", "wan-harness")
CELL_TIMEOUT_S = 1800.0     # a cell that has not finished in 30 min is stopped and marked incomplete
JOIN_TIMEOUT_S = 180.0      # seconds the learner waits for its workers (model building on 2 cores)


class NeedsRoot(RuntimeError):
    """Network namespaces need root (CAP_NET_ADMIN + CAP_SYS_ADMIN)."""


@dataclass(frozen=True)
class Cell:
    variant: Variant
    seed: int

    @property
    def name(self) -> str:
        return f"{self.variant.slug}-s{self.seed}"


def cells(cfg: RunConfig) -> list[Cell]:
    return [Cell(v, s) for s in cfg.seeds for v in cfg.variants]


# ---- metadata --------------------------------------------------------------------------------

def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _version(pkg: str) -> str | None:
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return None


def meta(cfg: RunConfig, backend: str) -> dict:
    uname = platform.uname()
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"run_id": cfg.run_id, "status": "running", "complete": False,
            "started_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "git_sha": _git("rev-parse", "HEAD"), "git_dirty": bool(status) if status is not None else None,
            "packages": {p: _version(p) for p in PACKAGES}, "python": platform.python_version(),
            "kernel": uname.release, "host": uname.node, "machine": uname.machine, "cpus": os.cpu_count(),
            "emulation": cfg.emulation, "backend": backend, "profile": cfg.profile_name,
            "cells": [c.name for c in cells(cfg)], "cells_complete": []}


# ---- processes -------------------------------------------------------------------------------

def service_env(token: str, cache: Path) -> dict:
    env = dict(os.environ, RUN_TOKEN=token, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore",
               WAN_CACHE_DIR=str(cache))
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_flags(cfg: RunConfig, cell: Cell) -> list[str]:
    """The learner's argv for one cell: every service parameter of the spec, explicitly."""
    return spec.to_argv(cfg.service_values(cell.variant, cell.seed))


class Processes:
    """The learner and workers of one cell; `stop()` always leaves none running."""

    def __init__(self, spawn: Callable[..., subprocess.Popen] | None = None):
        self.spawn = spawn or _local_spawn  # None: plain processes on this host (no namespaces)
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, node: str, argv: list[str], cell_dir: Path, env: dict) -> subprocess.Popen:
        """Start `argv` as process `name` on `node`, its output appended to `cell_dir/<name>.log`."""
        with open(cell_dir / f"{name}.log", "ab") as log:
            self.procs[name] = self.spawn(node, argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True)  # Ctrl-C reaches us; we stop them in order
        return self.procs[name]

    def alive(self) -> list[str]:
        return [n for n, p in self.procs.items() if p.poll() is None]

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM the learner first (it writes an incomplete summary), then the rest; SIGKILL stragglers."""
        for name in sorted(self.alive(), key=lambda n: n != "learner"):
            with contextlib.suppress(ProcessLookupError):
                self.procs[name].send_signal(signal.SIGTERM)
                self.procs[name].send_signal(signal.SIGCONT)  # a stopped (SIGSTOP) process must see it too
        end = time.monotonic() + grace_s
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _local_spawn(_node: str, argv: list[str], **kw) -> subprocess.Popen:
    return subprocess.Popen(argv, **kw)


def wait_address(path: Path, learner: subprocess.Popen, timeout_s: float = 900.0) -> str:
    """The learner's HOST:PORT once it listens (after building its model and, for distill, its
    teacher: minutes on a busy 2-core box the first time; a learner that exits fails at once)."""
    end = time.monotonic() + timeout_s
    while not path.exists():
        if learner.poll() is not None or time.monotonic() > end:
            raise RuntimeError(f"the learner did not start (see {path.parent / 'learner.log'})")
        time.sleep(0.05)
    return path.read_text().strip()


def run_cell(cfg: RunConfig, cell: Cell, cell_dir: Path, spawn, listen: str, token: str,
             progress: Callable[[Cell, Path], None]) -> dict:
    """Start the learner and the workers, wait for all of them; returns the learner's summary."""
    cell_dir.mkdir(parents=True, exist_ok=True)
    env = service_env(token, Path(cfg.out_dir).resolve() / ".cache")
    procs = Processes(spawn)
    py = sys.executable
    try:
        procs.start("learner", "learner", [py, "-m", "trainers.learner", "--run-dir", str(cell_dir), "--listen", listen,
                                           "--join-timeout", str(JOIN_TIMEOUT_S), *run_flags(cfg, cell)], cell_dir, env)
        address = wait_address(cell_dir / "learner.addr", procs.procs["learner"])
        for w in range(1, cfg.workers + 1):
            procs.start(f"w{w}", f"w{w}", [py, "-m", "trainers.worker", "--learner", address, "--worker-id", str(w),
                                           "--run-dir", str(cell_dir)], cell_dir, env)
        end = time.monotonic() + CELL_TIMEOUT_S
        while procs.alive() and time.monotonic() < end:
            progress(cell, cell_dir)
            if procs.procs["learner"].poll() is not None:  # the learner is done: workers get a short grace
                end = min(end, time.monotonic() + 15)
            time.sleep(0.25)
        progress(cell, cell_dir)
    finally:
        procs.stop()
    summary_path = cell_dir / "summary.json"
    return json.loads(summary_path.read_text()) if summary_path.exists() else {"complete": False, "status": "no summary"}


# ---- the network -----------------------------------------------------------------------------

@contextlib.contextmanager
def network(cfg: RunConfig) -> Iterator[tuple[object, str]]:
    """(topology, backend) with shaping applied; torn down on exit. Without emulation: (None, 'none')."""
    if not cfg.emulation:
        yield None, "none"
        return
    from harness import shaper

    with shaper.emulate(cfg.load_profile(), cfg.workers, backend=cfg.backend) as (topo, shp):
        yield topo, shp.plan.backend


def check_privileges(cfg: RunConfig) -> None:
    if cfg.emulation and os.geteuid() != 0:
        raise NeedsRoot("harness run: building the emulated network needs root (network namespaces); "
                        "run as root, or add --no-emulation to run the same on localhost, unshaped")


def new_run_id(cfg: RunConfig) -> str:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{cfg.variants[0].slug}-w{cfg.workers}-{secrets.token_hex(2)}"


def execute(cfg: RunConfig, progress: Callable[[Cell, Path], None] = lambda c, d: None) -> Path:
    """Run every cell of `cfg`; returns the run folder. Raises KeyboardInterrupt/SystemExit after
    tearing down and writing partial results when interrupted."""
    check_privileges(cfg)
    run_dir = cfg.run_dir.resolve()  # the services run with cwd = the repository: give them absolute paths
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(run_dir / "config.json", cfg.to_json())
    token = secrets.token_hex(16)
    doc = meta(cfg, "pending")
    status = "interrupted"
    from harness.signals import signals_raise  # SIGTERM/SIGHUP -> SystemExit, so `finally` tears down

    try:
        with signals_raise(), network(cfg) as (topo, backend):
            doc["backend"] = backend
            doc["netns_run_id"] = getattr(topo, "run_id", None)  # `harness clean --run-id` finds leftovers by it
            atomic_write_json(run_dir / "meta.json", doc)
            for cell in cells(cfg):
                summary = _run_one(cfg, cell, run_dir, topo, token, progress)
                if summary.get("complete"):
                    doc["cells_complete"].append(cell.name)
                atomic_write_json(run_dir / "meta.json", doc)
        status = "complete" if len(doc["cells_complete"]) == len(doc["cells"]) else "incomplete"
    finally:
        doc.update(status=status, complete=status == "complete",
                   finished_utc=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
        atomic_write_json(run_dir / "meta.json", doc)
        finalize(run_dir)
    return run_dir


def _run_one(cfg: RunConfig, cell: Cell, run_dir: Path, topo, token: str, progress) -> dict:
    cell_dir = run_dir / "cells" / cell.name
    cell_dir.mkdir(parents=True, exist_ok=True)
    if topo is None:
        return run_cell(cfg, cell, cell_dir, _local_spawn, "127.0.0.1:0", token, progress)
    from harness.linkstats import LinkSampler

    listen = f"{topo.nodes['learner'].address}:{LEARNER_PORT}"
    with LinkSampler(topo, cell_dir / "links.csv", interval_s=0.5):
        return run_cell(cfg, cell, cell_dir, topo.run_in, listen, token, progress)


def finalize(run_dir: Path) -> None:
    """Tables, summary, report and figures from the folder alone (also for partial runs); the
    folder's files are parsed once and the tables handed to each."""
    from harness import compare, plots, report, results

    try:
        tables = results.write_tables(run_dir)
        compare.write_summary(run_dir, tables)
        report.write(run_dir, tables=tables)
        plots.write(run_dir, tables=tables)
    except Exception as err:  # a partial run may have too little to plot; the raw files stay
        print(f"harness run: could not build every artefact for {run_dir}: {type(err).__name__}: {err}",
              file=sys.stderr)

