"""`harness doctor` and the preflight of `harness run` / `calibrate`.

On this machine without the iptables package (a PATH holding every binary but iptables-*), the
doctor prints one line per missing binary saying what to install and exits 2, and a run or a
calibration that needs them stops the same way before anything is built (checked in a private
mount + network namespace, so other sessions' runs on this machine do not disturb the comparison).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.net import doctor, profiles

ROOT = Path(__file__).resolve().parents[3]
HARNESS = [sys.executable, "-m", "harness.cli"]
MISSING = ["missing iptables-restore: apt-get install iptables", "missing iptables-save: apt-get install iptables"]


# ---- pure parts ------------------------------------------------------------------------------

def test_a_kernel_feature_is_judged_from_config_modules_and_what_is_loaded():
    feat = doctor.Feature("frobnicator", ("CONFIG_FROB",), ("sch_frob_harness_test",))
    assert doctor.feature_problem(feat, {"CONFIG_FROB": "y"}, set()) is None
    assert doctor.feature_problem(feat, {"CONFIG_FROB": "m"}, {"sch_frob_harness_test"}) is None
    assert doctor.feature_problem(feat, {"CONFIG_FROB": "m"}, None) is None          # modules unknown: assume
    assert doctor.feature_problem(feat, None, None) is None                          # nothing can tell
    line = doctor.feature_problem(feat, {"CONFIG_FROB": "m"}, {"veth"})
    assert line == f"missing kernel module sch_frob_harness_test (frobnicator): apt-get install linux-modules-extra-{os.uname().release}"
    assert doctor.feature_problem(feat, {}, set(), ", or use --backend fallback") == (
        "missing kernel feature frobnicator: CONFIG_FROB is not set; boot a kernel built with it, or use --backend fallback")
    loaded = doctor.Feature("namespaces", ("CONFIG_NOPE",), proc=(("/proc/self/ns/net", None),))
    assert doctor.feature_problem(loaded, {}, set()) is None                         # shown in /proc


def test_iptables_is_needed_only_where_the_plan_loads_rules():
    rate_only = profiles.load("paper-62.5mbit")
    lossy = profiles.from_doc({"defaults": {"rate": "10mbit", "loss": "1%"}}, "x")
    later = profiles.from_doc({"defaults": {"rate": "10mbit"}, "schedule": [{"at": "5s", "delay": "20ms"}]}, "y")
    assert not rate_only.impaired(2) and lossy.impaired(2) and later.impaired(2)
    assert not doctor.needs_rules("fallback", rate_only.impaired(2))
    assert doctor.needs_rules("fallback", lossy.impaired(2)) and doctor.needs_rules("fallback", later.impaired(2))
    assert not doctor.needs_rules("netem", lossy.impaired(2))
    assert doctor.needs_rules("fallback", None)                                      # doctor alone: any run


def test_the_preflight_asks_for_iptables_exactly_where_the_fallback_plan_has_rules():
    """The preflight reads the links (Profile.impaired); the plan is what the run loads: they agree on
    every shipped profile, a burst-loss, a learner-only and a one-worker profile, at every time of each schedule."""
    from harness.net.plan import build_plan
    from harness.net.topology import Topology

    extra = [profiles.load(Path(__file__).with_name("ge-burst.yaml")),
             profiles.from_doc({"defaults": {"rate": "10mbit"}, "learner": {"jitter": "1ms", "delay": "2ms"}}, "l"),
             profiles.from_doc({"defaults": {"rate": "10mbit"}, "workers": {"w3": {"loss": "1%"}}}, "w")]
    for prof in [profiles.load(name) for name in profiles.list_profiles()] + extra:
        for workers in (1, 3):
            planned = any(op["op"] == "iptables" for at_s in [0.0, *prof.change_times()]
                          for op in build_plan(prof, Topology.plan("0000", workers), "fallback", at_s=at_s).ops)
            assert doctor.needs_rules("fallback", prof.impaired(workers)) == planned, (prof.name, workers)


def test_the_checks_name_what_they_found(tmp_path):
    report = doctor.check("netem", impaired=profiles.load("paper-62.5mbit").impaired(2), out_dir=tmp_path / "not" / "yet")
    assert report.backend.name == "netem" and report.backend.source == "requested"
    assert any(line.startswith("disk: ") for line in report.ok)
    assert "binaries: none needed (every kernel change goes through netlink)" in report.ok
    assert all("\n" not in line for line in report.problems + report.ok)


def test_doctor_does_not_import_torch():
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom harness.cli import app\n"
            "CliRunner().invoke(app, ['doctor'])\nprint(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.stdout.strip().splitlines()[-1] == "[]", res.stderr


def test_a_bad_backend_is_a_usage_error():
    res = subprocess.run(HARNESS + ["doctor", "--backend", "tbf"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.strip() == "error: --backend: 'tbf' is unknown (valid: netem, fallback)"


def test_the_limits_are_checked_for_the_workers_asked():
    res = subprocess.run(HARNESS + ["doctor", "--workers", "5"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "for 5 workers" in res.stdout + res.stderr, res.stdout + res.stderr
    bad = subprocess.run(HARNESS + ["doctor", "--workers", "0"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--workers" in bad.stderr


# ---- this machine without the iptables package -------------------------------------------------

@pytest.fixture
def path_without_iptables(tmp_path):
    """A PATH whose folder links every binary of the current PATH except iptables-*."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for part in os.environ["PATH"].split(os.pathsep):
        if os.path.isdir(part):
            for name in os.listdir(part):
                if not name.startswith("iptables") and not (folder / name).exists():
                    (folder / name).symlink_to(os.path.join(part, name))
    return str(folder)


