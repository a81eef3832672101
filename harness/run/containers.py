"""Containers: `harness` as the controller of docker-compose.yml (and of a single-node swarm stack).

    WAN_PROFILE=transatlantic WORKERS=2 UPDATES=5 docker compose up --exit-code-from controller

The learner and worker containers start idle (``sleep infinity`` under a shell that exits 0 or 1
on the controller's signal, see :data:`SERVICE_DONE`; no network of docker's:
``network_mode: none``). The controller container (NET_ADMIN + SYS_ADMIN, a writable /proc/sys, ``pid: host``, the docker socket)
runs ``python -m harness.run.containers``, which

1. reads the run's settings from the environment through the run spec (:func:`values_from_env`:
   every parameter by its upper-case name, the profile as ``WAN_PROFILE``); a bad value, or an
   unknown profile, exits 2 with one line before anything is shaped. Valid settings touch
   READY_FILE, the compose healthcheck on which the learner and workers wait: they start only then;
2. finds its learner and worker containers through the docker SDK (compose or stack labels,
   ``State.Pid``) and names each container's network namespace ``/run/netns/wh<RID>-<node>`` (a
   symlink to ``/proc/<pid>/ns/net``, inside the controller only), so the topology, the shaper,
   the delay lines and the link counters of `harness run` work on them unchanged;
3. builds harness/net/topology.py's layout with the containers as the nodes (:class:`ContainerTopology`:
   a router namespace of the controller, one veth per container, ``eth0`` inside it) and applies
   the same plan (netem, or the fallback with the delay lines running in the containers'
   namespaces);
4. runs every cell through :func:`harness.run.launch.execute`, starting the learner and the workers
   inside their containers as the non-root user (``docker exec``, :class:`ExecProcess`), and
   writes the same ``results/<run-id>/`` to the bind-mounted ``./results``;
5. tears everything down (delay lines, rules, qdiscs, veths, the router namespace), stops the
   learner and worker containers (so a bare ``docker compose up`` returns; they exit 0 after a
   complete run, 1 otherwise), and exits 0 when every cell completed, 1 otherwise (2: bad settings
   or a missed calibration).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Mapping

from pyroute2 import IPRoute, netns

from harness.net import topology
from harness.owner import process_start_time
from harness.net.topology import Topology
from trainers import spec
from harness.net import profiles
from harness.run import config
from harness.net import shaper
from harness.net import calibrate
from harness.run import launch
from harness.run.config import ConfigError
from harness.signals import signals_raise

SERVICE_USER = "harness"     # the image's non-root user (Dockerfile) that runs learner and workers
SERVICE_UID = 1000
FIND_TIMEOUT_S = 120.0       # how long the controller waits for its learner and workers to run
ENV_NAMES = {"profile": "WAN_PROFILE", "seed": "SEEDS"}   # every other parameter: NAME.upper()
ROLE_LABEL = "wan-harness.role"
# the compose healthcheck's file: the settings are valid, so the learner and workers may start
# (docker-compose.yml: they depend on the controller being healthy; a bad setting never starts them).
# It holds the controller's pid, which the check signals (0): a file left by an earlier run is stale.
READY_FILE = Path("/tmp/wan-harness-ready")
CALIBRATION_POLICIES = ("fail", "warn")   # CALIBRATION: a link that misses its profile stops the run, or marks it


class ContainersError(RuntimeError):
    """The stack is not as the run needs it (a container missing, no engine); one line."""


class CalibrationMissed(ContainersError):
    """A container link measured off its profile (CALIBRATION=fail): the run would not measure the
    WAN it names (once, a worker's RTT measured 0.2 ms where the profile wanted 71 ms)."""

    def __init__(self, misses: list[str]):
        self.misses = misses
        super().__init__(f"harness containers: calibration missed the profile on {len(misses)} link "
                         f"direction(s): {'; '.join(misses)}; no cell was run (CALIBRATION=warn runs it, "
                         "marked invalid)")

# ---- settings -------------------------------------------------------------------------------

def env_name(param: spec.Param) -> str:
    return ENV_NAMES.get(param.name, param.name.upper())


def values_from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    """Spec values from the environment: non-empty ``WAN_PROFILE``, ``METHOD``, ``UPDATES``, ...,
    and ``WAN_EXTRA`` ("lora_rank=4 hash_every=2") for any other parameter."""
    given: dict[str, Any] = {}
    for p in spec.PARAMS:
        raw = environ.get(env_name(p), "").strip()
        if raw:
            given[p.name] = raw
    for key, value in extra_values(environ.get("WAN_EXTRA", "")).items():
        if key not in {p.name for p in spec.PARAMS}:   # run_id=x was a TypeError: only run parameters go here
            raise spec.SpecError(f"WAN_EXTRA: {key[:60]!r} is not a run parameter (harness run --help lists them; "
                                 "RUN_ID and RESULTS_DIR name the run's folder)")
        if key in given:  # two values for one parameter: neither silently wins
            raise spec.SpecError(f"WAN_EXTRA: {key} is also set by {env_name(spec.get(key))}; give it once")
        given[key] = value
    return given


def extra_values(text: str) -> dict[str, str]:
    """WAN_EXTRA's name=value items, split as a POSIX shell would (a value with spaces is quoted:
    task_options="max_people=3, min_people=2"); SpecError on unbalanced quotes, an item that is not
    name=value, or a name given twice."""
    try:
        items = shlex.split(text)
    except ValueError as err:  # "No closing quotation", "No escaped character"
        raise spec.SpecError(f"WAN_EXTRA: {str(err).lower()} in {text[:200]!r}") from None
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        name = key.strip().replace("-", "_")
        if not sep or not name:
            raise spec.SpecError(f"WAN_EXTRA: {item[:200]!r} is not name=value")
        if name in out:
            raise spec.SpecError(f"WAN_EXTRA: {name} is given twice ({out[name]!r} and {value!r})")
        out[name] = value
    return out


def env_message(line: str) -> str:
    """A config error names the flag (`--updates: ...`); here the variable is what was typed (UPDATES)."""
    flags = {f"--{(p.flag_name or p.name).replace('_', '-')}": env_name(p) for p in spec.PARAMS}
    head, sep, rest = line.partition(":")
    return f"{flags[head]}{sep}{rest}" if head in flags else line


def check_profile(name: str) -> None:
    """An unknown WAN_PROFILE names the valid ones (before any container is touched)."""
    valid = profiles.list_profiles()
    if name not in valid:
        raise spec.SpecError(f"WAN_PROFILE: unknown profile {name!r} (valid: {', '.join(valid)})")


def config_from_env(environ: Mapping[str, str]):

    given = values_from_env(environ)
    check_profile(str(given.get("profile", spec.get("profile").default)))
    # the containers front door plays WAN_PROFILE's own rates: its links are shaped before a pilot could
    # measure anything (COMM_RATIO=off unless the environment says otherwise; harness run places a regime)
    given.setdefault("comm_ratio", "off")
    if str(given["comm_ratio"]).strip().lower() != "off":
        raise spec.SpecError(f"COMM_RATIO: {given['comm_ratio']!r}: the containers front door plays WAN_PROFILE's own "
                             "rates (harness run --comm-ratio places a run in a regime)")
    run_id = environ.get("RUN_ID", "").strip() or None
    return config.build(**given, run_id=run_id, out_dir=environ.get("RESULTS_DIR", "results"))


# ---- finding the service containers ------------------------------------------------------------

def _stack_of(labels: Mapping[str, str]) -> tuple[str, str] | None:
    """(label, value) that names this container's compose project or swarm stack."""
    for key in ("com.docker.compose.project", "com.docker.stack.namespace"):
        if labels.get(key):
            return key, labels[key]
    return None


def _role(labels: Mapping[str, str]) -> tuple[str, int] | None:
    """('learner', 0) or ('worker', slot) of a compose or swarm service container."""
    service = labels.get("com.docker.compose.service")
    number = labels.get("com.docker.compose.container-number")
    if service is None and labels.get("com.docker.swarm.service.name"):
        service = labels["com.docker.swarm.service.name"].rsplit("_", 1)[-1]
        task = labels.get("com.docker.swarm.task.name", "")   # <stack>_<service>.<slot>.<task id>
        number = task.split(".")[1] if task.count(".") >= 2 else None
    if service == "learner":
        return "learner", 0
    if service == "worker" and number and number.isdigit():
        return "worker", int(number)
    return None


def find_services(client, n_workers: int, timeout_s: float = FIND_TIMEOUT_S) -> dict[str, Any]:
    """Node name -> running container of this controller's stack: 'learner', 'w1'..'wN' (the
    workers in slot order). Waits for them to run; ContainersError when they do not."""
    me = client.containers.get(socket.gethostname())   # docker sets the hostname to the container id
    stack = _stack_of(me.labels)
    if stack is None:
        raise ContainersError("harness.run.containers: this container is not part of a compose project or a stack")
    end = time.monotonic() + timeout_s
    while True:
        found = {}
        for c in client.containers.list(filters={"label": f"{stack[0]}={stack[1]}", "status": "running"}):
            role = _role(c.labels)
            if role and c.attrs["State"].get("Pid"):
                found[role] = c
        workers = sorted(slot for kind, slot in found if kind == "worker")
        if ("learner", 0) in found and len(workers) >= n_workers:
            nodes = {"learner": found[("learner", 0)]}
            nodes.update({f"w{i}": found[("worker", slot)] for i, slot in enumerate(workers[:n_workers], 1)})
            return nodes
        if time.monotonic() > end:
            raise ContainersError(f"harness.run.containers: {stack[1]} runs {'a' if ('learner', 0) in found else 'no'} learner "
                                  f"and {len(workers)} of the {n_workers} workers WORKERS asks for "
                                  "(scale the worker service to WORKERS)")
        time.sleep(0.5)


# ---- processes inside a container ----------------------------------------------------------------

class ExecProcess:
    """A process started in a container by ``docker exec`` (docker SDK), read and signalled like a
    ``subprocess.Popen`` (what `harness.run.launch.Processes` needs: poll, wait, send_signal, kill).
    The controller shares the host's pid namespace, so it signals the process by its host pid."""

    def __init__(self, api, container_id: str, argv: list[str], env: Mapping[str, str], cwd: str, log: str):
        # the shell appends the output to the cell's log, then becomes the process (exec)
        cmd = ["sh", "-c", 'exec "$@" >>"$0" 2>&1', log, *argv]
        self.api = api
        self.exec_id = api.exec_create(container_id, cmd, user=SERVICE_USER, workdir=cwd, environment=dict(env))["Id"]
        api.exec_start(self.exec_id, detach=True)
        self.returncode: int | None = None
        self.pid, self.start_time = self._await_pid()

    def _await_pid(self, timeout_s: float = 10.0) -> tuple[int, int | None]:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            info = self.api.exec_inspect(self.exec_id)
            if info.get("Pid"):
                return info["Pid"], process_start_time(info["Pid"])
            if not info.get("Running") and info.get("ExitCode") is not None:
                return 0, None           # it has already ended
            time.sleep(0.02)
        raise ContainersError(f"docker exec {self.exec_id[:12]}: no process after {timeout_s:g} s")

    def _running(self) -> bool:
        return bool(self.pid) and self.start_time is not None and process_start_time(self.pid) == self.start_time

    def poll(self) -> int | None:
        if self.returncode is None and not self._running():
            for _ in range(100):        # the engine records the exit a moment after the process ends
                info = self.api.exec_inspect(self.exec_id)
                if not info.get("Running") and info.get("ExitCode") is not None:
                    code = int(info["ExitCode"])
                    # 128 + n: ended by signal n (a negative code, as subprocess gives it)
                    self.returncode = -(code - 128) if 128 < code < 128 + 65 else code
                    break
                time.sleep(0.02)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired(f"docker exec {self.exec_id[:12]}", timeout)
            time.sleep(0.05)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self._running():
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


# ---- the topology: containers as nodes -------------------------------------------------------------

_ENV_KEYS = ("RUN_TOKEN", "OMP_NUM_THREADS", "PYTHONWARNINGS", "WAN_CACHE_DIR", "PYTHONPATH")


class ContainerTopology(Topology):
    """harness/net/topology.py's layout with containers as the nodes: each node's namespace is its
    container's (a /run/netns symlink to /proc/<pid>/ns/net, so every name-based tool of the
    harness reaches it), the router namespace is the controller's own. Teardown removes the
    router namespace (and with it every veth, so each container's eth0) and the symlinks; it
    never kills a container's processes (the containers are compose's)."""

    IFNAME = "wan0"              # a swarm task already has an eth0 (its overlay network)
    ROUTE_DST = f"{topology.SUBNET}.0.0/16"   # only the harness's subnet: a swarm task keeps its default route
    containers: dict[str, Any] = {}
    api: Any = None

    @classmethod
    def attach(cls, run_id: str, containers: dict[str, Any], api) -> "ContainerTopology":
        topo = cls.plan(run_id, len(containers) - 1)
        topo.containers, topo.api = containers, api
        return topo.built()

    def _build(self) -> None:
        topology.write_state(self.run_id, self.namespaces())
        os.makedirs(topology.NETNS_DIR, exist_ok=True)
        for name, node in self.nodes.items():
            pid = self.containers[name].attrs["State"]["Pid"]
            os.symlink(f"/proc/{pid}/ns/net", os.path.join(topology.NETNS_DIR, node.netns))
        netns.create(self.router_ns)
        topology.write_sysctl(self.router_ns, {"net/ipv4/ip_forward": "1"})
        with IPRoute(netns=self.router_ns, flags=0) as rt:
            rt.link("set", index=rt.link_lookup(ifname="lo")[0], state="up")
            for node in self.nodes.values():
                self._link_node(rt, node)

    def run_in(self, node: str, argv, **kwargs):
        """The learner and workers run in their containers (as SERVICE_USER); "rt" in the router."""
        if node == "rt":
            return super().run_in(node, argv, **kwargs)
        log = kwargs["stdout"].name                 # Processes opened <cell>/<name>.log for us
        cell_dir = os.path.dirname(log)
        cache = kwargs["env"].get("WAN_CACHE_DIR")
        if cache:
            share_cache(Path(cache))
        for path in filter(None, (cell_dir, log)):
            os.chown(path, SERVICE_UID, SERVICE_UID)   # the non-root services write there
        env = {k: v for k, v in kwargs["env"].items() if k in _ENV_KEYS}
        return ExecProcess(self.api, self.containers[node].id, list(argv), env, str(kwargs.get("cwd", "/app")), log)

    def destroy(self) -> list[str]:
        removed = []
        if self.router_ns in set(netns.listnetns()):
            topology.kill_ns_processes(self.router_ns)
            with contextlib.suppress(FileNotFoundError):
                netns.remove(self.router_ns)        # every veth, so the containers' eth0, goes with it
            removed.append(self.router_ns)
        for node in self.nodes.values():
            path = os.path.join(topology.NETNS_DIR, node.netns)
            if os.path.islink(path):
                os.unlink(path)                     # a name only: the container keeps its namespace
                removed.append(node.netns)
        topology.remove_state(self.run_id)
        self._destroyed = True
        return removed


def share_cache(cache: Path) -> None:
    """The model cache as the services' user needs it: its folders theirs (a model built in a cell
    writes a file and its lock there), every file readable. A host `harness run` or this root
    controller built it, and a cache from before models were written 0644 holds 0600 files."""
    cache.mkdir(parents=True, exist_ok=True)
    for root, dirs, files in os.walk(cache):
        os.chown(root, SERVICE_UID, SERVICE_UID)
        for name in files:
            path = os.path.join(root, name)
            mode = os.stat(path).st_mode
            if mode & 0o044 != 0o044:
                os.chmod(path, mode | 0o044)


@contextlib.contextmanager
def container_network(cfg, client, calibrate_s: float = 0.0, policy: str = "fail",
                      misses: list[str] | None = None) -> Iterator[tuple[ContainerTopology, str]]:
    """launch.execute's network context with the stack's containers as the nodes; with
    ``calibrate_s`` > 0 each container link is measured first (calibration.json in the run folder).
    A link that misses its profile (calibrate's checks: goodput, RTT, loss) is added to ``misses``
    and, under policy "fail", stops the run before its first cell (CalibrationMissed)."""

    nodes = find_services(client, cfg.workers)

    def create(run_id: str, _n: int) -> ContainerTopology:
        return ContainerTopology.attach(run_id, nodes, client.api)

    with shaper.emulate(cfg.load_profile(), cfg.workers, backend=cfg.backend, create=create) as (topo, shp):
        if calibrate_s > 0:
            found = calibration_misses(measure_links(cfg, topo, shp.plan.backend, calibrate_s))
            if misses is not None:
                misses.extend(found)
            if found and policy == "fail":
                raise CalibrationMissed(found)
        yield topo, shp.plan.backend


# ---- measured links (harness calibrate's probes, in each container's namespace) -----------------

def measure_links(cfg, topo: ContainerTopology, backend: str, secs: float) -> Path:
    """Goodput, RTT and loss of every worker's path to the learner, measured as `harness calibrate`
    does, by probes running in the containers' namespaces (the controller's processes: the
    measurement is of the link, which is the namespace's); writes <run>/calibration.json."""
    import types
    from dataclasses import asdict


    profile = cfg.load_profile()
    probes = types.SimpleNamespace(   # calibrate._measure starts its probe through run_in
        nodes=topo.nodes, run_in=lambda node, argv, **kw: topology.popen_in(topo.nodes[node].netns, argv, **kw))
    server = topology.popen_in(topo.nodes["learner"].netns, [sys.executable, "-m", "harness.net.calibrate", "serve",
                                                           str(calibrate.PORT)], stdout=subprocess.PIPE, text=True)
    rows = []
    try:
        if server.stdout.readline().strip() != "ready":
            raise ContainersError("harness.run.containers: the calibration server did not start")
        for name in topo.workers:
            rows += calibrate._measure(profile, probes, name, topo.nodes["learner"].address, secs, 30, 300)
    finally:
        server.kill()
        server.wait()
        server.stdout.close()
    path = cfg.run_dir.resolve() / "calibration.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"profile": profile.name, "backend": backend, "secs": secs,
                                "rows": [asdict(r) for r in rows]}, indent=1))
    return path


