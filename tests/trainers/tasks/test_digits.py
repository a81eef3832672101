"""The tiny synthetic task: gold answers, the dense partial-credit reward, options."""
import pytest

from trainers.tasks import get_task
from trainers.tasks.digits import DigitsProblem


def test_gold_per_op():
    task = get_task("digits")
    assert task.gold(DigitsProblem("copy", "0123")) == "0123"
    assert task.gold(DigitsProblem("reverse", "0123")) == "3210"
    assert task.gold(DigitsProblem("add", "95", "7")) == "102"
    assert task.prompt(DigitsProblem("add", "95", "7")) == "add 95+7="


@pytest.mark.parametrize("completion, reward, correct", [
    ("3210", 1.0, True), (" 3210\n", 1.0, True),
    ("3211", 0.1 + 0.4 * 3 / 4, False), ("32", 0.1 + 0.4 * 2 / 4, False), ("321000", 0.1 + 0.4 * 4 / 6, False),
    ("9999", 0.1, False), ("", 0.0, False), ("32a0", 0.0, False), ("٣٢١٠", 0.0, False), ("3 2 1 0", 0.0, False),
])
def test_reward_table(completion, reward, correct):
    s = get_task("digits").score(DigitsProblem("reverse", "0123"), completion)
    assert s.reward == pytest.approx(reward) and s.correct == correct and s.reason


def test_generation_respects_options():
    task = get_task("digits", ops="copy,add", min_len=2, max_len=3)
    problems = task.generate(200, seed=0)
    assert {p.op for p in problems} == {"copy", "add"}
    assert all(2 <= len(p.a) <= 3 for p in problems)
    assert all((p.op == "add") == bool(p.b) for p in problems)


@pytest.mark.parametrize("options", [{"ops": "copy,multiply"}, {"ops": []}, {"min_len": 0}, {"min_len": 5, "max_len": 4}])
def test_bad_options(options):
    with pytest.raises(ValueError, match="digits"):
        get_task("digits", **options)
