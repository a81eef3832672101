"""The same docker-compose.yml as a stack on a single-node Docker Swarm (`docker stack deploy`):
the services on the stack's overlay network, the global controller's privileged sibling shaping
them, a complete results folder, and `docker stack rm` leaving no container or network."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid

import pytest

from tests.docker.conftest import COMPOSE_FILE, ROOT

pytestmark = pytest.mark.docker

SETTINGS = {"WAN_PROFILE": "transatlantic", "WORKERS": "2", "UPDATES": "3", "SEEDS": "1", "MODEL": "micro",
            "METHOD": "spar", "BASELINE": "none", "CALIBRATE_SECS": "0", "RUN_ID": "dkr-swarm"}


def _docker(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def swarm(engine):
    """A single-node swarm: this engine's, or one made (and left again) for the test."""
    state = _docker("info", "--format", "{{.Swarm.LocalNodeState}}").stdout.strip()
    made = False
    if state == "inactive":
        init = _docker("swarm", "init", "--advertise-addr", "127.0.0.1")
        if init.returncode:
            pytest.skip(f"docker: cannot start a swarm here ({init.stderr.strip().splitlines()[-1]})")
        made = True
    elif state != "active":
        pytest.skip(f"docker: the engine's swarm is {state!r}")
    yield
    if made:
        _docker("swarm", "leave", "--force")
        _docker("network", "rm", "docker_gwbridge")   # swarm init made it; leaving keeps it


def _stack_leftovers(stack: str) -> list[str]:
    label = f"label=com.docker.stack.namespace={stack}"
    found = [f"container {c}" for c in _docker("container", "ls", "-aq", "--filter", label).stdout.split()]
    return found + [f"network {n}" for n in _docker("network", "ls", "-q", "--filter", label).stdout.split()]


def test_stack_on_one_node_runs_and_leaves_nothing(swarm, tmp_path):
    shutil.copy(COMPOSE_FILE, tmp_path / "docker-compose.yml")   # ./results resolves next to the file
    (tmp_path / "results").mkdir()
    stack = f"wht{uuid.uuid4().hex[:8]}"
    meta_path = tmp_path / "results" / SETTINGS["RUN_ID"] / "meta.json"
    env = dict(os.environ, **SETTINGS)
    try:
        stack_file = subprocess.run([str(ROOT / "docker" / "stack-file.sh"), "docker-compose.yml"], cwd=tmp_path,
                                    capture_output=True, text=True, check=True).stdout
        deploy = subprocess.run(["docker", "stack", "deploy", "--resolve-image", "never", "-c", "-", stack],
                                input=stack_file, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert deploy.returncode == 0, deploy.stderr
        end = time.monotonic() + 900
        while time.monotonic() < end:   # the controller task ends after the report (or on a failure)
            states = _docker("service", "ps", f"{stack}_controller", "--format", "{{.CurrentState}}").stdout.split()
            if states and states[0] in ("Failed", "Rejected", "Complete", "Shutdown"):
                break
            time.sleep(2)
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        logs = _docker("service", "logs", f"{stack}_controller").stdout
        assert meta.get("complete"), f"{meta}\n{logs[-3000:]}"
        assert meta["emulation"] and meta["errors"] == [] and meta["profile"] == "transatlantic"
        assert (meta_path.parent / "report.md").exists()
        summary = json.loads((meta_path.parent / "cells" / "spar-12.8pct-s1" / "summary.json").read_text())
        assert summary["complete"] and summary["consistent"] and summary["workers"] == 2
    finally:
        _docker("stack", "rm", stack)
        end = time.monotonic() + 120
        while _stack_leftovers(stack) and time.monotonic() < end:
            time.sleep(1)
    assert _stack_leftovers(stack) == []
