"""The contract of trainers/tasks/base.py, checked for every registered task."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainers.tasks import Task, available, get_task


def test_registry_lists_every_task_and_rejects_unknown_names():
    assert available() == ["countdown", "digits", "knights_knaves"]
    with pytest.raises(ValueError, match="unknown task 'chess'; valid tasks: countdown, digits, knights_knaves"):
        get_task("chess")


@pytest.mark.parametrize("name", available())
def test_contract(name):
    task = get_task(name)
    assert isinstance(task, Task) and task.name == name
    problems = task.generate(20, seed=7)
    assert len(problems) == 20 and problems == task.generate(20, seed=7)
    assert problems != task.generate(20, seed=8)
    assert task.generate(0, seed=7) == []
    for p in problems:
        assert task.prompt(p) and task.gold(p)
        s = task.score(p, task.gold(p))
        assert s.correct and s.reward == task.max_reward
        assert task.reward(p, task.gold(p)) == task.max_reward and task.is_correct(p, task.gold(p))
        assert not task.is_correct(p, task.gold(p) + " and more")
    assert isinstance(task.options(), dict)
    with pytest.raises(ValueError):
        task.generate(-1, seed=0)


@pytest.mark.parametrize("name", available())
@settings(max_examples=60, deadline=None)
@given(text=st.text(max_size=200))
def test_arbitrary_text_never_raises_and_stays_in_range(name, text):
    task = get_task(name)
    p = task.generate(1, seed=0)[0]
    s = task.score(p, text)
    assert 0.0 <= s.reward <= task.max_reward and s.correct == (s.reward == task.max_reward)


@pytest.mark.parametrize("name", available())
def test_canonical_form_and_fields(name):
    """canonical: a deterministic str (the held-out split's key); fields: plain JSON values (harness data)."""
    import json

    task = get_task(name)
    problems = task.generate(20, 3)
    assert [task.canonical(p) for p in problems] == [task.canonical(p) for p in task.generate(20, 3)]
    for p in problems:
        assert isinstance(task.canonical(p), str) and task.canonical(p)
        assert json.loads(json.dumps(task.fields(p))) == task.fields(p)
