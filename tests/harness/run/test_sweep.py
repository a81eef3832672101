"""`harness sweep` runs a grid, writes one report over it, and resumes: completed grid points
are skipped on a re-run, an incomplete one is run again. On localhost (--no-emulation), so it
needs no root; the grid axis here is the worker count."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
FLAGS = ["--workers", "1,2", "--method", "int8", "--updates", "2", "--seeds", "1", "--no-emulation"]


def sweep(out: Path, *extra) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    grid = out.parent / "grid.yaml"
    grid.write_text("model: micro\nmax_new_tokens: 4\nobjective: grpo\n")
    return subprocess.run([sys.executable, "-m", "harness.cli", "sweep", "--grid", str(grid), *FLAGS,
                           "--out", str(out), *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "s"
    return out, sweep(out)


def test_sweep_runs_every_grid_point(first):
    out, res = first
    assert res.returncode == 0, res.stderr[-3000:]
    runs = sorted(p.name for p in (out / "runs").iterdir())
    assert runs == ["w1", "w2"]
    for r in runs:
        meta = json.loads((out / "runs" / r / "meta.json").read_text())
        assert meta["complete"] and meta["emulation"] is False and meta["backend"] == "none"
    md = (out / "report.md").read_text()
    assert md.count("| localhost (unshaped) | 1 | int8@12.8% |") == 1 and md.count("| localhost (unshaped) | 2 | full-bf16 |") == 1
    stems = {p.stem for p in (out / "figures").glob("*.pdf")}
    assert {"phase_breakdown", "quality_vs_bytes", "timeline", "link_throughput"} <= stems
    assert "seconds_vs_bandwidth" not in stems              # unshaped: no bandwidth axis to draw


def test_rerun_skips_complete_points_and_redoes_incomplete_ones(first):
    out, _ = first
    w1_meta = (out / "runs" / "w1" / "meta.json").read_text()
    meta2 = json.loads((out / "runs" / "w2" / "meta.json").read_text())
    meta2.update(complete=False, status="interrupted")
    (out / "runs" / "w2" / "meta.json").write_text(json.dumps(meta2))
    res = sweep(out, "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads(res.stdout)  # --json: one document on stdout
    assert doc["failed"] == 0 and len(doc["runs"]) == 2
    assert (out / "runs" / "w1" / "meta.json").read_text() == w1_meta  # untouched
    assert json.loads((out / "runs" / "w2" / "meta.json").read_text())["complete"] is True
