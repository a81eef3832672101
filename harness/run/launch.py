"""Launch: one `harness run` from a RunConfig to a finished results folder.

    results/<run-id>/
      config.json  meta.json  summary.json  updates.parquet/.csv  phases.*  links.*  report.md  figures/
      cells/<method>-s<seed>/   events-learner.jsonl  events-w<i>.jsonl  summary.json  links.csv  *.log

Order of work: write config.json and meta.json (status "running"); build the topology and apply
the shaping once (every cell runs under the same link); for each cell in `cfg.cells` order (seed by seed,
the variants' order reversed every other seed; `--schedule sequential`: variant by variant) start
the learner and the workers as processes inside their
namespaces, sample the link counters while they run, wait for them; then aggregate tables,
report and figures. Teardown (processes, shaping, namespaces) runs in `finally`, so Ctrl-C,
SIGTERM or a crash leave no namespace, qdisc, rule or process behind, and the partial results
are aggregated and marked incomplete. A cell cut short (its learner or aggregator, or a worker, killed
or stopped) does not stop the run: its reason goes into meta.json "errors", the other cells run, and
the run ends "failed"; a dead fork server is replaced before the next cell (harness/run/forkserver.py).

With `emulation=False` the same processes run on 127.0.0.1, unshaped, and the run is recorded
as such (meta.json: "emulation": false, "backend": "none").
"""
from __future__ import annotations

import contextlib
import datetime as dt
import importlib.metadata
import errno
import json
import os
import platform
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from harness.run.config import Cell, RunConfig, models_cache
from trainers.events import atomic_write_json  # torch-free; the one writer of polled JSON files
from trainers import cards, spec
from harness.owner import owner_record
from trainers.events import EventLog
from trainers.events import tail_events
from harness.run.forkserver import ForkServer, ForkServerError, Service
from harness.net import doctor
from harness.net import cgroups
from harness.net import limits
from harness.signals import received, signals_raise
from harness.run import fixed_cost

if TYPE_CHECKING:
    from harness.results.tables import RunTables
# the results and the cost model (pandas, matplotlib) are imported where finalize uses them: a run's
# first seconds are the fork server's imports, and ours overlap them (fixed_cost.prewarm)

ROOT = Path(__file__).resolve().parents[2]
LEARNER_PORT = 29500
PACKAGES = ("torch", "peft", "transformers", "pyroute2", "numpy", "pandas", "pyarrow", "matplotlib", "wan-harness")
CELL_TIMEOUT_S = 1800.0     # a cell that has not finished in 30 min is stopped and marked incomplete
JOIN_TIMEOUT_S = 180.0      # seconds the learner waits for its workers (model building on 2 cores)
RESERVE_BYTES = 1 << 20     # kept in the run folder so that the final meta.json and report fit on a full disk


class PreflightFailed(RuntimeError):
    """The emulated network cannot be built here: not root, or a kernel feature or binary is missing (harness doctor)."""

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


def _env_flag(name: str) -> bool | None:
    """'1'/'0' from the environment as True/False; unset or empty: None (unknown)."""
    value = os.environ.get(name, "").strip()
    return None if not value else value not in ("0", "false", "no")


def meta(cfg: RunConfig, backend: str) -> dict:

    uname = platform.uname()
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"run_id": cfg.run_id, "status": "running", "complete": False,
            "started_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            # a container image has no .git: its build recorded the commit (WAN_GIT_SHA, Dockerfile), and
            # its controller names the engine's host (WAN_HOST; uname there is the container id)
            "git_sha": _git("rev-parse", "HEAD") or os.environ.get("WAN_GIT_SHA") or None,
            "git_dirty": bool(status) if status is not None else _env_flag("WAN_GIT_DIRTY"),
            "packages": {p: _version(p) for p in PACKAGES}, "python": platform.python_version(),
            "kernel": uname.release, "host": os.environ.get("WAN_HOST") or uname.node, "machine": uname.machine,
            "cpus": os.cpu_count(),
            "emulation": cfg.emulation, "backend": backend, "profile": cfg.profile_name,
            "cells": [c.name for c in cfg.cells], "cells_complete": [],
            # who runs it (pid + /proc start time: a recycled pid is not the owner); `harness clean`
            # reads the same record from /run/wan-harness/<netns run id>.json (harness/net/topology.py)
            "owner": owner_record(),
            "errors": []}  # one line per failure: a link counter, a cell cut short (the rest still run), a restart


# ---- processes -------------------------------------------------------------------------------

def cache_dir(cfg: RunConfig) -> Path:
    return Path(cfg.models_dir) if cfg.models_dir else models_cache(Path(cfg.out_dir))


# malloc advises its large blocks (>= 2 MiB) to transparent huge pages (this kernel's THP is `madvise`:
# nothing is huge unless asked): a fresh adapter-sized block, e.g. an fp32 update payload, costs ~1.4
# memcpy of its bytes instead of 6-9 in 4 KiB page faults (tests/benchmarks/test_compress_bench.py)
MALLOC_TUNABLES = "glibc.malloc.hugetlb=1"


