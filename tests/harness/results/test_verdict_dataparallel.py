"""The verdict of a data-parallel run (tests/fixtures/runs/dp-vs-ddp: lordo-global against ddp, micro model,
2 workers, 3 seeds x 8 steps, emulation off). It said "quality: not evaluated on held-out problems" beside
a held-out perplexity the report's data-parallel section paired seed by seed, a regime line meant for runs
whose prediction predates the comm ratio, and a setup line naming a task the methods never trained."""
import json
import statistics
from pathlib import Path

from harness.results import report, tables
from harness.results.quality import ci95

RUN = Path(__file__).resolve().parents[2] / "fixtures" / "runs" / "dp-vs-ddp"


def final_ppl(cell: str) -> float:
    lines = (RUN / "cells" / cell / "events-learner.jsonl").read_text().splitlines()
    updates = [r for r in map(json.loads, lines) if r.get("kind") == "update"]
    return max(updates, key=lambda r: r["version"])["heldout_ppl"]


def test_the_verdict_states_held_out_perplexity_paired_against_ddp():
    md, _ = report.build(tables.read(RUN))
    block = md.split("## Runs")[0]
    diffs = [final_ppl(f"lordo-global-s{s}") - final_ppl(f"ddp-s{s}") for s in (1, 2, 3)]
    mean, half = ci95(diffs)
    assert mean - half > 0                                   # resolved: lordo-global's perplexity is higher
    ours = statistics.mean(final_ppl(f"lordo-global-s{s}") for s in (1, 2, 3))
    theirs = statistics.mean(final_ppl(f"ddp-s{s}") for s in (1, 2, 3))
    assert (f"  - quality: held-out perplexity (lower is better): {ours:.3f} against `ddp`'s {theirs:.3f}; paired "
            f"difference +{mean:.3f} ± {half:.3f} (3 paired seeds): **worse**") in block
    assert "- **`lordo-global` is 1.49x slower per update and is worse in held-out perplexity.**" in block
    assert "not evaluated on held-out problems" not in block
    assert "  - time to quality: not measured: a data-parallel cell evaluates held-out perplexity once" in block


def test_the_regime_and_setup_lines_say_what_a_data_parallel_run_is():
    md, _ = report.build(tables.read(RUN))
    assert ("**Regime**: not stated for data-parallel methods (the regime is HiLo full sync's link/compute ratio per "
            "update); emulation off: localhost, unshaped, so a speedup per step measures compute only.") in md
    assert "predates the comm ratio" not in md
    assert ("  - setup: model `micro`, the generated corpus pre-trained (--dp-train full), 2 workers, 8 optimizer "
            "steps x seeds 1, 2, 3\n") in md
    assert "task `digits`" not in md


def test_a_combined_report_with_a_hilo_run_keeps_the_data_parallel_quality_line(tmp_path):
    """lordo-global against ddp combined with a HiLo run (baseline full-bf16): the data-parallel bullet read
    "quality: not evaluated on held-out problems" and "`ddp` has no held-out figure"."""
    import shutil

    hilo = tmp_path / "hilo"
    shutil.copytree(RUN.parent / "run-heldout", hilo)
    md, _ = report.build(tables.read([RUN, hilo]))
    block = md.split("## Runs")[0]
    assert "held-out perplexity (lower is better): 85.124 against `ddp`'s 71.096" in block
    assert "not evaluated on held-out problems" not in block


def test_a_label_leaves_out_the_other_familys_parameters(tmp_path):
    """A HiLo run combined with a data-parallel one: the HiLo rows were labelled "(… dp_batch 8, dp_seq_len 64,
    dp_heldout 64)", parameters only the data-parallel loop reads."""
    import shutil

    hilo = tmp_path / "hilo"
    shutil.copytree(RUN.parent / "run-heldout", hilo)
    md, _ = report.build(tables.read([RUN, hilo]))
    assert "dp_batch" not in md.split("## Runs")[0] and "dp_seq_len 64" not in md


def test_a_label_leaves_out_a_hilo_parameter_that_differs_between_data_parallel_runs(tmp_path):
    """Two data-parallel runs at --lordo-k 2 and 4, the second also given --weight-decay 0.1 and --hash-every 2
    (a HiLo preset's, say): the data-parallel loop reads neither (trainers/dataparallel), yet the rows were
    labelled "lordo-global (lordo_k 4, weight_decay 0.1, hash_every 2)"."""
    import shutil

    from harness.results import compare

    for k, extra in ((2, {}), (4, {"weight_decay": 0.1, "hash_every": 2})):
        shutil.copytree(RUN, tmp_path / f"k{k}")
        cfg = json.loads((tmp_path / f"k{k}" / "config.json").read_text())
        (tmp_path / f"k{k}" / "config.json").write_text(json.dumps({**cfg, "lordo_k": k, **extra}))
    t = tables.read([tmp_path / "k2", tmp_path / "k4"])
    head, rows = report.table_rows(compare.comparison(t.updates, t.cells, t.evals))
    assert sorted(r[head.index("method")] for r in rows) == [
        "ddp (lordo_k 2)", "ddp (lordo_k 4)", "lordo-global (lordo_k 2)", "lordo-global (lordo_k 4)"]
    verdict = report.build(t)[0].split("## Runs")[0]
    assert "lordo_k 4" in verdict and "weight_decay" not in verdict and "hash_every" not in verdict
