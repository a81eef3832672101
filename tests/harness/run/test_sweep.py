"""`harness sweep` runs a grid, writes one report over it, and resumes: completed grid points
are skipped on a re-run, an incomplete one is run again. On localhost (--no-emulation), so it
needs no root; the grid axis here is the worker count. What it refuses (a grid changed under an
earlier run, a folder that is not a sweep's, an empty grid) is checked on the planning path alone,
against config.json files written as a run writes them."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.run import commands, config, fixed_cost
from harness.run.config import ConfigError

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
    """The first sweep: its folder, the process's outcome, and each run's fixed cost by part as that
    sweep left them (a re-run below redoes w2 as its process's first run)."""
    out = tmp_path_factory.mktemp("sweep") / "s"
    res = sweep(out)
    parts = {r.name: json.loads((r / "meta.json").read_text()).get("overhead", {}).get("parts", {})
             for r in (out / "runs").iterdir() if (r / "meta.json").is_file()}
    return out, res, parts


def test_sweep_runs_every_grid_point(first):
    out, res, _ = first
    assert res.returncode == 0, res.stderr[-3000:]
    runs = sorted(p.name for p in (out / "runs").iterdir())
    assert runs == ["w1", "w2"]
    for r in runs:
        meta = json.loads((out / "runs" / r / "meta.json").read_text())
        assert meta["complete"] and meta["emulation"] is False and meta["backend"] == "none"
    md = (out / "report.md").read_text()
    assert md.count("| localhost (unshaped) | 1 | int8@12.8% |") == 1 and md.count("| localhost (unshaped) | 2 | full-bf16 |") == 1
    stems = {p.stem for p in (out / "figures").glob("*.pdf")}
    assert {"phase_breakdown", "quality_vs_bytes", "timeline"} <= stems
    assert not {"seconds_vs_bandwidth", "link_throughput"} & stems   # unshaped: no bandwidth axis, no link counters


def test_rerun_skips_complete_points_and_redoes_incomplete_ones(first):
    out, _, _ = first
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


def test_each_run_of_a_sweep_is_timed_from_its_own_start(first):
    """The first run's fixed cost holds the process's start-up; the second's does not hold it (nor the
    first run, which the process ran before it)."""
    _, _, parts = first
    assert fixed_cost.STARTUP_PART in parts["w1"]
    assert fixed_cost.STARTUP_PART not in parts["w2"]


def test_sweep_prints_the_first_screen_and_where_the_report_is(first):
    out, res, _ = first
    assert "## Verdict" in res.stdout and "## Cells" not in res.stdout   # not all of report.md
    assert f"full report: {out / 'report.md'}" in res.stderr


def test_quiet_sweep_with_every_point_complete_says_so(first):
    out, _, _ = first
    res = sweep(out, "-q")
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"sweep: all 2 points were already complete; report: {out / 'report.md'}" in res.stderr
    assert res.stdout.strip() == str(out.resolve())   # -q prints the result folder, as `harness run -q` does


def test_report_names_planned_points_without_a_run_and_refuses_a_corrupt_sweep_json(first, tmp_path, capsys):
    out, _, _ = first
    copy = tmp_path / "s"
    shutil.copytree(out, copy)
    shutil.rmtree(copy / "runs" / "w2")
    assert commands.report_cmd([str(copy)], quiet=False) == 0
    note = "Sweep `s`: 1 of 2 planned points has no run folder: `w2`"
    assert note in capsys.readouterr().out and note in (copy / "report.md").read_text()   # on the first screen
    (copy / "sweep.json").write_text('{"runs": ["w1", ')
    with pytest.raises(ConfigError, match="sweep.json: not readable as JSON"):
        commands.report_cmd([str(copy)], quiet=True)


def test_report_names_run_folders_that_are_not_in_the_grid(first, tmp_path, capsys):
    """A point of an earlier grid left under runs/ was reported as one of this sweep's, unsaid."""
    out, _, _ = first
    copy = tmp_path / "s"
    shutil.copytree(out, copy)
    doc = json.loads((copy / "sweep.json").read_text())
    doc["runs"] = ["w1"]   # the grid as it is now: one point; w2 is an earlier grid's
    (copy / "sweep.json").write_text(json.dumps(doc))
    assert commands.report_cmd([str(copy)], quiet=False) == 0
    note = "Sweep `s`: 1 run folder under runs/ is not in its grid (an earlier grid's points): `w2`"
    assert note in capsys.readouterr().out and note in (copy / "report.md").read_text()


# ---- what a sweep refuses, before anything runs or is written ----------------------------------

GRID = "model: micro\nupdates: {updates}\nworkers: [1, 2]\nseeds: [1]\nmethod: int8\nemulation: false\n"


def plan(tmp_path: Path, updates: int, out: Path) -> list:
    grid = tmp_path / f"grid{updates}.yaml"
    grid.write_text(GRID.format(updates=updates))
    return commands.grid_configs(commands.load_grid(str(grid), {}), out), grid


def listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("complete", [True, False])
def test_resume_refuses_a_grid_that_changed_under_an_earlier_run(tmp_path, capsys, complete):
    """A run already in the sweep (complete or partial) made with other values than the grid's now:
    one line naming the point, the parameter and both values; exit 2; sweep.json untouched."""
    out = tmp_path / "sw1"
    before, _ = plan(tmp_path, 3, out)
    for cfg in before:   # the folders an earlier sweep left: config.json and meta.json as launch writes them
        cfg.run_dir.mkdir(parents=True)
        (cfg.run_dir / "config.json").write_text(json.dumps(cfg.to_json(), default=str))
        (cfg.run_dir / "meta.json").write_text(json.dumps({"complete": complete}))
    (out / "sweep.json").write_text(json.dumps({"runs": [c.run_id for c in before]}))
    kept = listing(out)
    _, grid = plan(tmp_path, 15, out)
    assert commands.sweep_command({}, str(grid), str(out), quiet=False, json_out=False) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"error: {out}/runs/w1 was run with --updates 3; the grid now says 15: use another --out "
                   "(or delete that run)")
    assert listing(out) == kept