def python_env(cache: Path, threads: int) -> dict:
    """The environment of a `python -m trainers...` process the harness starts."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONWARNINGS="ignore", WAN_CACHE_DIR=str(cache))
    # OpenMP threads that wait sleep instead of spinning: on a busy box a spinning helper thread
    # steals the core its partner needs (spar's encode ran 7-30x slower at 2 threads than at 1)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    env.setdefault("GLIBC_TUNABLES", MALLOC_TUNABLES)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def service_env(token: str, cache: Path) -> dict:
    return dict(python_env(cache, threads=1), RUN_TOKEN=token)


def service_modules(method: str) -> tuple[str, str]:
    """(centre, worker) modules of a method: the data-parallel family runs the aggregator on the
    learner's node and dp workers on the worker nodes; every other method the learner and workers."""
    if spec.is_data_parallel(method):
        return "trainers.dataparallel.aggregator", "trainers.dataparallel.worker"
    return "trainers.hilo.learner", "trainers.hilo.worker"


# the signals a centre service catches to write its summary naming them (trainers/hilo/learner.py,
# trainers/dataparallel/aggregator.py);
# any other centre, and any other signal, is stopped with SIGTERM
NAMES_ITS_SIGNAL = {"trainers.hilo.learner": (signal.SIGTERM, signal.SIGINT),
                    "trainers.dataparallel.aggregator": (signal.SIGTERM, signal.SIGINT)}


class Processes:
    """The learner and workers of one cell; `stop()` always leaves none running."""
    def __init__(self, spawn: Callable[..., subprocess.Popen] | None = None,
                 place: Callable[[str, int], None] = lambda name, pid: None):
        self.spawn = spawn or _local_spawn  # None: plain processes on this host (no namespaces)
        self.place = place  # moves a started process into its CPU-share cgroup (harness/net/cgroups.py)
        self.procs: dict[str, subprocess.Popen] = {}
        self.launches: dict[str, tuple] = {}  # name -> (node, argv, cell_dir, env): what `restart` repeats

    def start(self, name: str, node: str, argv: list[str], cell_dir: Path, env: dict) -> subprocess.Popen:
        """Start `argv` as process `name` on `node`, its output appended to `cell_dir/<name>.log`.
        The service learns our pid ($WAN_PARENT_PID) and asks the kernel for SIGTERM when we die
        (trainers.process.die_with_parent): a SIGKILLed harness leaves no service running. Call it
        from the main thread: the kernel ties that signal to the thread that forked."""
        env, log_path = self._launch(name, node, argv, cell_dir, env)
        with open(log_path, "ab") as log:
            proc = self.spawn(node, argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)  # Ctrl-C reaches us; we stop them in order
        return self._started(name, proc)

    def start_many(self, starts: list[tuple[str, str, list[str], Path, dict]]) -> None:
        """`start(*each)` for each of `starts` (name, node, argv, cell_dir, env), with one request to a
        fork server (`ForkSpawn.many`: forked together, released together), else one by one."""
        many = getattr(self.spawn, "many", None)
        if many is None:
            for start in starts:
                self.start(*start)
            return
        procs = many([(start[1], start[2], *self._launch(*start)) for start in starts])
        for (name, *_), proc in zip(starts, procs):
            self._started(name, proc)

    def _launch(self, name: str, node: str, argv: list[str], cell_dir: Path, env: dict) -> tuple[dict, Path]:
        """Record what `restart` repeats; `name`'s environment (with our pid) and its log file."""
        self.launches[name] = (node, argv, cell_dir, env)
        return dict(env, WAN_PARENT_PID=str(os.getpid())), cell_dir / f"{name}.log"

    def _started(self, name: str, proc) -> subprocess.Popen:
        self.procs[name] = proc
        self.place(name, proc.pid)
        return proc

    def restart(self, name: str) -> subprocess.Popen:
        """Start process `name`, which has exited, again: same node, argv and environment."""
        if self.procs[name].poll() is None:
            raise RuntimeError(f"{name} is still running")
        return self.start(name, *self.launches[name])

    def alive(self) -> list[str]:
        return [n for n, p in self.procs.items() if p.poll() is None]

    def stop(self, grace_s: float = 5.0, signum: int = signal.SIGTERM) -> None:
        """Signal the learner first with `signum`, one it catches (NAMES_ITS_SIGNAL: it writes an
        incomplete summary naming it; the harness passes the one it received, so a Ctrl-C reads as
        SIGINT), then SIGTERM the rest; SIGKILL stragglers."""
        for name in sorted(self.alive(), key=lambda n: n != "learner"):
            with contextlib.suppress(ProcessLookupError):
                self.procs[name].send_signal(signum if name == "learner" else signal.SIGTERM)
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


class ForkSpawn:
    """Processes forked by the run's fork server, each entering its node's network namespace (none
    without emulation): one at a time (`__call__`, as `subprocess.Popen`), or a cell's workers in
    one request (`many`)."""

    def __init__(self, server: ForkServer, topo=None):
        self.server, self.topo = server, topo

    def netns(self, node: str) -> str | None:
        return None if self.topo is None else self.topo.nodes[node].netns

    def __call__(self, node: str, argv: list[str], **kw) -> subprocess.Popen:
        return self.server.spawn(argv, netns=self.netns(node), **kw)

    def many(self, starts: list[tuple[str, list[str], dict, Path]]) -> list:
        """Fork (node, argv, env, log path) for each of `starts`, in one request; in their order."""
        return self.server.spawn_many([Service(argv, env, ROOT, log, self.netns(node))
                                       for node, argv, env, log in starts])


