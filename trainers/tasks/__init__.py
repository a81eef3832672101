"""Training tasks, registered by name: `get_task("countdown", exactly_once=True)`.

The contract every task implements is in `trainers/tasks/base.py`; an in-tree task is its file and its
card (trainers/cards/tasks.py); a task from another package registers through the entry-point group
`wan_harness.cards` (its card) or `wan_harness.tasks` (its class: docs/PLUGINS.md). A run names its task's
options as text (`--task-options max_people=3,max_number=9`): `parse_task_options` checks each
key against the task constructor's keywords and types the value like the keyword's default.
"""
from __future__ import annotations

import inspect
from typing import Any

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
    """'key=value,key=value' -> constructor keywords of task `name`, checked by building the task.

    A comma item without '=' continues the previous value (`ops=copy,reverse,max_len=3`), since
    some options are themselves comma lists. Raises ValueError with a one-line reason."""
    get_task(name)  # an unknown task name fails first, listing the valid ones
    sig = inspect.signature(_REGISTRY.get_class(name).__init__)
    keywords = {k: v.default for k, v in sig.parameters.items() if k != "self"}
    out: dict[str, str] = {}
    last = None
    for item in (x.strip() for x in (text or "").split(",")):
        if not item:
            continue
        if "=" not in item:
            if last is None:
                raise ValueError(f"task options {text!r}: {item!r} is not key=value")
            out[last] += "," + item
            continue
        key, _, value = (s.strip() for s in item.partition("="))
        if key not in keywords:
            raise ValueError(f"task options: {name} has no option {key!r}; valid: {', '.join(keywords)}")
        if key in out:
            raise ValueError(f"task options: {key!r} given twice")
        out[key], last = value, key
    options = {k: _typed(name, k, v, keywords[k]) for k, v in out.items()}
    get_task(name, **options)  # the task's own range checks (one-line ValueError)
    return options


def _typed(task: str, key: str, value: str, default: Any) -> Any:
    if isinstance(default, bool):
        if value.lower() in ("1", "true", "yes", "on"):
            return True
        if value.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"task options: {task} {key}={value!r} is not true or false")
    if isinstance(default, int):
        try:
            return int(value, 10)
        except ValueError:
            raise ValueError(f"task options: {task} {key}={value!r} is not an integer") from None
    return value  # strings and lists (digits' ops) parse in the task's constructor


def check_task_options(task: str, text: str) -> None:
    """Raise ValueError naming `--task-options` when `text` does not build task `task`
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
