"""The cost model's data-parallel byte rules (harness/projection/dpbytes.py) against what the methods
state (their `claimed_bytes`, step by step, on real replicas) and what a real run measured
(tests/fixtures/runs/dp-micro-excerpt: a `harness run` of lordo-global, lordo-global-none and
lordo-local, micro, 192 steps, K = 32, 2 workers); and prediction.json / the report carrying them
instead of a run-time "no byte rule for method 'ddp'" line."""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from harness.projection import dpbytes, prediction
from harness.projection.inputs import dp_tensors
from harness.results import ledger, report, tables
from trainers import cards

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "runs" / "dp-micro-excerpt"
NAMES = [*(c.name for c in cards.in_tree("dataparallel")), "lordo-global-none", "lordo-global-lowrank", "lordo-global-fullrank-reapplied",
         "lordo-local-none", "lordo-local-fullrank"]


@pytest.mark.parametrize("train, rank, lora_rank", [("full", 8, 8), ("lora", 4, 16)])
@pytest.mark.parametrize("initial_q", ["pseudo-gradient", "random"])
def test_every_step_equals_the_methods_own_claimed_bytes(train, rank, lora_rank, initial_q):
    """10 steps, K = 3 (a partial last window), state syncs every 6 steps, a refresh every 4: every sync
    kind of every method (first dense window, state syncs, refreshes, the last step's sync)."""
    from trainers.dataparallel import get_method
    from trainers.dataparallel.base import DPConfig
    from trainers.dataparallel.inprocess import replica

    if "initial_q" not in {f.name for f in dataclasses.fields(DPConfig)}:   # LoRDO before --lordo-initial-q
        if initial_q != "random":
            pytest.skip("this tree's LoRDO has no --lordo-initial-q: its first Q is the seeded random basis")
        first_q = {}
    else:
        first_q = {"initial_q": initial_q}
    _, params = replica("micro", seed=0, train=train, lora_rank=lora_rank)
    cfg = DPConfig(steps=10, k=3, k_states=6, refresh=4, rank=rank, **first_q)
    sync = dpbytes.Sync(steps=10, k=3, k_states=6, refresh=4, rank=rank, qhm=cfg.qhm, omega=cfg.omega,
                        initial_q=initial_q)
    tensors = dp_tensors("micro", train, lora_rank)
    assert [(n, tuple(p.shape)) for n, p in params.items()] == list(tensors)   # what a replica synchronises
    for name in NAMES:
        method = get_method(name, params, cfg)
        for step in range(1, 11):
            assert dpbytes.step_bytes(name, tensors, step, sync) == method.claimed_bytes(step), (name, step)


def test_the_stated_formulas_on_one_matrix():
    """docs/ALGORITHMS.md's bytes per sync per worker, by hand: one 64 x 176 MLP weight, r = 4."""
    t = (("layers.0.mlp.up_proj.weight", (64, 176)), ("norm.weight", (64,)))
    s, l, r, n = 64, 176, 4, 64
    sync = dpbytes.Sync(steps=8, k=4, k_states=8, refresh=200, rank=r, initial_q="random")
    assert dpbytes.step_bytes("ddp", t, 2, sync) == (4 * (n + s * l),) * 2
    assert dpbytes.step_bytes("lowrank-ddp-projected", t, 2, sync) == (4 * (n + r * l),) * 2
    assert dpbytes.step_bytes("lowrank-ddp-projected", t, 1, sync) == (4 * (n + s * l),) * 2   # refresh
    assert dpbytes.step_bytes("diloco", t, 3, sync) == (0, 0)
    assert dpbytes.step_bytes("diloco", t, 4, sync) == (4 * (n + s * l),) * 2
    assert dpbytes.step_bytes("lordo-global-none", t, 4, sync) == (4 * (n + r * l), 4 * (n + r * l + s * r))
    assert dpbytes.step_bytes("lordo-global", t, 4, sync) == (4 * (n + s * l), 4 * (n + s * l + s * r))
    assert dpbytes.step_bytes("lordo-global-none", t, 8, sync) == (4 * (3 * n + 3 * r * l), 4 * (3 * n + 3 * r * l + s * r))
    assert dpbytes.step_bytes("lordo-local-none", t, 4, sync) == (4 * (n + s * r + r * l), 4 * (n + s * l))
    # per step over the whole windows: diloco ships every element once per K steps
    assert dpbytes.bytes_per_step("diloco", t, sync) == (4 * (n + s * l) / 4,) * 2


def test_a_plugin_or_unknown_name_is_one_line_naming_it():
    with pytest.raises(ValueError, match="no data-parallel byte rule for method 'spar'"):
        dpbytes.step_bytes("spar", (), 1, dpbytes.Sync(steps=1))


def test_a_real_runs_claimed_and_measured_bytes(tmp_path):
    """Row by row, the run's claimed bytes are the byte rules'; the measured SYNC payload is that plus
    its tensor table's header (a JSON table of names and shapes: under 8 KiB here)."""
    t = tables.read(FIXTURE)
    cfg = t.runs[0].config
    tensors = dp_tensors(cfg["model"], cfg.get("dp_train"), int(cfg["lora_rank"]))
    sync = dpbytes.Sync.from_config(cfg)
    u = t.updates
    assert set(u["method"]) == {"lordo-global", "lordo-global-none", "lordo-local"}
    for row in u.itertuples():
        want = dpbytes.step_bytes(row.method, tensors, int(row.update_index), sync)
        assert want == (row.claimed_bytes_up, row.claimed_bytes_down), (row.method, row.update_index)
        if want[0]:
            assert 0 < row.payload_bytes_up / row.workers - want[0] < 8192
            assert 0 < row.payload_bytes_down - want[1] < 8192


def test_prediction_and_report_carry_the_data_parallel_bytes(tmp_path):
    run = shutil.copytree(FIXTURE, tmp_path / "dp")
    path = prediction.write(run)                 # it raised "no byte rule for method ..." before
    doc = json.loads(path.read_text())
    assert doc["variants"] == {} and "HiLo's round" in doc["dataparallel_note"]
    for method, v in doc["dataparallel"].items():
        assert v["bytes_up_per_step"] == pytest.approx(v["claimed_up_per_step"]), method
        assert v["bytes_down_per_step"] == pytest.approx(v["claimed_down_per_step"]), method
        assert v["bytes_up_per_step"] < v["payload_up_per_step"] < 1.02 * v["bytes_up_per_step"], method
    md = report.write(run).read_text()
    section = md.split("## Cost model vs measured: data-parallel bytes")[1].split("\n## ")[0]
    assert "bytes per optimizer step only" in section
    rows = [ln for ln in section.splitlines() if ln.startswith("| dp |")]
    assert {r.split(" | ")[1] for r in rows} == {"lordo-global", "lordo-global-none", "lordo-local"}
    assert ledger.model_section(tables.read(run).runs)[0] == "## Cost model vs measured: data-parallel bytes"
