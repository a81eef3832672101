"""`harness wrap`: a user's own distributed job, unchanged, once per node over the emulated WAN.

    harness wrap [--bw R | --delay D | --profile P | --trace F ...] --nodes N -- COMMAND ARGS...

The topology is `harness run`'s (harness/net/shaper.py `emulate`: namespaces, shaping, schedule and
traces, the same profiles and backends), built for N worker nodes: rank r runs in node w<r+1>, so
every rank sits behind its own worker link (a profile's defaults / wN entries); the learner node
carries no rank (it hosts the calibration server). Each process gets the environment a
torch.distributed `env://` job expects, and the harness's own::

    RANK, WORLD_SIZE, LOCAL_RANK=0, LOCAL_WORLD_SIZE=1, MASTER_ADDR (w1's address), MASTER_PORT,
    WAN_NODE (w<r+1>), WAN_RUN_DIR (the run folder), WAN_EVENTS (<run>/nodes/<node>/events.jsonl)

Order of work: the checks (the command exists and is executable, the flags, root, doctor) before
anything is built; meta.json; the network; a short calibration of every node's link
(harness/net/calibrate.py's probes, `--calibrate-s`); the link counters (links.csv) and the socket
ledger (sockets.csv) start; the N processes start, their stdout/stderr to <run>/nodes/<node>/;
the run ends when every process has exited, or, with `--on-fail stop` (default), at the first that
exits non-zero (the others get SIGTERM, then SIGKILL after STOP_GRACE_S); `--timeout` stops all.
Teardown is `harness run`'s: processes, then shaping and namespaces, in `finally` (Ctrl-C,
SIGTERM); each process also asks the kernel for SIGKILL when the harness dies
(PR_SET_PDEATHSIG, set between fork and exec), so a SIGKILLed harness leaves no job process, and
`harness clean` removes its namespaces (their owner is dead). Then summary.json and report.md
(harness/results/wrapped.py), with the ring all-reduce prediction (harness/projection/ring.py).

--comm-ratio is refused: it scales the links to a ratio of full sync's link time to a compute time
that a pilot of the harness's own trainer measures; a wrapped job has no such pilot.
"""
from __future__ import annotations

import contextlib
import ctypes
import datetime as dt
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

from harness.net import calibrate, cgroups, doctor, profiles, shaper, topology
from harness.net.linkstats import LinkSampler
from harness.net.sockets import SocketSampler
from harness.owner import owner_record
from harness.projection.network import Network, goodput_ratio
from harness.projection.ring import payload_from_sent, ring_allreduce_s
from harness.results import wrapped
from harness.run.config import ConfigError, check_results_folder, check_run_id
from harness.run.launch import PreflightFailed, describe_exit, write_final_meta
from harness.signals import exit_code, signals_raise
from trainers import spec
from trainers.events import atomic_write_json

ON_FAIL = ("stop", "wait")
STOP_GRACE_S = 5.0          # SIGTERM to SIGKILL for the processes the harness stops
POLL_S = 0.1
SAMPLE_S = 0.5              # link counters and socket ledger, as `harness run` samples its links
DEFAULT_PORT = 29500
CALIBRATION_RTT_PROBES, CALIBRATION_LOSS_PROBES = 20, 300
_LINK_FLAGS = {"rate": "--bw", "delay": "--delay", "jitter": "--jitter", "loss": "--loss", "trace": "--trace"}
PR_SET_PDEATHSIG = 1        # <linux/prctl.h>
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True)
class WrapConfig:
    command: tuple[str, ...]
    nodes: int
    profile: profiles.Profile = field(repr=False)
    emulation: bool = True
    backend: str | None = None
    run_id: str = ""
    out_dir: str = "results"
    label: str = ""
    on_fail: str = "stop"
    calibrate_s: float = 1.0
    timeout_s: float | None = None
    master_port: int = DEFAULT_PORT
    cpu_shares: dict[str, float] = field(default_factory=dict)   # node -> CPUs (--worker-cpu, the profile's cpu)

    @property
    def run_dir(self) -> Path:
        return (Path(self.out_dir) / self.run_id).resolve()

    @property
    def node_names(self) -> list[str]:
        return [f"w{r + 1}" for r in range(self.nodes)]


# ---- checks (before anything is built) -------------------------------------------------------