def test_resume_of_the_same_grid_skips_only_complete_points(tmp_path):
    out = tmp_path / "sw"
    cfgs, _ = plan(tmp_path, 3, out)
    for cfg, complete in zip(cfgs, (True, False)):
        cfg.run_dir.mkdir(parents=True)
        (cfg.run_dir / "config.json").write_text(json.dumps(cfg.to_json(), default=str))
        (cfg.run_dir / "meta.json").write_text(json.dumps({"complete": complete}))
    assert commands.resume_plan(cfgs) == [True, False]
    # the same value written otherwise, in another folder under another id: the same run parameters
    planned = config.build(model="micro", bw="5Mbit", run_id="x", out_dir=str(out))
    recorded = config.build(model="micro", bw="5mbit", run_id="y", out_dir="elsewhere").to_json()
    assert commands.first_difference(planned, json.loads(json.dumps(recorded, default=str))) is None
    other = config.build(model="micro", bw="6mbit", run_id="x", out_dir=str(out)).to_json()
    assert commands.first_difference(planned, json.loads(json.dumps(other, default=str))) == ("--bw", "6mbit", "5Mbit")


@pytest.mark.parametrize("kind", ["run folder", "other files", "file", "under a file"])
def test_out_must_be_new_empty_or_a_sweep(tmp_path, capsys, kind):
    out = tmp_path / "out"
    if kind in ("file", "under a file"):
        out.write_text("notes\n")
        out = out / "s" if kind == "under a file" else out
    else:
        out.mkdir()
        (out / ("config.json" if kind == "run folder" else "notes.txt")).write_text("{}")
        (out / "report.md").write_text("a run's report")
    _, grid = plan(tmp_path, 2, out)
    kept = listing(tmp_path)
    assert commands.sweep_command({}, str(grid), str(out), quiet=False, json_out=False) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --out: ") and f"{out} " in err
    assert listing(tmp_path) == kept


@pytest.mark.parametrize("text", ["", "# a grid, to be written\n", "{}\n"])
def test_an_empty_grid_file_is_refused(tmp_path, text):
    grid = tmp_path / "g.yaml"
    grid.write_text(text)
    with pytest.raises(ConfigError, match=f"the grid file {grid} is empty"):
        commands.load_grid(str(grid), {})


def test_an_empty_grid_axis_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="bw: the axis is empty"):
        commands.sweep_configs({"model": "micro", "bw": []}, tmp_path)
