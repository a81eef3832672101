"""The comparison table's bytes per update and "% of baseline" of a K-step data-parallel method (lordo-*,
diloco) are counted over whole sync windows, as the claimed-vs-measured table counts them, and say so.

They were the mean over every step, a last partial window included: measured on real micro runs (2 workers,
--no-emulation, --lordo-k 8) lordo-global read 38.14 % of ddp at 8 steps, 40.32 % at 12 (the sync at step 12
spread over 4 steps) and 50.85 % at 6 (no whole window at all). The run shorter than K is the
tests/fixtures/runs/dp-vs-ddp fixture (3 seeds x 8 steps) read with config.json's lordo_k set to 16.
"""
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from harness.results import compare, report, tables

RUN = Path(__file__).resolve().parents[2] / "fixtures" / "runs" / "dp-vs-ddp"


def row(md: str, section: str, start: str) -> str:
    return next(line for line in md.split(section)[1].splitlines() if line.startswith(start))


def rows(method: str, seed: int, syncs: set[int], payload: int, steps: int) -> list[dict]:
    """`steps` update rows of one seed; on sync steps each of 2 workers ships `payload` bytes each way."""
    return [{"profile": "p", "backend": "none", "emulated": False, "rate_bit_s": None, "links": None, "delay_s": 0.0,
             "loss_frac": 0.0, "workers": 2, "pipeline": 0, "method": method, "variant": method, "baseline": "ddp",
             "budget_frac": None, "seed": seed, "update_index": v, "seconds_per_update": 0.5, "lag": 0,
             "train_metric": 1.0, "train_metric_name": "lm_loss", "lordo_k": 4,
             "payload_bytes_down": payload if v in syncs else 0, "wire_bytes_down": 2 * (payload + 44) if v in syncs else 0,
             "payload_bytes_up": 2 * payload if v in syncs else 0, "wire_bytes_up": 2 * (payload + 44) if v in syncs else 0}
            for v in range(1, steps + 1)]


def test_the_percent_of_baseline_counts_whole_sync_windows_and_names_the_tail():
    """10 steps at K = 4: lordo syncs at 4, 8 and (the partial window) 10. Over whole windows it ships
    1700 / 4 per step, 42.5 % of ddp's 1000; over every step it read 3 x 1700 / 10 = 51 %."""
    updates = pd.DataFrame([r for s in (1, 2) for r in rows("lordo-global", s, {4, 8, 10}, 1700, 10)
                            + rows("ddp", s, set(range(1, 11)), 1000, 10)])
    comp = compare.comparison(updates, pd.DataFrame())
    lordo = comp.set_index("method").loc["lordo-global"]
    assert lordo["payload_bytes_down"] == pytest.approx(1700 / 4)
    assert lordo["fraction_of_full"] == pytest.approx(0.425)
    head, table = report.table_rows(comp)
    cell = dict(zip(head, next(r for r in table if r[2] == "lordo-global")))["% of baseline"]
    assert cell == "42.50% (whole sync windows: 2 tail steps left out)"
    ddp = dict(zip(head, next(r for r in table if r[2] == "ddp")))
    assert ddp["% of baseline"] == "100.00%" and ddp["payload B/update down (1 worker)"] == "1,000"


def test_a_run_shorter_than_lordo_k_has_no_percent_of_baseline_and_says_why(tmp_path):
    run = Path(shutil.copytree(RUN, tmp_path / "k16"))
    cfg = json.loads((run / "config.json").read_text())
    cfg["lordo_k"] = 16                                     # 8 steps: no whole window of 16
    (run / "config.json").write_text(json.dumps(cfg))
    md, comp = report.build(tables.read(run))
    head = row(md, "## Seconds per update", "| link |")
    cells = dict(zip([c.strip() for c in head.split("|")[1:-1]],
                     [c.strip() for c in row(md, "## Seconds per update", "| localhost (unshaped) | 2 | lordo-global |").split("|")[1:-1]]))
    assert cells["% of baseline"] == "- (no whole sync window in 8 steps, --lordo-k 16)"
    assert cells["payload B/update down (1 worker)"] == "-"
    assert comp.set_index("method").loc["lordo-global", "no_whole_window"]


def test_the_claimed_vs_measured_ratio_says_why_it_is_blank():
    """That table compares only equal counted steps: lordo's 8 (the partial window left out) against ddp's
    10 is no ratio, and the cell says both counts instead of a bare '-' ("- where the run has none")."""
    from harness.results import dataparallel_report

    updates = pd.DataFrame([r for s in (1, 2) for r in rows("lordo-global", s, {4, 8, 10}, 1700, 10)
                            + rows("ddp", s, set(range(1, 11)), 1000, 10)])
    updates["claimed_bytes_up"] = updates["claimed_bytes_down"] = updates["payload_bytes_down"]
    lordo = next(line for line in dataparallel_report.section(updates) if line.startswith("| 2 | lordo-global |"))
    assert "| - (8 steps, ddp 10: not comparable) |" in lordo
