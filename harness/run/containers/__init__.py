"""Containers: `harness` as the controller of docker-compose.yml (and of a single-node swarm stack).

    WAN_PROFILE=transatlantic WORKERS=2 UPDATES=5 docker compose up --exit-code-from controller

The learner and worker containers start idle (``sleep infinity`` under a shell that exits 0 or 1
on the controller's signal, see :data:`SERVICE_DONE`; no network of docker's:
``network_mode: none``). The controller container (NET_ADMIN + SYS_ADMIN, a writable /proc/sys, ``pid: host``, the docker socket)
runs ``python -m harness.run.containers`` (controller.py; settings.py, topology.py, swarm.py beside it), which

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

from harness.run.containers.controller import SERVICE_DONE, main, mark_calibration, run, stop_services
from harness.run.containers.settings import (READY_FILE, SERVICE_UID, CalibrationMissed, ContainersError, env_message,
                                             settings, values_from_env)
from harness.run.containers.topology import ContainerTopology, calibration_misses, share_cache

__all__ = ["READY_FILE", "SERVICE_DONE", "SERVICE_UID", "CalibrationMissed", "ContainerTopology", "ContainersError",
           "calibration_misses", "env_message", "main", "mark_calibration", "run", "settings", "share_cache",
           "stop_services", "values_from_env"]
