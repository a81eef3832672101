"""`harness project`'s flags come from one table of spec Params (harness/projection/params.py): the run
parameters it shares with `harness run` are the spec's entries, every flag is in the help with its unit and
range, and a bad value is one line naming the flag with exit 2."""
from __future__ import annotations

import dataclasses

import pytest
from typer.testing import CliRunner

from harness import cli
from harness.projection import params
from trainers import spec

# what a projection changes in a shared run parameter, and why (params.py says the same)
CHANGED = {"model": {"default", "help"},               # a scale this box cannot run; with --from: the run's
           "workers": {"hi", "help"},                  # a projection reaches scales a run cannot start
           "profile": {"default", "optional", "help"},  # none: the links as --bw/--delay/--loss say
           "pipeline": {"default", "many", "help"},     # a row per depth
           "lora_rank": {"default", "help"}, "method": {"default", "help"},   # not given: harness run's or --from's
           "budget": {"default", "help"}, "baseline": {"default", "help"}}


@pytest.mark.parametrize("p", params.PARAMS, ids=[p.name for p in params.PARAMS])
def test_a_shared_run_parameter_is_the_specs_own_entry(p):
    try:
        run = spec.get(p.name)
    except KeyError:
        assert p.name not in CHANGED
        return
    differs = {f.name for f in dataclasses.fields(p) if getattr(p, f.name) != getattr(run, f.name)}
    assert differs == CHANGED.get(p.name, set()), differs
    if "help" in differs:
        assert run.help.rstrip(".") in p.help or p.name == "profile"


def test_workers_default_is_harness_runs():
    assert params.BY_NAME["workers"].default == spec.get("workers").default


def test_every_flag_is_in_the_help_with_its_unit_and_range():
    text = " ".join(CliRunner().invoke(cli.app, ["project", "--help"], env={"COLUMNS": "300"}).stdout.split())
    for p in params.PARAMS:
        assert p.flag in text
        if p.unit:
            assert f"[unit: {p.unit}]" in text, p.flag
    assert "[range: 576..65535]" in text and "[range: 1..1048576]" in text


@pytest.mark.parametrize("args, line", [
    (["--mtu", "100"], "--mtu: '100' is outside [576, 65535] bytes"),
    (["--cc", "vegas"], "--cc: 'vegas' is not one of cubic, reno, bbr"),
    (["--compute-s", "0"], "--compute-s: '0' is outside [1e-06, 1000000] s"),
    (["--compute-s", "nan"], "--compute-s: 'nan' is not a finite number"),
    (["--rollout-share", "1.5", "--compute-s", "1"], "--rollout-share: '1.5' is outside [0, 1]"),
    (["--shared-cores", "two", "--compute-s", "1"], "--shared-cores: 'two' is not an integer"),
    (["--workers", "0", "--compute-s", "1"], "--workers: '0' is outside [1, 1048576]"),
    (["--relay-fanout", "0", "--compute-s", "1"], "--relay-fanout: '0' is outside [1, 1048576]"),
    (["--rollout-s", "0", "--train-s", "0"], "--rollout-s/--train-s: both 0 leave no compute per update"),
])
def test_a_bad_project_flag_is_one_line_and_exit_2(args, line):
    res = CliRunner().invoke(cli.app, ["project", *args])
    assert res.exit_code == 2 and res.output == f"error: {line}\n", res.output


def test_parse_fills_the_defaults_and_keeps_run_defaults_for_later():
    values = params.parse({"pipeline": "1,0", "shared_cores": "none", "budget": "1.60%"})
    assert values["pipeline"] == (1, 0) and values["shared_cores"] is None and values["budget"] == ("1.6%",)
    assert values["workers"] == 2 and values["mtu"] == 1500 and values["send"] == "blocking"
    assert values["method"] is None and values["lora_rank"] is None   # source.defaults fills them
