"""Result folders are validated on load (harness/results/schema.py): each malformed folder below is a
copy of the run-heldout fixture with one thing wrong, written to disk, and `harness report` on it
(the real CLI) must exit 2 with one line naming the file, the row and the field, write no report,
and never hang or trace back. The fixture itself still reports (its golden tests are elsewhere)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app

FIXTURE = Path(__file__).parents[2] / "fixtures" / "runs" / "run-heldout"
CELL = "cells/full-bf16-s1"
EVENTS = f"{CELL}/events-learner.jsonl"


def rows(run: Path, rel: str = EVENTS) -> list[dict]:
    return [json.loads(x) for x in (run / rel).read_text().splitlines()]


def write_rows(run: Path, rs: list[dict], rel: str = EVENTS) -> None:
    (run / rel).write_text("".join(json.dumps(r) + "\n" for r in rs))


def edit_row(kind: str, change, nth: int = 0):
    """Apply `change(row)` to the nth row of `kind` in the first cell's learner events."""
    def make(run: Path) -> None:
        rs = rows(run)
        change([r for r in rs if r["kind"] == kind][nth])
        write_rows(run, rs)
    return make


def setter(**values):
    return lambda r: r.update(values)


def nested(key: str, sub: str, value):
    return lambda r: r[key].__setitem__(sub, value)


def add_row(row: dict):
    def make(run: Path) -> None:
        rs = rows(run)
        rs.insert(3, {"t": rs[2]["t"] + 0.001, "process": "learner", **row})
        write_rows(run, rs)
    return make


def empty_events(run: Path) -> None:
    (run / EVENTS).write_text("")


def deep_line(run: Path) -> None:
    rs = rows(run)
    text = "".join(json.dumps(r) + "\n" for r in rs[:3])
    text += '{"kind": "x", "t": 1.0, "deep": ' + "[" * 100_000 + "]" * 100_000 + "}\n"
    (run / EVENTS).write_text(text + "".join(json.dumps(r) + "\n" for r in rs[3:]))


def link_to(target: str):
    def make(run: Path) -> None:
        (run / EVENTS).unlink()
        (run / EVENTS).symlink_to(target)
    return make


def config(**values):
    def make(run: Path) -> None:
        doc = json.loads((run / "config.json").read_text())
        doc.update(values)
        (run / "config.json").write_text(json.dumps(doc))
    return make


def summary(**values):
    def make(run: Path) -> None:
        doc = json.loads((run / CELL / "summary.json").read_text())
        doc.update(values)
        (run / CELL / "summary.json").write_text(json.dumps(doc))
    return make


# (id, how the folder is broken, what the one line must say besides the file's name)
CASES = [
    ("pass-at-k-5", edit_row("eval", setter(pass_at_k=5.0)), "row 42 (eval): 'pass_at_k' is 5.0, outside [0, 1]"),
    ("pass-at-k-negative", edit_row("eval", setter(pass_at_k=-0.5)), "'pass_at_k' is -0.5, outside [0, 1]"),
    ("pass-at-1-above-pass-at-k", edit_row("eval", setter(pass_at_1=0.9, pass_at_k=0.5)),
     "'pass_at_1' is 0.9, above 'pass_at_k' 0.5"),
    ("gold-prob-2", edit_row("eval", setter(gold_prob=2.0)), "'gold_prob' is 2.0, outside [0, 1]"),
    ("objective-metric-bogus", edit_row("eval", setter(objective_metric="bogus")),
     "'objective_metric' is \"bogus\", not one of"),
    ("version-1e30", edit_row("update", setter(version=10**30)), "(update): 'version' is 1000000000000000000000000000000"),
    ("version-a-float", edit_row("update", setter(version=2.0)), "has no integer 'version'"),
    ("seconds-per-update-0", edit_row("update", setter(seconds_per_update=0)),
     "'seconds_per_update' is 0, outside (0, 1e+08]"),
    ("seconds-per-update-nan", edit_row("update", setter(seconds_per_update=float("nan"))),
     "'seconds_per_update' is NaN"),
    ("negative-phase-duration", edit_row("update", nested("durations_s", "train", -0.5)),
     "'durations_s.train' is -0.5, outside [0, 1e+08]"),
    ("negative-cpu-seconds", edit_row("update", nested("cpu_s", "train", -0.1)), "'cpu_s.train' is -0.1"),
    ("phase-ends-before-it-starts", edit_row("update", nested("phases", "train", [5.0, 4.0])),
     "'phases.train' is [5.0, 4.0], not a [start, end] pair with end >= start"),
    ("steal-above-1", edit_row("update", nested("machine", "steal_frac", 3.0)), "'machine.steal_frac' is 3.0"),
    ("dropped-w7-of-2", add_row({"kind": "dropped", "worker": 7, "version": 3, "reason": "x"}),
     "(dropped): 'worker' is 7, but the run has 2 workers"),
    ("worker-0", add_row({"kind": "joined", "worker": 0, "version": 0}), "(joined): 'worker' is 0, outside [1, 10000]"),
    ("empty-events-file", empty_events, "no update row, but summary.json says 12 updates were done"),
    ("deeply-nested-line", deep_line, "row 4 is nested deeper than event rows go"),
    ("events-linked-to-dev-zero", link_to("/dev/zero"), "not a regular file (a device)"),
    ("events-a-folder", lambda run: ((run / EVENTS).unlink(), (run / EVENTS).mkdir()), "not a regular file (a folder)"),
    ("quality-metric-bogus", config(quality_metric="bogus"), "config.json: 'quality_metric' is \"bogus\", not one of"),
    ("workers-negative", config(workers=-2), "config.json: 'workers' is -2, not a number in"),
    ("summary-updates-negative", summary(updates=-3), "summary.json: 'updates' is -3, outside [0, 1e+09]"),
]


@pytest.fixture
def run_copy(tmp_path) -> Path:
    run = tmp_path / "run-heldout"
    shutil.copytree(FIXTURE, run)
    return run


@pytest.mark.parametrize("name,make,says", CASES, ids=[c[0] for c in CASES])
def test_a_malformed_result_folder_is_one_line_naming_file_row_and_field(run_copy, name, make, says):
    make(run_copy)
    result = CliRunner().invoke(app, ["report", str(run_copy)])
    lines = [x for x in result.output.strip().splitlines() if x.strip()]
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert len(lines) == 1 and says in lines[0], lines
    assert str(run_copy) in lines[0]
    assert not (run_copy / "report.md").exists()


def test_the_fixture_itself_reports(run_copy):
    result = CliRunner().invoke(app, ["report", str(run_copy), "--quiet"])
    assert result.exit_code == 0, result.output
    assert (run_copy / "report.md").exists()


def test_an_events_fifo_is_refused_without_waiting_for_a_writer(run_copy):
    """Opened non-blocking and checked with fstat: a FIFO is one line, not a hang (a child process
    with a deadline, so that a regression fails instead of hanging the suite)."""
    (run_copy / EVENTS).unlink()
    os.mkfifo(run_copy / EVENTS)
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "report", str(run_copy)], capture_output=True,
                          text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and "not a regular file (a FIFO)" in lines[-1], proc.stderr
    assert EVENTS in lines[-1]


def test_a_report_into_a_folder_that_cannot_be_written_is_one_line(run_copy, tmp_path):
    """`--out` under a regular file (the same OSError path as a read-only or full disk)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    result = CliRunner().invoke(app, ["report", str(run_copy), "--out", str(blocker / "report")])
    lines = [x for x in result.output.strip().splitlines() if x.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "cannot write the report" in lines[0], result.output
