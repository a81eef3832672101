"""`WAN_PROFILE=<name> docker compose up` (bare, as the README says, and with --abort-on-container-exit):
shaped container links, a complete results folder, the exit code of the run, parity with `harness run`,
and `docker compose down` leaving nothing behind."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest

from harness.net import clean
from tests.docker.conftest import ROOT

pytestmark = pytest.mark.docker

# the smallest real run: micro model, 2 workers, 3 updates, one seed, one cell (no baseline)
RUN = {"WORKERS": "2", "UPDATES": "3", "SEEDS": "1", "MODEL": "micro", "METHOD": "spar", "BASELINE": "none",
       "CALIBRATE_SECS": "1"}


def test_unknown_profile_exits_2_naming_the_valid_ones_before_any_service_starts(project):
    res = project.up_bare(WAN_PROFILE="nope", WORKERS="1")
    assert res.returncode != 0
    lines = [ln for ln in (res.stdout + res.stderr).splitlines() if "WAN_PROFILE" in ln and "unknown profile" in ln]
    assert len(lines) == 1, res.stdout[-3000:] + res.stderr[-3000:]
    assert "'nope'" in lines[0] and "transatlantic" in lines[0] and "paper-62.5mbit" in lines[0]
    assert not list((project.dir / "results").iterdir())      # nothing ran, nothing was written
    states = project.containers()
    services = {name: st for name, st in states.items() if "-controller-" not in name}
    assert services and all(st["StartedAt"].startswith("0001-01-01") for st in services.values()), states
    [controller] = [st for name, st in states.items() if "-controller-" in name]
    assert controller["ExitCode"] == 2


def test_after_a_host_run_a_bare_compose_up_runs_and_returns(project, tmp_path):
    """The README's order: `harness run` on the host, then the containers in the same folder. The host's
    model cache is root's; the services (uid 1000) must read it. A bare `up` returns by itself."""
    small = ["--model", "tiny", "--base-steps", "4", "--teacher-steps", "4", "--updates", "2", "--seeds", "1",
             "--method", "spar", "--baseline", "none", "--workers", "2"]
    host = subprocess.run([sys.executable, "-m", "harness.cli", "run", *small, "--no-emulation", "--run-id",
                           "dkr-host-first", "--out", str(project.dir / "results"), "--quiet"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env={k: v for k, v in os.environ.items() if k != "WAN_CACHE_DIR"})  # results/.cache
    assert host.returncode == 0, host.stdout[-3000:] + host.stderr[-3000:]
    models = list((project.dir / "results" / ".cache").rglob("*.safetensors"))
    assert models
    for path in models:
        path.chmod(0o600)            # as a host run before models were written 0644 left them
    res = project.up_bare(WAN_PROFILE="transatlantic", RUN_ID="dkr-after-host", MODEL="tiny", UPDATES="2",
                          SEEDS="1", METHOD="spar", BASELINE="none", CALIBRATE_SECS="1", CALIBRATION="warn",
                          WAN_EXTRA="base_steps=4 teacher_steps=4")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    meta = json.loads((project.run_dir("dkr-after-host") / "meta.json").read_text())
    assert meta["complete"], meta
    assert all(p.stat().st_mode & 0o044 == 0o044 for p in models)
    # provenance: the image's commit and the engine's host, not None and a container id
    image_sha = subprocess.run(["docker", "image", "inspect", "-f", "{{range .Config.Env}}{{println .}}{{end}}",
                                "wan-harness:latest"], capture_output=True, text=True).stdout
    want = next((ln.split("=", 1)[1] for ln in image_sha.splitlines() if ln.startswith("WAN_GIT_SHA=")), "")
    assert want and meta["git_sha"] == want, (meta["git_sha"], want)
    engine_host = subprocess.run(["docker", "info", "--format", "{{.Name}}"], capture_output=True, text=True).stdout.strip()
    assert meta["host"] == engine_host
    # every container has exited: that is why the bare `up` returned
    assert all(not st["Running"] for st in project.containers().values())


@pytest.mark.parametrize("code, want", [(0, 0), (1, 1), (2, 1)])
def test_idle_services_stopped_by_the_controller_exit_with_the_runs_outcome(project, code, want):
    """`up --abort-on-container-exit` returns the code of the first container that exits: a service the
    controller stopped. So a service must exit 0 after a complete run and non-zero after a failed one
    (it exited 143 on SIGTERM before, whatever the run's outcome); `docker compose stop` is still 143."""
    import docker
    from harness.run import containers

    up = project.compose("up", "-d", "--no-deps", "learner", "worker", env={"WORKERS": "2"})
    assert up.returncode == 0, up.stderr
    containers.stop_services(docker.from_env(), project.name, code)
    assert project.exit_codes() == {"learner": [want], "worker": [want, want]}
    again = project.compose("up", "-d", "--no-deps", "--force-recreate", "learner", env={"WORKERS": "2"})
    assert again.returncode == 0, again.stderr
    assert project.compose("stop", "learner").returncode == 0
    assert project.exit_codes()["learner"] == [143]


def test_compose_run_shapes_each_container_and_matches_harness_run(project, tmp_path):
    res = project.up(WAN_PROFILE="transatlantic", RUN_ID="dkr-compose", **RUN)
    # `up --abort-on-container-exit` after a complete run: 0 (it was 143: the first container to exit, an
    # idle service the controller stopped, was killed by SIGTERM), and every container says so
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    assert project.exit_codes() == {"controller": [0], "learner": [0], "worker": [0, 0]}, project.exit_codes()
    run = project.run_dir("dkr-compose")
    meta = json.loads((run / "meta.json").read_text())
    assert meta["complete"] and meta["emulation"] and meta["errors"] == [], meta
    assert meta["profile"] == "transatlantic" and meta["backend"] in ("netem", "fallback")
    for name in ("report.md", "summary.json", "config.json", "calibration.json"):
        assert (run / name).exists(), name
    # every container's link carried the run's bytes through the shaper, both directions
    rows = list(csv.DictReader(open(run / "cells" / "spar-12.8pct-s1" / "links.csv")))
    nodes = {r["node"] for r in rows}
    assert {"learner", "w1", "w2"} <= nodes, nodes
    # the report shows each container link's measured goodput and RTT
    report = (run / "report.md").read_text()
    assert "## Container links (measured)" in report
    cal = json.loads((run / "calibration.json").read_text())
    assert {(r["node"], r["direction"]) for r in cal["rows"]} == {(w, d) for w in ("w1", "w2") for d in ("up", "down")}
    # shaped: each path's RTT is at least the profile's (a busy box only adds to it); goodput is measured
    # (1 s is too short to judge it against the rate: `harness calibrate` and tests/harness/net do)
    assert all(r["rtt_median_s"] >= 0.95 * r["rtt_want_s"] and r["goodput_bit_s"] > 0 for r in cal["rows"]), cal["rows"]

    # parity: the same method, profile and seed through `harness run` on this host
    host_out = tmp_path / "host"
    argv = [sys.executable, "-m", "harness.cli", "run", "--profile", "transatlantic", "--workers", "2", "--updates", "3",
            "--seeds", "1", "--model", "micro", "--method", "spar", "--baseline", "none", "--run-id", "dkr-host",
            "--out", str(host_out), "--quiet"]
    host = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert host.returncode == 0, host.stdout[-3000:] + host.stderr[-3000:]
    mine = project.summary("dkr-compose", "spar-12.8pct-s1")
    theirs = json.loads((host_out / "dkr-host" / "cells" / "spar-12.8pct-s1" / "summary.json").read_text())
    assert mine["complete"] and mine["consistent"] and theirs["complete"]
    assert mine["payload_bytes_per_update"] == theirs["payload_bytes_per_update"]
    assert mine["state_hashes"]["learner"] == theirs["state_hashes"]["learner"]

    # down leaves no container, network, delay line; the shaping died with the namespaces
    down = project.down()
    assert down.returncode == 0, down.stderr
    assert project.leftovers() == []
    assert not [pid for pid, rid in clean.delaylines().items() if rid == meta["netns_run_id"]]
