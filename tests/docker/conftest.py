"""Docker tests: the compose front door and the swarm stack against a real engine (marker `docker`).

They need a running engine, the Compose v2 plugin and the image `wan-harness:latest` (CI builds
it: docker/build-base.sh --image); without one of them every test here is skipped and says which.
Each test uses its own compose project (a temporary project directory whose ./results is
bind-mounted) and takes it down again, even when it fails.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
IMAGE = "wan-harness:latest"


def _problem() -> str | None:
    """Why docker tests cannot run here (one line), or None."""
    if os.geteuid() != 0:
        return "needs root (the controller container is privileged)"
    if shutil.which("docker") is None:
        return "no docker CLI (apt-get install -y docker.io)"
    info = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, timeout=60)
    if info.returncode:
        return "no docker engine running (start dockerd)"
    if subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=60).returncode:
        return "no Compose v2 plugin (docker/install-compose.sh)"
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, timeout=60).returncode:
        return f"image {IMAGE} is not built (docker/build-base.sh --image)"
    return None


@pytest.fixture(scope="session")
def engine() -> None:
    problem = _problem()
    if problem:
        pytest.skip(f"docker: {problem}")


class Project:
    """One compose project of docker-compose.yml in its own directory (./results inside it)."""

    def __init__(self, directory: Path):
        self.dir = directory
        self.name = f"wht{uuid.uuid4().hex[:8]}"
        (directory / "results").mkdir(parents=True, exist_ok=True)

    def compose(self, *args: str, env: dict[str, str] | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
        full = dict(os.environ, **(env or {}))
        return subprocess.run(["docker", "compose", "-f", str(COMPOSE_FILE), "--project-directory", str(self.dir),
                               "-p", self.name, *args], capture_output=True, text=True, env=full, timeout=timeout)

    def up(self, **env: str) -> subprocess.CompletedProcess:
        """`up --abort-on-container-exit`: its exit code is the first exiting container's, an idle service
        the controller stopped with the run's outcome (0 complete, 1 failed)."""
        return self.compose("up", "--abort-on-container-exit", env=env)

    def up_bare(self, **env: str) -> subprocess.CompletedProcess:
        """`docker compose up` as a user types it: it must return by itself when the run ends."""
        return self.compose("up", env=env)

    def containers(self) -> dict[str, dict]:
        """Container name -> `docker inspect` State of this project's containers."""
        ids = subprocess.run(["docker", "container", "ls", "-aq", "--filter",
                              f"label=com.docker.compose.project={self.name}"],
                             capture_output=True, text=True, timeout=60).stdout.split()
        if not ids:
            return {}
        docs = json.loads(subprocess.run(["docker", "inspect", *ids], capture_output=True, text=True,
                                         timeout=60).stdout)
        return {d["Name"].lstrip("/"): d["State"] for d in docs}

    def exit_codes(self) -> dict[str, list[int]]:
        """Service name (learner, worker, controller) -> the exit codes of its containers."""
        codes: dict[str, list[int]] = {}
        for name, st in self.containers().items():
            service = name[len(self.name) + 1:].rsplit("-", 1)[0]
            codes.setdefault(service, []).append(st["ExitCode"])
        return codes

    def down(self) -> subprocess.CompletedProcess:
        return self.compose("down", "--remove-orphans", "--timeout", "10")

    def leftovers(self) -> list[str]:
        """Containers and networks of this project that the engine still has."""
        label = f"label=com.docker.compose.project={self.name}"
        found = []
        for kind, argv in (("container", ["container", "ls", "-aq"]), ("network", ["network", "ls", "-q"])):
            out = subprocess.run(["docker", *argv, "--filter", label], capture_output=True, text=True, timeout=60)
            found += [f"{kind} {x}" for x in out.stdout.split()]
        return found

    def run_dir(self, run_id: str) -> Path:
        return self.dir / "results" / run_id

    def summary(self, run_id: str, cell: str) -> dict:
        return json.loads((self.run_dir(run_id) / "cells" / cell / "summary.json").read_text())


@pytest.fixture
def project(engine, tmp_path):
    proj = Project(tmp_path / "stack")
    yield proj
    proj.down()
