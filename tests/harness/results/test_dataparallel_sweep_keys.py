"""The data-parallel reporting keys on every coordinate that varies between the runs, and keeps a seed
that ran no whole sync window.

Built on tests/fixtures/runs/dp-vs-ddp (lordo-global against ddp, micro model, 2 workers, 3 seeds x 8
steps, --lordo-k 2): expected values are read from the raw event rows (json), not through the tables.

1. A sweep over --lordo-k (`harness sweep --lordo-k 2,4`) merged its points: both verdict bullets gave one
   perplexity, the tables one "lordo-global" row over every point's seeds, the figures one series. Here:
   the fixture as the k=2 point, and a copy holding seed 1 only with config.json's lordo_k set to 4 as
   the k=4 point (the numbers per point then differ: 3 seeds against 1).
2. A run with fewer steps than --lordo-k lost its row: no whole window, so no bytes, so no held-out
   perplexity, no pairing and "quality: not evaluated". Here: the fixture with config.json's lordo_k 16.
"""
import json
import shutil
import statistics
from pathlib import Path

import pytest

from harness.results import dataparallel_plots, dataparallel_report, equal_bytes, report, tables
from harness.results.quality import ci95

RUN = Path(__file__).resolve().parents[2] / "fixtures" / "runs" / "dp-vs-ddp"


def final_ppl(cell: str) -> float:
    lines = (RUN / "cells" / cell / "events-learner.jsonl").read_text().splitlines()
    updates = [r for r in map(json.loads, lines) if r.get("kind") == "update"]
    return max(updates, key=lambda r: r["version"])["heldout_ppl"]


def copy(dst: Path, lordo_k: int, seeds: list[int] | None = None) -> Path:
    shutil.copytree(RUN, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["lordo_k"] = lordo_k
    if seeds is not None:
        cfg["seeds"] = seeds
        meta = json.loads((dst / "meta.json").read_text())
        for key in ("cells", "cells_complete"):
            meta[key] = [c for c in meta[key] if int(c.rsplit("-s", 1)[1]) in seeds]
        (dst / "meta.json").write_text(json.dumps(meta))
        for cell in (dst / "cells").iterdir():
            if int(cell.name.rsplit("-s", 1)[1]) not in seeds:
                shutil.rmtree(cell)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("swdp")
    return tables.read([copy(root / "lordo_k2", 2), copy(root / "lordo_k4", 4, seeds=[1])])


def test_a_lordo_k_sweep_keeps_its_points_apart_in_every_grouping(sweep):
    k2 = statistics.mean(final_ppl(f"lordo-global-s{s}") for s in (1, 2, 3))
    k4 = final_ppl("lordo-global-s1")
    assert k2 != pytest.approx(k4)
    t = dataparallel_report.table(sweep.updates)
    lordo = t[t["method"] == "lordo-global"].set_index("lordo_k")
    assert sorted(lordo.index) == [2, 4] and list(lordo["seeds"][[2, 4]]) == [3, 1]
    assert lordo.loc[2, "ppl_mean"] == pytest.approx(k2) and lordo.loc[4, "ppl_mean"] == pytest.approx(k4)
    pairs = dataparallel_report.baseline_pairs(sweep.updates).set_index("lordo_k")
    assert pairs.loc[2, "ppl"] == pytest.approx(k2) and pairs.loc[4, "ppl"] == pytest.approx(k4)
    assert list(pairs["pairs"][[2, 4]]) == [3, 1]
    pts = dataparallel_plots.ppl_points(sweep.updates)
    assert len(pts) == 4 and set(pts["lordo_k"]) == {2, 4}            # ddp and lordo-global at each point
    assert set(dataparallel_plots.overlap_bands(sweep.updates).groupby("lordo_k")["seeds"].max()) == {3, 1}
    assert set(equal_bytes.dp_cumulative(sweep.updates).groupby(["lordo_k", "method"])["seeds"].max()) == {3, 1}

    md, _ = report.build(sweep)
    verdict = md.split("## Runs")[0]
    ddp = statistics.mean(final_ppl(f"ddp-s{s}") for s in (1, 2, 3))
    assert f"held-out perplexity (lower is better): {k2:.3f} against `ddp`'s {ddp:.3f}" in verdict
    assert f"held-out perplexity (lower is better): {k4:.3f} against `ddp`'s {final_ppl('ddp-s1'):.3f}" in verdict
    section = md.split("## Data-parallel bytes")[1]
    assert "| 2 | lordo-global (lordo_k 2) | 3 x 8 |" in section and "| 2 | lordo-global (lordo_k 4) | 1 x 8 |" in section
    assert "| 2 | lordo-global | 4 x 8 |" not in section


def test_a_lordo_k_sweep_draws_one_series_per_point(sweep):
    fig = equal_bytes.draw_dp_equal_bytes(sweep.updates)[1]
    labels = {line.get_label() for ax in fig.axes for line in ax.get_lines()}
    assert {"lordo-global (lordo_k 2) (n=3)", "lordo-global (lordo_k 4) (n=1)"} <= labels
    overlap = dataparallel_plots.draw_dp_overlap(sweep.updates)[1]
    assert {line.get_label() for line in overlap.axes[0].get_lines()} == {
        "lordo-global (lordo_k 2), 3 seeds", "lordo-global (lordo_k 4), 1 seeds"}


def test_fewer_steps_than_lordo_k_keeps_the_held_out_perplexity_and_says_why_no_bytes(tmp_path):
    t = tables.read(copy(tmp_path / "k16", 16))
    ours = statistics.mean(final_ppl(f"lordo-global-s{s}") for s in (1, 2, 3))
    theirs = statistics.mean(final_ppl(f"ddp-s{s}") for s in (1, 2, 3))
    pairs = dataparallel_report.baseline_pairs(t.updates)
    assert list(pairs["method"]) == ["lordo-global"] and pairs["ppl"].iloc[0] == pytest.approx(ours)
    md, _ = report.build(t)
    verdict = md.split("## Runs")[0]
    assert f"quality: held-out perplexity (lower is better): {ours:.3f} against `ddp`'s {theirs:.3f}" in verdict
    assert "not evaluated on held-out problems" not in verdict
    row = next(line for line in md.split("## Data-parallel bytes")[1].splitlines()
               if line.startswith("| 2 | lordo-global |"))
    assert "| 3 x 8 | no whole sync window in 8 steps (--lordo-k 16) |" in row
    assert "| - | - | - | - | - | - | - | - | - | - |" not in row and row.count("| - ") == 9   # s/step is there
    mean, half = ci95([final_ppl(f"lordo-global-s{s}") for s in (1, 2, 3)])
    assert row.endswith(f"| {mean:.3f} ± {half:.3f} |")
    name, fig, caption = equal_bytes.draw_dp_equal_bytes(t.updates)
    assert "Left leaves out lordo-global: no seed ran a whole sync window" in caption
