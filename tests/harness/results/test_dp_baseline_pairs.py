"""The data-parallel report's held-out perplexity paired against the run's data-parallel --baseline
(harness/results/dataparallel_report.py `baseline_pairs`; presets/lordo-stagnation.yaml's table), on a
copy of tests/fixtures/runs/dp-micro-excerpt whose config names lordo-global-none the baseline
(lordo-global x seeds 1-3, lordo-global-none x 1-2, lordo-local x 1). Expected values from the raw rows."""
import json
import shutil
from pathlib import Path

import pytest

from harness.results import dataparallel_report, tables
from harness.results.quality import ci95

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "runs" / "dp-micro-excerpt"


def with_baseline(tmp_path: Path, baseline: str) -> Path:
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    cfg = json.loads((run / "config.json").read_text())
    cfg["baseline"] = baseline
    (run / "config.json").write_text(json.dumps(cfg))
    return run


def raw(run: Path, cell: str, process: str) -> list[dict]:
    return [json.loads(x) for x in (run / "cells" / cell / f"events-{process}.jsonl").read_text().splitlines()]


def final_ppl(run: Path, cell: str) -> float:
    return [r for r in raw(run, cell, "learner") if r.get("kind") == "update"][-1]["heldout_ppl"]


def mean_overlap(run: Path, cell: str) -> float:
    per: dict[int, list[float]] = {}
    for w in ("w1", "w2"):
        for r in raw(run, cell, w):
            if r.get("kind") == "update" and "overlap" in r:
                per.setdefault(r["version"], []).append(r["overlap"])
    syncs = [sum(v) / len(v) for v in per.values()]
    return sum(syncs) / len(syncs)


def test_pairs_are_taken_seed_by_seed_over_the_seeds_both_ran(tmp_path):
    run = with_baseline(tmp_path, "lordo-global-none")
    t = dataparallel_report.baseline_pairs(tables.read(run).updates).set_index("method")
    assert set(t.index) == {"lordo-global", "lordo-local"}
    diffs = [final_ppl(run, f"lordo-global-s{s}") - final_ppl(run, f"lordo-global-none-s{s}") for s in (1, 2)]
    mean, half = ci95(diffs)
    g = t.loc["lordo-global"]
    assert g["pairs"] == 2 and g["diff"] == pytest.approx(mean) and g["diff_ci95"] == pytest.approx(half)
    assert g["overlap_base"] == pytest.approx(1.0, abs=1e-6)                  # QHM none: Q never moved
    assert g["overlap"] == pytest.approx(sum(mean_overlap(run, f"lordo-global-s{s}") for s in (1, 2)) / 2)
    local = t.loc["lordo-local"]
    assert local["pairs"] == 1 and local["diff"] == pytest.approx(final_ppl(run, "lordo-local-s1")
                                                                  - final_ppl(run, "lordo-global-none-s1"))
    assert local["diff_ci95"] is None or local["diff_ci95"] != local["diff_ci95"]    # one pair: no CI
    md = "\n".join(dataparallel_report.section(tables.read(run).updates))
    assert "### Held-out perplexity paired against `lordo-global-none`" in md
    assert f"| 2 | lordo-global | 2 | " in md and f"{mean:+.3f} ± {half:.3f}" in md


def test_no_pairs_without_a_data_parallel_baseline_that_ran(tmp_path):
    assert dataparallel_report.baseline_pairs(tables.read(with_baseline(tmp_path, "full-bf16")).updates).empty
    assert dataparallel_report.baseline_pairs(tables.read(FIXTURE).updates).empty           # ddp: not in the run
    assert "paired against" not in "\n".join(dataparallel_report.section(tables.read(FIXTURE).updates))


def test_the_stagnation_preset_names_its_baseline_and_only_dp_methods():
    from harness.run import presets
    from trainers import spec

    values = presets.load("lordo-stagnation")["values"]
    assert values["baseline"] == "lordo-global-none" and values["method"] == ["lordo-global-fullrank"]
    assert all(spec.is_data_parallel(m) for m in values["method"] + [values["baseline"]])
