"""Runs that end badly and folders that are broken are reported as such, never as a traceback:

- `report`/`plot` on a malformed folder: exit 2, one line naming the file;
- `harness run` exits 128 + the signal: 143 on SIGTERM, 130 on SIGINT;
- a run whose harness was SIGKILLed (meta.json still "running", its owner process gone) reads
  as "interrupted"; a killed learner's cell counts the updates its event file logged;
- the report shows the run's recorded errors and each method's pipelining depth and lag.

Fixture folders are copies of tests/fixtures/runs (real runs); the signal tests start real
`harness run` processes on localhost (--no-emulation).
"""
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness import owner

from harness.results import report, tables
from harness.cli import app
from trainers.events import read_events

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "runs"
RUN = FIXTURES / "run-spar-20mbit"
QUICK = ["--model", "micro", "--objective", "grpo", "--max-new-tokens", "4", "--seeds", "1", "--workers", "2",
         "--method", "spar", "--baseline", "none", "--no-emulation", "--quiet"]


@pytest.fixture()
def run_copy(tmp_path):
    shutil.copytree(RUN, tmp_path / "r")
    return tmp_path / "r"


def one_error_line(result, name: str) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("error: ") and name in lines[0], result.stderr
    assert "Traceback" not in result.output
    return lines[0]


# ---- malformed folders ------------------------------------------------------------------------

def _config_a_list(run: Path) -> str:
    (run / "config.json").write_text("[1, 2, 3]\n")
    return "config.json: expected a JSON object"


def _meta_not_json(run: Path) -> str:
    (run / "meta.json").write_text("{\"status\": \n")
    return "meta.json: not readable as JSON"


def _update_row_without_t(run: Path) -> str:
    path = run / "cells" / "spar-1.6pct-s1" / "events-learner.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    first = next(r for r in rows if r["kind"] == "update")
    del first["t"]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return "events-learner.jsonl: row"


def _summary_a_string(run: Path) -> str:
    (run / "cells" / "full-s1" / "summary.json").write_text('"done"\n')
    return "summary.json: expected a JSON object, found a str"


def _event_row_a_number(run: Path) -> str:
    with open(run / "cells" / "full-s1" / "events-w2.jsonl", "a") as fh:
        fh.write("42\n")
    return "events-w2.jsonl: row"


def _links_without_bytes(run: Path) -> str:
    (run / "cells" / "full-s1" / "links.csv").write_text("t_s,node,direction\n1,w1,down\n")
    return "links.csv: no column 'bytes'"


def _profile_doc_a_list(run: Path) -> str:
    cfg = json.loads((run / "config.json").read_text())
    cfg["profile_doc"] = ["not", "a", "profile"]
    (run / "config.json").write_text(json.dumps(cfg))
    return "config.json: 'profile_doc' is [\"not\", \"a\", \"profile\"], not a mapping"


BREAKAGES = [_config_a_list, _meta_not_json, _update_row_without_t, _summary_a_string, _event_row_a_number,
             _links_without_bytes, _profile_doc_a_list]


@pytest.mark.parametrize("cmd", ["report", "plot"])
@pytest.mark.parametrize("breakage", BREAKAGES, ids=[b.__name__.strip("_") for b in BREAKAGES])
def test_report_and_plot_name_the_malformed_file(run_copy, cmd, breakage):
    name = breakage(run_copy)
    one_error_line(CliRunner().invoke(app, [cmd, str(run_copy), "--quiet"]), name)


def test_results_error_names_the_file_in_the_api_too(run_copy):
    _update_row_without_t(run_copy)
    with pytest.raises(tables.ResultsError, match=r"spar-1\.6pct-s1/events-learner\.jsonl: row \d+ \(update\) "
                                                   r"has no numeric time 't'"):
        tables.read(run_copy)


def test_sweep_names_the_flag_of_a_bad_value(tmp_path):
    for value in ("abc", "1,abc"):
        result = CliRunner().invoke(app, ["sweep", "--workers", value, "--no-emulation", "--out", str(tmp_path / "s")])
        assert "--workers: 'abc' is not an integer" in one_error_line(result, "--workers")
    assert not (tmp_path / "s").exists()


# ---- runs that end badly ----------------------------------------------------------------------

def start_run(out: Path, run_id: str, updates: int = 400, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "harness.cli", "run", *QUICK, "--updates", str(updates),
                             "--run-id", run_id, "--out", str(out)], cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def learner_updates(cell: Path) -> list[dict]:
    path = cell / "events-learner.jsonl"
    return [r for r in read_events(path) if r["kind"] == "update"] if path.exists() else []


def wait_for_updates(proc: subprocess.Popen, cell: Path, n: int) -> None:
    end = time.monotonic() + 600
    while len(learner_updates(cell)) < n:
        assert proc.poll() is None and time.monotonic() < end, proc.communicate()[1][-3000:]
        time.sleep(0.05)


