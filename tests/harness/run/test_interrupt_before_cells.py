"""A `harness run` interrupted before its first cell (in the regime pilot of a first run into a fresh
models cache, or while its models are built): the interrupt's exit code and its one "interrupted"
line saying plainly that no cell ran, no claim of partial results in a folder that holds none, and
no process or namespace left behind (a failure in the wind-up never replaces the interrupt)."""
import json
import signal
import time
from pathlib import Path

import pytest

from harness.net import clean
from tests.harness.faults.test_faults import pids_of
from tests.harness.run.test_run_e2e import harness

pytestmark = pytest.mark.root

RUN = ["--model", "micro", "--workers", "1", "--updates", "3", "--seeds", "1"]


def interrupt_when(proc, ready, signum: int, timeout_s: float = 300) -> str:
    """Send `signum` to the run as soon as `ready()` holds; its stderr once it has exited."""
    end = time.monotonic() + timeout_s
    while not ready():
        assert proc.poll() is None and time.monotonic() < end, proc.communicate()[1][-3000:]
        time.sleep(0.02)
    proc.send_signal(signum)
    return proc.communicate(timeout=300)[1]


def lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


def test_ctrl_c_in_the_regime_pilot_is_an_interrupt_not_a_failure(tmp_path, monkeypatch):
    """SIGINT while the pilot (--comm-ratio paper, the default) builds its models in its folder under
    the models cache: exit 130, the interrupted line says no cell ran and that the run folder was not made, no
    traceback or 'could not build' line, and no process of the pilot or the run is left."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("WAN_CACHE_DIR", str(cache))   # a fresh models cache: the pilot runs
    run_dir = tmp_path / "x"
    proc = harness("run", *RUN, "--out", str(tmp_path), "--run-id", "x")
    pilots = cache / "regime"
    # the pilot's meta.json: its fork server is up and its models are being built, no cell yet
    stderr = interrupt_when(proc, lambda: pilots.is_dir() and any(pilots.glob("*/meta.json")), signal.SIGINT)
    assert proc.returncode == 130, stderr[-3000:]
    said = [line for line in lines(stderr) if not line.startswith("regime: ")]
    assert len(said) == 1 and said[0].startswith("interrupted: ") and "no cell ran" in said[0], stderr[-3000:]
    assert "partial results" not in stderr and "Traceback" not in stderr and "could not" not in stderr
    assert not run_dir.exists()
    pilot = next(p for p in pilots.iterdir() if p.is_dir())
    assert pids_of(str(pilot)) == [] and pids_of(str(run_dir)) == []


def test_sigterm_while_the_models_are_built_says_no_cell_ran(tmp_path, monkeypatch):
    """SIGTERM once the network is up (meta.json written) and the models are being built into a fresh
    cache, before any cell: exit 143, one interrupted line naming the folder and saying no cell ran (no
    'could not build every artefact' line), and no namespace or process left."""
    monkeypatch.setenv("WAN_CACHE_DIR", str(tmp_path / "cache"))
    run_dir = tmp_path / "y"
    proc = harness("run", *RUN, "--comm-ratio", "off", "--out", str(tmp_path), "--run-id", "y")
    stderr = interrupt_when(proc, lambda: (run_dir / "meta.json").exists(), signal.SIGTERM)
    assert proc.returncode == 143, stderr[-3000:]
    said = [line for line in lines(stderr) if not line.startswith("run y: ")]
    assert len(said) == 1 and said[0].startswith("interrupted: ") and "no cell ran" in said[0], stderr[-3000:]
    assert str(run_dir) in said[0] and "partial results" not in stderr and "could not" not in stderr
    assert not (run_dir / "cells").exists()
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "interrupted"
    assert clean.leftovers(meta["netns_run_id"]) == [] and pids_of(str(run_dir)) == []
