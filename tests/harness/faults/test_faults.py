"""Fault injection on the emulated network (root): each fault is injected into a real
`harness run` (micro model, 2 workers, grpo, a few updates), and each test asserts what a user
relies on afterwards:

- the learner did not crash (unless the fault IS a learner crash, which must be reported);
- every live replica applied every version exactly once, in order (worker event files);
- the replicas that finished agree on the final hash (cell summary `consistent`);
- the results folder is readable (`harness report` exits 0) and correctly marked;
- nothing is left behind: no namespace, qdisc, rule, delay line or process of the run.

Hostile peers, slowloris and fd exhaustion are in tests/trainers/hilo/test_hostile.py (the
learner alone, on localhost); a killed worker under each --on-drop policy in
tests/harness/run/test_on_drop.py. Run by hand: `pytest -m faults tests/harness/faults -s`.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.net import clean

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.root, pytest.mark.faults]
BASE = ["--workers", "2", "--method", "spar", "--budget", "1.6%", "--baseline", "none", "--model", "micro",
        "--seeds", "1", "--objective", "grpo", "--max-new-tokens", "4",
        "--comm-ratio", "off"]  # budget given: the cells' names below; the profile's literal rate, no pilot
TABLE: list[tuple] = []   # (fault, survived, versions lost, leftovers): printed at the end with -s


def harness(*args: str) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-m", "harness.cli", *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def pids_of(*needles: str) -> list[int]:
    """Processes whose command line holds every needle (the run folder names a run's services)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if all(n in cmd for n in needles):
            out.append(int(entry))
    return out


def wait_for_update(cell: Path, version: int, proc: subprocess.Popen, timeout_s: float = 600) -> None:
    events = cell / "events-learner.jsonl"
    end = time.monotonic() + timeout_s
    while True:
        rows = [json.loads(x) for x in events.read_text().splitlines() if x.strip()] if events.exists() else []
        if any(r.get("kind") == "update" and r.get("version", 0) >= version for r in rows):
            return
        assert proc.poll() is None and time.monotonic() < end, proc.communicate()[1][-3000:]
        time.sleep(0.2)


def versions_applied_once(cell: Path) -> dict[str, bool]:
    """Per worker: within each life of its replica (split at `joined`), the applied versions go
    up by exactly one each time: none skipped, none applied twice."""
    ok = {}
    for path in sorted(cell.glob("events-w*.jsonl")):
        rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        good, last = True, None
        for r in rows:
            if r.get("kind") == "joined":
                last = None
            elif r.get("kind") == "update" and r.get("type") == "UPDATE":
                good &= last is None or r["version"] == last + 1
                last = r["version"]
        ok[path.stem.removeprefix("events-")] = good
    return ok


def leftovers(run_dir: Path) -> list[str]:
    meta = json.loads((run_dir / "meta.json").read_text())
    rid = meta.get("netns_run_id")
    return (clean.leftovers(rid) if rid else []) + [f"pid {p}" for p in pids_of(str(run_dir))]


def finish(name: str, run_dir: Path, cell: Path, survived: bool) -> dict:
    report = subprocess.run([sys.executable, "-m", "harness.cli", "report", "--quiet", str(run_dir)], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr[-2000:]
    once = versions_applied_once(cell)
    left = leftovers(run_dir)
    summary = json.loads((cell / "summary.json").read_text()) if (cell / "summary.json").exists() else {}
    TABLE.append((name, "yes" if survived else "no", sum(not v for v in once.values()), len(left)))
    assert all(once.values()), once
    assert left == [], left
    return summary


def run_with_fault(tmp_path: Path, name: str, flags: list[str], fault=None, at_version: int = 1):
    run_dir, cell = tmp_path / name, tmp_path / name / "cells" / "spar-1.6pct-s1"
    proc = harness("run", *BASE, *flags, "--run-id", name, "--out", str(tmp_path), "--quiet")
    if fault is not None:
        wait_for_update(cell, at_version, proc)
        fault(proc, run_dir, cell)
    _, stderr = proc.communicate(timeout=900)
    return proc.returncode, stderr, run_dir, cell


def test_worker_sigstop_then_sigcont_is_waited_for(tmp_path):
    def pause_w1(proc, run_dir, cell):
        (pid,) = pids_of(str(cell), "trainers.hilo.worker", "--worker-id 1 ")
        os.kill(pid, signal.SIGSTOP)
        time.sleep(5)
        os.kill(pid, signal.SIGCONT)

    code, stderr, run_dir, cell = run_with_fault(tmp_path, "sigstop", ["--updates", "4"], pause_w1)
    assert code == 0, stderr[-3000:]
    summary = finish("worker SIGSTOP 5 s", run_dir, cell, survived=True)
    assert summary["complete"] and summary["consistent"] and summary["dropped"] == []


def test_learner_sigkill_is_reported_not_hidden(tmp_path):
    def kill_learner(proc, run_dir, cell):
        (pid,) = pids_of(str(cell), "trainers.hilo.learner")
        os.kill(pid, signal.SIGKILL)

    code, stderr, run_dir, cell = run_with_fault(tmp_path, "learnerkill", ["--updates", "30"], kill_learner)
    assert code == 1, stderr[-3000:]
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["complete"] is False and meta["status"] == "failed"
    assert meta["errors"] == ["spar-1.6pct-s1: the learner ended (killed by SIGKILL) before its summary"], meta
    assert "INCOMPLETE" in (run_dir / "report.md").read_text()
    finish("learner SIGKILL", run_dir, cell, survived=False)


def test_harness_sigkill_then_clean_leaves_nothing(tmp_path):
    run_dir, cell = tmp_path / "harnesskill", tmp_path / "harnesskill" / "cells" / "spar-1.6pct-s1"
    proc = harness("run", *BASE, "--updates", "50", "--run-id", "harnesskill", "--out", str(tmp_path), "--quiet")
    wait_for_update(cell, 1, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    rid = json.loads((run_dir / "meta.json").read_text())["netns_run_id"]
    assert clean.leftovers(rid), "a SIGKILLed harness cannot tear down: the namespaces must still be there"
    res = subprocess.run([sys.executable, "-m", "harness.cli", "clean", "--run-id", rid], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    for pid in pids_of(str(run_dir)):  # services outside the namespaces' reach would be a leak
        pytest.fail(f"process {pid} of the killed run is still alive after clean")
    finish("harness SIGKILL + clean", run_dir, cell, survived=False)


def test_link_flap_to_1kbit_for_5s(tmp_path):
    profile = tmp_path / "flap.yaml"
    profile.write_text("name: flap\ndescription: 20 Mbit/s links that drop to 1 kbit/s from 3 s to 8 s\n"
                       "defaults: {rate: 20mbit, delay: 5ms}\nschedule:\n"
                       "  - {at: 3s, target: workers, rate: 1kbit}\n  - {at: 8s, target: workers, rate: 20mbit}\n")
    code, stderr, run_dir, cell = run_with_fault(tmp_path, "flap", ["--profile", str(profile), "--updates", "6"])
    assert code == 0, stderr[-3000:]
    summary = finish("link flap 1 kbit/s for 5 s", run_dir, cell, survived=True)
    assert summary["complete"] and summary["consistent"]


@pytest.mark.parametrize("name,flags", [("loss10", ["--bw", "20mbit", "--loss", "10%"]),
                                        ("rtt600", ["--bw", "20mbit", "--delay", "300ms"])])
def test_hard_links_complete_consistently(tmp_path, name, flags):
    code, stderr, run_dir, cell = run_with_fault(tmp_path, name, [*flags, "--updates", "3"])
    assert code == 0, stderr[-3000:]
    summary = finish({"loss10": "10 % loss", "rtt600": "600 ms RTT"}[name], run_dir, cell, survived=True)
    assert summary["complete"] and summary["consistent"]


def test_print_the_fault_table():
    """With -s: the table for the closing note (fault, survived, versions lost, leftovers)."""
    print("\n| fault | learner survived | replicas with a lost/duplicated version | leftovers |")
    print("|---|---|---|---|")
    for row in TABLE:
        print("| " + " | ".join(map(str, row)) + " |")
