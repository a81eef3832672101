"""The walk gate: how often a reader following a run's values goes back to a file already left.

Two walks (the definition: tests/benchmarks/walk.py's docstring), counted at any depth: the run
parameters from `harness run` to the learner's `Learner.run`, and the profile from its YAML file to
`Shaper.apply` (through the plan and the shaper). Root: the profile walk builds the emulated network
up to the shaper. CI runs this file (no benchmark marker); it prints the figures and the sequences.

Two kinds of assertion:
- a ratchet: neither walk may get worse than it is now (`CEILINGS`, any depth); lower them when a
  change makes a walk shorter;
- the goals (`GOALS`: CLI -> learner fewer than 10 returns, profile -> kernel fewer than 4), strict
  expected failures until they are met, so a change that meets one turns this red until the marker goes.

    .venv/bin/python -m pytest tests/benchmarks/test_walk.py -s
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.root]
ROOT = Path(__file__).resolve().parents[2]
GOALS = {"cli": 10, "profile": 4}        # returns, any depth: fewer than these
CEILINGS = {"cli": 23, "profile": 29}    # returns, any depth, as measured now: never more


@pytest.fixture(scope="module")
def walks() -> dict:
    done = subprocess.run([sys.executable, str(ROOT / "tests/benchmarks/walk.py"), "--walk", "both", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    for name, depths in found.items():
        for depth, w in depths.items():
            print(f"{name} walk ({depth}): {w['files']} files entered, {w['returns']} returns\n  "
                  + " -> ".join(w["sequence"]))
    return found


def test_the_profile_walk_reaches_the_plan_and_the_shaper(walks):
    seq = walks["profile"]["any depth"]["sequence"]
    assert seq[0] == "harness/cli.py" and "harness/net/profiles.py" in seq
    assert seq[-1] == "harness/net/shaper.py" and "harness/net/plan.py" in seq


def test_the_cli_walk_reaches_the_learner(walks):
    seq = walks["cli"]["any depth"]["sequence"]
    assert seq[0] == "harness/cli.py" and seq[-1].startswith("trainers/hilo/") and "trainers/hilo/learner.py" in seq


@pytest.mark.parametrize("walk", ["cli", "profile"])
def test_no_walk_gets_longer(walks, walk):
    returns = walks[walk]["any depth"]["returns"]
    assert returns <= CEILINGS[walk], (f"{walk} walk: {returns} returns to a file already left, more than "
                                       f"{CEILINGS[walk]}: {' -> '.join(walks[walk]['any depth']['sequence'])}")


@pytest.mark.parametrize("walk", [
    pytest.param("cli", marks=pytest.mark.xfail(strict=True, reason="23 returns: launch.py <-> config/spec/events "
                                                "and the learner's stack build walk back and forth")),
    pytest.param("profile", marks=pytest.mark.xfail(strict=True, reason="22 returns: regime.place and launch "
                                                    "call back into commands/launch/profiles while scaling rates"))])
def test_the_walk_meets_its_goal(walks, walk):
    assert walks[walk]["any depth"]["returns"] < GOALS[walk]
