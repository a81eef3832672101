"""`harness check [NAME ...]`: the project's contract suites on registered implementations, in-tree or plugin.

A compressor gets the whole compressor contract (trainers/compress/contract.py: round trip, fresh
decode, deterministic encode, bytes as stated, error feedback conserved, decode bits at 1 and 2
threads, replay bit-identical across processes); a task the task contract's cheap half
(trainers/tasks/base.py: generate deterministic, gold correct at max_reward, malformed text scored
without raising, reward in range); an objective or a data-parallel method that it loads from its
name and subclasses its contract class. With no NAME: every compressor and task. Each check
prints one line, PASS or FAIL with the reason; the exit code is 1 when anything fails.

A plugin's checks run in a child process (`python -m trainers.check --child`) under a time limit:
a plugin that hangs, raises, or ends its process (os._exit) fails with one line saying so, and the
summary is always printed. An installed plugin that is ignored (an in-tree name, a name outside the
grammar) or clashes (two distributions, one name) fails a `refused` check naming its distribution.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
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


CHECK_TIMEOUT_S = 600.0   # one plugin's whole contract (replay in fresh processes) on a busy 2-core box


def describe_exit(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exit code {code}"


def check_in_child(name: str, budget: str | None, timeout_s: float) -> dict[str, str | None]:
    """`check(name)` in a child process of its own (its process group killed on the time limit); a
    child that hangs, dies or reports nothing is one failed check with the reason."""
    with tempfile.TemporaryDirectory(prefix="wan-check-") as tmp:
        out, log = Path(tmp) / "result.json", Path(tmp) / "stderr"
        argv = [sys.executable, "-m", "trainers.check", "--child", name, "--out", str(out)]
        with open(log, "wb") as err:   # a file, not a pipe: a chatty plugin cannot fill our memory or block
            proc = subprocess.Popen(argv + (["--budget", budget] if budget else []), stdout=subprocess.DEVNULL,
                                    stderr=err, start_new_session=True)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):   # the group may be gone already
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return {"runs": f"did not finish within {timeout_s:g} s (its processes were killed)"}
        try:
            result = json.loads(out.read_text())
        except (OSError, ValueError):
            with open(log, "rb") as fh:
                fh.seek(max(0, log.stat().st_size - 4096))
                tail = [line for line in fh.read().decode(errors="replace").strip().splitlines()
                        if not line.startswith("warning: ")]   # plugins.py's own lines are not the cause
            last = (tail or ["no output"])[-1][:300]
            return {"runs": f"its process ended ({describe_exit(proc.returncode)}) before reporting: {last}"}
    if not isinstance(result, dict) or not all(isinstance(v, (str, type(None))) for v in result.values()):
        return {"runs": "its process reported something that is not a check result"}
    return result


def guarded_check(name: str, budget: str | None) -> dict[str, str | None]:
    try:
        return check(name, budget)
    except Exception as err:   # noqa: BLE001 - an implementation that raises fails its check, in one line
        return {"runs": f"raised {type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"}


def main(names: list[str], budget: str | None = None, echo=print, timeout_s: float = CHECK_TIMEOUT_S) -> int:
    """Print one line per check; 0 when every check passes, 1 when one fails, 2 on an unknown name."""
    for listed in kinds().values():
        listed()   # every registry loaded: its in-tree names reserve themselves before plugins are judged
    refused = plugins.problems()
    refused_names = {n for n, _ in refused}
    found = []
    for name in names or [*compress.available(), *tasks.available()]:
        try:
            found.append((name, kind_of(name)))
        except ValueError as err:
            if name in refused_names:   # an ignored plugin's name: its refusal below is its check
                continue
            echo(f"error: {err}")
            return 2
    failed = 0
    for name, why in refused:
        if not names or name in names:
            echo(f"plugin {name}")
            echo(f"  FAIL refused: {why}")
            failed += 1
    for name, kind in found:
        if name in refused_names and plugins.source(PLUGIN_KIND[kind], name) is not None:
            continue   # a clashing plugin name: its refusal above is its check
        where = plugins.source(PLUGIN_KIND[kind], name)
        echo(f"{kind} {name}" + (f" (plugin: {where})" if where else ""))
        results = check_in_child(name, budget, timeout_s) if where else guarded_check(name, budget)
        for check_name, reason in results.items():
            echo(f"  {'PASS' if reason is None else 'FAIL'} {check_name}" + (f": {reason}" if reason else ""))
            failed += reason is not None
    echo(f"{failed} check(s) failed" if failed else "every check passed")
    return 1 if failed else 0


def child(argv: list[str]) -> int:
    """`python -m trainers.check --child NAME --out FILE [--budget B]`: one implementation's checks,
    written to FILE as JSON (check name -> reason or null)."""
    parser = argparse.ArgumentParser(prog="python -m trainers.check")
    parser.add_argument("--child", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--budget")
    args = parser.parse_args(argv)
    Path(args.out).write_text(json.dumps(guarded_check(args.child, args.budget)))
    return 0


if __name__ == "__main__":
    sys.exit(child(sys.argv[1:]))
