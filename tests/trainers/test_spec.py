"""The run spec (trainers/spec.py) is the one place a run parameter is declared: every surface
(CLI help, RunConfig, config.json, the learner's argv, RunParams/WELCOME, results columns, sweep
keys) is derived from it, with the same default; and the vocabularies the spec holds so that the
controller need not import torch agree with the registries that own them."""
import argparse
import json

import pytest
import typer
from typer.testing import CliRunner

from harness import cli

from harness.run import commands, config
from trainers import cards, spec
from trainers.hilo.methods import get_method


def _defaults_cfg():
    return config.build()  # validating needs no root: nothing is built


@pytest.mark.parametrize("p", spec.PARAMS, ids=[p.name for p in spec.PARAMS])
def test_every_parameter_reaches_every_surface_with_one_default(p):
    result = CliRunner().invoke(cli.app, ["run", "--help"], env={"COLUMNS": "300"})
    assert p.flag in result.stdout
    cfg = _defaults_cfg()
    assert cfg.values[p.name] == p.default
    doc = cfg.to_json()
    key = p.flag_name or p.name
    assert doc[key] == (list(p.default) if p.many else p.default)
    if p.where != "service":
        return
    cell = cfg.cells[0]
    argv = cell.argv
    parser = argparse.ArgumentParser()
    spec.add_run_args(parser, required=True)
    params = spec.run_params_from_args(parser.parse_args(argv))
    expected = cell.values[p.name]
    assert getattr(params, p.name) == expected
    assert spec.RunParams.from_json(json.loads(json.dumps(params.to_json()))) == params  # WELCOME round trip
    assert spec.RunParams().to_json()[p.name] == p.service_default