def calibration_misses(path: Path) -> list[str]:
    """One phrase per measured link direction that failed calibrate's checks, with what it wanted."""
    doc = json.loads(path.read_text())
    out = []
    for r in doc["rows"]:
        bad = []
        if not r["ok_rtt"]:
            got = "none" if r["rtt_median_s"] is None else f"{r['rtt_median_s'] * 1e3:.1f} ms"
            bad.append(f"RTT {got} vs {r['rtt_want_s'] * 1e3:.1f} ms wanted")
        if not r["ok_goodput"]:
            got = "none" if r["goodput_bit_s"] is None else f"{r['goodput_bit_s'] / 1e6:.2f} Mbit/s"
            bad.append(f"goodput {got} at a rate of {(r['rate_bit_s'] or 0) / 1e6:.2f} Mbit/s")
        if not r["ok_loss"]:
            bad.append(f"loss {r['loss_lost']}/{r['loss_sent']} vs {r['loss_want']:.2%} wanted")
        if bad:
            out.append(f"{r['node']} {r['direction']} {', '.join(bad)}")
    return out


# ---- the controller ----------------------------------------------------------------------------

def main(environ: Mapping[str, str] | None = None) -> int:
    environ = os.environ if environ is None else environ
    READY_FILE.unlink(missing_ok=True)          # a restarted container's file is an earlier run's
    try:
        cfg, secs, policy = settings(environ)
        launch.check_privileges(cfg)            # root, and the kernel features of the backend (doctor)
    except ConfigError as err:
        print(f"harness containers: {env_message(str(err))}", file=sys.stderr)
        return 2
    except launch.PreflightFailed as err:
        print(str(err), file=sys.stderr)
        return 2
    READY_FILE.write_text(f"{os.getpid()}\n")   # healthy: compose starts the learner and the workers now
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except Exception as err:   # no socket mounted, or no engine behind it
        print(f"harness containers: no docker engine ({type(err).__name__}: {err})", file=sys.stderr)
        return 2
    me = client.containers.get(socket.gethostname())
    if swarm_task(me):
        return run_sibling(client, me, environ)
    # provenance: uname here is the container id; the engine knows the host (meta.json host)
    os.environ.setdefault("WAN_HOST", str(client.info().get("Name") or ""))
    project = me.labels.get("com.docker.compose.project")
    try:
        code = run(cfg, client, secs, policy)
    except BaseException:
        if project:                        # a crash or an interrupt: the idle services still stop (exit 1)
            stop_services(client, project, 1)
        raise
    if project:
        end_compose_run(client, project, code)
    return code


