"""Cards (trainers/cards): every implementation describes itself once, and a new one needs two places.

The scratch compressor, data-parallel method, task and objective below are each a file and one registration line
(an entry point of the group `wan_harness.cards`, as an installed package declares it); nothing in this
repository changes, and the name then works everywhere: the run spec's flags and checks, the registry,
the cost model, a figure's style and a real run."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.plugin_site import dist_info
from trainers import cards, spec

ROOT = Path(__file__).resolve().parents[2]
HARNESS = [sys.executable, "-m", "harness.cli"]

# Place 1: the compressor's file. Torch-free at import (the controller reads the card); the class,
# which needs torch, is built when a service asks the module for it.
SCRATCH_FILE = '''"""halves: every element in bf16, no error feedback of its own beyond identity's."""
import functools

from trainers.cards import Card, Option
from trainers.cards.sizes import container_bytes, n_params


def halves_bytes(tensors, options, cap):
    return container_bytes("halves", tensors, [("values", options["dtype"], n_params(tensors))])


CARD = Card("compressor", "halves", "scratch_halves:Halves",
            {"dtype": Option("bf16", "payload value dtype", choices=("bf16", "fp16"))},
            payload_bytes=halves_bytes, style=("#000000", "h"))


@functools.cache
def _build():
    from trainers.compress.identity import IdentityCompressor

    return type("Halves", (IdentityCompressor,), {"__module__": __name__})


def __getattr__(name):
    if name == "Halves":
        return _build()
    raise AttributeError(name)
'''
# Place 2: its one registration line.
ENTRY_POINT = "halves = scratch_halves:CARD"


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> dict:
    site = tmp_path_factory.mktemp("site")
    (site / "scratch_halves.py").write_text(SCRATCH_FILE)
    entry_points = dist_info(site, "scratch-halves", "0.1", [ENTRY_POINT])
    places = [site / "scratch_halves.py", (entry_points, ENTRY_POINT)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    return {"site": site, "env": env, "places": places}


def _python(code: str, env: dict) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_every_in_tree_compressor_has_one_card_that_the_spec_and_the_registry_read():
    from trainers import compress

    names = [c.name for c in cards.in_tree("compressor")]
    assert names == ["identity", "int8", "powersgd", "spar", "topk"] == compress.in_tree()
    assert set(spec.BUDGETED) == {c.name for c in cards.in_tree("compressor") if c.budgeted}
    flags = {p.flag for p in spec.PARAMS}
    for card in cards.in_tree("compressor"):
        assert card.payload_bytes is not None and card.style is not None, card.name
        assert {f"--{card.name}-{o}".replace("_", "-") for o in card.options} <= flags
        cls = compress.compressor_class(card.name)
        assert cls.name == card.name and cls.options == card.defaults


def test_a_second_card_of_one_name_is_refused_in_one_line():
    found: dict = {}
    cards._add(found, cards.find("compressor", "spar"), "here")
    with pytest.raises(cards.CardError, match=r"^compressor 'spar' has two cards \(the second in there\)$"):
        cards._add(found, cards.find("compressor", "spar"), "there")


def test_a_scratch_compressor_needs_two_places_and_then_works_by_name(scratch, tmp_path):
    assert len(scratch["places"]) == 2   # its file and one registration line; no file of this repository
    env = scratch["env"]
    out = _python(
        "import sys; from trainers import spec; "
        "spec.check_method('halves'); p = spec.get('halves_dtype'); "
        "print(p.flag, p.default, spec.takes_budget('halves'), 'torch' in sys.modules)", env).split()
    assert out == ["--halves-dtype", "bf16", "False", "False"]   # the flag from its card; no torch to know it

    # the cost model counts it by the card's rule, equal to the real payload's length
    out = _python(
        "from harness.projection import costmodel as cm, inputs; "
        "from trainers.compress import get_compressor; from trainers.compress.bench import synthetic_gradients; "
        "a = inputs.adapter_for('micro', 4); "
        "c = get_compressor('halves'); "
        "print(cm.payload_bytes('halves', a), len(c.encode(synthetic_gradients(dict(a.tensors)))), c.name)", env)
    projected, real, name = out.split()
    assert int(projected) == int(real) and name == "halves"

    # a projection figure draws it (its card's style), from the command line
    figs = tmp_path / "figs"
    proc = subprocess.run([*HARNESS, "project", "--model", "micro", "--method", "halves", "--compute-s", "10",
                           "--figures", str(figs)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "halves" in proc.stdout and (figs / "projected_seconds_vs_workers.png").stat().st_size > 0

    # and the run validates it by name (the real run: the slow test below)
    proc = subprocess.run([*HARNESS, "run", "--method", "halves", "--halves-dtype", "fp16", "--model", "micro",
                           "--no-emulation", "--dry-run", "--out", str(tmp_path / "r")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "halves" in proc.stdout


@pytest.mark.slow
def test_a_scratch_compressor_runs_by_name(scratch, tmp_path):
    """A real run (~1.5 min on 2 loaded cores): learner and worker build `halves` from its card."""
    proc = subprocess.run([*HARNESS, "run", "--method", "halves", "--baseline", "none", "--model", "micro",
                           "--no-emulation", "--updates", "2", "--seeds", "1", "--workers", "1",
                           "--out", str(tmp_path / "r")], capture_output=True, text=True, env=scratch["env"],
                          timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run, = (tmp_path / "r").iterdir()
    assert (run / "updates.parquet").is_file() and "halves" in (run / "report.md").read_text()


def test_a_broken_card_plugin_is_one_warning_and_stays_unknown(tmp_path):
    dist_info(tmp_path, "broken", "0.1", ["ghost = no_such_module_here:CARD"])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-c", "from trainers import spec; spec.check_method('spar'); "
                           "spec.check_method('ghost')"], capture_output=True, text=True, env=env, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert lines[0] == ("warning: card plugin 'ghost' (no_such_module_here:CARD) failed to load: "
                        "ModuleNotFoundError: No module named 'no_such_module_here'; ignored")
    assert proc.returncode == 1 and "unknown method 'ghost'" in lines[-1]


# A data-parallel method and a task the same way: each is its file and one entry-point line.
SCRATCH_DP_FILE = '''"""ddp2: ddp under a name of its own (the scratch data-parallel method)."""
import functools

