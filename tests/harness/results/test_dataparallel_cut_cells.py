"""How a data-parallel run's report treats a cell cut short and a cell never started.

Built on tests/fixtures/runs/dp-vs-ddp (lordo-global against ddp, micro model, 2 workers, 3 seeds x 8
steps, --lordo-k 2), copied and edited the way a real run leaves its folder (checked against real runs:
a SIGTERM during a cell leaves its learner's update rows up to where it stopped, an "interrupted" row, a
summary saying "interrupted: SIGTERM" with no held-out figure, and no folder for the cells after it).

1. A seed cut short was averaged into its variant's row: "3 x 7" steps (8, 8, 5), its bytes and seconds per
   step in the means, and its missing held-out figure left its partner's in the baseline's paired mean
   (the verdict then quoted 3 paired seeds over 2 differences).
2. A cell that never started (the run stopped before it) was missing from the Cells table.
"""
import json
import shutil
import statistics
from pathlib import Path

import pytest

from harness.results import dataparallel_report, report, tables
from harness.results.quality import ci95

RUN = Path(__file__).resolve().parents[2] / "fixtures" / "runs" / "dp-vs-ddp"


def events(cell: Path, name: str = "events-learner.jsonl") -> list[dict]:
    return [json.loads(line) for line in (cell / name).read_text().splitlines()]


def final_ppl(cell: str) -> float:
    return next(r["heldout_ppl"] for r in events(RUN / "cells" / cell) if r.get("kind") == "heldout")


def edit_meta(run: Path, **changes) -> None:
    meta = json.loads((run / "meta.json").read_text())
    for key, value in changes.items():
        meta[key] = value(meta[key]) if callable(value) else value
    (run / "meta.json").write_text(json.dumps(meta))


def cut(run: Path, cell: str, steps: int) -> None:
    """Cut `cell` after `steps` optimizer steps as SIGTERM does: its rows after that gone (the held-out
    evaluation after the last step with them), an interrupted row, an interrupted summary."""
    folder = run / "cells" / cell
    for name in ("events-learner.jsonl", "events-w1.jsonl", "events-w2.jsonl"):
        kept = [r for r in events(folder, name) if r.get("kind") != "heldout" and r.get("version", 0) <= steps]
        for r in kept:
            r.pop("heldout_ppl", None)
        if name == "events-learner.jsonl":
            kept.append({"kind": "interrupted", "process": "learner", "reason": "SIGTERM", "t": kept[-1]["t"] + 0.1})
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in kept))
    summary = json.loads((folder / "summary.json").read_text())
    summary.update(complete=False, consistent=False, status="interrupted: SIGTERM", updates=steps,
                   heldout_ppl=None, hash_checks=0)
    summary.pop("hashes", None)
    (folder / "summary.json").write_text(json.dumps(summary))
    edit_meta(run, cells_complete=lambda done: [c for c in done if c != cell], status="interrupted", complete=False)


def copy(dst: Path) -> Path:
    shutil.copytree(RUN, dst)
    return dst


def row(md: str, section: str, start: str) -> str:
    return next(line for line in md.split(section)[1].splitlines() if line.startswith(start))


# ---- 1. a seed cut short ----------------------------------------------------------------------

def test_a_seed_cut_short_is_left_out_of_its_rows_figures_and_named(tmp_path):
    run = copy(tmp_path / "cut")
    cut(run, "ddp-s3", 5)
    t = tables.read(run)
    md, _ = report.build(t)
    ddp = row(md, "## Data-parallel bytes", "| 2 | ddp |")
    assert "| 2 | ddp | 2 x 8 (seed 3 at 5 of 8 steps: cut short, left out) |" in ddp
    mean, half = ci95([final_ppl("ddp-s1"), final_ppl("ddp-s2")])
    assert ddp.endswith(f"| {mean:.3f} ± {half:.3f} |")
    # both rows now count 8 steps a seed: the ratio against ddp is there
    lordo = dataparallel_report.table(t.updates).set_index("method").loc["lordo-global"]
    assert lordo["vs_ddp"] == pytest.approx(lordo["measured"] / dataparallel_report.table(t.updates)
                                            .set_index("method").loc["ddp", "measured"])
    assert "| 2 | lordo-global | 3 x 8 |" in md.split("## Data-parallel bytes")[1]


def test_a_seed_cut_short_on_one_side_is_no_pair(tmp_path):
    run = copy(tmp_path / "cut")
    cut(run, "ddp-s3", 5)
    t = tables.read(run)
    pairs = dataparallel_report.baseline_pairs(t.updates).iloc[0]
    assert pairs["pairs"] == 2
    assert pairs["ppl"] == pytest.approx(statistics.mean(final_ppl(f"lordo-global-s{s}") for s in (1, 2)))
    assert pairs["ppl_base"] == pytest.approx(statistics.mean(final_ppl(f"ddp-s{s}") for s in (1, 2)))
    quality = next(line for line in report.build(t)[0].split("## Runs")[0].splitlines() if "quality:" in line)
    assert quality.endswith("(n=2 seeds: too few for an interval)")


def test_every_seed_cut_short_keeps_the_row_and_says_so(tmp_path):
    run = copy(tmp_path / "cut")
    for seed, steps in ((1, 4), (2, 6), (3, 6)):
        cut(run, f"ddp-s{seed}", steps)
    section = "\n".join(dataparallel_report.section(tables.read(run).updates))
    assert "| 2 | ddp | 3 x 4-6 (every seed cut short of 8 steps) |" in section


# ---- 2. a cell that never started ----------------------------------------------------------------

def test_a_cell_never_started_is_listed_with_why(tmp_path):
    run = copy(tmp_path / "stopped")
    cut(run, "lordo-global-s3", 6)
    shutil.rmtree(run / "cells" / "ddp-s3")          # the run stopped before its last cell
    md, _ = report.build(tables.read(run))
    cells = md.split("## Cells")[1]
    assert "| stopped | lordo-global-s3 | interrupted: SIGTERM | 6 / 8 |" in cells
    assert "| stopped | ddp-s3 | not started (the run ended interrupted before it) | 0 / 8 | - | - | - |  |" in cells


def test_a_cell_whose_processes_could_not_start_says_so_not_interrupted(tmp_path):
    run = copy(tmp_path / "nostart")
    shutil.rmtree(run / "cells" / "ddp-s3")
    (run / "cells" / "ddp-s3").mkdir()            # launch made its folder, then could not start it
    reason = "the fork server could not start it (it died)"
    edit_meta(run, cells_complete=lambda done: [c for c in done if c != "ddp-s3"], status="failed", complete=False,
              errors=[f"ddp-s3: not started: {reason}"])
    cells = report.build(tables.read(run))[0].split("## Cells")[1]
    assert f"| nostart | ddp-s3 | not started: {reason} | 0 / " in cells


def test_the_hilo_family_lists_its_never_started_cell_too():
    """Not a data-parallel matter: run-interrupted (spar vs full, SIGTERM in the first cell) never listed full-s1."""
    md, _ = report.build(tables.read(RUN.parent / "run-interrupted"))
    assert "| run-interrupted | full-s1 | not started (the run ended interrupted before it) | 0 / 20 |" in md.split("## Cells")[1]
