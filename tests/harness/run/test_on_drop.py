"""`--on-drop fail|continue|restart`: one worker SIGKILLed mid-run, on localhost (--no-emulation).

Each test starts a real `harness run` (micro model, 2 workers, one cell), waits for the learner's
third update, SIGKILLs worker 2 and asserts what the user sees (exit code, stderr, cell status,
report.md, summary.json) and what the replicas did: every live replica applied every version
exactly once and in order (its event file, split at each process's `joined` row: versions
strictly increasing by one), and every hash it reported equals the learner's at that version.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from typer.testing import CliRunner

from harness.results import tables
from harness.cli import app
from trainers.events import read_events

ROOT = Path(__file__).resolve().parents[3]
UPDATES = 120
CELL = "spar-12.8pct-s1"


def run_and_kill(policy: str, out: Path, *flags: str) -> tuple[int, str, str, Path]:
    """`harness run --on-drop policy`, w2 SIGKILLed after the learner's third update."""
    run_id = f"drop-{policy}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "run", "--model", "micro", "--objective", "grpo", "--max-new-tokens", "4",
         "--updates", str(UPDATES), "--seeds", "1", "--workers", "2", "--method", "spar", "--baseline", "none",
         "--no-emulation", "--on-drop", policy, "--run-id", run_id, "--out", str(out), "--quiet", *flags],
        cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    cell = out / run_id / "cells" / CELL
    end = time.monotonic() + 600
    while len(updates(cell / "events-learner.jsonl")) < 3:
        assert proc.poll() is None and time.monotonic() < end, proc.communicate()[1][-3000:]
        time.sleep(0.05)
    pid = worker_pid(cell, 2)
    os.kill(pid, signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=600)
    assert processes_mentioning(str(out / run_id)) == []  # nothing left running
    return proc.returncode, stdout, stderr, out / run_id


def updates(path: Path) -> list[dict]:
    return [r for r in read_events(path) if r["kind"] == "update"] if path.exists() else []


def cmdlines() -> dict[int, list[str]]:
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                out[int(entry)] = Path(f"/proc/{entry}/cmdline").read_bytes().decode().split("\0")
            except OSError:
                continue
    return out


def worker_pid(cell: Path, worker: int) -> int:
    pids = [pid for pid, cmd in cmdlines().items() if "trainers.hilo.worker" in cmd and str(cell) in cmd
            and cmd[cmd.index("--worker-id") + 1] == str(worker)]
    assert len(pids) == 1, pids
    return pids[0]


def processes_mentioning(text: str) -> list[int]:
    return [pid for pid, cmd in cmdlines().items() if any(text in c for c in cmd)]


def incarnations(rows: list[dict]) -> list[list[dict]]:
    """A worker's event rows, one list per process (each starts with its `joined` row)."""
    out: list[list[dict]] = []
    for r in rows:
        if r["kind"] == "joined":
            out.append([])
        if out:
            out[-1].append(r)
    return out


def check_replicas(cell: Path) -> dict[str, list[list[int]]]:
    """Versions strictly +1 per replica (process) and every reported hash equal to the learner's;
    returns worker -> the versions each of its processes applied."""
    learner = updates(cell / "events-learner.jsonl")
    assert [r["version"] for r in learner] == list(range(1, len(learner) + 1))
    hashes = {r["version"]: r["hash"] for r in learner}
    applied = {}
    for name in ("w1", "w2"):
        applied[name] = []
        for life in incarnations(read_events(cell / f"events-{name}.jsonl")):
            joined, versions = life[0], [r["version"] for r in life if r["kind"] == "update"]
            assert versions == list(range(joined["snapshot_version"] + 1, joined["snapshot_version"] + 1 + len(versions)))
            for r in life:
                if r["kind"] == "update" and r.get("hash"):
                    assert r["hash"] == hashes[r["version"]], (name, r["version"])
            applied[name].append(versions)
    return applied


def cell_row(run_dir: Path) -> dict:
    cells = tables.load_cells(run_dir)
    assert len(cells) == 1
    return cells.iloc[0].to_dict()