def spawner(topo, server: ForkServer | None) -> Callable:
    """How a cell starts its processes: exec'ed (`topo.run_in` inside the node's namespace, or a plain
    process without emulation), or forked by the fork server (`--spawn fork`), which enters the namespace."""
    if server is None:
        return _local_spawn if topo is None else topo.run_in
    return ForkSpawn(server, topo)


def server_modules(cfg: RunConfig) -> list[str]:
    """What the run's fork server imports: every cell's services, the models step when it builds, and
    the adapter's sizing (trainers.model.shapes: the cost model's shapes, see AdapterShapes)."""
    return sorted({m for cell in cfg.cells for m in service_modules(cell.variant.method)}
                  | ({MODELS_MODULE} if models_to_build(cfg) else set()) | {SHAPES_MODULE})


@contextlib.contextmanager
def fork_server(cfg: RunConfig, run_dir: Path, containers: bool) -> Iterator[ForkServer | None]:
    """The run's fork server (`--spawn fork`): started once, before the first cell, with the modules
    of every cell's services imported; stopped after the last. Yielded at once, its imports under
    way (`wait_ready`, or its first spawn, waits for them). None with `--spawn exec` and in
    containers (each service runs in its own container there)."""
    if cfg.spawn != "fork" or containers:
        yield None
        return
    with ForkServer.started(server_modules(cfg), python_env(cache_dir(cfg), threads=1), run_dir / "forkserver.log",
                            label=str(run_dir), wait=False) as server:
        yield server


def wait_address(path: Path, learner: subprocess.Popen, timeout_s: float = 900.0) -> str:
    """The learner's HOST:PORT once it listens (after building its model and, for distill, its
    teacher: minutes on a busy 2-core box the first time; a learner that exits fails at once)."""
    end = time.monotonic() + timeout_s
    while not path.exists():
        if learner.poll() is not None or time.monotonic() > end:
            raise RuntimeError(f"the learner did not start (see {path.parent / 'learner.log'})")
        time.sleep(0.05)
    return path.read_text().strip()


MAX_RESTARTS = 3            # --on-drop restart: restarts per worker and cell; after that the worker stays lost


class CellFailed(RuntimeError):
    """--on-drop fail: a worker was lost, so the cell was stopped; the run stops there (exit 1)."""

def describe_exit(code: int) -> str:
    """A process's return code in words: `killed by SIGKILL`, `exit code 1`."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class DropWatch:
    """What `run_cell` does about lost workers (`--on-drop`), recorded in the cell's
    `events-harness.jsonl` (written only when there is something to say):
    - `worker_exit`: a worker process ended with an error or a signal while the learner ran;
    - `restart` (restart): it was started again with the same argv; it says HELLO with the same
      worker id, and the learner replaces the lost member and catches it up (snapshot + log);
    - `cell_failed` (fail): a worker process ended, or the learner dropped one: the cell is stopped;
    - `learner_exit`: the learner ended with an error before the harness stopped it;
    - `cell_timeout`: the cell ran past CELL_TIMEOUT_S and was stopped.
    `version` in each row is the learner's newest update when the harness noticed."""

    def __init__(self, policy: str, cell_dir: Path):
        self.policy, self.cell_dir = policy, cell_dir
        self.offset, self.version = 0, 0
        self.restarts: dict[str, int] = {}
        self.seen: set[int] = set()  # pids whose exit is recorded
        self.log = None

    def write(self, kind: str, **fields) -> None:

        if self.log is None:
            self.log = EventLog(self.cell_dir, "harness")
        self.log.write(kind, **fields)

    def check(self, procs: Processes) -> str | None:
        """Called while the learner runs: restart what --on-drop restart restarts; returns why
        the cell fails under --on-drop fail, else None."""

        rows, self.offset = tail_events(self.cell_dir / "events-learner.jsonl", self.offset)
        failure = None
        for r in rows:
            if r.get("kind") == "update" and isinstance(r.get("version"), int):
                self.version = r["version"]
            elif r.get("kind") == "dropped" and failure is None:
                failure = f"the learner dropped worker w{r.get('worker')} at version {r.get('version')} ({r.get('reason')})"
        for name, proc in list(procs.procs.items()):
            code = proc.poll()
            if name == "learner" or code in (None, 0) or proc.pid in self.seen:
                continue
            self.seen.add(proc.pid)
            worker = int(name[1:])
            self.write("worker_exit", worker=worker, returncode=code, how=describe_exit(code), version=self.version)
            if self.policy == "fail":
                failure = failure or f"worker {name} {describe_exit(code)} at version {self.version}"
            elif self.policy == "restart" and self.restarts.get(name, 0) < MAX_RESTARTS:
                self.restarts[name] = self.restarts.get(name, 0) + 1
                procs.restart(name)
                self.write("restart", worker=worker, attempt=self.restarts[name], version=self.version,
                           after=describe_exit(code))
        if failure is not None and self.policy == "fail":
            self.write("cell_failed", reason=failure, version=self.version)
            return failure
        return None

    def close(self) -> None:
        if self.log is not None:
            self.log.close()


