"""Load-aware measurement (issue 24): cells interleaved so load drifts hit every method alike, each
phase's CPU seconds and the machine's load recorded beside its wall time, speedups with a CI over
paired seeds, and a flag when the machine was contended."""
import time

import pandas as pd
import pytest

from harness.results import compare
from harness.run import config, launch
from trainers.events import PhaseTimer, machine_load, read_cpu_counters


def _order(schedule: str) -> list[str]:
    cfg = config.build(method="spar,topk", seed="1,2,3", schedule=schedule)
    return [c.name for c in launch.cells(cfg)]


def test_interleaved_is_the_default_and_reverses_the_variants_every_other_seed():
    assert config.build().schedule == "interleaved"
    names = _order("interleaved")
    assert [n.rsplit("-s", 1)[1] for n in names] == ["1"] * 3 + ["2"] * 3 + ["3"] * 3
    first, second = names[:3], names[3:6]
    assert [n.rsplit("-s", 1)[0] for n in second] == [n.rsplit("-s", 1)[0] for n in first][::-1]


def test_sequential_runs_each_variants_seeds_back_to_back_with_the_same_cells():
    seq, inter = _order("sequential"), _order("interleaved")
    assert sorted(seq) == sorted(inter)
    assert [n.rsplit("-s", 1)[1] for n in seq[:3]] == ["1", "2", "3"]
    assert len({n.rsplit("-s", 1)[0] for n in seq[:3]}) == 1


def test_an_unknown_schedule_is_refused_in_one_line():
    with pytest.raises(config.ConfigError, match="interleaved, sequential"):
        config.build(schedule="random")


def test_phase_timer_charges_a_busy_phase_cpu_and_a_waiting_phase_none():
    timer = PhaseTimer()
    with timer.phase("train"):
        end = time.thread_time() + 0.05
        while time.thread_time() < end:   # burns this thread's CPU
            pass
    with timer.phase("idle"):
        time.sleep(0.05)                  # waits: no CPU
    row = timer.row()
    assert row["cpu_s"]["train"] >= 0.05 and row["cpu_s"]["train"] <= row["durations_s"]["train"] + 1e-3
    assert row["cpu_s"]["idle"] < row["durations_s"]["idle"] / 2
    assert row["process_cpu_s"] >= row["cpu_s"]["train"] - 1e-3
    m = row["machine"]
    assert set(m) == {"busy_frac", "steal_frac", "load1", "cores"} and m["cores"] >= 1
    assert m["busy_frac"] is None or 0.0 <= m["busy_frac"] <= 1.0


def test_machine_load_is_the_share_of_all_cores_time_between_two_readings():
    assert machine_load((10, 0, 100), (60, 20, 200)) | {"load1": None, "cores": None} == \
        {"busy_frac": 0.5, "steal_frac": 0.2, "load1": None, "cores": None}
    assert machine_load((1, 1, 1), (1, 1, 1))["busy_frac"] is None      # no time passed
    busy, steal, total = read_cpu_counters()
    assert total >= busy + steal > 0


def _updates(spu: list[float], train_s: float, train_cpu_s: float, seeds=(1, 1, 2, 2), load1=1.0) -> pd.DataFrame:
    return pd.DataFrame({"seed": list(seeds), "seconds_per_update": spu, "train_s": train_s,
                         "train_cpu_s": train_cpu_s, "encode_s": 0.0, "encode_cpu_s": 0.0, "idle_s": 0.5,
                         "worker_rollout_s": 0.4, "worker_rollout_cpu_s": 0.1, "load1": load1, "cores": 2,
                         "steal_frac": 0.0})


def test_cpu_charged_seconds_take_out_what_compute_phases_waited_for_a_core():
    g = _updates([2.0] * 4, train_s=1.0, train_cpu_s=0.25)
    # 2.0 - (1.0 - 0.25) train wait - (0.4 - 0.1) rollout wait (under the 0.5 s idle)
    assert compare.cpu_charged(g).tolist() == pytest.approx([0.95] * 4)
    old = g.drop(columns=[c for c in g if c.endswith("cpu_s")])       # a run recorded before the columns
    assert compare.cpu_charged(old).tolist() == [2.0] * 4


def test_a_contended_machine_is_flagged_with_its_reasons_and_a_quiet_one_is_not():
    busy = compare._contention(_updates([1.0] * 4, train_s=1.0, train_cpu_s=0.5, load1=3.0))
    assert busy["contended"] and "load 1.50/core" in busy["contention"] and "train CPU/wall 0.50" in busy["contention"]
    quiet = compare._contention(_updates([1.0] * 4, train_s=1.0, train_cpu_s=0.97, load1=0.5))
    assert quiet["contended"] is False and quiet["contention"] is None
    unknown = compare._contention(pd.DataFrame({"seed": [1], "seconds_per_update": [1.0], "train_s": [1.0]}))
    assert unknown["contended"] is None


def test_speedup_ci_is_over_seeds_paired_and_exact_when_every_seed_agrees():
    mean, lo, hi, n = compare._speedup_ci({1: 2.0, 2: 4.0}, {1: 1.0, 2: 2.0})
    assert (mean, lo, hi, n) == (pytest.approx(2.0), pytest.approx(2.0), pytest.approx(2.0), 2)
    mean, lo, hi, n = compare._speedup_ci({1: 2.0, 2: 2.0, 3: 2.0}, {1: 1.0, 2: 2.0, 3: 4.0})
    assert n == 3 and lo < mean < hi and mean == pytest.approx(1.0)
    assert compare._speedup_ci({1: 2.0}, {2: 1.0}) == (None, None, None, 0)    # no seed in common
    assert compare._speedup_ci({1: 2.0}, {1: 1.0})[1:3] == (None, None)        # one seed: no interval