def test_continue_marks_the_cell_degraded_and_says_who_dropped_when(tmp_path):
    code, _, stderr, run_dir = run_and_kill("continue", tmp_path, "--worker-timeout", "4")
    assert code == 0, stderr[-3000:]
    warnings = [line for line in stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and CELL in warnings[0] and "w2 dropped at version" in warnings[0], stderr
    cell = run_dir / "cells" / CELL
    applied = check_replicas(cell)
    assert applied["w1"] == [list(range(1, UPDATES + 1))]  # the survivor: every version once
    assert len(applied["w2"]) == 1  # not restarted
    row = cell_row(run_dir)
    assert row["status"] == "degraded" and row["degraded"] and row["complete"] and row["consistent"]
    (drop,) = row["drops"]
    assert drop["worker"] == 2 and drop["remaining"] == 1 and applied["w2"][0][-1] <= drop["version"]
    learner = updates(cell / "events-learner.jsonl")
    assert all(sorted(r["rollout_arrival"]) == ["w1"] for r in learner[drop["version"]:])  # ran with one worker
    assert row["workers_min"] == 1 and row["updates_done"] == UPDATES
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["complete"] and summary["degraded"] == [CELL]
    assert [c["status"] for c in summary["cells"]] == ["degraded"]
    md = (run_dir / "report.md").read_text()
    assert "## Degraded cells" in md
    assert f"w2 dropped at version {drop['version']}" in md
    assert f"1 of 2 workers remained from update {drop['version'] + 1}" in md
    assert "| degraded |" in md and "yes, DEGRADED" in md


def test_restart_rejoins_through_catch_up_and_is_not_degraded(tmp_path):
    # No snapshot within the run: the restarted worker replays the log from version 0 whatever
    # version the learner reached meanwhile (on a quiet box it ran 100+ micro updates while the new
    # process imported torch; snapshot catch-up has its own test in tests/trainers/services).
    code, _, stderr, run_dir = run_and_kill("restart", tmp_path, "--snapshot-every", "1000")
    assert code == 0, stderr[-3000:]
    assert "warning:" not in stderr
    cell = run_dir / "cells" / CELL
    applied = check_replicas(cell)
    assert applied["w1"] == [list(range(1, UPDATES + 1))]
    first, second = applied["w2"]  # killed, then restarted with the same worker id
    assert second == list(range(1, UPDATES + 1))  # caught up from the log (version 0 + every update), then on
    learner_final = updates(cell / "events-learner.jsonl")[-1]["hash"]
    finals = {name: updates(cell / f"events-{name}.jsonl")[-1]["hash"] for name in ("w1", "w2")}
    assert finals == {"w1": learner_final, "w2": learner_final}
    harness_rows = read_events(cell / "events-harness.jsonl")
    assert [(r["kind"], r["worker"]) for r in harness_rows] == [("worker_exit", 2), ("restart", 2)]
    assert harness_rows[0]["returncode"] == -signal.SIGKILL
    row = cell_row(run_dir)
    assert row["status"] == "complete" and not row["degraded"] and row["consistent"]
    (restart,) = row["restarts"]
    assert restart["worker"] == 2 and restart["rejoined_version"] is not None and restart["after"] == "killed by SIGKILL"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["complete"] and summary["degraded"] == []
    md = (run_dir / "report.md").read_text()
    assert f"w2 restarted at version {restart['version']} (killed by SIGKILL), rejoined at version" in md
    assert "Degraded cells" not in md


def test_fail_stops_the_run_and_exits_1(tmp_path):
    code, _, stderr, run_dir = run_and_kill("fail", tmp_path)
    assert code == 1, stderr[-3000:]
    # Whichever notices first stops the cell: the harness (the process died) or the learner (its
    # send to the dead worker failed); both name the policy and the worker.
    assert "--on-drop fail" in stderr and ("w2 killed by SIGKILL" in stderr or "dropped worker w2" in stderr), stderr
    cell = run_dir / "cells" / CELL
    applied = check_replicas(cell)
    done = len(updates(cell / "events-learner.jsonl"))
    assert done < UPDATES and applied["w1"] == [list(range(1, len(applied["w1"][0]) + 1))]
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "failed" and not meta["complete"]
    row = cell_row(run_dir)
    assert row["status"] == "failed" and not row["complete"] and row["updates_done"] == done
    kinds = [r["kind"] for r in read_events(cell / "events-harness.jsonl")]
    assert kinds[-1] == "cell_failed" and set(kinds[:-1]) <= {"worker_exit"}, kinds
    md = (run_dir / "report.md").read_text()
    assert "status failed" in md and "| failed |" in md
    assert ("cell stopped (--on-drop fail): worker w2 killed by SIGKILL" in md
            or "learner dropped worker w2 at version" in md), md
    result = CliRunner().invoke(app, ["report", str(run_dir), "--quiet"])  # the folder stays readable
    assert result.exit_code == 0, result.output
