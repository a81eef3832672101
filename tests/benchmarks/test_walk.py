"""Benchmark (issue 20, "each value built once"): the walk of the run parameters from the CLI to
the learner, and of a profile from its YAML file to the kernel, as files entered and returns to
a file already left (the definition: tests/benchmarks/walk.py's docstring). Root (the profile walk
builds the emulated network up to the shaper). Prints the figures and the files walked; asserts
nothing about them (the goal, fewer than 10 and fewer than 4 returns, is printed as met or not).

    .venv/bin/python -m pytest tests/benchmarks/test_walk.py -m benchmark -s
"""
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.benchmark, pytest.mark.root]
ROOT = Path(__file__).resolve().parents[2]
GOALS = {"cli": 10, "profile": 4}


@pytest.mark.parametrize("walk", ["cli", "profile"])
def test_walk(walk):
    done = subprocess.run([sys.executable, str(ROOT / "tests/benchmarks/walk.py"), "--walk", walk, "--sequence"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    print(done.stdout)
    returns = int(re.search(rf"{walk} walk \(depth \d+\): \d+ files entered, (\d+) returns", done.stdout).group(1))
    print(f"goal: fewer than {GOALS[walk]} returns: {'met' if returns < GOALS[walk] else 'not met'} ({returns})")
