"""The example plugin (examples/wan-harness-randk), installed, reached only through its entry point.

Nothing here imports it by path: the harness finds `randk` in the installed distributions'
metadata (trainers/plugins.py) and every surface takes the name from there. The README's test
command installs it (`pip install -e '.[test]' -e examples/wan-harness-randk`)."""
from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata

import pytest

from trainers import plugins, spec

NAME, DIST = "randk", "wan-harness-randk"


@pytest.fixture(scope="module", autouse=True)
def installed():
    eps = {ep.name: ep for ep in metadata.entry_points(group="wan_harness.budgeted_compressors")}
    if NAME not in eps:
        pytest.fail(f"{DIST} is not installed: pip install -e examples/{DIST} (the README's test command does)")
    assert eps[NAME].dist.name == DIST


def test_the_controller_knows_the_name_without_torch_or_the_plugin():
    code = ("import sys; from trainers import spec; from harness.run import config; "
            "spec.check_method('randk'); "
            "print(spec.takes_budget('randk'), spec.variant_label('randk', '1.6%'), "
            "'torch' in sys.modules, 'wan_harness_randk' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "randk@1.6%", "False", "False"]
    assert NAME in spec.method_names() and plugins.source("compressor", NAME) == f"{DIST} 0.1.0"


def test_a_run_config_takes_it_at_every_budget():
    from harness.run import config

    cfg = config.build(method="randk,identity", budget="1.6%,6.25%", model="micro", emulation=False)
    assert [v.label for v in cfg.variants] == ["randk@1.6%", "randk@6.25%", "identity", "full-bf16"]
    opts = spec.compressor_options("randk", next(c.values for c in cfg.cells if c.variant == cfg.variants[1]))
    assert set(opts) == {*spec.COMMON_OPTIONS, *spec.BUDGET_OPTIONS} and opts["budget"] == "6.25%"


def test_it_keeps_the_compressor_contract():
    from trainers.compress import contract

    checks = ("round_trip", "fresh_decode", "deterministic", "bytes", "error_feedback", "state")
    assert contract.run(NAME, checks=checks) == dict.fromkeys(checks)


def test_hilo_builds_it_as_a_replay_method_from_the_run_parameters():
    from trainers.hilo import methods

    params = spec.RunParams(method=NAME, budget="5%", model="micro")
    method = methods.get_method(params.method, **params.compressor_options())
    assert method.replay and method.compressor == NAME
    c = method.make_compressor()
    assert type(c).__module__ == "wan_harness_randk" and c.config["budget"] == "5%"


def test_harness_check_passes_it_and_names_the_plugin():
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "check", NAME], capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert f"compressor {NAME} (plugin: {DIST} 0.1.0)" in proc.stdout
    assert proc.stdout.count("PASS") == 8 and "every check passed" in proc.stdout  # the 8 of contract.CHECKS


def test_harness_project_asks_it_for_its_bytes():
    """The cost model has no rule for randk: it asks the compressor (stated_bytes), and a real payload
    of that layout fills the stated cap."""
    from harness.projection import costmodel as cm, inputs
    from trainers.compress import get_compressor
    from trainers.compress.bench import synthetic_gradients

    adapter = inputs.adapter_for("tiny", 8)
    projected = cm.payload_bytes(NAME, adapter, "1.6%")
    payload = get_compressor(NAME, budget="1.6%").encode(synthetic_gradients(dict(adapter.tensors)))
    assert projected == int(0.016 * adapter.nbytes("bf16")) and 0.9 * projected <= len(payload) <= projected
    row, = [p for p in cm.compare([(NAME, "1.6%")], "full-bf16", adapter, cm.Network.uniform(2, 62.5e6),
                                  cm.Compute(8.0, 6.0)) if p.method == NAME]
    assert row.payload_bytes == projected and row.variant == "randk@1.6%"
