"""The fixed cost a run reports (launch.overhead): its wall seconds split into training loops, the held-out
evaluations outside them and the harness's own rest, from a recorded run folder."""
import datetime as dt
import json
from pathlib import Path

from harness.results import tables
from harness.run import launch

RUN = Path(__file__).resolve().parents[2] / "fixtures" / "runs" / "run-heldout"


def test_a_runs_seconds_split_into_loop_evaluations_and_the_rest():
    t = tables.read(RUN)
    meta = json.loads((RUN / "meta.json").read_text())
    end = dt.datetime.fromisoformat(meta["finished_utc"])
    o = launch.overhead(RUN, t, now=end)
    assert o["run_s"] == (end - dt.datetime.fromisoformat(meta["started_utc"])).total_seconds()
    spans = t.updates.groupby("cell").agg(a=("t_start_s", "min"), b=("t_end_s", "max"))
    assert o["loop_s"] == float((spans["b"] - spans["a"]).sum()) > 0
    assert 0 < o["eval_outside_loop_s"] <= t.evals["eval_s"].sum()
    assert o["overhead_s"] == o["run_s"] - o["loop_s"] - o["eval_outside_loop_s"]
    line = launch.overhead_line(o)
    assert line.startswith(f"harness overhead: {o['overhead_s']:.1f} s outside the training loop (")


def test_a_folder_without_a_start_time_reports_nothing(tmp_path):
    (tmp_path / "meta.json").write_text("{}")
    assert launch.overhead(tmp_path, tables.read(RUN)) is None


def test_the_report_states_the_fixed_cost_meta_json_holds(tmp_path):
    """report.md's run line carries the overhead meta.json records: the cost until the report on the
    run's first write (the report's own writing comes after), the whole cost on a rebuild."""
    import shutil

    from harness.results import report

    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    meta = json.loads((run / "meta.json").read_text())
    for until, says in (("report", "until this report"), (None, "outside the training loops (")):
        cost = {"run_s": 200.0, "loop_s": 150.0, "eval_outside_loop_s": 10.0, "overhead_s": 40.0}
        (run / "meta.json").write_text(json.dumps({**meta, "overhead": {**cost, **({"until": until} if until else {})}}))
        report.write(run)
        text = (run / "report.md").read_text()
        line = next(x for x in text.splitlines() if "harness overhead" in x)
        assert "40.0 s of the run's 200.0 s" in line and "(20%)" in line and says in line
        assert ("until this report" in line) == (until == "report")
