"""`harness check [NAME ...]`: the project's contract suites on registered implementations, in-tree or plugin.

A compressor gets the whole compressor contract (trainers/compress/contract.py: round trip, fresh
decode, deterministic encode, bytes as stated, error feedback conserved, decode bits at 1 and 2
threads, replay bit-identical across processes); a task the task contract's cheap half
(trainers/tasks/base.py: generate deterministic, gold correct at max_reward, malformed text scored
without raising, reward in range); an objective or a data-parallel method that it loads from its
name and subclasses its contract class. With no NAME: every compressor and task. Each check
prints one line, PASS or FAIL with the reason; the exit code is 1 when anything fails.
"""
from __future__ import annotations

from typing import Callable

from trainers import compress, dataparallel, objectives, plugins, tasks
from trainers.compress import contract

GARBAGE = ("", "\x00" * 3, "<answer>" * 50, "-" * 5000)   # completions a scorer must survive
PLUGIN_KIND = {"compressor": "compressor", "task": "task", "objective": "objective",
               "data-parallel method": "dataparallel"}   # -> trainers/plugins.py GROUPS


def kinds() -> dict[str, Callable[[], list[str]]]:
    return {"compressor": compress.available, "task": tasks.available, "objective": objectives.available,
            "data-parallel method": dataparallel.available}


def kind_of(name: str) -> str:
    """The extension point that registers `name`; ValueError listing every name (and close matches)."""
    every = {kind: names() for kind, names in kinds().items()}
    for kind, names in every.items():
        if name in names:
            return kind
    raise ValueError(plugins.unknown_name("implementation", "names", name, [n for ns in every.values() for n in ns]))


def task_checks(name: str) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    try:
        task = tasks.get_task(name)
    except Exception as err:   # noqa: BLE001 - reported: a plugin that cannot be built fails its check
        return {"builds": f"raised {type(err).__name__}: {err}"}
    out["builds"] = None
    a, b = task.generate(8, seed=3), task.generate(8, seed=3)
    out["deterministic"] = None if a == b else "generate(8, seed=3) twice gave different problems"
    bad = [i for i, p in enumerate(a) if not (s := task.score(p, task.gold(p))).correct or s.reward != task.max_reward]
    out["gold"] = None if not bad else f"problem {bad[0]}: gold() does not score correct at max_reward"
    out["malformed"] = None
    for text in GARBAGE:
        try:
            s = task.score(a[0], text)
        except Exception as err:   # noqa: BLE001 - the contract says never raise on model output
            out["malformed"] = f"score raised {type(err).__name__} on {text[:12]!r}..."
            break
        if not 0.0 <= s.reward <= task.max_reward or s.correct:
            out["malformed"] = f"{text[:12]!r}... scored {s.reward} correct={s.correct}"
            break
    return out


def loads(kind: str, name: str) -> dict[str, str | None]:
    get_class = {"objective": objectives._REGISTRY.get_class, "data-parallel method": dataparallel._REGISTRY.get_class}
    try:
        get_class[kind](name)
    except Exception as err:   # noqa: BLE001
        return {"loads": str(err)}
    return {"loads": None}


def check(name: str, budget: str | None = None) -> dict[str, str | None]:
    kind = kind_of(name)
    if kind == "compressor":   # --budget reaches budgeted compressors only (the others take no budget)
        budgeted = issubclass(compress.compressor_class(name), compress.BudgetedCompressor)
        return contract.run(name, {"budget": budget} if budget and budgeted else None)
    if kind == "task":
        return task_checks(name)
    return loads(kind, name)


def main(names: list[str], budget: str | None = None, echo=print) -> int:
    """Print one line per check; 0 when every check passes, 1 when one fails, 2 on an unknown name."""
    names = names or [*compress.available(), *tasks.available()]
    try:
        found = [(n, kind_of(n)) for n in names]
    except ValueError as err:
        echo(f"error: {err}")
        return 2
    failed = 0
    for name, kind in found:
        where = plugins.source(PLUGIN_KIND[kind], name)
        echo(f"{kind} {name}" + (f" (plugin: {where})" if where else ""))
        for check_name, reason in check(name, budget).items():
            echo(f"  {'PASS' if reason is None else 'FAIL'} {check_name}" + (f": {reason}" if reason else ""))
            failed += reason is not None
    echo(f"{failed} check(s) failed" if failed else "every check passed")
    return 1 if failed else 0
