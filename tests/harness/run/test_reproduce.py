"""`harness reproduce`: a paper figure as one sweep (presets/reproduce/*.yaml); the figure itself is
tested on a recorded sweep (tests/harness/results/test_regime_report.py)."""
from typer.testing import CliRunner

from harness.cli import app
from harness.run import commands, reproduce


def test_the_reproduction_grid_is_twelve_runs_and_a_bad_name_is_one_line(tmp_path):
    doc = reproduce.load("hilo-speed")
    cfgs = commands.sweep_configs(commands.load_grid(None, {"seed": "1"}, doc=doc["grid"]), out=tmp_path)
    assert len(cfgs) == 12 and {c.pipeline for c in cfgs} == {0, 1}
    assert sorted({round(c.comm_ratio_target, 2) for c in cfgs}) == [0.1, 0.3, 1.0, 1.34, 3.0, 6.0]
    assert all(c.seeds == (1,) and c.eval_problems == 0 for c in cfgs)
    res = CliRunner().invoke(app, ["reproduce", "nope"])
    assert res.exit_code == 2 and "unknown figure 'nope'; valid: hilo-speed" in res.output