def resolve_command(command: list[str]) -> str:
    """The executable COMMAND[0] names (a path, or a name on $PATH); ConfigError, one line, if none."""
    if not command:
        raise ConfigError("COMMAND: nothing to run (harness wrap [flags] --nodes N -- COMMAND ...)")
    exe = command[0]
    if "/" in exe:
        path = Path(exe)
        if not path.exists():
            raise ConfigError(f"COMMAND: {exe!r} does not exist")
        if path.is_dir() or not os.access(path, os.X_OK):
            raise ConfigError(f"COMMAND: {exe!r} is not executable" + (" (a folder)" if path.is_dir() else
                                                                       f" (chmod +x {exe}, or run it with its interpreter)"))
        return str(path.resolve())
    found = shutil.which(exe)
    if found is None:
        raise ConfigError(f"COMMAND: {exe!r} not found on PATH")
    return found


def build(values: dict, nodes: int | None, command: list[str], run_id: str | None = None, out_dir: str = "results",
          label: str | None = None, on_fail: str = "stop", calibrate_s: float = 1.0, timeout_s: float | None = None,
          master_port: int = DEFAULT_PORT) -> WrapConfig:
    """Validate the flags (the run spec's link parameters, `values` keyed by spec name, raw) and the
    command; ConfigError (one line) on the first problem."""
    given = {p.name: values.get(p.name) for p in spec.params("link")}
    parsed = {name: spec.parse_value(name, raw) if raw is not None else spec.get(name).default
              for name, raw in given.items()}
    if parsed["comm_ratio"] not in (None, "off"):
        raise ConfigError(f"--comm-ratio {parsed['comm_ratio']}: a ratio needs the compute time of the harness's "
                          "own trainer (its pilot); a wrapped job has none: give the link itself (--bw, --profile)")
    shaping = [f"--{k}" for k in ("bw", "delay", "jitter", "loss", "trace") if given.get(k) not in (None, "")]
    if shaping and parsed["emulation"] is False:
        raise ConfigError(f"{', '.join(shaping)}: shape the emulated link; with --no-emulation nothing is shaped")
    if nodes is None:
        raise ConfigError(f"--nodes is required (1-{topology.MAX_WORKERS})")
    if not 1 <= nodes <= topology.MAX_WORKERS:
        raise ConfigError(f"--nodes: {nodes!r} must be within 1 and {topology.MAX_WORKERS}")
    if on_fail not in ON_FAIL:
        raise ConfigError(f"--on-fail: {on_fail!r} must be one of {', '.join(ON_FAIL)}")
    if calibrate_s < 0:
        raise ConfigError(f"--calibrate-s: {calibrate_s!r} must be >= 0 (0: RTT and loss only)")
    if timeout_s is not None and timeout_s <= 0:
        raise ConfigError(f"--timeout: {timeout_s!r} must be > 0 seconds")
    if not 1 <= master_port <= 65535:
        raise ConfigError(f"--master-port: {master_port!r} must be a TCP port (1-65535)")
    check_run_id(run_id)
    resolve_command(command)
    link = {"rate": parsed["bw"], "delay": parsed["delay"], "jitter": parsed["jitter"], "loss": parsed["loss"],
            "trace": str(Path(parsed["trace"]).resolve()) if parsed["trace"] and Path(parsed["trace"]).is_file()
            else parsed["trace"]}
    try:
        prof = profiles.resolve(parsed["profile"], {k: v for k, v in link.items() if v is not None})
    except profiles.OverrideError as err:
        raise ConfigError(f"{_LINK_FLAGS[err.key]}: {err}") from None
    except profiles.ProfileError as err:
        raise ConfigError(f"--profile: {err}") from None
    try:
        shares = prof.cpu_shares(nodes, spec.parse_worker_cpu(parsed["worker_cpu"], nodes, "nodes"))
    except (spec.SpecError, ValueError) as err:
        raise ConfigError(str(err)) from None
    if shares and not parsed["emulation"]:
        raise ConfigError("--worker-cpu: CPU shares go with the emulated nodes; with --no-emulation there are none")
    check_results_folder(Path(out_dir))
    rid = run_id or f"{dt.datetime.now():%Y%m%d-%H%M%S}-wrap-n{nodes}-{secrets.token_hex(2)}"
    cfg = WrapConfig(command=tuple(command), nodes=nodes, profile=prof, emulation=parsed["emulation"],
                     backend=parsed["backend"], run_id=rid, out_dir=out_dir, label=label or " ".join(command),
                     on_fail=on_fail, calibrate_s=calibrate_s, timeout_s=timeout_s, master_port=master_port,
                     cpu_shares=shares)
    if cfg.run_dir.exists() and (not cfg.run_dir.is_dir() or any(cfg.run_dir.iterdir())):
        raise ConfigError(f"--run-id: {rid!r} is taken: {cfg.run_dir} already exists (choose another --run-id)")
    return cfg


