"""`harness run` end to end on the emulated network (root): real namespaces, shaping, processes.

2 workers, 3 updates, micro model, a 20 Mbit/s link so that the physical floor
payload_bytes x 8 / rate of the `full` update is a meaningful lower bound.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from harness.net import clean

from harness.results import tables
from harness.run import fixed_cost

ROOT = Path(__file__).resolve().parents[3]
RATE = 20e6
pytestmark = pytest.mark.root


def harness(*args, **kw) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-m", "harness.cli", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def processes_mentioning(text: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if entry.isdigit() and text in cmd and int(entry) != os.getpid():
            pids.append(int(entry))
    return pids


@pytest.fixture(scope="module")
def e2e(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    proc = harness("run", "--bw", "20mbit", "--workers", "2", "--updates", "3", "--method", "spar",
                   "--model", "micro", "--seeds", "1", "--objective", "grpo", "--baseline", "full", "--run-id", "e2e", "--out", str(out), "--json")
    stdout, stderr = proc.communicate(timeout=600)
    return proc.returncode, stdout, stderr, out / "e2e"


def test_run_succeeds_and_prints_machine_readable_summary(e2e):
    code, stdout, stderr, run_dir = e2e
    assert code == 0, stderr[-3000:]
    doc = json.loads(stdout)  # --json: one JSON document on stdout, nothing else
    assert doc["run_dir"] == str(run_dir) and doc["complete"] is True
    assert {m["variant"]: m["consistent"] for m in doc["methods"]} == {"spar@12.8%": True, "full": True}  # the default budget (spec.RUN_BUDGET)


def test_every_artefact_is_written(e2e):
    run_dir = e2e[3]
    for name in ("config.json", "meta.json", "summary.json", "updates.parquet", "updates.csv", "phases.parquet",
                 "links.parquet", "report.md", "report.html"):
        assert (run_dir / name).stat().st_size > 0, name
    figs = {p.name for p in (run_dir / "figures").iterdir()}
    for stem in ("phase_breakdown", "quality_vs_bytes", "timeline", "link_throughput", "quality_vs_time"):
        assert {f"{stem}.pdf", f"{stem}.png"} <= figs
    assert "seconds_vs_bandwidth.png" not in figs            # one bandwidth: drawn only where a run varies it
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["complete"] and meta["status"] == "complete" and meta["emulation"] is True
    assert meta["backend"] in ("netem", "fallback") and meta["kernel"] and meta["host"]
    assert len(meta["git_sha"]) == 40 and meta["packages"]["torch"].startswith("2.13.0")
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["rate_bit_s"] == RATE and cfg["overrides"] == {"rate": "20mbit"}
    for cell in ("spar-12.8pct-s1", "full-s1"):
        d = run_dir / "cells" / cell
        for name in ("events-learner.jsonl", "events-w1.jsonl", "events-w2.jsonl", "summary.json", "links.csv"):
            assert (d / name).stat().st_size > 0, (cell, name)
        s = json.loads((d / "summary.json").read_text())
        assert s["complete"] and s["consistent"] and s["updates"] == 3
    df = pd.read_parquet(run_dir / "updates.parquet")
    assert sorted(df.groupby("method").size().items()) == [("full", 3), ("spar", 3)]
    md = (run_dir / "report.md").read_text()
    assert "spar@12.8%" in md and "speedup vs baseline" in md and "20mbit" in md


def test_meta_json_splits_the_fixed_cost_by_part(e2e):
    """The run's seconds outside its loops, by part: the harness's steps, each cell's, and the rest."""
    cost = json.loads((e2e[3] / "meta.json").read_text())["overhead"]
    parts = cost["parts"]
    for part in (fixed_cost.STARTUP_PART, "network (namespaces, shaping)",
                 "learner start (until it listens)", "tables", "figures", "report text (md, html)", "other"):
        assert part in parts, (part, parts)
    assert "fork server (the wait for its imports)" in parts or "report imports (while the fork server imports)" in parts
    assert all(v >= 0 for v in parts.values()) and "cells" not in parts
    assert sum(parts.values()) == pytest.approx(cost["overhead_s"], abs=0.05)
    assert cost["run_s"] == pytest.approx(cost["loop_s"] + cost["eval_outside_loop_s"] + cost["overhead_s"])


def test_full_is_no_faster_than_the_link_allows(e2e):
    df = tables.load(e2e[3])
    full = df[df["method"] == "full"]
    floor = full["payload_bytes_down"] * 8 / RATE   # one update to one worker over its own 20 Mbit/s link
    assert len(full) == 3 and (full["payload_bytes_down"] > 50_000).all()
    assert (full["seconds_per_update"] >= floor).all(), list(zip(full["seconds_per_update"], floor))
    links = pd.read_csv(e2e[3] / "cells" / "full-s1" / "links.csv")
    w1 = links[(links["node"] == "w1") & (links["direction"] == "down")]["bytes"]
    assert w1.max() - w1.min() >= 3 * full["payload_bytes_down"].iloc[0]  # the link really carried the updates


def test_nothing_is_left_behind(e2e):
    rid = json.loads((e2e[3] / "meta.json").read_text())["netns_run_id"]
    assert rid and clean.leftovers(rid) == []  # other runs (other tests) may be live: only ours must be gone
    assert processes_mentioning(str(e2e[3])) == []


def test_interrupt_tears_down_and_marks_the_run_incomplete(tmp_path):
    run_dir = tmp_path / "int"
    proc = harness("run", "--bw", "20mbit", "--workers", "2", "--updates", "50", "--method", "spar",
                   "--model", "micro", "--seeds", "1", "--objective", "grpo",
                   "--run-id", "int", "--out", str(tmp_path), "--quiet")
    events = run_dir / "cells" / "spar-12.8pct-s1" / "events-learner.jsonl"
    end = time.monotonic() + 300
    while not (events.exists() and '"kind": "update"' in events.read_text()):
        assert proc.poll() is None and time.monotonic() < end, proc.communicate()[1][-3000:]
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-3000:]
    assert "partial results" in stderr
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "interrupted" and meta["complete"] is False
    assert meta["netns_run_id"] and clean.leftovers(meta["netns_run_id"]) == []
    assert processes_mentioning(str(run_dir)) == []
    md = (run_dir / "report.md").read_text()
    assert "INCOMPLETE" in md
    assert not json.loads((run_dir / "cells" / "spar-12.8pct-s1" / "summary.json").read_text())["complete"]
