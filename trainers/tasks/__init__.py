"""Training tasks, registered by name: `get_task("countdown", exactly_once=True)`.

The contract every task implements is in `trainers/tasks/base.py`; an in-tree task is its file and its
card (trainers/cards/tasks.py); a task from another package registers through the entry-point group
`wan_harness.cards` (its card) or `wan_harness.tasks` (its class: docs/PLUGINS.md). A run names its task's
options as text (`--task-options max_people=3,max_number=9`): `parse_task_options` checks each
key, type and range against the task card's options, torch-free and without importing the task (a task
without card options: against its constructor's keywords, and then by building it).
"""
from __future__ import annotations

import inspect
from typing import Any

from trainers import cards, spec
from trainers.cards import Option
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
    """'key=value,key=value' -> the keywords task `name` is built with, typed and range-checked against its
    card's options (trainers/cards/tasks.py) without importing the task. A task whose card declares no
    options (a plugin's class, or a card without them) is checked against its constructor's keywords, each
    typed like its default (bool, int, float, else text), and then built, so that its own checks run.

    A comma item without '=' continues the previous value (`ops=copy,reverse,max_len=3`), since
    some options are themselves comma lists. Raises ValueError with a one-line reason."""
    card = cards.find("task", name)
    if card is not None and card.options:
        return _parse(name, text, card.options)
    cls = _REGISTRY.get_class(name)   # an unknown task name fails first, listing the valid ones
    options = _parse(name, text, _keyword_options(cls))
    get_task(name, **options)  # the task's own range checks (one-line ValueError)
    return options


def _keyword_options(cls: type) -> dict[str, Option]:
    """A card-less task's options: its constructor's keywords, each typed like its default."""
    def option(default: Any) -> Option:
        kind = type(default) if isinstance(default, (bool, int, float)) else str
        return Option(default, "", type=kind, optional=default is None)
    return {k: option(None if d is inspect.Parameter.empty else d) for k, d in cards.constructor_keywords(cls).items()}


def _parse(task: str, text: str, options: dict[str, Option]) -> dict[str, Any]:
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
        if key not in options:
            valid = ", ".join(o.describe(k) for k, o in options.items())
            raise ValueError(f"task options: {task} has no option {key!r}; valid: {valid}")
        if key in out:
            raise ValueError(f"task options: {key!r} given twice")
        out[key], last = value, key
    typed = {k: _typed(task, k, v, options[k]) for k, v in out.items()}
    for key, o in options.items():
        if o.at_least:
            low, high = typed.get(o.at_least, options[o.at_least].default), typed.get(key, o.default)
            if low is not None and high is not None and high < low:
                said = "" if key in typed else " (its default)"
                raise ValueError(f"task options: {task} {key}={high}{said} is below {o.at_least}={low}")
    return typed


def _typed(task: str, key: str, value: str, option: Option) -> Any:
    """One value typed and range-checked as the run spec checks a flag's (trainers/spec.py Param.parse)."""
    param = spec.Param(key, option.type, option.default, option.help, lo=option.lo, hi=option.hi,
                       choices=option.choices, optional=option.optional)
    try:
        if option.many:
            items = [x.strip() for x in value.split(",") if x.strip()]
            if not items:
                raise ValueError(f"task options: {task} {key}: no value given")
            return tuple(param.parse(x) for x in items)
        return param.parse(value)
    except spec.SpecError as err:
        reason = str(err).removeprefix(f"{param.flag}: ")
        raise ValueError(f"task options: {task} {key}={reason}") from None


def check_task_options(task: str, text: str) -> None:
    """Raise ValueError naming `--task-options` when `text` is not a valid set of task `task`'s options
    (an unknown task is left to the --task check)."""
    if task not in available():
        return
    try:
        parse_task_options(task, text)
    except ValueError as e:
        raise ValueError(f"--task-options: {e}") from None


def build_task(params) -> Task:
    """The task of a run's parameters (`trainers.spec.RunParams`): built once per process."""
    return get_task(params.task, **parse_task_options(params.task, params.task_options))


__all__ = ["Score", "Task", "available", "build_task", "check_task_options", "get_task", "parse_task_options",
           "register", "unique_gold"]