def settings(environ: Mapping[str, str]):
    """(RunConfig, calibration seconds, calibration policy) from the environment; ConfigError names
    the variable. Every check runs here, before the learner and workers are started."""
    cfg = config_from_env(environ)
    secs = _calibrate_secs(environ)
    policy = environ.get("CALIBRATION", "").strip() or "fail"
    if policy not in CALIBRATION_POLICIES:
        raise ConfigError(f"CALIBRATION: {policy!r} is not one of {', '.join(CALIBRATION_POLICIES)}")
    if not cfg.emulation:
        raise ConfigError("EMULATION: the containers front door always shapes the links")
    if cfg.run_id is None:
        cfg = _with_run_id(cfg, launch.new_run_id(cfg))
    launch.check_run_id_free(cfg, "RUN_ID", "choose another RUN_ID, or leave it empty for a new one")
    return cfg, secs, policy


def run(cfg, client, secs: float, policy: str) -> int:
    """The run through launch.execute with the containers as the nodes; the exit code."""
    misses: list[str] = []
    try:
        run_dir = launch.execute(cfg, progress=_progress,
                                 net=lambda c: container_network(c, client, secs, policy, misses))
    except CalibrationMissed as err:
        mark_calibration(cfg.run_dir.resolve(), err.misses, failed=True)
        print(str(err), file=sys.stderr)
        return 2
    except (ContainersError, launch.PreflightFailed) as err:
        print(str(err), file=sys.stderr)
        return 2
    except launch.CellFailed as err:
        print(f"harness containers: {err}", file=sys.stderr)
        return 1
    except RuntimeError as err:          # a learner that did not start: its log says why
        print(f"harness containers: {err}{_log_tail(str(err))}", file=sys.stderr)
        return 1
    if misses:
        mark_calibration(run_dir, misses, failed=False)
        print(f"harness containers: INVALID run (CALIBRATION=warn): calibration missed the profile: "
              f"{'; '.join(misses)}", file=sys.stderr, flush=True)
    meta = json.loads((run_dir / "meta.json").read_text())
    print(f"harness containers: run {cfg.run_id} {meta['status']} on the {meta['backend']} backend: "
          f"{run_dir}/report.md", flush=True)
    return 0 if meta["complete"] else 1


