"""Named presets (presets/*.yaml, harness/run/presets.py): data that sets run-spec values; flags win."""
import pytest
from typer.testing import CliRunner

from harness.run import config, launch, presets
from harness.cli import app
from trainers import spec


@pytest.mark.parametrize("name", presets.names())
def test_every_preset_loads_and_every_cell_validates(name):
    doc = presets.load(name)
    assert doc["description"] and "paper" in doc["scaling"].lower()
    # a preset that names its regime (--comm-ratio) shapes links: built with emulation (building touches nothing)
    cfg = config.build(preset=name, emulation="comm_ratio" in doc["values"])
    for key, value in doc["values"].items():
        expect = spec.parse_value(key, value)
        assert cfg.values[key] == expect, key
    for cell in cfg.cells:
        spec.RunParams(**cell.values)  # what every replica will receive
    # HiLo presets compare against the paper's full sync; a data-parallel one (lordo-stagnation) against one
    # of its own family, so that no HiLo cell runs and the report pairs the seeds against it
    dp = all(spec.is_data_parallel(m) for m in cfg.values["method"])
    assert (spec.is_data_parallel(cfg.values["baseline"]) if dp else cfg.values["baseline"] == "full-bf16")
    assert len(cfg.seeds) >= 3


def test_the_paper_presets_exist_and_a_flag_wins_over_the_preset():
    assert {"hilo-kk", "hilo-countdown"} <= set(presets.names())
    cfg = config.build(preset="hilo-kk", seed="7", workers="1", emulation=False)
    assert cfg.seeds == (7,) and cfg.values["workers"] == 1
    assert cfg.values["task"] == "knights_knaves" and cfg.values["budget"] == ("6.4%", "3.12%")
    assert config.build(emulation=False).values["task"] == spec.get("task").default  # no preset: the spec's


def test_bad_presets_fail_with_one_line(tmp_path):
    with pytest.raises(ValueError, match="unknown preset 'nope'; valid presets: .*hilo-kk"):
        config.build(preset="nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("description: x\nscaling: x\nvalues: {lora_rnak: 4}\n")
    with pytest.raises(ValueError, match="'lora_rnak' is not a run parameter"):
        config.build(preset=str(bad))
    bad.write_text("description: x\nvalues: {lora_rank: -4}\n")
    with pytest.raises(ValueError, match="--lora-rank"):
        config.build(preset=str(bad))
    result = CliRunner().invoke(app, ["run", "--preset", "nope", "--dry-run", "--out", str(tmp_path / "r")])
    assert result.exit_code == 2 and "unknown preset 'nope'" in result.output
    assert not (tmp_path / "r").exists()


def test_the_run_builds_each_pretrained_model_set_once_before_its_cells():
    """hilo-kk (3 variants x 3 seeds, distill): one base + teacher set; grpo with a pre-trained base:
    one; micro (never pre-trained), a random tiny base under grpo, or a data-parallel run: none."""
    kk = launch.models_to_build(config.build(preset="hilo-kk", emulation=False))
    assert len(kk) == 1 and (kk[0]["model"], kk[0]["base_steps"], kk[0]["teacher_steps"]) == ("tiny", 200, 1500)
    assert len(launch.models_to_build(config.build(preset="hilo-countdown", emulation=False))) == 1
    assert launch.models_to_build(config.build(model="micro", emulation=False)) == []
    assert launch.models_to_build(config.build(objective="grpo", base_steps="0", emulation=False)) == []
    assert len(launch.models_to_build(config.build(objective="distill", base_steps="0", emulation=False))) == 1
    assert launch.models_to_build(config.build(method="diloco", baseline="ddp", emulation=False)) == []


def test_a_dry_run_says_which_models_the_run_builds_first(tmp_path):
    """hilo-kk builds a base and a 1500-step teacher before its first cell (an hour on a small box the first
    time): its dry run says so, and where they are cached; a micro run builds none there."""
    result = CliRunner().invoke(app, ["run", "--preset", "hilo-kk", "--dry-run", "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    [line] = [x for x in result.stdout.splitlines() if x.startswith("models: ")]
    assert line.startswith("models: before the first cell, the tiny base for knights_knaves (200 supervised steps) "
                           "and its distill teacher (1500 steps) are built, or found cached under ")
    micro = CliRunner().invoke(app, ["run", "--model", "micro", "--dry-run", "--no-emulation"])
    assert micro.exit_code == 0 and "models: " not in micro.stdout
