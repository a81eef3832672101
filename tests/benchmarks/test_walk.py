"""The walk gate: how often a reader following a run's values goes back to a file already left.

Two walks (the definition: tests/benchmarks/walk.py's docstring), counted at any depth: the run
parameters from `harness run` to the learner's `Learner.run`, and the profile from its YAML file to
`Shaper.apply` (through the plan and the shaper). Root: the profile walk builds the emulated network
up to the shaper. CI runs this file (no benchmark marker); it prints the figures and the sequences.

Three kinds of assertion:
- a ratchet: neither walk, nor the worst trip, may get worse than it is now (`CEILINGS`, any depth);
  lower them when a change makes a walk shorter;
- no trip in the house (one call of a house function, from its call to its return: walk.py's rule 7)
  returns to a file already left more than `TRIP_GOAL` (8) times;
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
TRIP_GOAL = 8                            # returns of any one trip: no more than this
CEILINGS = {"cli": 9, "profile": 5, "trip": 2}   # returns, any depth, as measured now: never more


@pytest.fixture(scope="module")
def walks() -> dict:
    done = subprocess.run([sys.executable, str(ROOT / "tests/benchmarks/walk.py"), "--walk", "both", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    for name, walk in found.items():
        for depth, w in walk.items():
            if depth != "trips":
                print(f"{name} walk ({depth}): {w['files']} files entered, {w['returns']} returns\n  "
                      + " -> ".join(w["sequence"]))
        worst = walk["trips"][0]
        print(f"{name} walk, worst trip {worst['function']}: {worst['returns']} returns\n  "
              + " -> ".join(worst["sequence"]))
    return found


def worst_trip(walks) -> dict:
    return max((w["trips"][0] for w in walks.values() if w["trips"]), key=lambda t: t["returns"])


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


def test_no_trip_gets_longer(walks):
    trip = worst_trip(walks)
    assert trip["returns"] <= CEILINGS["trip"], (f"{trip['function']}: {trip['returns']} returns, more than "
                                                 f"{CEILINGS['trip']}: {' -> '.join(trip['sequence'])}")


def test_no_trip_in_the_house_is_longer_than_its_goal(walks):
    trip = worst_trip(walks)
    assert trip["returns"] <= TRIP_GOAL, f"{trip['function']}: {' -> '.join(trip['sequence'])}"


@pytest.mark.parametrize("walk", [
    "cli",
    pytest.param("profile", marks=pytest.mark.xfail(strict=True, reason="5 returns: the profile is parsed "
                                                    "(config <-> profiles), the regime builds a second one at "
                                                    "its scaled rates, from the first's delays and the pilot's "
                                                    "compute (launch <-> profiles), the shaper builds the plan"))])
def test_the_walk_meets_its_goal(walks, walk):
    assert walks[walk]["any depth"]["returns"] < GOALS[walk]