def mark_calibration(run_dir: Path, misses: list[str], failed: bool) -> None:
    """meta.json (and the report's run line, which prints its errors and status note) say that the
    links missed their profile: the run stopped before its cells, or ran marked invalid."""
    from trainers.events import atomic_write_json

    path = run_dir / "meta.json"
    meta = json.loads(path.read_text()) if path.exists() else {"run_id": run_dir.name, "errors": []}
    meta["calibration_ok"] = False
    meta.setdefault("errors", []).append(f"calibration missed the profile: {'; '.join(misses)}")
    if failed:
        meta.update(status="failed", complete=False, status_note="calibration missed the profile: no cell run")
    else:
        meta["status_note"] = "INVALID: calibration missed the profile (CALIBRATION=warn)"
    atomic_write_json(path, meta)
    if not failed:
        launch.finalize(run_dir)        # the report's run line from the updated meta.json


# The idle command of the learner and worker services (docker-compose.yml) exits 0 on SIGUSR1 and 1 on
# SIGUSR2 (a plain SIGTERM, e.g. `docker compose down`, still ends it with 143). `up
# --abort-on-container-exit` returns the exit code of the first container that exits, which is one of
# these services when the controller stops them: so they carry the run's outcome.
SERVICE_DONE = {True: "SIGUSR1", False: "SIGUSR2"}   # run complete -> exit 0; failed -> exit 1
SERVICE_STOP_S = 10                                  # seconds a service gets to exit before a plain stop


