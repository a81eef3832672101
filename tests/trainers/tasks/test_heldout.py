"""The held-out split: disjoint by logic from every training stream, deterministic, and loud when a task is too small."""
import dataclasses

import pytest

from trainers.tasks import heldout
from trainers.tasks import available, get_task, parse_task_options
from trainers.tasks.countdown import CountdownProblem
from trainers.tasks.digits import DigitsProblem
from trainers.tasks.knights_knaves import KKProblem

# Settings the shipped runs use (the default run's digits, the presets' tasks) and each task's defaults.
SETTINGS = [("digits", ""), ("countdown", "count=3,max_number=9,max_target=30"),
            ("knights_knaves", "min_people=3,max_people=3,depth=1,names=letters,style=compact"),
            ("knights_knaves", "")]  # countdown at its defaults: 15 ms a problem, too slow for 20,000


@pytest.mark.parametrize("name", available())
def test_heldout_set_is_disjoint_from_training_streams(name):
    task = get_task(name)
    held = heldout.heldout_problems(task, 24)
    prompts = {task.prompt(p) for p in held}
    assert len(prompts) == 24  # distinct
    assert all(heldout.is_heldout(task, p) for p in held)
    for seed in range(6):  # the workers' seeds, the warm-ups' seeds: any seed
        train = heldout.training_problems(task, 16, seed)
        assert len(train) == 16 and not prompts & {task.prompt(p) for p in train}
        assert not any(heldout.is_heldout(task, p) for p in train)


@pytest.mark.parametrize("name,options", SETTINGS)
def test_no_heldout_logic_in_20000_training_draws(name, options):
    """No held-out problem's canonical form (its logic) appears in 20,000 draws of the run's streams
    (workers' batches over seeds) nor in the warm-up pool; the held-out set is 64 distinct classes."""
    task = get_task(name, **parse_task_options(name, options))
    held = {task.canonical(p) for p in heldout.heldout_problems(task, 64)}
    assert len(held) == 64
    drawn = set()
    for seed in (1, 2, 3, 4, 5):
        drawn |= {task.canonical(p) for _, _, p in heldout.run_stream(task, seed, 2, 16, 125)}  # 4,000 each
    drawn |= {task.canonical(p) for p in heldout.training_problems(task, 4000, 1_000_003)}
    assert not held & drawn


def test_canonical_form_ignores_wording():
    """Renamed speakers, reordered numbers and swapped addends are the same problem (same split side)."""
    kk = get_task("knights_knaves")
    p = kk.generate(1, 5)[0]
    renamed = dataclasses.replace(p, names=tuple("ABCDEFGH"[:len(p.names)]))
    assert kk.prompt(p) != kk.prompt(renamed) and kk.canonical(p) == kk.canonical(renamed)
    equivalent = dataclasses.replace(p, statements=tuple(("not", ("not", s)) for s in p.statements))
    assert kk.canonical(p) == kk.canonical(equivalent)
    cd = get_task("countdown")
    a, b = CountdownProblem((3, 5, 7, 9), 24, ""), CountdownProblem((9, 7, 5, 3), 24, "")
    assert cd.prompt(a) != cd.prompt(b) and cd.canonical(a) == cd.canonical(b)
    assert cd.canonical(a) != cd.canonical(CountdownProblem((3, 5, 7, 9), 25, ""))
    dg = get_task("digits", ops="copy,reverse,add")
    assert dg.canonical(DigitsProblem("add", "12", "345")) == dg.canonical(DigitsProblem("add", "345", "12"))
    assert dg.canonical(DigitsProblem("copy", "12")) != dg.canonical(DigitsProblem("reverse", "12"))
    for problem, task in ((p, kk), (a, cd)):
        assert heldout.is_heldout(task, problem) == heldout.is_heldout(task, renamed if task is kk else b)


def test_two_people_are_too_few_to_hold_out_64_classes():
    """2 speakers admit 108 uniquely solvable puzzles at any depth (4 x 3^3): ~13 held out."""
    task = get_task("knights_knaves", min_people=2, max_people=2, depth=2, names="letters", style="compact")
    with pytest.raises(ValueError, match="too small for this split"):
        heldout.heldout_problems(task, 64)
    assert len({task.canonical(p) for p in task.generate(5000, 1)}) == 108


def test_split_is_deterministic_and_keeps_clean_streams_unchanged():
    task = get_task("digits")
    assert heldout.heldout_problems(task, 10) == heldout.heldout_problems(task, 10)
    assert heldout.training_problems(task, 10, 3) == heldout.training_problems(task, 10, 3)
    plain = task.generate(40, 7)
    kept = [p for p in plain if not heldout.is_heldout(task, p)]
    assert heldout.training_problems(task, 40, 7)[:len(kept)] == kept  # round 0 is the plain stream, filtered
    assert 0 < len(plain) - len(kept) < 40  # some, not all, are held out


def test_a_task_too_small_for_the_split_says_so():
    task = get_task("digits", ops="copy", min_len=1, max_len=1)
    with pytest.raises(ValueError, match="too small for this split"):
        heldout.heldout_problems(task, 10)  # 10 possible prompts, ~1/8 of them held out