def run_cell(cfg: RunConfig, cell: Cell, cell_dir: Path, spawn, listen: str, token: str,
             progress: Callable[[Cell, Path], None]) -> dict:
    """Start the learner and the workers, wait for all of them (acting on lost workers as
    `--on-drop` says, see DropWatch); returns the learner's summary. Raises CellFailed under
    `--on-drop fail` once a worker is lost (the cell's processes are stopped first)."""
    cell_dir.mkdir(parents=True, exist_ok=True)
    env = service_env(token, cache_dir(cfg))
    times = {"started_t": time.monotonic()}  # launch.json: the cell's fixed costs (CLOCK_MONOTONIC, as the events' t)
    shares = cfg.cpu_shares
    groups = cgroups.CpuGroups(shares) if shares else None   # removed in `finally`, after the processes
    times["cpu_shares"] = shares
    procs = Processes(spawn, place=groups.place if groups else lambda name, pid: None)
    watch = DropWatch(cfg.on_drop, cell_dir)
    py = sys.executable
    centre, worker = service_modules(cell.variant.method)
    try:
        procs.start("learner", "learner", [py, "-m", centre, *spec.service_argv(
            run_dir=str(cell_dir), listen=listen, join_timeout=JOIN_TIMEOUT_S, worker_timeout=cfg.worker_timeout,
            liveness=cfg.liveness), *cell.argv], cell_dir, env)
        address = wait_address(cell_dir / "learner.addr", procs.procs["learner"])
        times["listening_t"] = time.monotonic()
        procs.start_many([(f"w{w}", f"w{w}", [py, "-m", worker, *spec.service_argv(
            learner=address, worker_id=w, run_dir=str(cell_dir))], cell_dir, env) for w in range(1, cfg.workers + 1)])
        times["workers_started_t"] = time.monotonic()
        end = time.monotonic() + CELL_TIMEOUT_S
        while procs.alive() and time.monotonic() < end:
            progress(cell, cell_dir)
            if procs.procs["learner"].poll() is not None:  # the learner is done: workers get a short grace
                end = min(end, time.monotonic() + 15)
            elif (failure := watch.check(procs)) is not None:
                raise CellFailed(f"cell {cell.name}: {failure} (--on-drop fail)")
            time.sleep(0.25)
        if procs.procs["learner"].poll() is None:
            watch.write("cell_timeout", seconds=CELL_TIMEOUT_S, version=watch.version)
        progress(cell, cell_dir)
    finally:
        code = procs.procs["learner"].poll() if "learner" in procs.procs else None
        ended = "still running when the harness stopped it" if code is None else describe_exit(code)
        if code not in (None, 0):  # it ended on its own (the harness has not signalled it yet)
            watch.write("learner_exit", returncode=code, how=describe_exit(code))
        times["stopping_t"] = time.monotonic()
        got = received(sys.exc_info()[1])
        procs.stop(signum=got if got in NAMES_ITS_SIGNAL.get(centre, ()) else signal.SIGTERM)
        if groups is not None:
            times["cpu_throttled"] = groups.throttled()   # how much each quota held its worker back
            groups.remove()
        watch.close()
        with contextlib.suppress(OSError):  # a record of costs, never a reason to fail the cell
            atomic_write_json(cell_dir / "launch.json", dict(times, stopped_t=time.monotonic()))
    summary_path = cell_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {"complete": False, "status": "no summary"}
    return summary if summary.get("complete") else {**summary, "learner_ended": ended}


def disk_full(folder: Path) -> bool:
    """Whether `folder`'s filesystem has (almost) no byte left for an unprivileged writer: less than
    one events row's worth, 64 KiB (the space reserve, freed at the end, is not counted as free)."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 64 * 1024


def cell_error(cell: Cell, summary: dict) -> str:
    """One meta.json "errors" line for a cell that did not complete: the learner's (or aggregator's)
    own reason, or how its process ended where it wrote none (killed: its summary says "running")."""
    status = str(summary.get("status", "no summary"))
    if status in ("running", "no summary"):
        return f"{cell.name}: the learner ended ({summary.get('learner_ended', 'unknown')}) before its summary"
    return f"{cell.name}: {status}"


# ---- the network -----------------------------------------------------------------------------

@contextlib.contextmanager
def network(cfg: RunConfig) -> Iterator[tuple[object, str]]:
    """(topology, backend) with shaping applied; torn down on exit. Without emulation: (None, 'none')."""
    if not cfg.emulation:
        yield None, "none"
        return

    from harness.net import shaper   # pyroute2 (~75 ms of imports): here, once the fork server's imports are under way

    with shaper.emulate(cfg.load_profile(), cfg.workers, backend=cfg.backend) as (topo, shp):
        yield topo, shp.plan.backend


def check_privileges(cfg: RunConfig) -> None:
    """The preflight (before anything is built): root, then `harness doctor`'s checks for this
    run's backend and plan; PreflightFailed with one line per missing piece (exit 2)."""
    if cfg.emulation and os.geteuid() != 0:
        raise PreflightFailed("harness run: building the emulated network needs root (network namespaces); "
                              "run as root, or add --no-emulation to run the same on localhost, unshaped")
    if cfg.emulation:
        impaired = cfg.load_profile().impaired(cfg.workers)   # delay, jitter or loss: the fallback's iptables rules
        missing = doctor.problems(cfg.backend, impaired=impaired, workers=cfg.workers, out_dir=cfg.out_dir, root=True)
        if missing:
            raise PreflightFailed("\n".join(missing))
    if cfg.cpu_shares and (why := cgroups.problem()):
        raise PreflightFailed(why)