def pids_mentioning(text: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if text in Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace"):
                    pids.append(int(entry))
            except OSError:
                continue
    return pids


@pytest.mark.parametrize("signum,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_an_interrupted_run_exits_128_plus_the_signal(tmp_path, signum, code):
    proc = start_run(tmp_path, "sig")
    wait_for_updates(proc, tmp_path / "sig" / "cells" / "spar-12.8pct-s1", 1)
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == code, stderr[-3000:]
    assert "partial results" in stderr
    meta = json.loads((tmp_path / "sig" / "meta.json").read_text())
    assert meta["status"] == "interrupted" and not meta["complete"]
    assert pids_mentioning(str(tmp_path / "sig")) == []
    # the Cells table names the signal the harness got (a SIGINT read "interrupted: SIGTERM")
    assert list(tables.load_cells(tmp_path / "sig")["status"]) == [f"interrupted: {signum.name}"]


def test_a_killed_harness_reads_as_interrupted_and_a_live_one_as_running(tmp_path):
    proc = start_run(tmp_path, "k")
    run_dir, cell = tmp_path / "k", tmp_path / "k" / "cells" / "spar-12.8pct-s1"
    wait_for_updates(proc, cell, 1)
    md = report.build(tables.read(run_dir))[0]  # the harness is alive: the run is running
    assert "status running" in md and "| running |" in md
    proc.kill()
    proc.communicate(timeout=60)
    for pid in pids_mentioning(str(run_dir)):  # its services get SIGTERM from the kernel (die_with_parent);
        with contextlib.suppress(ProcessLookupError):  # any still here are ours to end
            os.kill(pid, signal.SIGKILL)
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "running" and meta["owner"]["pid"] == proc.pid  # what SIGKILL leaves behind
    result = CliRunner().invoke(app, ["report", str(run_dir)])
    assert result.exit_code == 0, result.output
    assert "**INCOMPLETE**" in result.stdout   # the first screen says it; the runs section says why
    assert f"status interrupted — **INCOMPLETE (interrupted)**: partial results (its harness process (pid {proc.pid})" \
        in (run_dir / "report.md").read_text()
    cells = tables.load_cells(run_dir)
    # "interrupted", or "interrupted: SIGTERM" where the learner got the parent-death signal in time to say so
    assert [str(x).split(":")[0] for x in cells["status"]] == ["interrupted"]
    assert list(cells["updates_done"]) == [learner_updates(cell)[-1]["version"]]


def _with_meta(run: Path, **changes) -> None:
    meta = json.loads((run / "meta.json").read_text())
    (run / "meta.json").write_text(json.dumps({**meta, **changes}))


def test_owner_liveness_uses_the_pid_and_its_start_time(run_copy):
    import platform

    me = {"pid": os.getpid(), "start_time": owner.process_start_time(os.getpid())}
    gone = subprocess.Popen(["true"])
    gone.wait()
    cases = {"running": me, "interrupted": {**me, "start_time": me["start_time"] - 1}}
    cases_dead = {"interrupted": {"pid": gone.pid, "start_time": 1}}
    for want, record in [*cases.items(), *cases_dead.items()]:
        _with_meta(run_copy, status="running", complete=False, owner=record, host=platform.node())
        assert tables.read(run_copy).runs[0].meta["status"] == want, record
    _with_meta(run_copy, status="running", owner=None)  # no owner recorded: cannot tell, left as it is
    assert tables.read(run_copy).runs[0].meta["status"] == "running"


def test_a_killed_learner_counts_the_updates_it_logged(tmp_path):
    proc = start_run(tmp_path, "kl")
    cell = tmp_path / "kl" / "cells" / "spar-12.8pct-s1"
    wait_for_updates(proc, cell, 3)
    (learner,) = [pid for pid in pids_mentioning(str(cell))
                  if b"trainers.hilo.learner" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    os.kill(learner, signal.SIGKILL)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 1, stderr[-3000:]
    logged = learner_updates(cell)[-1]["version"]
    assert json.loads((cell / "summary.json").read_text())["updates"] == 0  # the learner's summary is stale
    (row,) = tables.load_cells(tmp_path / "kl").to_dict(orient="records")
    assert row["updates_done"] == logged >= 3 and row["status"] == "learner killed by SIGKILL"
    md = (tmp_path / "kl" / "report.md").read_text()
    assert f"| {logged} / 400 |" in md and "learner killed by SIGKILL" in md


# ---- what the report adds ---------------------------------------------------------------------

def test_report_shows_recorded_errors_and_pipelining_lag(run_copy):
    _with_meta(run_copy, errors=["spar-1.6pct-s1: link counters: iptables-save not found (apt-get install iptables)"])
    md = report.write(run_copy).read_text()
    assert "  - **error**: spar-1.6pct-s1: link counters: iptables-save not found (apt-get install iptables)" in md
    assert "| pipeline | lag median / max |" in md
    lags = {m: [json.loads(line)["lag"] for c in sorted((run_copy / "cells").glob(f"{m}-*"))
                for line in (c / "events-learner.jsonl").read_text().splitlines() if '"kind": "update"' in line]
            for m in ("spar", "full")}
    config = json.loads((run_copy / "config.json").read_text())
    for method, label in (("spar", "spar@1.6%"), ("full", "full")):
        median, top = statistics.median(lags[method]), max(lags[method])
        row = next(line for line in md.splitlines() if f"| {label} |" in line)
        assert f"| {config['pipeline']} | {median:g} / {top:g} |" in row, row
    summary = tables.read(run_copy)
    assert summary.runs[0].meta["errors"]
