"""Countdown: targets reachable (independent search), whitelisted parser, reward table."""
import builtins
import functools
from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainers.tasks import get_task
from trainers.tasks.countdown import Rejected, parse_expression


@functools.lru_cache(maxsize=None)
def values_using_all(numbers: tuple[int, ...]) -> frozenset[int]:
    """Integer values of expressions using every number once (exact division), by splitting
    the multiset into two non-empty parts: a different search from the task's own."""
    if len(numbers) == 1:
        return frozenset(numbers)
    out = set()
    idx = range(len(numbers))
    for size in range(1, len(numbers)):
        for left in combinations(idx, size):
            a = values_using_all(tuple(sorted(numbers[i] for i in left)))
            b = values_using_all(tuple(sorted(numbers[i] for i in idx if i not in left)))
            for x in a:
                for y in b:
                    out.update((x + y, x - y, x * y))
                    if y != 0 and x % y == 0:
                        out.add(x // y)
    return frozenset(out)


def values_using_some(numbers):
    return frozenset().union(*(values_using_all(tuple(sorted(s))) for k in range(1, len(numbers) + 1)
                               for s in combinations(numbers, k)))


@pytest.mark.parametrize("exactly_once", [True, False])
def test_targets_are_reachable_and_gold_is_correct(exactly_once):
    task = get_task("countdown", exactly_once=exactly_once)
    for p in task.generate(30, seed=2):
        assert len(p.numbers) == 4 and all(1 <= n <= 99 for n in p.numbers) and 1 <= p.target <= 100
        search = values_using_all(tuple(sorted(p.numbers))) if exactly_once else values_using_some(p.numbers)
        assert p.target in search
        s = task.score(p, task.gold(p))
        assert (s.reward, s.correct) == (1.0, True), (p, s)
        assert str(p.target) in task.prompt(p) and all(str(n) in task.prompt(p) for n in p.numbers)


def test_generation_is_deterministic():
    task = get_task("countdown")
    assert task.generate(10, seed=1) == task.generate(10, seed=1) != task.generate(10, seed=2)


@pytest.fixture
def puzzle():
    task = get_task("countdown")
    return task, task.generate(1, seed=0)[0]


def test_documented_rewards(puzzle):
    task, p = puzzle
    a, b, c, d = p.numbers
    cases = {
        task.gold(p): 1.0,
        f"  {task.gold(p)} = {p.target} ": 1.0,
        f"{task.gold(p)} = {p.target + 1}": 0.1,
        f"{a}+{b}+{c}+{d}" if a + b + c + d != p.target else f"{a}*{b}*{c}*{d}": 0.1,
        f"{a}+{b}": 0.1,                      # exactly_once: not every number used
        f"{a}/({b}-{b})+{c}+{d}": 0.0,        # b reused (unless b is offered twice)
    }
    if p.numbers.count(b) > 1:
        del cases[f"{a}/({b}-{b})+{c}+{d}"]
    for text, reward in cases.items():
        assert task.reward(p, text) == reward, (text, task.score(p, text))


def test_at_most_once_accepts_a_subset():
    task = get_task("countdown", exactly_once=False)
    p = next(p for p in task.generate(50, seed=0) if len(task.gold(p)) < 12)
    assert task.is_correct(p, task.gold(p))
    loose = get_task("countdown", exactly_once=False)
    two = loose.generate(200, seed=5)
    p2 = next(p for p in two if p.target == p.numbers[0] + p.numbers[1])
    assert loose.is_correct(p2, f"{p2.numbers[0]}+{p2.numbers[1]}")


def test_division_by_zero_is_a_wrong_answer_not_a_crash():
    task = get_task("countdown")
    p = task.generate(1, seed=0)[0]
    a, b, c, d = p.numbers
    s = task.score(p, f"{a}/({b}-{b})*{c}*{d}") if p.numbers.count(b) > 1 else None
    s = task.score(p, f"{a}*{b}*{c}*{d}/0") if s is None else s
    assert s.reward in (0.0, 0.1) and not s.correct


HOSTILE = [
    '__import__("os").system("touch /tmp/countdown-pwned")',
    "abc", "x+1", "print(1)", "(1).real", "2**3", "8//2", "7%3", "-5+3", "+5", "1e3", "0x10",
    "[1,2]", "'1'+'2'", "lambda: 1", "1 if 1 else 2", "1<2", "1_000", "()", "1 2", "((((1)))",
    "3.5*2", "~1", "1;2",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_parser_rejects_hostile_input_without_evaluating(text, monkeypatch, tmp_path):
    def forbidden(*a, **k):
        raise AssertionError("eval/exec called")
    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(builtins, "exec", forbidden)
    with pytest.raises(Rejected):
        parse_expression(text)
    task = get_task("countdown")
    s = task.score(task.generate(1, seed=0)[0], text)
    assert (s.reward, s.correct) == (0.0, False) and s.reason
    import os
    assert not os.path.exists("/tmp/countdown-pwned")


def test_parser_rejects_long_input_before_parsing(monkeypatch):
    import ast

    def no_parse(*a, **k):
        raise AssertionError("parsed a too-long input")
    monkeypatch.setattr(ast, "parse", no_parse)
    with pytest.raises(Rejected, match="longer than"):
        parse_expression("(" * 5000 + "1" + ")" * 5000)
    task = get_task("countdown")
    assert task.score(task.generate(1, seed=0)[0], "1+" * 10_000 + "1").reward == 0.0


def test_foreign_and_reused_numbers_are_rejected():
    task = get_task("countdown")
    p = next(p for p in task.generate(20, seed=0) if len(set(p.numbers)) == 4)
    a, b, c, d = p.numbers
    foreign = next(n for n in range(1, 200) if n not in p.numbers)
    for text in (f"{a}+{b}+{c}+{d}+{foreign}", f"{a}+{a}+{b}+{c}+{d}", f"{a}+{b}+{c}+{foreign}"):
        s = task.score(p, text)
        assert s.reward == 0.0 and "not offered" in s.reason


def test_parse_expression_value_and_numbers():
    from fractions import Fraction
    assert parse_expression("(8/3)*3 + 1") == (Fraction(9), [8, 3, 3, 1])
    assert parse_expression("4/(2-2)") == (None, [4, 2, 2])


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_any_text_scores_without_raising(text):
    task = get_task("countdown")
    assert task.reward(task.generate(1, seed=0)[0], text) in (0.0, 0.1, 1.0)


@pytest.mark.parametrize("options", [{"count": 1}, {"max_number": 0}, {"bogus": 1}])
def test_bad_options(options):
    with pytest.raises(ValueError, match="countdown"):
        get_task("countdown", **options)