def preflight(cfg: WrapConfig) -> None:
    """Root and `harness doctor`'s checks for this profile, as `harness run` does (PreflightFailed)."""
    if not cfg.emulation:
        return
    if os.geteuid() != 0:
        raise PreflightFailed("harness wrap: building the emulated network needs root (network namespaces); "
                              "run as root, or add --no-emulation to run the job on localhost, unshaped")
    missing = doctor.problems(cfg.backend, impaired=cfg.profile.impaired(cfg.nodes), workers=cfg.nodes,
                              out_dir=cfg.out_dir, root=True)
    if cfg.cpu_shares and (why := cgroups.problem()):
        missing.append(f"--worker-cpu: {why}")
    if missing:
        raise PreflightFailed("\n".join(missing))


# ---- processes -------------------------------------------------------------------------------

# The interface each node's job must talk on: gloo, TensorPipe and NCCL otherwise pick the address the
# host name resolves to (the host's, shared by every namespace: often 127.0.0.1), which is no peer's.
SOCKET_IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def job_env(cfg: WrapConfig, rank: int, master_addr: str) -> dict[str, str]:
    node = cfg.node_names[rank]
    base = dict(os.environ)
    if cfg.emulation:
        for var in SOCKET_IFNAME_VARS:
            base.setdefault(var, topology.Topology.IFNAME)
    return dict(base, RANK=str(rank), WORLD_SIZE=str(cfg.nodes), LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                MASTER_ADDR=master_addr, MASTER_PORT=str(cfg.master_port), WAN_NODE=node,
                WAN_RUN_DIR=str(cfg.run_dir), WAN_EVENTS=str(cfg.run_dir / "nodes" / node / "events.jsonl"))


def _child_setup(netns: str | None, cgroup_procs: Path | None = None):
    """Between fork and exec: join the node's CPU-share cgroup (before exec, so every process the job
    starts is inside it), enter the node's namespace; SIGKILL when the harness's thread dies."""
    def setup() -> None:
        if cgroup_procs is not None:
            cgroup_procs.write_text("0")   # "0": the writing process itself
        if netns is not None:
            topology.setns(netns)
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    return setup


class Job:
    """The N processes of a wrapped command; `stop()` always leaves none running."""

    def __init__(self, cfg: WrapConfig, topo: topology.Topology | None, groups: cgroups.CpuGroups | None = None):
        self.cfg, self.topo, self.groups = cfg, topo, groups
        self.procs: dict[str, subprocess.Popen] = {}
        self.exits: dict[str, int] = {}
        self.stopped: set[str] = set()   # the harness ended them (--on-fail stop, a timeout, an interrupt)

    def start(self) -> None:
        master = self.topo.nodes["w1"].address if self.topo else "127.0.0.1"
        for rank, node in enumerate(self.cfg.node_names):
            folder = self.cfg.run_dir / "nodes" / node
            folder.mkdir(parents=True, exist_ok=True)
            netns = self.topo.nodes[node].netns if self.topo else None
            group = self.groups.groups.get(node) if self.groups else None
            with open(folder / "stdout.log", "wb") as out, open(folder / "stderr.log", "wb") as err:
                self.procs[node] = subprocess.Popen(list(self.cfg.command), env=job_env(self.cfg, rank, master),
                                                    stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                                    preexec_fn=_child_setup(netns, group and group / "cgroup.procs"),
                                                    start_new_session=True)

    def poll(self) -> list[str]:
        """Nodes whose process ended since the last poll, their codes recorded."""
        ended = []
        for node, proc in self.procs.items():
            if node not in self.exits and proc.poll() is not None:
                self.exits[node] = proc.returncode
                ended.append(node)
        return ended

    def alive(self) -> list[str]:
        return [n for n, p in self.procs.items() if p.poll() is None]

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM every live process's group (the job's own children too), SIGKILL what is left."""
        live = self.alive()
        self.stopped |= set(live)
        for node in live:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.procs[node].pid, signal.SIGTERM)
        end = time.monotonic() + grace_s
        for node in live:
            try:
                self.procs[node].wait(timeout=max(0.05, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.procs[node].pid, signal.SIGKILL)
                self.procs[node].wait()
        self.poll()


def wait(job: Job, cfg: WrapConfig, doc: dict) -> str:
    """Until every process has exited (or `--on-fail stop` / `--timeout` ends them); the run's status."""
    end = None if cfg.timeout_s is None else time.monotonic() + cfg.timeout_s
    while job.alive():
        for node in job.poll():
            code = job.exits[node]
            if code != 0 and doc.get("failed_node") is None:
                doc["failed_node"], doc["failure"] = node, describe_exit(code)
                if cfg.on_fail == "stop":
                    job.stop()
                    return "failed"
        if end is not None and time.monotonic() > end:
            doc["timed_out_nodes"] = job.alive()     # --timeout is the job's: these were still running
            if doc.get("failed_node") is None:       # else the node that failed first stays the headline
                doc["failure"] = f"timed out after {cfg.timeout_s:g} s"
            job.stop()
            return "timeout"
        time.sleep(POLL_S)
    job.poll()
    bad = next((n for n in cfg.node_names if job.exits.get(n, 0) != 0), None)
    if bad is not None and doc.get("failed_node") is None:
        doc["failed_node"], doc["failure"] = bad, describe_exit(job.exits[bad])
    return "failed" if bad else "complete"