def models_to_build(cfg: RunConfig) -> list[dict]:
    """One cell's service values per distinct pre-trained model set the run loads: the student's base
    (`PRETRAINED_MODELS` with `base_steps` > 0) and the teacher of an objective whose card needs one. Neither depends on the
    method, budget or seed (trainers/hilo/stack.py), so a 3-seed, 3-variant run needs one entry."""
    out, seen = [], set()
    for cell in cfg.cells:
        values = cell.values
        if spec.is_data_parallel(values["method"]) or values["model"] not in spec.PRETRAINED_MODELS:
            continue  # data-parallel replicas are built as given (seeded); micro's teacher is cheap enough for its cell
        if values["base_steps"] == 0 and not cards.objective(values["objective"]).needs_teacher:
            continue
        key = tuple(values[k] for k in ("task", "task_options", "model", "base_steps", "objective", "teacher_steps"))
        if key not in seen:
            seen.add(key)
            out.append(values)
    return out


MODELS_MODULE = "trainers.hilo.stack"
SHAPES_MODULE = "trainers.model.shapes"   # the adapter's shapes for the cost model (AdapterShapes)


def prepare_models(cfg: RunConfig, cache: Path, server: ForkServer | None = None) -> None:
    """Build (or find) the cached models the cells load, before the first cell, with every core.

    Inside a cell the learner would build them with its one thread while the cell's processes wait:
    a 1500-step teacher (the hilo-kk preset) is ~20 min there, past `wait_address`'s limit. Here it
    runs once, in its own process (the harness stays torch-free), its progress lines on our stderr;
    the services then load the same files. A cache hit costs one process start: forked by the run's
    fork `server` when there is one (its torch already imported: ~0.1 s), else a fresh Python (torch's
    import, seconds of CPU); its progress lines go to our stderr either way."""
    threads = os.cpu_count() or 1
    for values in models_to_build(cfg):
        argv = [sys.executable, "-m", MODELS_MODULE, "--threads", str(threads),
                "--run-params", json.dumps(spec.RunParams(**values).to_json())]
        if server is not None:
            with os.fdopen(os.dup(2), "wb") as stderr:
                proc = server.spawn(argv, cwd=ROOT, env=python_env(cache, threads), stdout=stderr)
            try:
                code = proc.wait()
            except BaseException:   # interrupted: the build stops with us, as subprocess.run's would
                proc.kill()
                proc.wait()
                raise
        else:
            code = subprocess.run(argv, cwd=ROOT, env=python_env(cache, threads), stdout=subprocess.DEVNULL).returncode
        if code != 0:
            raise RuntimeError(f"building the run's models failed ({describe_exit(code)}): {' '.join(argv[:5])} ...")


