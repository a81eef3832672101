"""The held-out split: disjoint from every training stream, deterministic, and loud when a task is too small."""
import pytest

from trainers.tasks import heldout
from trainers.tasks import available, get_task


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