# ---- the network -----------------------------------------------------------------------------

@contextlib.contextmanager
def network(cfg: WrapConfig) -> Iterator[tuple[topology.Topology | None, str]]:
    if not cfg.emulation:
        yield None, "none"
        return
    with shaper.emulate(cfg.profile, cfg.nodes, backend=cfg.backend) as (topo, shp):
        yield topo, shp.plan.backend


def measure_links(cfg: WrapConfig, topo: topology.Topology, backend: str) -> None:
    """calibration.json: each node's path to the (idle) learner node, as `harness calibrate` measures it."""
    server = topo.run_in("learner", [sys.executable, "-m", "harness.net.calibrate", "serve", str(calibrate.PORT)],
                         stdout=subprocess.PIPE, text=True)
    rows = []
    try:
        if server.stdout.readline().strip() != "ready":
            raise RuntimeError("the calibration server did not start")
        for node in cfg.node_names:
            rows += calibrate._measure(cfg.profile, topo, node, topo.nodes["learner"].address, cfg.calibrate_s,
                                       CALIBRATION_RTT_PROBES, CALIBRATION_LOSS_PROBES)
    finally:
        server.kill()
        server.wait()
        server.stdout.close()
    atomic_write_json(cfg.run_dir / "calibration.json", {"profile": cfg.profile.name, "backend": backend,
                                                          "secs": cfg.calibrate_s, "rows": [asdict(r) for r in rows]})


def ring_model(cfg: WrapConfig, summary: dict) -> dict | None:
    """A ring all-reduce of the bytes each node sent per step, at this profile's links; None without
    step marks, bytes, emulation or a second node."""
    if cfg.nodes < 2 or not cfg.emulation or not summary.get("steps"):
        return None
    sent, source = summary.get("socket_sent_bytes"), "the sockets' bytes sent per node per step"
    if not sent:
        wire = summary.get("wire_up_bytes")
        sent, source = (wire * goodput_ratio() if wire else None), "the wire bytes up per node per step x goodput share"
    if not sent:
        return None
    nbytes = payload_from_sent(sent, cfg.nodes)
    return {**ring_allreduce_s(nbytes, Network.from_profile(cfg.profile, cfg.nodes)), "payload_bytes": nbytes,
            "bytes_from": source, "formula": "2(N-1) * max_hop[(B/N) / goodput + one-way delay]"}


def link_doc(cfg: WrapConfig) -> dict:
    up = cfg.profile.link("w1").up
    return {"rate_bit_s": up.rate_bit_s, "delay_s": up.delay_s, "jitter_s": up.jitter_s, "loss_frac": up.loss_frac,
            "trace": Path(up.trace.file).name if up.trace else None}


# ---- the run ---------------------------------------------------------------------------------

