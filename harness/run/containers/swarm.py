"""Swarm: a controller task cannot add capabilities nor share the host's pid namespace, so it starts
this image as a plain sibling container on its node that can, and follows it."""
from __future__ import annotations

import contextlib
import sys
from typing import Mapping

from harness.run.containers.settings import ROLE_LABEL, env_name
from harness.signals import signals_raise
from trainers import spec

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