def execute(cfg: RunConfig, progress: Callable[[Cell, Path], None] = lambda c, d: None, net=None,
            started: Callable[[], None] = lambda: None, artefacts: bool = True,
            place: Callable[[RunConfig], RunConfig] | None = None,
            clock: fixed_cost.Stopwatch | None = None, finishing: Callable[[], None] = lambda: None) -> Path:
    """Run every cell of `cfg`; returns the run folder. Raises KeyboardInterrupt/SystemExit after
    tearing down and writing partial results when interrupted. The preflight runs here, once
    (PreflightFailed before anything is built or written); `started()` right after it.
    `net(cfg)`: the network context (default `network`; harness/run/containers.py passes the containers' one).
    `artefacts=False`: the tables only, no summary, prediction, report or figures (the regime pilot).
    `place(cfg)`: the config the cells run, after the preflight (harness/run/regime.py's `--comm-ratio`;
    None: the links run at the rates given).
    `clock`: times the run's fixed cost by part (meta.json "overhead"; a fresh one when None).
    `finishing()`: after the cells, before finalize (commands.run stops its live display there: with no
    thread but ours, finalize's figures are written by two processes, style.save_all).

    The fork server starts first: its imports (torch, transformers, peft: seconds of CPU) run on
    another core while the network is built and finalize's own imports are done (fixed_cost.prewarm);
    then it forks the models step (a cache hit: no second torch import), the adapter's sizing for the
    cost model (AdapterShapes: a first run into a models cache) and the cells."""
    clock = clock or fixed_cost.Stopwatch()
    with clock.part("preflight"):
        check_privileges(cfg)
    if place is not None:
        with clock.part("regime (cached ratio, or its pilot run)"):
            cfg = place(cfg)
    limits.raise_open_files(cfg.workers)  # the centre holds a socket per worker; services inherit it
    started()
    run_dir = cfg.run_dir.resolve()  # the services run with cwd = the repository: give them absolute paths
    run_dir.mkdir(parents=True, exist_ok=True)
    reserve = SpaceReserve(run_dir / ".space-reserve")
    atomic_write_json(run_dir / "config.json", cfg.to_json())
    token = secrets.token_hex(16)
    with clock.part("metadata (git, package versions)"):
        doc = meta(cfg, "pending")
    status = "interrupted"
    shapes = AdapterShapes()
    returning = False   # the body ran to its end: a failure in the wind-up below is the run's to raise

    try:
        with signals_raise(), fork_server(cfg, run_dir, containers=net is not None) as server:
            with contextlib.ExitStack() as built:   # torn down on the way out, before the fork server stops
                with clock.part("network (namespaces, shaping)"):
                    topo, backend = built.enter_context((net or network)(cfg))
                doc["backend"] = backend
                doc["netns_run_id"] = getattr(topo, "run_id", None)  # `harness clean --run-id` finds leftovers by it
                atomic_write_json(run_dir / "meta.json", doc)
                if server is not None:
                    if artefacts:   # finalize's imports, on our core while the server imports on the other
                        with clock.part("report imports (while the fork server imports)"):
                            fixed_cost.prewarm()
                    with clock.part("fork server (the wait for its imports)"):
                        server.wait_ready()
                    if artefacts:
                        shapes = AdapterShapes.start(cfg, run_dir, server)
                try:
                    with clock.part("models (build, or find in the cache)"):
                        prepare_models(cfg, cache_dir(cfg), server)
                except RuntimeError as e:
                    status = "failed"
                    doc["errors"].append(str(e))
                    raise
                run_cells(cfg, run_dir, topo, token, progress, doc, server, clock)
        status = "complete" if len(doc["cells_complete"]) == len(doc["cells"]) else "failed"
        returning = True
    except CellFailed:  # --on-drop fail: the run stops at the first lost worker
        status = "failed"
        raise
    except OSError as err:  # a write that failed (a full disk, a read-only folder): the run stops, marked failed
        status = "failed"
        doc["errors"].append(f"{err.filename or 'a write'}: {err.strerror or err}")
        raise
    finally:
        reserve.release()  # the services are gone: its space is the final meta.json's and the report's
        doc.update(status=status, complete=status == "complete",
                   finished_utc=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
        write_final_meta(run_dir, doc)
        try:
            shapes.finish(wait_s=0.0 if status == "interrupted" else SHAPES_TIMEOUT_S)
            finishing()
            if not (run_dir / "cells").is_dir():
                pass   # stopped before its first cell (models, network, fork server): nothing to tabulate
            elif artefacts:
                finalize(run_dir, clock)
            else:
                from harness.results.tables import write_tables

                write_tables(run_dir)
        except Exception as err:
            if returning:
                raise
            # the interrupt (or the failure) on its way out is the run's outcome, not this
            print(f"harness run: could not write the partial results in {run_dir}: {type(err).__name__}: {err}",
                  file=sys.stderr)
    return run_dir


def run_cells(cfg: RunConfig, run_dir: Path, topo, token: str, progress, doc: dict,
              server: ForkServer | None, clock: fixed_cost.Stopwatch) -> None:
    """Every cell in order, meta.json rewritten after each (its cells_complete, errors)."""
    for cell in cfg.cells:
        try:
            with clock.part("cells"):   # fixed_cost splits it with the cells' launch.json
                summary = _run_one(cfg, cell, run_dir, topo, token, progress, doc["errors"], server)
        except ForkServerError as err:   # not even a restarted server could start it: the rest still run
            summary = {"complete": False, "status": f"not started: {err}"}
        if summary.get("complete"):
            doc["cells_complete"].append(cell.name)
        else:   # a cell cut short: the run goes on with the rest, and ends "failed" saying why
            doc["errors"].append(cell_error(cell, summary))
            if disk_full(run_dir):   # the services could not even say so: the disk is the reason
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(run_dir))
        if server is not None:
            doc["errors"].extend(server.notes)
            server.notes.clear()
        atomic_write_json(run_dir / "meta.json", doc)


