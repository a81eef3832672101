"""An implementation's options given as text (`--task-options max_people=3`, `--objective-options
kl_coef=0.05`), parsed against its card's options (trainers/cards/__init__.py Option): each key named,
each value typed and range-checked as the run spec checks a flag's (trainers/spec.py Param.parse),
torch-free and without importing the implementation. A class without card options (a plugin's class,
or a card without them) is read against its constructor's keywords, each typed like its default; its
caller then builds it, so that its own checks run.

A comma item without '=' continues the previous value (`ops=copy,reverse,max_len=3`), since some
options are themselves comma lists. Every error is one ValueError line naming the implementation
("<name> <key>=<value> ..."); the callers put the flag (`--task-options: `) in front.
"""
from __future__ import annotations

import inspect
from typing import Any, Mapping

from trainers import cards, spec
from trainers.cards import Option


def keyword_options(cls: type, teacher: bool = False) -> dict[str, Option]:
    """A card-less class's options: its constructor's keywords, each typed like its default (`teacher`:
    the run's teacher, which the learner passes itself, is none of them)."""
    def option(default: Any) -> Option:
        kind = type(default) if isinstance(default, (bool, int, float)) else str
        return Option(default, "", type=kind, optional=default is None)
    return {k: option(None if d is inspect.Parameter.empty else d) for k, d in cards.constructor_keywords(cls, teacher).items()}


def parse(name: str, text: str, options: Mapping[str, Option]) -> dict[str, Any]:
    """'key=value,key=value' -> the keywords the implementation `name` is built with."""
    out: dict[str, str] = {}
    last = None
    for item in (x.strip() for x in (text or "").split(",")):
        if not item:
            continue
        if "=" not in item:
            if last is None:
                raise ValueError(f"{name}: {item!r} in {text!r} is not key=value")
            out[last] += "," + item
            continue
        key, _, value = (s.strip() for s in item.partition("="))
        if key not in options:
            valid = ", ".join(o.describe(k) for k, o in options.items()) or "none"
            raise ValueError(f"{name} has no option {key!r}; valid: {valid}")
        if key in out:
            raise ValueError(f"{name}: {key!r} given twice")
        out[key], last = value, key
    typed = {k: _typed(name, k, v, options[k]) for k, v in out.items()}
    for key, o in options.items():
        if o.at_least:
            low, high = typed.get(o.at_least, options[o.at_least].default), typed.get(key, o.default)
            if low is not None and high is not None and high < low:
                said = "" if key in typed else " (its default)"
                raise ValueError(f"{name} {key}={high}{said} is below {o.at_least}={low}")
    return typed


def _typed(name: str, key: str, value: str, option: Option) -> Any:
    """One value typed and range-checked as the run spec checks a flag's (trainers/spec.py Param.parse)."""
    param = spec.Param(key, option.type, option.default, option.help, lo=option.lo, hi=option.hi,
                       choices=option.choices, optional=option.optional)
    try:
        if option.many:
            items = [x.strip() for x in value.split(",") if x.strip()]
            if not items:
                raise ValueError(f"{name} {key}: no value given")
            return tuple(param.parse(x) for x in items)
        return param.parse(value)
    except spec.SpecError as err:
        reason = str(err).removeprefix(f"{param.flag}: ")
        raise ValueError(f"{name} {key}={reason}") from None


def check_carded(kind: str, name: str, text: str) -> None:
    """Raise ValueError naming `--<kind>-options` when `text` is not a valid set of the options `name`'s
    card declares; torch-free (the harness checks a run's values before anything starts). A name without
    a card, or whose card declares no options, is left to the service that builds it."""
    card = cards.find(kind, name)
    if card is None or not card.options:
        return
    try:
        parse(name, text, card.options)
    except ValueError as e:
        raise ValueError(f"--{kind}-options: {e}") from None