def test_a_new_parameter_is_one_line_in_the_spec(monkeypatch, tmp_path):
    knob = spec.Param("knob_count", int, 7, "a parameter added for this test", lo=1, hi=99)
    monkeypatch.setattr(spec, "PARAMS", [*spec.PARAMS, knob])
    app = typer.Typer()
    cli.spec_command("run", cli.RUN_BODY, cli.RUN_EXTRA, cli.RUN_DOC, target=app)
    help_text = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "300"}).stdout
    assert "--knob-count" in help_text and "a parameter added for this test" in help_text
    res = CliRunner().invoke(app, ["--dry-run", "--no-emulation", "--knob-count", "9", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert '"knob_count": 9' in res.stdout                  # config.json
    assert "--knob-count 9" in res.stdout                    # the learner's argv
    res = CliRunner().invoke(app, ["--dry-run", "--no-emulation", "--knob-count", "100"])
    assert res.exit_code == 2 and "--knob-count: '100' is outside [1, 99]" in res.stderr
    cfg = config.build(emulation=False, knob_count="5")
    parser = argparse.ArgumentParser()
    spec.add_run_args(parser, required=True)
    params = spec.run_params_from_args(parser.parse_args(cfg.cells[0].argv))
    assert params.knob_count == 5 and spec.RunParams().knob_count == 7
    grid = commands.load_grid(None, {"knob_count": "3,4", "emulation": False})
    assert [c.run_id for c in commands.sweep_configs(grid, tmp_path)] == ["knob_count3", "knob_count4"]


def test_sweep_axes_and_run_names_come_from_the_spec(tmp_path):
    grid = commands.load_grid(None, {"workers": "1,2", "bw": "10mbit,20mbit", "method": "spar,topk", "seed": "1,2"})
    cfgs = commands.sweep_configs(grid, tmp_path)
    assert [c.run_id for c in cfgs] == ["bw10mbit-w1", "bw10mbit-w2", "bw20mbit-w1", "bw20mbit-w2"]
    assert all(c.seeds == (1, 2) and [v.method for v in c.variants] == ["spar", "topk", "full-bf16"] for c in cfgs)
    path = tmp_path / "grid.yaml"
    path.write_text("seeds: [3]\nlora_rank: [4, 16]\n")
    cfgs = commands.sweep_configs(commands.load_grid(str(path), {}), tmp_path)
    assert [(c.run_id, c.lora_rank, c.seeds) for c in cfgs] == [("lora_rank4", 4, (3,)), ("lora_rank16", 16, (3,))]


def test_compressor_options_come_from_the_spec_and_reach_the_compressor():
    cfg = config.build(method="spar,powersgd", spar_sketch="16", powersgd_rank="3", budget="0.78%", emulation=False)
    by_method = {c.variant.method: spec.RunParams(**c.values) for c in cfg.cells}
    spar = get_method("spar", **by_method["spar"].compressor_options()).make_compressor()
    assert spar.config["sketch"] == 16 and spar.config["budget"] == "0.78%"
    assert get_method("powersgd", **by_method["powersgd"].compressor_options()).make_compressor().config["rank"] == 3
    assert by_method["full-bf16"].compressor_options() == {}


def test_one_budget_syntax():
    assert spec.parse_budget("1.6%") == pytest.approx(0.016)
    for bad in ("0.016", 0.016, "0%", "101%", "1e-30%", "nan%", "%"):
        with pytest.raises(spec.SpecError, match="--budget"):
            spec.parse_budget(bad)


def test_run_params_reject_unknown_and_out_of_range_values():
    with pytest.raises(spec.SpecError, match="unknown run parameters"):
        spec.RunParams(colour="red")
    with pytest.raises(spec.SpecError, match="--pipeline"):
        spec.RunParams(pipeline=2)
    with pytest.raises(spec.SpecError, match="--method: unknown method"):
        spec.RunParams(method="nope")
    with pytest.raises(AttributeError):
        spec.RunParams().workers = 3


def test_torch_free_vocabularies_agree_with_their_registries():
    """In-tree names against the registries' own modules; installed plugins' names (read torch-free
    from entry points) against what the registries load."""
    from trainers import compress, dataparallel, objectives, tasks
    from trainers.hilo import methods
    from trainers.model import models
    from trainers.compress.base import BudgetedCompressor, Compressor

    assert sorted(models.available_models()) == sorted(spec.MODEL_NAMES)
    named = {kind: [c.name for c in cards.in_tree(kind)] for kind in ("objective", "task", "dataparallel", "method")}
    assert objectives.in_tree() == named["objective"] == ["distill", "grpo"]
    assert tuple(objectives.available()) == spec.objective_names() == spec.get("objective").choices
    assert named["method"] == ["delta", "full", "full-bf16", "rank-R"]
    assert [methods.get_method(n).name for n in ("delta", "full", "full-bf16", "rank-2")] == \
        ["delta", "full", "full-bf16", "rank-2"]
    assert compress.in_tree() == sorted(spec.COMPRESSOR_OPTIONS)
    assert compress.available() == spec.compressor_names()
    assert dataparallel.in_tree() == named["dataparallel"] == ["ddp", "diloco", "lordo-global", "lordo-local",
                                                               "lowrank-ddp", "lowrank-ddp-dense", "lowrank-ddp-projected"]
    assert all(spec.is_data_parallel(n) for n in dataparallel.available())
    assert set(tasks.available()) >= set(named["task"]) == {"digits", "countdown", "knights_knaves"}
    assert Compressor.common_options == spec.COMMON_OPTIONS
    assert BudgetedCompressor.budget_options == spec.BUDGET_OPTIONS
    for name in compress.available():
        cls = compress.compressor_class(name)
        assert issubclass(cls, BudgetedCompressor) == (name in spec.budgeted_names()), name
        if name in spec.COMPRESSOR_OPTIONS:
            assert cls.options == spec.COMPRESSOR_OPTIONS[name]
    assert sorted(methods.available()) == sorted(spec.method_names())


def test_backend_names_agree_with_the_shaper():
    from harness.net import backend

    assert tuple(spec.BACKENDS) == tuple(backend.BACKENDS)


def test_held_out_sample_count_must_cover_pass_at_k():
    assert spec.RunParams(eval_samples=8, pass_k=4).pass_k == 4
    with pytest.raises(spec.SpecError, match=r"--eval-samples: 6 must be at least 2 x --pass-k \(4\)"):
        spec.RunParams(eval_samples=6, pass_k=4)
