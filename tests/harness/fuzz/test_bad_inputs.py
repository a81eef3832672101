"""The bad traces, profiles, presets, grids and flags that once hung the controller, ended in a
traceback or were accepted as if valid, each run through the command a user types (in process, with
a timeout): every one is refused with one line naming the file, line or field, exit 2, and writes
nothing. The two that must be accepted (a one-value grid axis, a budget written two ways) are
checked for what they mean."""
from __future__ import annotations

import importlib
import json

import pytest
from typer.testing import CliRunner

from harness import cli
from harness.net import traces
from harness.run import commands, config
from trainers import spec

RUN = ["run", "--dry-run", "--model", "micro"]


@pytest.fixture
def files(tmp_path, monkeypatch):
    def write(name: str, text: str) -> str:
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    out = {"tmp": tmp_path, "file": write("afile", "x")}
    out["big"] = write("big.csv", "0,10\n1e12,5\n")
    out["tiny"] = write("tiny.csv", "0,10\n1e-9,5\n")
    out["small"] = write("small.csv", "0,10\n0.00001,5\n")
    out["huge"] = write("huge.csv", "0,10\n1,1e300\n")
    out["mahi"] = write("m.mahi", "1\n99999999999\n")
    monkeypatch.setattr(traces, "MAX_TRACE_ROWS", 1000)   # the cap's behaviour, on a file of seconds
    out["long"] = write("long.csv", "".join(f"{i},{1 + i % 7}\n" for i in range(1001)))
    for key in ("tiny", "huge"):
        out[f"p{key}"] = write(f"p{key}.yaml", f"name: p{key}\ndefaults: {{trace: {out[key]}}}\n")
    out["nullup"] = write("nullup.yaml", "name: nullup\ndefaults: {rate: 10mbit, up: {rate: 5mbit}}\n"
                                         "workers: {w1: {up: null}}\n")
    out["dup"] = write("dup.yaml", "name: dup\ndefaults:\n  rate: 10mbit\n  rate: 20mbit\n")
    out["deep"] = write("deep.yaml", "description: x\nvalues: " + "[" * 5000 + "]" * 5000 + "\n")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen2", "hidden_size": 10**9,
                                                   "num_hidden_layers": 2, "vocab_size": 64}))
    out["model"] = str(model)
    return out


