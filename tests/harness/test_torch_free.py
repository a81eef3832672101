"""The controller's light commands never import torch (or trainers' training stack): `harness
profiles`, `run --dry-run`, `report`, `plot` and `clean` must start in well under a second on a
box where torch takes seconds to import, and the controller container must not need it."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "runs" / "run-spar-20mbit"

PROBE = """
import sys
from typer.testing import CliRunner
from harness.cli import app
res = CliRunner().invoke(app, sys.argv[1:])
heavy = sorted(m for m in ("torch", "transformers", "peft") if m in sys.modules)
print("EXIT", res.exit_code, "HEAVY", ",".join(heavy) or "-")
if res.exit_code:
    print(res.output, file=sys.stderr)
"""


def _modules_after(*argv: str) -> str:
    res = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=ROOT, capture_output=True, text=True, timeout=300)
    last = res.stdout.strip().splitlines()[-1]
    assert last.startswith("EXIT 0 "), res.stdout[-2000:] + res.stderr[-2000:]
    return last.split("HEAVY ")[1]


@pytest.mark.parametrize("argv", [
    ["profiles"],
    ["profiles", "transatlantic", "--plan", "--workers", "2"],
    ["run", "--dry-run", "--bw", "20mbit", "--method", "spar,powersgd", "--workers", "3"],
    ["run", "--dry-run", "--no-emulation", "--model", "micro"],
    ["clean", "--list", "--run-id", "abcd12"],
], ids=lambda a: " ".join(a[:2]))
def test_light_commands_do_not_import_torch(argv):
    assert _modules_after(*argv) == "-"


@pytest.mark.parametrize("cmd", ["report", "plot"])
def test_report_and_plot_do_not_import_torch(tmp_path, cmd):
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    assert _modules_after(cmd, "--quiet", str(run)) == "-"
