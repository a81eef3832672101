"""Plugins that take in-tree names, break the name grammar, clash, hang, exit, raise or decode NaN
(tests/examples/bad_plugins.py: real distributions found through their metadata): each is ignored or
refused with one line naming its distribution, `harness check` always prints its summary, and no
surface shows a traceback."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.examples import bad_plugins

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return bad_plugins.build(tmp_path_factory.mktemp("site"))


def python(site, code: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=bad_plugins.env(site),
                          cwd=bad_plugins.ROOT, timeout=timeout)


def harness(site, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True,
                          env=bad_plugins.env(site), cwd=bad_plugins.ROOT, timeout=timeout)


def test_in_tree_names_are_reserved_and_bad_names_ignored_with_a_warning_naming_the_distribution(site):
    code = ("import json; from trainers import spec; "
            "values = {**spec.RunParams(method='full-bf16').to_json()}; "
            "print(json.dumps([spec.compressor_names(), spec.compressor_options('full-bf16', values), "
            "spec.check_method('full-bf16'), spec.check_method('nanout')]))")
    done = python(site, code)
    assert done.returncode == 0, done.stderr
    names, options, *_ = json.loads(done.stdout)
    assert "nanout" in names and "full-bf16" not in names and "x@1%" not in names
    assert options == {}   # the full method's: no compressor options (the plugin's would have broken the learner)
    warnings = done.stderr.splitlines()
    assert "warning: plugin 'full-bf16' of wan-bad 0.1 is ignored: 'full-bf16' is an in-tree name (the in-tree " \
           "one is used)" in warnings
    assert any(w.startswith("warning: plugin 'x@1%' of wan-bad 0.1 is ignored: a name is lower-case") for w in warnings)
    assert len(warnings) == len(set(warnings))   # once per process
    assert "Traceback" not in done.stderr


def test_the_in_tree_compressor_is_built_for_its_name_not_the_plugin(site):
    done = python(site, "from trainers.compress import get_compressor; print(type(get_compressor('spar')).__module__)")
    assert done.returncode == 0 and done.stdout.split() == ["trainers.compress.spar"], done.stderr


def test_one_name_from_two_distributions_is_an_error_naming_both(site):
    done = python(site, "from trainers import spec; spec.check_method('twin')")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert "SpecError: --method: plugin name 'twin' is offered by 2 distributions: wan-bad 0.1 " \
           "(wan_bad_plugins:Shadow) and wan-twin 0.2 (wan_twin_plugin:Other)" in last
    done = harness(site, "run", "--method", "twin", "--no-emulation", "--dry-run")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "wan-bad 0.1" in done.stderr and "wan-twin 0.2" in done.stderr


def test_check_refuses_reserved_bad_and_clashing_names_naming_their_distributions(site):
    done = harness(site, "check", "full-bf16", "x@1%", "twin")
    out = done.stdout
    assert done.returncode == 1 and "Traceback" not in out + done.stderr, out + done.stderr
    assert out.splitlines() == [
        "plugin full-bf16",
        "  FAIL refused: plugin 'full-bf16' of wan-bad 0.1 is ignored: 'full-bf16' is an in-tree name (the in-tree "
        "one is used)",
        "plugin twin",
        "  FAIL refused: plugin name 'twin' is offered by 2 distributions: wan-bad 0.1 (wan_bad_plugins:Shadow) and "
        "wan-twin 0.2 (wan_twin_plugin:Other); uninstall all but one",
        "plugin x@1%",
        "  FAIL refused: plugin 'x@1%' of wan-bad 0.1 is ignored: a name is lower-case letters and digits joined by "
        "'-' or '_', like the in-tree names",
        "3 check(s) failed"]


@pytest.mark.slow   # three children that import torch (~1 min on a busy 2-core box)
def test_check_survives_a_plugin_that_hangs_exits_or_raises_and_prints_its_summary(site):
    done = harness(site, "check", "exits", "raises", "--timeout", "300")
    out = done.stdout
    assert done.returncode == 1 and "Traceback" not in out + done.stderr, out + done.stderr
    lines = out.splitlines()
    assert lines[:3] == ["compressor exits (plugin: wan-bad 0.1)",
                         "  FAIL runs: its process ended (exit code 7) before reporting: no output",
                         "compressor raises (plugin: wan-bad 0.1)"], out
    raised = lines[3:-1]   # each contract check that builds it fails with the reason
    assert raised and all(line.startswith("  FAIL ") and line.endswith("RuntimeError: this compressor cannot be built")
                          for line in raised), out
    assert lines[-1] == f"{1 + len(raised)} check(s) failed", out
    done = harness(site, "check", "hangs", "--timeout", "5")
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr
    assert done.stdout.splitlines() == ["compressor hangs (plugin: wan-bad 0.1)",
                                        "  FAIL runs: did not finish within 5 s (its processes were killed)",
                                        "1 check(s) failed"]
    assert not bad_plugins_running()


def bad_plugins_running() -> list[str]:
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "trainers.check --child hangs" in line]


def test_a_payload_that_decodes_to_nan_is_refused_with_a_reason(site):
    code = ("from trainers.compress import get_compressor, PayloadError\n"
            "from trainers.compress.bench import synthetic_gradients\n"
            "import torch\n"
            "c = get_compressor('nanout')\n"
            "msg = c.encode({'a': torch.ones(4, 2), 'b': torch.ones(2, 4)})\n"
            "try:\n    c.decode(msg)\nexcept PayloadError as e:\n    print(e)\n")
    done = python(site, code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "nanout: the payload decodes to non-finite values (NaN or inf) in a; refused"


def test_a_run_whose_compressor_decodes_nan_stops_at_once_with_the_reason(site, tmp_path):
    """The learner decodes its own update before stepping: NaN is refused there, never sent, and the run
    ends "failed" with the reason (it used to crash the worker's sampling and wait out --worker-timeout)."""
    done = harness(site, "run", "--method", "nanout", "--baseline", "none", "--no-emulation", "--model", "micro",
                   "--updates", "2", "--workers", "1", "--seeds", "1", "--objective", "grpo", "--max-new-tokens", "4",
                   "--comm-ratio", "off", "--worker-timeout", "600", "--out", str(tmp_path), "--run-id", "nan",
                   "--quiet")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    meta = json.loads((tmp_path / "nan" / "meta.json").read_text())
    assert meta["status"] == "failed" and len(meta["errors"]) == 1, meta
    assert meta["errors"][0].startswith("nanout-s1: interrupted: update 1 refused: nanout: the payload decodes to "
                                        "non-finite values (NaN or inf) in ")
    cell = tmp_path / "nan" / "cells" / "nanout-s1"
    assert "Traceback" not in (cell / "learner.log").read_text() + (cell / "w1.log").read_text()
    told = (cell / "w1.log").read_text().splitlines()[-1]   # the worker was told why, not left waiting
    assert told.startswith("[w1] stopped by the learner: learner stopped: update 1 refused: nanout: "), told
