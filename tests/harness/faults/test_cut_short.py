"""Runs cut short still report what completed (real `harness run`s, micro model, no emulation, real
processes killed or stopped mid-run):

- a data-parallel worker or aggregator SIGKILLed, or a worker SIGSTOPped past --liveness: the cell
  ends, meta.json says "failed" with the cell's reason in "errors", report.md is built from the steps
  that ran, and `harness report DIR` reads the folder again (it used to be "KeyError: Label(s)
  ['heldout_ppl'] do not exist" and no report);
- the fork server SIGKILLed or SIGSTOPped during the first of two cells: a new one is started for
  the second, both cells complete, and meta.json's "errors" says so (the second cell used to be
  never run, the run "interrupted" with no error).

The data-parallel worker kill (~20 s on a quiet box) and the fork server's restart (the server alone,
with a light module) run by default; the longer injections carry the `faults` marker.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness.faults.test_faults import harness, pids_of

ROOT = Path(__file__).resolve().parents[3]
DP = ["--method", "ddp", "--baseline", "none", "--no-emulation", "--model", "micro", "--workers", "2",
      "--objective", "grpo", "--max-new-tokens", "4", "--comm-ratio", "off"]


def updates_logged(cell: Path) -> int:
    events = cell / "events-learner.jsonl"
    if not events.exists():
        return 0
    return sum(1 for line in events.read_text().splitlines() if '"kind": "update"' in line)


def run_and_inject(tmp_path: Path, run_id: str, flags: list[str], cell_name: str, needles: list[str], sig: int,
                   after_updates: int = 3) -> tuple[subprocess.Popen, str, Path]:
    """Start `harness run`, wait for `after_updates` updates in cell `cell_name`, send `sig` to the one
    process whose command line holds every needle; returns (the finished process, its stderr, run folder)."""
    run_dir = tmp_path / run_id
    proc = harness("run", *flags, "--run-id", run_id, "--out", str(tmp_path), "--quiet")
    try:
        end = time.monotonic() + 600
        while updates_logged(run_dir / "cells" / cell_name) < after_updates:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < end, "no updates within 600 s"
            time.sleep(0.2)
        (pid,) = pids_of(str(run_dir), *needles)
        os.kill(pid, sig)
        _, stderr = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc, stderr, run_dir


def assert_reported(run_dir: Path, stderr: str) -> dict:
    assert "Traceback" not in stderr and "could not build every artefact" not in stderr, stderr[-3000:]
    meta = json.loads((run_dir / "meta.json").read_text())
    report = (run_dir / "report.md").read_text()
    assert "Data-parallel bytes: claimed vs measured" in report
    again = subprocess.run([sys.executable, "-m", "harness.cli", "report", str(run_dir)], capture_output=True,
                           text=True, cwd=ROOT, timeout=600)
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr[-3000:]
    assert pids_of(str(run_dir)) == []
    return meta


def test_a_data_parallel_run_whose_worker_is_killed_reports_what_completed(tmp_path):
    proc, stderr, run_dir = run_and_inject(tmp_path, "dpw", [*DP, "--updates", "3000", "--seeds", "1"], "ddp-s1",
                                           ["trainers.dataparallel.worker", "--worker-id 1"], signal.SIGKILL)
    assert proc.returncode == 1
    meta = assert_reported(run_dir, stderr)
    assert meta["status"] == "failed" and meta["complete"] is False
    assert len(meta["errors"]) == 1 and meta["errors"][0].startswith("ddp-s1: failed: "), meta["errors"]


@pytest.mark.faults
def test_a_data_parallel_run_whose_aggregator_is_killed_reports_what_completed(tmp_path):
    proc, stderr, run_dir = run_and_inject(tmp_path, "dpa", [*DP, "--updates", "3000", "--seeds", "1"], "ddp-s1",
                                           ["trainers.dataparallel.aggregator", "--listen"], signal.SIGKILL)
    assert proc.returncode == 1
    meta = assert_reported(run_dir, stderr)
    assert meta["status"] == "failed"
    assert meta["errors"] == ["ddp-s1: the learner ended (killed by SIGKILL) before its summary"]


@pytest.mark.faults
def test_a_data_parallel_worker_stopped_past_liveness_ends_the_run_failed_with_its_report(tmp_path):
    proc, stderr, run_dir = run_and_inject(tmp_path, "dps", [*DP, "--updates", "3000", "--seeds", "1",
                                                             "--liveness", "5"], "ddp-s1",
                                           ["trainers.dataparallel.worker", "--worker-id 2"], signal.SIGSTOP)
    assert proc.returncode == 1
    meta = assert_reported(run_dir, stderr)
    assert meta["status"] == "failed" and len(meta["errors"]) == 1 and "w2" in meta["errors"][0], meta["errors"]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["SIGKILL", "SIGSTOP"])
def test_a_fork_server_that_died_or_stopped_is_replaced_at_the_next_spawn(tmp_path, sig):
    from harness.run.forkserver import ForkServer
    from harness.run.launch import python_env
    from tests.harness.run.test_forkserver import read_report, spawn

    with ForkServer.started(["tests.harness.run.forkchild"], python_env(ROOT / ".cache", threads=1),
                            tmp_path / "forkserver.log", label=str(tmp_path)) as server:
        first = server.proc
        os.kill(first.pid, sig)
        proc, report, argv = spawn(server, tmp_path)
        assert read_report(report, proc)["cmdline"] == argv and proc.wait(timeout=120) == 0
        assert first.poll() == -signal.SIGKILL and server.proc.pid != first.pid   # the stopped one is killed
        how = "exited (killed by SIGKILL)" if sig == signal.SIGKILL else "stopped (SIGSTOP)"
        assert server.notes == [f"the fork server {how}: a new one was started"]
    assert pids_of(str(tmp_path)) == []


@pytest.mark.faults
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["SIGKILL", "SIGSTOP"])
def test_a_dead_or_stopped_fork_server_is_replaced_and_the_remaining_cells_run(tmp_path, sig):
    name = signal.Signals(sig).name
    proc, stderr, run_dir = run_and_inject(tmp_path, f"fs-{name}", [*DP, "--updates", "30", "--seeds", "1,2"],
                                           "ddp-s1", ["trainers.forkserver"], sig)
    assert proc.returncode == 0, stderr[-3000:]
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "complete" and meta["cells_complete"] == ["ddp-s1", "ddp-s2"], meta
    how = "exited (killed by SIGKILL)" if sig == signal.SIGKILL else "stopped (SIGSTOP)"
    assert meta["errors"] == [f"the fork server {how}: a new one was started"], meta["errors"]
    assert f"harness run: the fork server {how}; started a new one" in stderr
    assert "Traceback" not in stderr and pids_of(str(run_dir)) == []
