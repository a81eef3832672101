"""Training tasks, registered by name: `get_task("countdown", exactly_once=True)`.

The contract every task implements is in `trainers/tasks/base.py`; an in-tree task is its file and its
card (trainers/cards/tasks.py); a task from another package registers through the entry-point group
`wan_harness.cards` (its card) or `wan_harness.tasks` (its class: docs/PLUGINS.md). A run names its task's
options as text (`--task-options max_people=3,max_number=9`): `parse_task_options` checks each
key, type and range against the task card's options, torch-free and without importing the task (a task
without card options: against its constructor's keywords, and then by building it).
"""
from __future__ import annotations

from typing import Any

from trainers import card_options, cards
from trainers.registry import Registry
from trainers.tasks.base import Score, Task

_REGISTRY: Registry[Task] = Registry("task", "tasks", plugin="task", base=Task, carded=True)
register = _REGISTRY.register
available = _REGISTRY.available
get_task = _REGISTRY.get


def unique_gold(name: str) -> bool:
    """Whether task `name`'s gold is its only right answer (`Task.unique_gold`); False for a name no
    registry knows (a plugin not installed here): then P(gold) is not trusted as the quality."""
    try:
        return bool(_REGISTRY.get_class(name).unique_gold)
    except ValueError:
        return False


def parse_task_options(name: str, text: str) -> dict[str, Any]:
    """'key=value,key=value' -> the keywords task `name` is built with (trainers/card_options.py): checked
    against its card's options without importing the task; a task whose card declares none, against its
    constructor's keywords, and then built, so that its own checks run. Raises ValueError (one line)."""
    card = cards.find("task", name)
    if card is not None and card.options:
        return card_options.parse(name, text, card.options)
    cls = _REGISTRY.get_class(name)   # an unknown task name fails first, listing the valid ones
    options = card_options.parse(name, text, card_options.keyword_options(cls))
    get_task(name, **options)  # the task's own range checks (one-line ValueError)
    return options


def check_task_options(task: str, text: str) -> None:
    """Raise ValueError naming `--task-options` when `text` is not a valid set of task `task`'s options
    (an unknown task is left to the --task check)."""
    if task not in available():
        return
    try:
        parse_task_options(task, text)
    except ValueError as e:
        raise ValueError(f"--task-options: {e}") from None


def build_task(name: str, options: str = "") -> Task:
    """The task `name` with its options as the --task-options flag gives them (`max_people=2,...`)."""
    return get_task(name, **parse_task_options(name, options))


__all__ = ["Score", "Task", "available", "build_task", "check_task_options", "get_task", "parse_task_options",
           "register", "unique_gold"]