def execute(cfg: WrapConfig, announce=lambda text: None) -> tuple[Path, int]:
    """Run the wrapped job; (run folder, exit code: 0 when every process exited 0, else 1). Raises
    KeyboardInterrupt / SystemExit after tearing down and writing what was measured."""
    preflight(cfg)
    run_dir = cfg.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    doc = {"kind": wrapped.KIND, "run_id": cfg.run_id, "status": "running", "label": cfg.label,
           "command": list(cfg.command), "cwd": os.getcwd(), "nodes": cfg.node_names, "on_fail": cfg.on_fail,
           "emulation": cfg.emulation, "backend": "pending", "profile": cfg.profile.name,
           "profile_doc": cfg.profile.to_doc(), "link": link_doc(cfg), "master_port": cfg.master_port,
           "started_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "owner": owner_record(), "exits": {}, "failed_node": None, "errors": []}
    atomic_write_json(run_dir / "meta.json", doc)
    status, job = "interrupted", None
    try:
        with signals_raise(), network(cfg) as (topo, backend):
            doc.update(backend=backend, netns_run_id=getattr(topo, "run_id", None))
            atomic_write_json(run_dir / "meta.json", doc)
            if topo is not None:
                announce(f"measuring {cfg.nodes} links ({cfg.calibrate_s:g} s goodput each way)")
                try:
                    measure_links(cfg, topo, backend)
                except (RuntimeError, ValueError) as err:   # a probe that cannot finish: the job still runs
                    doc["errors"].append(f"calibration: {err}")
                    print(f"harness wrap: calibration incomplete: {err}", file=sys.stderr)
                shaper.restart_schedule(topo.run_id, run_dir / "schedule.csv")   # traces from the job's start
            samplers = [] if topo is None else [LinkSampler(topo, run_dir / "links.csv", interval_s=SAMPLE_S),
                                                SocketSampler(topo, run_dir / "sockets.csv", SAMPLE_S, cfg.node_names)]
            with contextlib.ExitStack() as stack:
                for s in samplers:
                    stack.enter_context(s)
                groups = stack.enter_context(cgroups.CpuGroups(cfg.cpu_shares)) if cfg.cpu_shares else None
                job = Job(cfg, topo, groups)
                doc["cpu_shares"] = cfg.cpu_shares
                doc["job_started_wall"] = time.time()
                announce(f"running `{' '.join(cfg.command)}` on {cfg.nodes} node{'s' if cfg.nodes != 1 else ''} -> {run_dir}")
                try:
                    job.start()
                    status = wait(job, cfg, doc)
                finally:
                    job.stop()
                    doc["job_ended_wall"] = time.time()
                    if groups is not None:
                        doc["cpu_throttled"] = groups.throttled()
            doc["errors"] += [line for s in samplers for line in s.errors]
    except OSError as err:
        status = "failed"
        doc["errors"].append(f"{err.filename or 'a write'}: {err.strerror or err}")
        raise
    except Exception as err:   # the network could not be built, a sampler failed to start: recorded, raised
        status = "failed"
        doc["errors"].append(f"{type(err).__name__}: {err}")
        raise
    finally:
        if job is not None:
            doc["exits"] = {n: describe_exit(c) for n, c in job.exits.items()}
            doc["stopped_by_harness"] = sorted(job.stopped)
        doc.update(status=status, finished_utc=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
        write_final_meta(run_dir, doc)
        try:
            wrapped.write(run_dir, model=ring_model(cfg, wrapped.summarize(run_dir)))
        except Exception as err:   # a partial run may have too little to summarise; the raw files stay
            print(f"harness wrap: could not summarise {run_dir}: {type(err).__name__}: {err}", file=sys.stderr)
    return run_dir, 0 if status == "complete" else 1


def main(values: dict, command: list[str], nodes: int | None, run_id: str | None, out: str, label: str | None,
         on_fail: str, calibrate_s: float, timeout_s: float | None, master_port: int, quiet: bool) -> int:
    """`harness wrap`: exit 0 when every process exited 0, 1 when one failed, 2 on a bad flag or
    command (nothing created), 128 + signal when interrupted."""
    try:
        cfg = build(values, nodes, command, run_id, out, label, on_fail, calibrate_s, timeout_s, master_port)
    except (ConfigError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    say = (lambda text: None) if quiet else (lambda text: print(f"harness wrap: {text}", file=sys.stderr))
    try:
        run_dir, code = execute(cfg, say)
    except PreflightFailed as err:
        print(str(err), file=sys.stderr)
        return 2
    except (OSError, RuntimeError) as err:   # torn down already; meta.json says "failed" and why
        print(f"harness wrap: {type(err).__name__}: {err} (run folder {cfg.run_dir})", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, SystemExit) as err:  # SIGINT: 130; SIGTERM/SIGHUP (harness/signals.py): 143/129
        print(f"interrupted: job stopped, network torn down; what was measured is in {cfg.run_dir}", file=sys.stderr)
        return exit_code(err)
    summary = wrapped._json(run_dir / "summary.json")
    if code:
        meta = wrapped._json(run_dir / "meta.json")
        print(f"harness wrap: {wrapped.failure_words(meta)} (status {meta.get('status')}; "
              f"logs in {run_dir / 'nodes'})", file=sys.stderr)
    if not quiet and summary:
        print(wrapped.headline(summary), file=sys.stderr)
    print(run_dir)
    return code
