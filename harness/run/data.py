"""`harness data`: a task's problems as a run sees them, one a line (torch-free).

    harness data --preset hilo-kk --split heldout --count 5          # the first 5 held-out puzzles
    harness data --task countdown --task-options count=3 --split train --seed 2 --count 40 --json

`--split heldout --count N` prints the held-out set a run with `--eval-problems N` evaluates
(`trainers.tasks.heldout.heldout_problems`: one problem per canonical form). `--split train --seed S`
prints what a run of seed S trains on, in the order its workers draw it (`heldout.run_stream`: update
batch, then worker 1..W, `--problems-per-worker` each), so the preset's or flags' `workers`,
`problems_per_worker` and `updates` matter (a count beyond what the run draws is refused). Each line: the problem's canonical form (its logic, the split's key),
its prompt, its gold answer and its structured fields (`Task.fields`); `--json` writes one JSON
object a line instead of tab-separated text. Precedence as in `harness run`: the spec's default <
the preset < a flag given.
"""
from __future__ import annotations

import itertools
import json
from typing import Any, Iterator

from harness.run import presets
from trainers import spec
from trainers.tasks import available, build_task, check_task_options, heldout

SPLITS = ("heldout", "train")
MAX_COUNT = 1_000_000  # problems one call may print (a bound on what a typo can ask for)
USED = ("task", "task_options", "workers", "problems_per_worker", "updates", "seed")


def resolve(preset: str | None, flags: dict[str, Any]) -> dict[str, Any]:
    """The run-spec values this command reads, parsed and range-checked like `harness run`'s:
    defaults < preset < flags (None = not given). Raises ValueError (one line)."""
    raw = spec.defaults()
    if preset:
        raw.update(presets.load(preset)["values"])
    raw.update({k: v for k, v in flags.items() if v is not None})
    return {name: spec.parse_value(name, raw[name]) for name in USED}


def rows(values: dict[str, Any], split: str, count: int, seed: int | None) -> Iterator[dict[str, Any]]:
    """The problems to print, as dicts. Raises ValueError (one line) on bad input; the caller
    collects every row before printing, so nothing is printed then."""
    seed = _check(split, count, seed)
    task = _task(values)
    if split == "heldout":
        problems = ({"index": i, "problem": p} for i, p in enumerate(heldout.heldout_problems(task, count)))
    else:
        problems = _train(task, values, count, seed if seed is not None else values["seed"][0])
    for row in problems:
        p = row.pop("problem")
        yield {"split": split, **row, "canonical": task.canonical(p), "prompt": task.prompt(p),
               "gold": task.gold(p), "fields": task.fields(p)}


def _check(split: str, count: int, seed: int | None) -> int | None:
    if split not in SPLITS:
        raise ValueError(f"--split: {split!r} is not one of {', '.join(SPLITS)}")
    if not 1 <= count <= MAX_COUNT:
        raise ValueError(f"--count: {count} is out of range 1..{MAX_COUNT:,}")
    if split == "heldout" and seed is not None:
        raise ValueError("--seed: the held-out set is the same for every seed; give --seed with --split train")
    return None if seed is None else spec.get("seed").parse(seed)


def _task(values: dict[str, Any]):
    if values["task"] not in available():
        raise ValueError(f"--task: unknown task {values['task']!r}; valid tasks: {', '.join(available())}")
    check_task_options(values["task"], values["task_options"])
    return build_task(values["task"], values["task_options"])


def _train(task, values: dict[str, Any], count: int, run_seed: int) -> Iterator[dict[str, Any]]:
    """The first `count` problems a run of `run_seed` draws, with their batch and worker."""
    workers, per, updates = (int(values[k]) for k in ("workers", "problems_per_worker", "updates"))
    if count > workers * per * updates:
        raise ValueError(f"--count: a run of {updates} updates x {workers} workers x {per} problems draws "
                         f"{workers * per * updates:,} problems, fewer than {count:,} (raise --updates)")
    stream = heldout.run_stream(task, run_seed, workers, per, updates)
    return ({"index": i, "seed": run_seed, "batch": b, "worker": w, "problem": p}
            for i, (b, w, p) in enumerate(itertools.islice(stream, count)))


def line(row: dict[str, Any], as_json: bool) -> str:
    """One printed line: JSON, or tab-separated index, canonical form, prompt (escaped), gold, fields."""
    if as_json:
        return json.dumps(row, separators=(",", ":"))
    where = f"s{row['seed']} b{row['batch']} w{row['worker']}" if "batch" in row else "heldout"
    prompt = json.dumps(row["prompt"])  # the prompt's newline as \n: one problem, one line
    return "\t".join((str(row["index"]), where, row["canonical"], prompt, row["gold"],
                      json.dumps(row["fields"], separators=(",", ":"))))
