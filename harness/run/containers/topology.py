"""The service containers as the nodes of harness/net/topology.py's layout: finding them (compose or
stack labels), processes inside them (`docker exec`), their network namespaces, and their links
measured before the cells (harness calibrate's probes)."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import types
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterator, Mapping

from pyroute2 import IPRoute, netns

from harness.net import calibrate, shaper, topology
from harness.net.topology import Topology
from harness.owner import process_start_time
from harness.run.containers.settings import (FIND_TIMEOUT_S, SERVICE_UID, SERVICE_USER, CalibrationMissed,
                                             ContainersError)

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
