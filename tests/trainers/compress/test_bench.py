"""The compression benchmark command (the README's main job until `harness run` lands)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def harness(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ROOT}, timeout=600)


def test_small_benchmark_covers_every_compressor_and_keeps_its_promises(tmp_path):
    out = tmp_path / "rows.json"
    proc = harness("bench-compress", "--shape", "small", "--repeats", "1", "--budgets", "1.6%,6.25%",
                   "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(out.read_text())
    names = {r["compressor"] for r in rows}
    assert {"identity", "identity (bf16)", "int8", "spar", "topk", "powersgd", "powersgd (rank R)",
            "spar @powersgd-bytes"} <= names
    assert {r["gradients"] for r in rows} == {"synthetic", "real"}
    for r in rows:
        if r["compressor"] in ("spar", "topk", "powersgd", "int8") and r["budget"] != "-":
            assert r["fraction_of_full"] <= float(r["budget"].rstrip("%")) / 100
    for kind in ("synthetic", "real"):
        for budget in ("1.60%", "6.25%"):
            cell = {r["compressor"]: r for r in rows if r["gradients"] == kind and r["budget"] == budget}
            equal = cell["spar @powersgd-bytes"]
            assert equal["payload_bytes"] <= cell["powersgd (rank R)"]["payload_bytes"]
            assert equal["rel_error"] < cell["powersgd (rank R)"]["rel_error"]
    assert "spar" in proc.stdout and "rel. error" in proc.stdout and "x memcpy" in proc.stdout
    for r in rows:                          # steady state, each beside a memcpy measured in the same process
        assert r["memcpy_s"] > 0 and r["total_x"] == pytest.approx(r["total_s"] / r["memcpy_s"])
    for kind in ("synthetic", "real"):      # torch's own hook as an external row, spar beside it at its bytes
        for budget in ("1.60%", "6.25%"):
            cell = {r["compressor"]: r for r in rows if r["gradients"] == kind and r["budget"] == budget}
            hook, same = cell["torch powerSGD_hook (rank R)"], cell["spar @hook-bytes"]
            assert 0 < same["payload_bytes"] <= hook["payload_bytes"]
            assert hook["encode_s"] > 0 and same["rel_error"] < hook["rel_error"]


@pytest.mark.parametrize("args,needle", [(["--gradients", "fake"], "--gradients: 'fake'"),
                                         (["--budgets", "0%"], "--budgets: '0%' is outside [0.001%, 100%]"),
                                         (["--budgets", "lots"], "not a percentage"),
                                         (["--shape", "huge"], "--shape: 'huge'")])
def test_bad_flags_fail_with_one_line_and_exit_2(args, needle):
    proc = harness("bench-compress", *args)
    assert proc.returncode == 2
    assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