# (case, argv built from the files, words the one line must hold)
CASES = [
    ("trace span 1e12 s: show", lambda f: ["traces", "show", f["big"]], "big.csv:2: time_s"),
    ("trace span 1e12 s: run", lambda f: RUN + ["--trace", f["big"]], "big.csv:2: time_s"),
    ("trace span 1e12 s: calibrate", lambda f: ["calibrate", "--profile", "paper-62.5mbit", "--trace", f["big"],
                                                "--dry-run"], "big.csv:2"),
    ("trace step 1e-9 s: run", lambda f: RUN + ["--trace", f["tiny"]], "tiny.csv:2"),
    ("trace step 1e-9 s: plan", lambda f: ["profiles", f["ptiny"], "--plan"], "tiny.csv:2"),
    ("trace step 1e-5 s: run", lambda f: RUN + ["--trace", f["small"]], "small.csv:2"),
    ("mahimahi 1e11 ms", lambda f: ["traces", "show", f["mahi"]], "m.mahi:2: timestamp"),
    ("trace rate 1e300", lambda f: RUN + ["--trace", f["huge"]], "huge.csv:2: rate_mbit_s"),
    ("trace rate 1e300: plan", lambda f: ["profiles", f["phuge"], "--plan"], "huge.csv:2: rate_mbit_s"),
    ("csv past the row cap", lambda f: ["traces", "show", f["long"]], "long.csv:1001: more than 1000 rows"),
    ("generate --seconds 1e9", lambda f: ["traces", "generate", "constant", f"{f['tmp']}/g.csv", "--seconds", "1e9"],
     "seconds:"),
    ("generate --step 1ns", lambda f: ["traces", "generate", "constant", f"{f['tmp']}/g.csv", "--step", "1ns"], "step:"),
    ("generate --mean 100gbit .mahi", lambda f: ["traces", "generate", "constant", f"{f['tmp']}/g.mahi", "--mean",
                                                 "100gbit"], "Mahimahi"),
    ("show --interval 1us --steps", lambda f: ["traces", "show", "cellular-lte.csv", "--interval", "1us", "--steps"],
     "interval"),
    ("generate --outage 0s", lambda f: ["traces", "generate", "outages", f"{f['tmp']}/g.csv", "--outage", "0s"],
     "outage:"),
    ("generate --seconds inf", lambda f: ["traces", "generate", "constant", f"{f['tmp']}/g.csv", "--seconds", "inf"],
     "seconds:"),
    ("generate --sd nan", lambda f: ["traces", "generate", "normal", f"{f['tmp']}/g.csv", "--sd", "nan"], "sd:"),
    ("generate into a missing folder", lambda f: ["traces", "generate", "constant", f"{f['tmp']}/no/g.csv"],
     "does not exist"),
    ("generate under a file", lambda f: ["traces", "generate", "constant", f"{f['file']}/g.csv"], "is not a folder"),
    ("convert into a missing folder", lambda f: ["traces", "convert", "cellular-lte.csv", f"{f['tmp']}/no/g.mahi"],
     "does not exist"),
    ("project --figures under a file", lambda f: ["project", "--model", "micro", "--compute-s", "10", "--figures",
                                                  f"{f['file']}/figs"], "--figures"),
    ("project --model hidden_size 1e9", lambda f: ["project", "--model", f["model"], "--compute-s", "10"],
     "hidden_size"),
    ("profile up: null", lambda f: ["profiles", f["nullup"], "--plan"], "workers.w1.up"),
    ("profile duplicate key", lambda f: ["profiles", f["dup"]], "line 4: key 'rate' is given twice"),
    ("--method rank-99999", lambda f: RUN + ["--method", "rank-99999"], "4096"),
    ("--budget 1.6%,1.60%", lambda f: RUN + ["--method", "spar", "--budget", "1.6%,1.60%"], "repeats a value"),
    ("--log bogus", lambda f: RUN + ["--log", "bogus"], "--log"),
    ("--budget-bytes 64", lambda f: RUN + ["--method", "spar", "--budget-bytes", "64"], "fixed overhead"),
    ("deeply nested preset", lambda f: RUN + ["--preset", f["deep"]], "nested too deeply"),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case, argv, words", CASES, ids=[c[0] for c in CASES])
def test_each_is_one_line_and_exit_2(files, case, argv, words):
    before = sorted(p.name for p in files["tmp"].iterdir())
    res = CliRunner().invoke(cli.app, argv(files))
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1, (res.exit_code, res.stderr[-2000:], res.stdout[-500:])
    assert words in lines[0], lines[0]
    assert sorted(p.name for p in files["tmp"].iterdir()) == before      # nothing written


def test_compose_settings_are_refused_in_one_line(files):
    containers = importlib.import_module("harness.run.containers.settings")   # the package exports a function of that name
    with pytest.raises(spec.SpecError, match="^WAN_EXTRA: 'run_id' is not a run parameter"):
        containers.values_from_env({"WAN_EXTRA": "run_id=x"})
    with pytest.raises(spec.SpecError) as err:       # TRACE= goes through the same reader as --trace
        containers.config_from_env({"TRACE": files["big"]})
    assert "big.csv:2: time_s" in str(err.value) and "\n" not in str(err.value)


def test_a_one_value_grid_axis_is_that_value(tmp_path):
    grid = tmp_path / "grid.yaml"
    grid.write_text("lr: [0.002]\nworkers: [1]\nseeds: [1]\nmodel: micro\nemulation: false\n")
    cfgs = commands.sweep_configs(commands.load_grid(str(grid), {}), tmp_path / "sweep")
    assert len(cfgs) == 1 and cfgs[0].lr == 0.002 and cfgs[0].workers == 1 and cfgs[0].seeds == (1,)


def test_a_budget_is_one_spelling():
    cfg = config.build(method="spar", budget="1.60%,12.80%", model="micro", emulation=False)
    assert [v.label for v in cfg.variants][:2] == ["spar@1.6%", "spar@12.8%"]


def test_a_schedule_of_a_thousand_changes_is_the_most():
    from harness.net import profiles

    changes = [{"at": f"{i}s", "rate": "1mbit"} for i in range(1001)]
    with pytest.raises(profiles.ProfileError, match=r"^p\.schedule: 1001 changes, more than 1000"):
        profiles.from_doc({"schedule": changes}, "p")
    assert len(profiles.from_doc({"schedule": changes[:3]}, "p").schedule) == 3
