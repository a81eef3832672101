"""An interrupted data-parallel cell reads as interrupted, naming the signal the harness received, as a
HiLo cell does: its aggregator (trainers/dataparallel/aggregator.py) catches SIGTERM and SIGINT and
writes summary.json's status "interrupted: SIG...", and the harness passes it the signal it got
(harness/run/launch.py NAMES_ITS_SIGNAL). It read "failed: SystemExit: 143" after a Ctrl-C.

A real `harness run` on localhost (--no-emulation, micro model, tiny batches), stopped after its first
optimizer step."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.results import tables
from trainers.events import read_events

ROOT = Path(__file__).resolve().parents[3]
DP = ["--model", "micro", "--method", "lordo-global", "--baseline", "none", "--lordo-k", "2", "--seeds", "1",
      "--workers", "2", "--no-emulation", "--dp-batch", "2", "--dp-seq-len", "16", "--dp-heldout", "8", "--quiet"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_data_parallel_cell_names_the_signal(tmp_path, signum):
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "run", *DP, "--updates", "2000", "--run-id", "dp",
                             "--out", str(tmp_path)], cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    events = tmp_path / "dp" / "cells" / "lordo-global-s1" / "events-learner.jsonl"
    end = time.monotonic() + 300
    while not (events.exists() and any(r["kind"] == "update" for r in read_events(events))):
        assert proc.poll() is None and time.monotonic() < end, proc.communicate()[1][-3000:]
        time.sleep(0.05)
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, stderr[-3000:]
    summary = json.loads((events.parent / "summary.json").read_text())
    assert summary["status"] == f"interrupted: {signum.name}" and not summary["complete"]
    assert list(tables.load_cells(tmp_path / "dp")["status"]) == [f"interrupted: {signum.name}"]
    assert any(r["kind"] == "interrupted" and r["reason"] == signum.name for r in read_events(events))