SANDBOXED = r"""
import json, os, subprocess, sys
def snap():
    return {d: sorted(os.listdir(d)) if os.path.isdir(d) else None for d in ("/run/netns", "/run/wan-harness")}
before = snap()
argv, path = json.loads(sys.argv[1]), sys.argv[2]
res = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, PATH=path))
print(json.dumps({"rc": res.returncode, "stdout": res.stdout, "stderr": res.stderr, "unchanged": snap() == before}))
"""


def _sandboxed(argv, path):
    """Run ``argv`` with ``path`` as PATH in a private mount + network namespace (its own /run)."""
    script = f"mount -t tmpfs none /run && exec {sys.executable} -c '{SANDBOXED}' '{json.dumps(argv)}' '{path}'"
    res = subprocess.run(["unshare", "--mount", "--net", "sh", "-c", script], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


@pytest.mark.root
def test_doctor_without_iptables_says_what_to_install_and_exits_2(path_without_iptables):
    res = subprocess.run(HARNESS + ["doctor", "--backend", "fallback"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, PATH=path_without_iptables))
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == MISSING
    assert "ok: root" in res.stdout
    full = subprocess.run(HARNESS + ["doctor", "--backend", "fallback"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert full.returncode == 0 and full.stderr == "", full.stderr     # the same machine with the package


@pytest.mark.root
@pytest.mark.parametrize("argv", [
    ["run", "--loss", "5%", "--backend", "fallback", "--model", "micro", "--out", "/tmp/harness-doctor-test"],
    ["run", "--delay", "20ms", "--backend", "fallback", "--model", "micro", "--out", "/tmp/harness-doctor-test"],
    ["calibrate", "--profile", "transatlantic", "--backend", "fallback", "--out", "/tmp/harness-doctor-test"],
], ids=["run-loss", "run-delay", "calibrate"])
def test_run_and_calibrate_stop_before_building_anything(path_without_iptables, argv):
    res = _sandboxed(HARNESS + argv, path_without_iptables)
    assert res["rc"] == 2, res
    assert res["stderr"].strip().splitlines() == MISSING
    assert res["unchanged"] and not os.path.exists("/tmp/harness-doctor-test")


@pytest.mark.root
def test_a_rate_only_run_needs_no_iptables(path_without_iptables, monkeypatch):
    monkeypatch.setenv("PATH", path_without_iptables)
    assert doctor.problems("fallback", impaired=profiles.load("paper-62.5mbit").impaired(2), workers=2) == []
    assert doctor.problems("fallback", impaired=profiles.load("transatlantic").impaired(2), workers=2) == MISSING