def stop_services(client, project: str, code: int) -> None:
    """Stop the learner and worker containers of this compose project with the run's outcome (exit 0
    when `code` is 0, else 1): they idle, and a bare `docker compose up` returns only when every
    container has exited. A service that does not exit on the signal (an image before this idle
    command) gets a plain stop."""
    services = client.containers.list(filters={"label": [f"com.docker.compose.project={project}",
                                                         f"{ROLE_LABEL}=service"]})
    for c in services:
        with contextlib.suppress(Exception):   # already gone (docker compose down): nothing to stop
            c.kill(signal=SERVICE_DONE[code == 0])
    for c in services:
        with contextlib.suppress(Exception):
            try:
                c.wait(timeout=SERVICE_STOP_S)
            except Exception:                  # still running after the signal
                c.stop(timeout=SERVICE_STOP_S)


def end_compose_run(client, project: str, code: int) -> None:
    """Stop the services and end this process with the run's exit code; it does not return.

    With `--abort-on-container-exit` (or `--exit-code-from controller`) compose answers the first
    service stopped here with a SIGTERM to every container, this one included, once the services
    have stopped: i.e. while this process returns from main() or later. Python restores SIGTERM's
    default action while it finalises, so a handler alone left a window in which that SIGTERM
    ended a complete run with 143. The handler covers the stop; os._exit then leaves no window."""
    signal.signal(signal.SIGTERM, lambda *_: _exit_now(code))
    stop_services(client, project, code)
    _exit_now(code)