class SpaceReserve:
    """RESERVE_BYTES written (so allocated) at `path` when the run starts and removed before its final
    writes: a run that fills its disk can still record that it failed. A disk too full for the reserve
    itself gets none (the final write then fails as it would have, one stderr line)."""

    def __init__(self, path: Path):
        self.path = path
        try:
            with open(path, "wb") as fh:
                fh.write(bytes(RESERVE_BYTES))
                fh.flush()
                os.fsync(fh.fileno())
        except OSError:
            self.release()

    def release(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()


def write_final_meta(run_dir: Path, doc: dict) -> bool:
    """meta.json with the run's final status; on a failed write (a full disk, a read-only folder)
    one stderr line and False: the old file (status "running", its owner dead by the time anyone
    reads it: results mark the run interrupted) stays whole, and no temp file is left."""
    try:
        atomic_write_json(run_dir / "meta.json", doc)
        return True
    except OSError as err:
        print(f"harness run: could not write {run_dir / 'meta.json'}: {err.strerror or err}", file=sys.stderr)
        return False


def _run_one(cfg: RunConfig, cell: Cell, run_dir: Path, topo, token: str, progress,
             errors: list[str] | None = None, server: ForkServer | None = None) -> dict:
    """One cell; on the emulated network with the link counters sampled. A counter that could not
    be read is appended to ``errors`` (meta.json "errors") as '<cell>: <line>'. `server`: the fork
    server that starts the cell's processes (None: each is exec'ed)."""
    cell_dir = run_dir / "cells" / cell.name
    cell_dir.mkdir(parents=True, exist_ok=True)
    if topo is None:
        return run_cell(cfg, cell, cell_dir, spawner(None, server), "127.0.0.1:0", token, progress)

    from harness.net import shaper                 # imported by `network` already: pyroute2 kept off the start
    from harness.net.linkstats import LinkSampler

    listen = f"{topo.nodes['learner'].address}:{LEARNER_PORT}"
    # every cell meets the schedule and traces from the start of its first update (each step logged: due vs applied)
    clock = None
    if shaper.hold_schedule(topo.run_id):
        clock = ScheduleClock(cell_dir / "events-learner.jsonl", cfg.workers,
                              lambda t: shaper.restart_schedule(topo.run_id, cell_dir / "schedule.csv", t))
    sampler = LinkSampler(topo, cell_dir / "links.csv", interval_s=0.5)  # failures also go to stderr
    try:
        with sampler:
            return run_cell(cfg, cell, cell_dir, spawner(topo, server), listen, token, progress)
    finally:
        if clock is not None:
            clock.stop()
        if errors is not None:
            errors.extend(f"{cell.name}: {line}" for line in sampler.errors)


SCHEDULE_POLL_S = 0.05   # how often a cell's learner events are read for its first update's start


class ScheduleClock:
    """Starts a cell's link schedule (a trace, a profile's `schedule:`) at the same point of every cell: the
    start of the learner's first update, i.e. its row for the last of the cell's workers to join (or, where an
    update row comes first, a worker that never joined, that update's earliest phase). Until then the links
    are held at the schedule's time 0, so the processes' start-up and model loads, which differ by method and
    by the cell's place in the run, take none of the trace's time. The clock is set to the row's own time
    (the services' clock is time.monotonic(), the shaper's), so the poll's delay shifts no step: those already
    due are applied at once, their lag logged in schedule.csv."""

    def __init__(self, events: Path, workers: int, start: Callable[[float], object]):
        self.events, self.workers, self.start = events, workers, start
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="schedule-clock", daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        offset, joined = 0, set()
        while not self.stopped.wait(SCHEDULE_POLL_S):
            rows, offset = tail_events(self.events, offset)
            for r in rows:
                if r.get("kind") == "joined":
                    joined.add(r.get("worker"))
                at = (r.get("t") if r.get("kind") == "joined" and len(joined) >= self.workers else
                      first_phase(r) if r.get("kind") == "update" else None)
                if isinstance(at, (int, float)) and not isinstance(at, bool):
                    self.start(float(at))
                    return

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join()


def first_phase(update: dict) -> float | None:
    """The earliest phase start of an update row (its idle wait for rollouts comes first), else its time."""
    starts = [p[0] for p in (update.get("phases") or {}).values()
              if isinstance(p, list) and p and isinstance(p[0], (int, float))]
    return min(starts) if starts else update.get("t")


SHAPES_TIMEOUT_S = 120.0    # the adapter's sizing on the meta device: ~0.1 s for micro, seconds for a 7B shape


class AdapterShapes:
    """The shape tables finalize's cost model reads (the adapter's; a data-parallel replica's), sized while
    the cells run by children the fork server forks (`trainers.model.shapes`: its torch is imported
    already), so that write_prediction runs in this process instead of starting a Python that imports
    torch (a first run into a models cache). Nothing when they are cached or without a fork server; a
    child that fails leaves write_prediction to its process, as before."""

    def __init__(self, children: list[tuple] = ()):
        self.children = list(children)   # (process, pending file, (cache, model, rank)); rank None: the whole model

    @classmethod
    def start(cls, cfg: RunConfig, run_dir: Path, server: ForkServer) -> "AdapterShapes":
        from harness.projection import prediction

        children = []
        methods = [v.method for v in cfg.variants]
        for rank in prediction.needed_ranks(methods, int(cfg.values["lora_rank"]), cfg.values.get("dp_train")):
            key = (cache_dir(cfg), str(cfg.values["model"]), rank)
            try:
                pending = prediction.pending_shapes(*key)
                if pending is None:
                    continue
                table = ["--full"] if rank is None else ["--rank", str(rank)]
                argv = [sys.executable, "-m", SHAPES_MODULE, "--model", key[1], *table, "--out", str(pending)]
                with open(run_dir / "forkserver.log", "ab") as log:
                    children.append((server.spawn(argv, cwd=ROOT, env=python_env(key[0], threads=1), stdout=log),
                                     pending, key))
            except (OSError, ForkServerError):   # write_prediction sizes it in its own process
                continue
        return cls(children)

    def finish(self, wait_s: float) -> None:
        """Wait up to `wait_s` for the children (then kill them) and keep the shapes they wrote in the cache."""
        children, self.children = self.children, []
        if not children:   # nothing to import for: a run stopped mid-import (pandas half-loaded) must not retry it
            return
        from harness.projection import prediction

        for proc, pending, key in children:
            try:
                code = proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            with contextlib.suppress(OSError):   # a cache we cannot write: write_prediction's process tries again
                if code == 0:
                    prediction.adopt_shapes(*key, pending)
                else:
                    pending.unlink()


def write_prediction(run_dir: Path, tables: RunTables | None = None) -> None:
    """prediction.json (the cost model at this run's link and measured compute), which the report reads.
    In this process when the adapter's shapes are in the models cache (no torch, no process start:
    AdapterShapes put them there while the cells ran); else its own process, which sizes the adapter on
    the meta device (torch; the harness stays torch-free) and caches the shapes for the next run. `tables`: the run's, already parsed (finalize
    reads the folder once). A failure is one stderr line; the report then has no model section."""
    from harness.projection import prediction

    cache = models_cache(run_dir.parent)
    try:
        if prediction.in_process(run_dir, cache):
            prediction.write(run_dir, cache, tables)
            return
    except Exception as err:  # the report goes on without a model section, as after a failed process
        print(f"harness run: no cost-model prediction for {run_dir}: {type(err).__name__}: {err}", file=sys.stderr)
        return
    done = subprocess.run([sys.executable, "-m", "harness.projection.prediction", str(run_dir)], cwd=ROOT,
                          env=python_env(cache, 1), capture_output=True, text=True, timeout=600)
    if done.returncode:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        print(f"harness run: no cost-model prediction for {run_dir}: {last}", file=sys.stderr)


def overhead(run_dir: Path, tables: RunTables, now: dt.datetime | None = None,
             clock: fixed_cost.Stopwatch | None = None) -> dict | None:
    """The run's wall seconds (from the process's start with `clock`, else since meta.json's start), the
    seconds its cells spent in their training loops (first update's start to last update's end, summed
    over cells: evaluations between updates included), the held-out evaluations outside them (before
    the first update and after the last) and the rest: the harness's fixed cost, split by part
    (harness/run/fixed_cost.py: models, namespaces, the fork server's imports, process starts, joins,
    teardown, tables, prediction, report and figures)."""
    return fixed_cost.split(run_dir, tables, clock, now)


def overhead_line(o: dict) -> str:
    share = o["overhead_s"] / o["run_s"] if o["run_s"] > 0 else 0.0
    evals = f"; held-out evaluations {o['eval_outside_loop_s']:.1f} s" if o.get("eval_outside_loop_s") else ""
    from harness.results.wording import seconds_by_part

    parts = f"; by part, one after another, adding up to it: {seconds_by_part(o['parts'])}" if o.get("parts") else ""
    return (f"harness overhead: {o['overhead_s']:.1f} s outside the training loop ({share:.0%} of the run; "
            f"loop {o['loop_s']:.1f} s{evals}){parts}")


def _set_meta(run_dir: Path, **fields) -> None:
    doc = json.loads((run_dir / "meta.json").read_text())
    atomic_write_json(run_dir / "meta.json", {**doc, **fields})


def finalize(run_dir: Path, clock: fixed_cost.Stopwatch | None = None) -> None:
    """Tables, summary, report and figures from the folder alone (also for partial runs); the
    folder's files are parsed once and the tables handed to each. `clock`: the run's (execute),
    which times each of them for the fixed cost's split (without it, as for a run whose cells ran in
    another process, the run's seconds count from meta.json's start and only the cells are split)."""
    from harness.results import compare, report
    from harness.results.tables import write_tables

    run_clock, clock = clock, clock or fixed_cost.Stopwatch()
    try:
        with clock.part("tables"):
            tables = write_tables(run_dir)
        with clock.part("summary"):
            compare.write_summary(run_dir, tables)
        with clock.part("prediction (cost model)"):
            write_prediction(run_dir, tables)
        if (cost := overhead(run_dir, tables, clock=run_clock)) is not None:   # the report states the cost so far
            _set_meta(run_dir, overhead={**cost, "until": "report"})
            tables.runs[0].meta["overhead"] = {**cost, "until": "report"}
        timings: dict[str, float] = {}
        report.write(run_dir, tables=tables, timings=timings)  # and figures/, whose PNGs report.html inlines
        for name, seconds in timings.items():
            clock.add(name, seconds)
        cost = overhead(run_dir, tables, clock=run_clock)
        if cost is not None:                  # the whole fixed cost is known only now: meta.json and a line
            _set_meta(run_dir, overhead=cost)
            print(overhead_line(cost), file=sys.stderr)
    except Exception as err:  # a partial run may have too little to plot; the raw files stay
        print(f"harness run: could not build every artefact for {run_dir}: {type(err).__name__}: {err}",
              file=sys.stderr)
