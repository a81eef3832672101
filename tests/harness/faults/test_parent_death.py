"""D7 (docs/FAULTS.md): the services die with the harness that started them, whatever killed it.

A SIGKILLed `harness run` cannot tear anything down; its services used to keep training into the
run folder (version 5 -> 137 in 30 s with --no-emulation), and a resumed sweep left the same
orphans. Each service now asks the kernel for SIGTERM when its parent dies
(trainers.process.die_with_parent, PR_SET_PDEATHSIG), so within a short while no process of the
run is left and its event files stop growing. Emulated runs still leave their namespaces for
`harness clean` (test_faults.py), not their processes.

The waits are guards against a hang (the services need a moment to handle SIGTERM); nothing
asserts how long anything took.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness.faults.test_faults import BASE, ROOT, harness, pids_of, wait_for_update

GUARD_S = 120


def survivors(folder: Path) -> list[int]:
    """The processes whose command line names `folder`, once they had `GUARD_S` seconds to go."""
    end = time.monotonic() + GUARD_S
    while pids_of(str(folder)) and time.monotonic() < end:
        time.sleep(0.2)
    return pids_of(str(folder))


def quiet(cell: Path) -> bool:
    """True if no event file of the cell grows over two seconds."""
    sizes = {p: p.stat().st_size for p in cell.glob("events-*.jsonl")}
    time.sleep(2)
    return all(p.stat().st_size == n for p, n in sizes.items())


def kill_and_check(proc: subprocess.Popen, folder: Path, cell: Path) -> None:
    wait_for_update(cell, 1, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    left = survivors(folder)
    for pid in left:  # do not leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert left == [], f"services of the killed harness still alive: {left}"
    assert quiet(cell)


def clean(run_dir: Path) -> None:
    meta = run_dir / "meta.json"
    rid = json.loads(meta.read_text()).get("netns_run_id") if meta.exists() else None
    if rid:
        subprocess.run([sys.executable, "-m", "harness.cli", "clean", "--run-id", rid], cwd=ROOT,
                       capture_output=True, timeout=120)


@pytest.mark.parametrize("mode", ["no-emulation", pytest.param("emulation", marks=pytest.mark.root)])
def test_a_sigkilled_harness_run_takes_its_services_with_it(tmp_path, mode):
    run_id = f"pdeath-{mode}"
    flags = [*BASE, "--updates", "100000", "--run-id", run_id, "--out", str(tmp_path), "--quiet"]
    proc = harness("run", *flags, *(["--no-emulation"] if mode == "no-emulation" else []))
    run_dir = tmp_path / run_id
    try:
        kill_and_check(proc, run_dir, run_dir / "cells" / "spar-1.6pct-s1")
    finally:
        clean(run_dir)


def test_a_sigkilled_sweep_takes_its_services_with_it(tmp_path):
    sweep = tmp_path / "sweep"
    proc = harness("sweep", *BASE, "--updates", "100000,100001", "--no-emulation", "--out", str(sweep), "--quiet")
    end = time.monotonic() + 600
    while not list(sweep.glob("**/cells/spar-1.6pct-s1/events-learner.jsonl")):
        assert proc.poll() is None and time.monotonic() < end, proc.communicate()[1][-3000:]
        time.sleep(0.2)
    cell = next(sweep.glob("**/cells/spar-1.6pct-s1"))
    kill_and_check(proc, sweep, cell)