def _exit_now(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):   # a closed stream: nothing left to flush
            stream.flush()
    os._exit(code)


# ---- swarm: a node controller starts the controller next to it ----------------------------------

NODE_CONTROLLER = "node-controller"   # ROLE_LABEL of the sibling controller a swarm task starts


def swarm_task(me) -> bool:
    return bool(me.labels.get("com.docker.swarm.service.name"))


def run_sibling(client, me, environ: Mapping[str, str]) -> int:
    """A swarm task cannot add capabilities' security options nor share the host's pid namespace: the
    controller task starts this image as a plain container on its node that can (pid host, the
    socket, the same results mount) and the same environment, follows its output, and returns
    its exit code; a SIGTERM (docker stack rm) removes it, which tears its shaping down."""

    results = next((m["Source"] for m in me.attrs["Mounts"] if m["Destination"] == "/app/results"), None)
    volumes = {"/var/run/docker.sock": {"bind": "/var/run/docker.sock", "mode": "rw"}}
    if results:
        volumes[results] = {"bind": "/app/results", "mode": "rw"}
    stack = me.labels["com.docker.stack.namespace"]
    env = {k: v for k, v in environ.items() if k in {env_name(p) for p in spec.PARAMS} | {"RUN_ID", "WAN_EXTRA", "CALIBRATE_SECS"}}
    api = client.api
    host = api.create_host_config(cap_add=["NET_ADMIN", "SYS_ADMIN"], pid_mode="host", network_mode="none",
                                  binds={src: v for src, v in volumes.items()})
    # `--security-opt systempaths=unconfined` is the CLI's (and compose's) word for these: a writable /proc/sys
    host.update(MaskedPaths=[], ReadonlyPaths=[])
    created = api.create_container(me.image.id, ["python", "-m", "harness.run.containers"], environment=env,
                                   host_config=host, name=f"{stack}-controller-{me.id[:12]}",
                                   labels={"com.docker.stack.namespace": stack, ROLE_LABEL: NODE_CONTROLLER})
    sibling = client.containers.get(created["Id"])
    sibling.start()
    try:
        with signals_raise():
            for chunk in sibling.logs(stream=True, follow=True):
                sys.stdout.write(chunk.decode(errors="replace"))
                sys.stdout.flush()
            return int(sibling.wait()["StatusCode"])
    finally:
        with contextlib.suppress(Exception):
            sibling.stop(timeout=30)           # SIGTERM: the controller tears down, then exits
        with contextlib.suppress(Exception):
            sibling.remove(force=True)


