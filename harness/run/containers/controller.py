"""The controller: settings checked, the stack found, every cell run through launch.execute with the
containers as the nodes, everything torn down, the services stopped with the run's outcome."""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import sys
from pathlib import Path
from typing import Mapping

from harness.run import launch
from harness.run.config import ConfigError
from harness.run.containers.settings import READY_FILE, ROLE_LABEL, CalibrationMissed, ContainersError, env_message, settings
from harness.run.containers.swarm import run_sibling, swarm_task
from harness.run.containers.topology import container_network
from trainers.events import atomic_write_json

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
