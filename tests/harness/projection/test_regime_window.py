"""A traced run's regime is read at the rate its full sync's updates met (the part of the trace they ran
over, on each cell's own trace clock: harness/results/trace_clock.py), not at the whole trace's mean."""
import json
import shutil
from pathlib import Path

import pytest

from harness.net import profiles
from harness.projection import commratio, costmodel as cm, prediction
from harness.results import regime_report, tables, trace_clock

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "runs" / "run-heldout"
START_S = 2.0     # each cell's schedule starts 2 s after its first event (its first update's start)


def _traced_run(tmp_path) -> Path:
    """The fixture run with its worker links on a 200 s trace: 80 Mbit/s for 100 s, then 5 Mbit/s (whole
    mean 42.5); its updates run ~15-35 s into the cells, so they met only the 80 Mbit/s part."""
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    trace = tmp_path / "step.csv"
    trace.write_text("time_s,rate_mbit_s\n0,80\n100,5\n")
    cfg = json.loads((run / "config.json").read_text())
    cfg["profile_doc"] = {"defaults": {"delay": "5ms", "trace": str(trace)}}
    (run / "config.json").write_text(json.dumps(cfg))
    for cell in (run / "cells").iterdir():
        t0 = json.loads((cell / "events-learner.jsonl").open().readline())["t"]
        (cell / "schedule.csv").write_text(
            "at_s,due_t_s,applied_t_s,lag_s,skipped,node,direction,rate_bit_s,delay_s,loss_frac\n"
            f"0.0,{t0 + START_S},{t0 + START_S},0.0,False,w1,down,80000000.0,0.005,0.0\n")
    return run


def test_the_span_of_the_trace_updates_ran_over_is_on_each_cells_own_clock(tmp_path):
    run = _traced_run(tmp_path)
    u = tables.read(run).updates
    full = u[(u["method"] == "full-bf16") & (u["update_index"] > 1)]
    first, last = trace_clock.covered(run, full)
    assert first == pytest.approx(full["t_start_s"].min() - START_S)
    assert last == pytest.approx(full["t_end_s"].max() - START_S)
    assert 0 < first < last < 100
    assert trace_clock.covered(FIXTURE, full) is None          # no schedule logged: no span


def test_a_short_traced_runs_regime_is_at_the_rate_its_updates_met(tmp_path):
    """The Regime line read 'at trace step.csv, mean 42.5 Mbit/s (5-80)' and its ratio was computed at
    42.5 Mbit/s, though every update of the run ran while the trace was at 80 Mbit/s."""
    run = _traced_run(tmp_path)
    built = prediction.build(run, tmp_path / "cache")
    doc, cc = built["regime"], built["cc"]
    line = regime_report.words(doc)
    assert "full sync's measured updates ran over, trace step.csv over " in line
    assert "mean 80 Mbit/s there (the whole trace: mean 42.5 Mbit/s, 5-80)" in line
    assert doc["links"] == "trace step.csv, mean 42.5 Mbit/s (5-80)"        # the tables' coordinate, unchanged
    m = commratio.Measured(doc["compute_s"], doc["down_bytes"], doc["up_bytes"])
    prof = profiles.from_doc(json.loads((run / "config.json").read_text())["profile_doc"], "paper-62.5mbit")
    whole = commratio.ratio_at(cm.Network.from_profile(prof, 2, cc=cc), m)
    assert doc["ratio"] < whole                               # a faster link than the mean: less link time
    met = cm.Network.from_profile(prof, 2, tuple(doc["window_s"]), cc=cc)
    assert met.workers[0].down.rate_bit_s == pytest.approx(80e6)
    assert doc["ratio"] == pytest.approx(commratio.ratio_at(met, m))
