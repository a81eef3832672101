"""Named presets (presets/*.yaml, harness/presets.py): data that sets run-spec values; flags win."""
import pytest
from typer.testing import CliRunner

from harness import config, launch, presets
from harness.cli import app
from trainers import spec


@pytest.mark.parametrize("name", presets.names())
def test_every_preset_loads_and_every_cell_validates(name):
    doc = presets.load(name)
    assert doc["description"] and "paper" in doc["scaling"].lower()
    cfg = config.build(preset=name, emulation=False)
    for key, value in doc["values"].items():
        expect = spec.parse_value(key, value)
        assert cfg.values[key] == expect, key
    for cell in launch.cells(cfg):
        spec.RunParams(**cfg.service_values(cell.variant, cell.seed))  # what every replica will receive
    assert cfg.values["baseline"] == "full-bf16" and len(cfg.seeds) >= 3


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