from trainers.cards import Card
from trainers.cards.dataparallel import dense_bytes

CARD = Card("dataparallel", "ddp2", "scratch_ddp2:DDP2", sync_bytes=dense_bytes, style=("#123456", "h"))


@functools.cache
def _build():
    from trainers.dataparallel.ddp import DDP

    return type("DDP2", (DDP,), {"__module__": __name__})


def __getattr__(name):
    if name == "DDP2":
        return _build()
    raise AttributeError(name)
'''
SCRATCH_TASK_FILE = '''"""digits2: the digits task under a name of its own (the scratch task)."""
from trainers.cards import Card
from trainers.tasks.digits import Digits

CARD = Card("task", "digits2", "scratch_digits2:Digits2")


class Digits2(Digits):
    """Digits, by another name."""
'''
DP_ENTRY_POINT, TASK_ENTRY_POINT = "ddp2 = scratch_ddp2:CARD", "digits2 = scratch_digits2:CARD"


@pytest.fixture(scope="module")
def scratch_dp_and_task(tmp_path_factory) -> dict:
    site = tmp_path_factory.mktemp("site")
    (site / "scratch_ddp2.py").write_text(SCRATCH_DP_FILE)
    (site / "scratch_digits2.py").write_text(SCRATCH_TASK_FILE)
    dist_info(site, "scratch-more", "0.1", [DP_ENTRY_POINT, TASK_ENTRY_POINT])
    places = {"ddp2": [site / "scratch_ddp2.py", DP_ENTRY_POINT],
              "digits2": [site / "scratch_digits2.py", TASK_ENTRY_POINT]}
    return {"env": {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}, "places": places}


def test_a_scratch_data_parallel_method_needs_two_places_and_then_works_by_name(scratch_dp_and_task, tmp_path):
    assert all(len(p) == 2 for p in scratch_dp_and_task["places"].values())
    env = scratch_dp_and_task["env"]
    out = _python(
        "import sys; from trainers import spec; from harness.results import style; "
        "spec.check_method('ddp2'); "
        "print(spec.is_data_parallel('ddp2'), 'ddp2' in spec.dp_method_names(), style.style('ddp2'), "
        "'torch' in sys.modules)", env)
    assert out.split() == ["True", "True", "('#123456',", "'h')", "False"]   # its card's style; torch-free

    # a real (in-process) training run by name: the tensors it exchanges are its card's bytes per step
    out = _python(
        "from harness.projection import dpbytes; from harness.projection.inputs import dp_tensors; "
        "from trainers.dataparallel.base import DPConfig; from trainers.dataparallel.inprocess import simulate; "
        "t = simulate('ddp2', DPConfig(steps=3, k=2), workers=2, batch=2, seq_len=16); "
        "rule = [dpbytes.step_bytes('ddp2', dp_tensors('micro', 'full', 8), s, dpbytes.Sync(steps=3, k=2)) "
        "for s in (1, 2, 3)]; "
        "print(type(t.methods[0]).name, t.data_bytes == rule == t.claimed, t.losses[-1] < t.losses[0])", env)
    assert out.split() == ["ddp2", "True", "True"]

    proc = subprocess.run([*HARNESS, "run", "--method", "ddp2", "--baseline", "ddp", "--model", "micro",
                           "--no-emulation", "--dry-run", "--out", str(tmp_path / "r")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0 and "ddp2" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_a_scratch_task_needs_two_places_and_then_works_by_name(scratch_dp_and_task, tmp_path):
    env = scratch_dp_and_task["env"]
    out = _python(
        "from trainers import tasks; t = tasks.get_task('digits2', max_len=2); p = t.generate(2, seed=1)[0]; "
        "print(t.name, 'digits2' in tasks.available(), t.score(p, t.gold(p)).correct, "
        "tasks.parse_task_options('digits2', 'max_len=3'))", env)
    assert out.split() == ["digits2", "True", "True", "{'max_len':", "3}"]
    # a card without options: its constructor's keywords, typed like their defaults, and its own range checks
    out = _python(
        "from trainers import tasks\n"
        "print(tasks.parse_task_options('digits2', 'ops=copy,add,min_len=2'))\n"
        "try: tasks.check_task_options('digits2', 'max_len=99')\n"
        "except ValueError as e: print(e)", env)
    assert out.splitlines() == ["{'ops': 'copy,add', 'min_len': 2}",
                                "--task-options: digits: need 1 <= min_len <= max_len <= 32, got 1, 99"]
    proc = subprocess.run([*HARNESS, "run", "--method", "full-bf16", "--baseline", "none", "--task", "digits2", "--task-options",
                           "max_len=2", "--model", "micro", "--no-emulation", "--dry-run", "--out", str(tmp_path / "r")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_every_in_tree_method_card_parses_its_own_names():
    """The name grammars live on the cards: rank-R and the lordo-* readings, each with what it implies."""
    assert cards.match("method", "rank-3")[1] == {"ship_dtype": "bf16", "lora_rank": 3}
    assert cards.match("method", "rank3")[1]["lora_rank"] == 3
    assert cards.match("method", "rank-0") is None and cards.match("method", "rank-R") is None
    assert cards.match("method", "full")[1] == {"ship_dtype": "fp32"}
    card, implied = cards.match("dataparallel", "lordo-global-fullrank-reapplied")
    assert card.name == "lordo-global" and implied == {"qhm": "full-rank", "qhm_residual": "reapplied"}
    assert cards.match("dataparallel", "lordo-local-none")[1] == {"qhm": "none"}
    assert cards.match("dataparallel", "lordo-global-none-reapplied") is None   # a reading only after -fullrank
    assert cards.match("dataparallel", "ddp-none") is None
    assert cards.is_in_tree("rank-12") and cards.is_in_tree("lordo-local-lowrank") and not cards.is_in_tree("halves")
    for kind in ("method", "dataparallel", "task", "objective"):
        assert cards.in_tree(kind), kind


# An objective the same way: its card says what the learner, the model cache and the results make of it.
SCRATCH_OBJECTIVE_FILE = '''"""kl2: distill under a name of its own (the scratch objective)."""
import functools

