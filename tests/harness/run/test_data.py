"""`harness data`: the held-out set a run evaluates and the problems a run of a seed draws, one a line."""
import json

import pytest
from typer.testing import CliRunner

from harness.cli import app
from trainers.tasks import get_task, heldout

runner = CliRunner()


def _json_lines(args):
    res = runner.invoke(app, ["data", "--json", *args])
    assert res.exit_code == 0, res.output
    return [json.loads(x) for x in res.output.splitlines()]


def test_heldout_lines_are_the_evaluated_set_with_structured_fields():
    opts = "min_people=3,max_people=3,depth=1,names=letters,style=compact"
    rows = _json_lines(["--task", "knights_knaves", "--task-options", opts, "--count", "5"])
    task = get_task("knights_knaves", min_people=3, max_people=3, depth=1, names="letters", style="compact")
    expected = heldout.heldout_problems(task, 5)
    assert [r["prompt"] for r in rows] == [task.prompt(p) for p in expected]
    assert [r["gold"] for r in rows] == [task.gold(p) for p in expected]
    f = rows[0]["fields"]
    assert f["names"] == ["A", "B", "C"] and len(f["statements"]) == 3 and set(f["solution"]) <= {"knight", "knave"}
    assert all(s[0] in ("is", "not", "and", "or", "implies", "iff") for s in f["statements"])
    assert len({r["canonical"] for r in rows}) == 5


def test_train_lines_are_what_a_run_of_that_seed_draws():
    """Worker w's batch b of seed s is training_problems(task, P, rollout_seed(s, w, b)), batch by batch."""
    from trainers.hilo import worker  # the worker draws with the same seed function (torch import: test only)
    assert worker.rollout_seed is heldout.rollout_seed
    rows = _json_lines(["--preset", "hilo-countdown", "--split", "train", "--seed", "2", "--count", "12"])
    task = get_task("countdown", count=3, max_number=9, max_target=30)
    want = [(b, w, p) for b in range(2) for w in (1, 2)
            for p in heldout.training_problems(task, 4, heldout.rollout_seed(2, w, b))][:12]
    assert [(r["batch"], r["worker"], r["prompt"]) for r in rows] == [(b, w, task.prompt(p)) for b, w, p in want]
    assert rows[0]["fields"]["numbers"] and "target" in rows[0]["fields"]


def test_text_lines_are_one_problem_each():
    res = runner.invoke(app, ["data", "--task", "countdown", "--count", "3"])
    assert res.exit_code == 0 and len(res.output.splitlines()) == 3
    assert all(len(line.split("\t")) == 6 for line in res.output.splitlines())


@pytest.mark.parametrize("args,message", [
    (["--task", "sudoku"], "--task: unknown task 'sudoku'"),
    (["--task-options", "width=3"], "--task-options: digits has no option 'width'"),
    (["--split", "test"], "--split: 'test' is not one of heldout, train"),
    (["--count", "0"], "--count: 0 is out of range"),
    (["--seed", "2"], "--seed: the held-out set is the same for every seed"),
    (["--split", "train", "--seed", "-1"], "-1 is outside"),
    (["--split", "train", "--count", "5000"], "--count: a run of 40 updates x 2 workers x 16 problems draws 1,280"),
    (["--preset", "nope"], "--preset: unknown preset 'nope'"),
    (["--workers", "0", "--split", "train"], "--workers: 0 is outside"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    res = runner.invoke(app, ["data", *args])
    assert res.exit_code == 2
    assert message in res.output and len(res.output.strip().splitlines()) == 1
