"""An eval row's `objective_metric` must be a held-out figure some objective's card names (harness/results/
schema.py): the in-tree cards' and an installed plugin's alike, so a plugin objective whose card names a
figure of its own has its rows read, while a name no card gives is still refused in one line."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.plugin_site import dist_info

ROOT = Path(__file__).resolve().parents[3]
# A plugin objective judged on held-out P(gold), and one naming a figure the evaluation does not measure.
CARDS = '''from trainers.cards import Card

GOLD = Card("objective", "gold-pg", "scratch_gold:GoldPG", heldout_metric="gold_prob")
WRONG = Card("objective", "acc-pg", "scratch_gold:AccPG", heldout_metric="accuracy")
'''
CHECK = '''
import json, sys
from pathlib import Path
from harness.results import schema
for metric in ("reverse_kl", "mean_reward", "gold_prob", "accuracy"):
    row = {"kind": "eval", "t": 1.0, "version": 3, "pass_at_1": 0.1, "pass_at_k": 0.2, "gold_prob": 0.3,
           "objective": 0.3, "objective_metric": metric}
    try:
        schema.check_row(Path("events-learner.jsonl"), 7, row)
        print(metric, "read")
    except schema.ResultsError as e:
        print(metric, "refused:", e)
'''


def _check(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("site")
    (site / "scratch_gold.py").write_text(CARDS)
    dist_info(site, "scratch-gold", "0.1", ["gold-pg = scratch_gold:GOLD", "acc-pg = scratch_gold:WRONG"])
    return site


def test_a_plugin_objectives_held_out_figure_is_read_and_an_unknown_one_refused(site):
    proc = _check({**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])})
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[:3] == ["reverse_kl read", "mean_reward read", "gold_prob read"]
    assert lines[3] == ("accuracy refused: events-learner.jsonl: row 7 (eval): 'objective_metric' is "
                        "\"accuracy\", not one of gold_prob, mean_reward, reverse_kl (the held-out figures of the "
                        "installed objectives' cards)")
    # the card naming a figure the evaluation does not measure is its author's bug: one warning, ignored
    assert proc.stderr.count("warning: objective 'acc-pg' (plugin acc-pg) names the held-out figure "
                             "'accuracy'; the evaluation measures") == 1


def test_without_the_plugin_its_figure_is_refused():
    proc = _check({**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[2].startswith(
        "gold_prob refused: events-learner.jsonl: row 7 (eval): 'objective_metric' is \"gold_prob\", not one of "
        "mean_reward, reverse_kl ")