from trainers.cards import Card

CARD = Card("objective", "kl2", "scratch_kl2:KL2", implies={"group_size": 1}, needs_teacher=True,
            heldout_metric="reverse_kl", train_metric="kl2_loss")


@functools.cache
def _build():
    from trainers.objectives.distill import Distill

    return type("KL2", (Distill,), {"__module__": __name__})


def __getattr__(name):
    if name == "KL2":
        return _build()
    raise AttributeError(name)
'''
OBJECTIVE_ENTRY_POINT = "kl2 = scratch_kl2:CARD"


@pytest.fixture(scope="module")
def scratch_objective(tmp_path_factory) -> dict:
    site = tmp_path_factory.mktemp("site")
    (site / "scratch_kl2.py").write_text(SCRATCH_OBJECTIVE_FILE)
    dist_info(site, "scratch-kl2", "0.1", [OBJECTIVE_ENTRY_POINT])
    return {"env": {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])},
            "places": [site / "scratch_kl2.py", OBJECTIVE_ENTRY_POINT]}


def test_every_in_tree_objective_card_names_figures_the_services_and_results_know():
    from dataclasses import fields

    from trainers.hilo.evaluate import EvalResult

    # the figures a card may name are the evaluation's float figures; the results accept what the cards name
    figures = {f.name for f in fields(EvalResult) if str(f.type).startswith("float")}   # one figure, not a list
    assert set(cards.HELDOUT_FIGURES) == figures
    assert {c.heldout_metric for c in cards.in_tree("objective")} | {"mean_reward"} == cards.heldout_metrics()
    assert [c.name for c in cards.in_tree("objective") if c.needs_teacher] == ["distill"]
    # an objective without a card (a plugin's class, an old folder's name): no teacher, grpo's figures
    plain, grpo = cards.objective("no-such-objective"), cards.objective("grpo")
    assert (plain.needs_teacher, plain.heldout_metric, plain.train_metric) == (
        grpo.needs_teacher, grpo.heldout_metric, grpo.train_metric) == (False, "mean_reward", "reward_mean")


def test_a_scratch_objective_needs_two_places_and_its_card_drives_teacher_and_metrics(scratch_objective):
    assert len(scratch_objective["places"]) == 2   # its file and one registration line
    env = scratch_objective["env"]
    out = _python(
        "import sys; from trainers import spec; from harness.results import tables; "
        "p = spec.get('objective'); p.parse('kl2'); "
        "print(tables.train_metric_name({'method': 'full', 'objective': 'kl2'}), "
        "tables.train_metric_name({'method': 'full', 'objective': 'grpo'}), spec.resolve_group_size('kl2', None), "
        "'torch' in sys.modules)", env)
    assert out.split() == ["kl2_loss", "reward_mean", "1", "False"]   # the results read its card, torch-free

    # the learner builds it with the run's teacher, as its card says (grpo's card takes none)
    out = _python(
        "from trainers.hilo.learner import build_objective; from trainers.model.models import build_base_model; "
        "m = build_base_model('micro'); o = build_objective('kl2', m); g = build_objective('grpo', m); "
        "print(type(o).__name__, o.name, o.teacher is m, hasattr(g, 'teacher'))", env)
    assert out.split() == ["KL2", "kl2", "True", "False"]


@pytest.mark.slow
def test_a_scratch_objective_runs_by_name(scratch_objective, tmp_path):
    """A real run (~1.5 min on 2 loaded cores): the model cache builds its teacher, the learner scores
    held-out problems by its card's figure, the results name its training figure."""
    proc = subprocess.run([*HARNESS, "run", "--objective", "kl2", "--method", "full", "--baseline", "none",
                           "--model", "micro", "--no-emulation", "--updates", "2", "--seeds", "1", "--workers", "1",
                           "--eval-every", "1", "--out", str(tmp_path / "r")], capture_output=True, text=True,
                          env=scratch_objective["env"], timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    import pandas as pd

    from trainers.events import read_events

    run, = (tmp_path / "r").iterdir()
    assert set(pd.read_parquet(run / "updates.parquet")["train_metric_name"]) == {"kl2_loss"}
    evals = [r for path in run.rglob("events-learner.jsonl") for r in read_events(path) if r["kind"] == "eval"]
    assert evals and {r["objective_metric"] for r in evals} == {"reverse_kl"}
    assert all(r["objective"] == r["reverse_kl"] is not None for r in evals)


# Task and objective options: the card declares them (names, defaults, ranges, choices); the class takes
# them as keywords. The two are held equal here, so neither can drift from the other.
def _build(card, keywords: dict):
    cls = card.load()
    return cls(teacher=object(), **keywords) if card.needs_teacher else cls(**keywords)


def _accepted(card, key: str, value) -> bool:
    keywords = {key: value}
    for other, o in card.options.items():   # keep the cross rules (max_len >= min_len) out of the way
        if o.at_least == key:
            keywords[other] = value
        if card.options[key].at_least == other:
            keywords[other] = o.lo
    try:
        _build(card, keywords)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("card", [*cards.in_tree("task"), *cards.in_tree("objective")], ids=lambda c: c.name)
def test_every_task_and_objective_card_states_its_constructors_keywords_defaults_and_ranges(card):
    assert card.options, card.name
    assert cards.option_drift(card, card.load()) == []
    _build(card, {})   # the defaults build it
    for key, o in card.options.items():
        if o.lo is not None:
            below = o.lo - 1 if o.type is int else o.lo - (abs(o.lo) or 1)
            assert _accepted(card, key, o.lo) and not _accepted(card, key, below), (key, o.lo)
        if o.hi is not None:
            assert _accepted(card, key, o.hi) and not _accepted(card, key, o.hi + 1), (key, o.hi)
        for choice in o.choices or ():
            assert _accepted(card, key, (choice,) if o.many else choice), (key, choice)
        if o.choices:
            assert not _accepted(card, key, ("no-such",) if o.many else "no-such"), key


def test_option_drift_names_each_difference():
    class Task:
        def __init__(self, count: int = 4, extra: str = "x", **more):
            pass

    card = cards.Card("task", "t", "", {"count": cards.Option(5, "n", type=int), "gone": cards.Option(1, "g")})
    assert cards.option_drift(card, Task) == ["extra: the constructor has it, the card not",
                                              "gone: the card has it, the constructor not",
                                              "count: default 5 on the card, 4 in the constructor"]


def test_task_options_are_checked_from_the_card_without_importing_the_task():
    out = _python(
        "import sys; from trainers import tasks\n"
        "print(tasks.parse_task_options('digits', 'ops=copy,add,max_len=3'))\n"
        "for text in ('min_len=5', 'max_len=33', 'ops=copy,mul', 'depth=2'):\n"
        "    try: tasks.check_task_options('digits', text)\n"
        "    except ValueError as e: print(e)\n"
        "print(sorted(m for m in sys.modules if m.startswith('trainers.tasks.')), 'torch' in sys.modules)",
        {**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.splitlines() == [
        "{'ops': ('copy', 'add'), 'max_len': 3}",
        "--task-options: digits max_len=4 (its default) is below min_len=5",
        "--task-options: digits max_len='33' is outside [1, 32]",
        "--task-options: digits ops='mul' is not one of copy, reverse, add",
        "--task-options: digits has no option 'depth'; valid: ops=copy,reverse (any of "
        "copy|reverse|add), min_len=1 (1..32), max_len=4 (1..32)",
        "['trainers.tasks.base'] False"]



def test_objective_options_reach_the_objective_the_learner_builds():
    """--objective-options, typed from the card, are the keywords the learner's objective is built with."""
    from trainers.hilo.learner import build_objective

    grpo = build_objective("grpo", None, "kl_coef=0.05,aggregation=sequence,scale_by_std=false")
    assert (grpo.kl_coef, grpo.aggregation, grpo.scale_by_std) == (0.05, "sequence", False)
    assert build_objective("grpo", None, "").kl_coef == 0.0
