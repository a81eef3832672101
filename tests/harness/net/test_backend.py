"""The backend decision (harness.net.backend) and the plan module's import weight (pure, no kernel)."""
import subprocess
import sys
from pathlib import Path

import pytest

from harness.net import backend


@pytest.mark.parametrize("name", ["tbf", "", "NETEM"])
def test_unknown_backend_is_one_line_naming_the_valid_ones(name):
    with pytest.raises(ValueError) as err:
        backend.decide(name)
    assert str(err.value) == f"backend: {name!r} is unknown (valid: netem, fallback)"
    with pytest.raises(ValueError, match=r"^--backend: 'tbf' is unknown \(valid: netem, fallback\)$"):
        backend.validate("tbf", flag="--backend")


@pytest.mark.parametrize("name", backend.BACKENDS)
def test_a_requested_backend_is_taken_as_is(name, monkeypatch):
    monkeypatch.setattr(backend, "netem_from_config", lambda: pytest.fail("read the kernel config"))
    monkeypatch.setattr(backend, "probe_by_trying", lambda: pytest.fail("probed"))
    assert backend.decide(name) == backend.Decision(name, "requested")


def test_dry_run_decision_follows_the_kernel_config_and_never_probes(monkeypatch):
    monkeypatch.setattr(backend, "probe_by_trying", lambda: pytest.fail("a dry run created a namespace"))
    known = backend.netem_from_config()
    got = backend.decide(None, create=False)
    if known is None:
        assert got == backend.Decision("fallback", "assumed") and got.assumed
    else:
        assert got == backend.Decision("netem" if known else "fallback", "kernel config") and not got.assumed


def test_unreadable_config_is_assumed_without_create_and_probed_with_it(monkeypatch):
    monkeypatch.setattr(backend, "netem_from_config", lambda: None)
    monkeypatch.setattr(backend, "probe_by_trying", lambda: pytest.fail("a dry run created a namespace"))
    assert backend.decide(None, create=False) == backend.Decision("fallback", "assumed")
    monkeypatch.setattr(backend, "probe_by_trying", lambda: "netem")
    assert backend.decide(None) == backend.Decision("netem", "probe")


def test_plan_module_needs_neither_torch_nor_pyroute2():
    code = ("import sys, harness.net.plan, harness.net.backend; "
            "print(sorted(m for m in ('torch', 'pyroute2') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[3]).stdout
    assert out.strip() == "[]"