def _calibrate_secs(environ: Mapping[str, str]) -> float:
    """CALIBRATE_SECS: seconds of TCP per direction and link measured before the run (0: none)."""
    raw = environ.get("CALIBRATE_SECS", "").strip() or "2"
    try:
        secs = float(raw)
    except ValueError:
        secs = -1.0
    if not 0 <= secs <= 60:
        raise ConfigError(f"CALIBRATE_SECS: {raw!r} must be a number of seconds within 0 and 60")
    return secs


def _with_run_id(cfg, run_id: str):
    import dataclasses

    return dataclasses.replace(cfg, run_id=run_id)


def _log_tail(message: str) -> str:
    """': <last line of the log>' when `message` points at one ('... (see <cell>/learner.log)')."""
    found = re.search(r"\(see (\S+\.log)\)", message)
    if not found or not os.path.exists(found.group(1)):
        return ""
    lines = [line for line in Path(found.group(1)).read_text(errors="replace").splitlines() if line.strip()]
    return f": {lines[-1].strip()}" if lines else ""


def _progress(cell, cell_dir: Path) -> None:
    """One line per cell as it finishes (compose shows the controller's output)."""
    if cell_dir in _done or not (cell_dir / "summary.json").exists():
        return
    try:
        summary = json.loads((cell_dir / "summary.json").read_text())
    except ValueError:          # being written
        return
    if summary.get("status") not in (None, "running"):
        _done.add(cell_dir)
        print(f"harness containers: cell {cell.name} {summary['status']}, "
              f"{summary.get('seconds_per_update_median') or 0:.3f} s per update", flush=True)


_done: set[Path] = set()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
    sys.exit(130)
