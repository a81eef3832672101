"""`harness calibrate` on links too slow or lossy for its probe (root: real namespaces and shaping).
The probe used to die with a TimeoutError that came out of the harness as a RuntimeError traceback.
Now the probe stops at the measurement that could not complete; the table marks the link "NO (probe
incomplete)", one stderr line says which measurement and why, the exit code is 1, and the run's
namespaces are gone."""
import subprocess
import sys
from pathlib import Path

import pytest

from harness.net import clean

pytestmark = [pytest.mark.root, pytest.mark.faults]   # 70-100 s each: the probe waits out its socket timeout
ROOT = Path(__file__).resolve().parents[3]


def our_leftovers(before: set[str]) -> list[str]:
    """Run ids present now that were not before and whose owner is dead (another engineer's live run is
    not ours to judge)."""
    return [rid for rid in clean.runs() if rid not in before and clean.owner_status(rid)[1] is not True]


@pytest.mark.parametrize("flags", [["--bw", "1kbit"], ["--loss", "99%"]], ids=["1kbit", "loss-99pct"])
def test_a_probe_that_cannot_complete_is_reported_not_a_traceback(tmp_path, flags):
    before = set(clean.runs())
    res = subprocess.run([sys.executable, "-m", "harness.cli", "calibrate", "--profile", "paper-62.5mbit", *flags,
                          "--secs", "1", "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                         timeout=900)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert "NO (probe incomplete)" in res.stdout, res.stdout
    lines = [ln for ln in res.stderr.splitlines() if "the probe could not complete" in ln]
    assert len(lines) == 1 and lines[0].startswith("w1: "), res.stderr
    assert our_leftovers(before) == []
