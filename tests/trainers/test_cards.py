"""Cards (trainers/cards): every compressor describes itself once, and a new one needs two places.

The scratch compressor below is a file and one registration line (an entry point of the group
`wan_harness.cards`, as an installed package declares it); nothing in this repository changes, and
the name then works everywhere: the run spec's flags and checks, the registry, the cost model, a
projection figure and a real run."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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
    info = site / "scratch_halves-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: scratch-halves\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[wan_harness.cards]\n{ENTRY_POINT}\n")
    places = [site / "scratch_halves.py", (info / "entry_points.txt", ENTRY_POINT)]
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
    info = tmp_path / "broken-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[wan_harness.cards]\nghost = no_such_module_here:CARD\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-c", "from trainers import spec; spec.check_method('spar'); "
                           "spec.check_method('ghost')"], capture_output=True, text=True, env=env, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert lines[0] == ("warning: card plugin 'ghost' (no_such_module_here:CARD) failed to load: "
                        "ModuleNotFoundError: No module named 'no_such_module_here'; ignored")
    assert proc.returncode == 1 and "unknown method 'ghost'" in lines[-1]
