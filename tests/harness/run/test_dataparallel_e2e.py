"""`harness run` of the data-parallel family end to end on the emulated network (root): the
aggregator on the learner's node, dp workers on the worker nodes, bytes in the results tables and
the report's claimed-vs-measured table, checked against the raw event files."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.results import tables
from trainers.events import read_events

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.root
METHODS = "lordo-global"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--bw", "20mbit", "--workers", "2",
                           "--updates", "4", "--method", METHODS, "--baseline", "ddp", "--model", "micro",
                           "--seeds", "1", "--lordo-k", "2", "--lordo-rank", "4", "--dp-batch", "2",
                           "--dp-seq-len", "16", "--dp-heldout", "4", "--run-id", "dp-e2e", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=800)
    return proc, out / "dp-e2e"


def test_run_completes_consistent(run):
    proc, run_dir = run
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = tables.read_run(run_dir).cells
    assert set(cells["method"]) == {"lordo-global", "ddp"}
    assert cells["complete"].all() and cells["consistent"].all()


def test_tables_carry_the_bytes_the_aggregator_counted(run):
    _, run_dir = run
    updates = tables.read_run(run_dir).updates
    for method, g in updates.groupby("method"):
        rows = [r for r in read_events(run_dir / "cells" / f"{method}-s1" / "events-learner.jsonl")
                if r["kind"] == "update"]
        assert len(g) == len(rows) == 4
        assert g["payload_bytes_up"].sum() == sum(r["payload_bytes_up"] for r in rows)
        assert g["claimed_bytes_up"].sum() == sum(r["claimed_bytes_up"] for r in rows)
        # what the workers wrote equals what the aggregator read, frame for frame
        sent = sum(r.get("bytes", {}).get("sent", {}).get("SYNC", 0) for w in (1, 2)
                   for r in read_events(run_dir / "cells" / f"{method}-s1" / f"events-w{w}.jsonl")
                   if r["kind"] == "update")
        assert sent == g["wire_bytes_up"].sum()


def test_report_has_claimed_vs_measured(run):
    _, run_dir = run
    report = (run_dir / "report.md").read_text()
    assert "## Data-parallel bytes: claimed vs measured" in report
    section = report.split("## Data-parallel bytes: claimed vs measured")[1]
    for method in ("lordo-global", "ddp"):
        assert f"| {method} |" in section
    # the main table names the data-parallel training metric (the LM loss), not the HiLo objective's
    main = report.split("## Data-parallel bytes: claimed vs measured")[0]
    assert "lm_loss" in main and "distill_loss" not in main
