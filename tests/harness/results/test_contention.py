"""Load-aware measurement: cells interleaved so load drifts hit every method alike, each
phase's CPU seconds and the machine's load recorded beside its wall time, speedups with a CI over
paired seeds, and a flag when the machine was contended."""
import time
from pathlib import Path

import pandas as pd
import pytest

from harness.results import compare
from harness.run import config
from trainers.events import PhaseTimer, machine_load, read_cpu_counters

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "runs"


def _order(schedule: str) -> list[str]:
    cfg = config.build(method="spar,topk", seed="1,2,3", schedule=schedule)
    return [c.name for c in cfg.cells]


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


# ---- cpu_charged at pipelining depth 1: the waits on the critical path only, never below the link ----

FULL_BF16_BYTES = 588_000     # the default run's full-bf16 update (README): 0.49 s at 10 Mbit/s


def _deep(train_s=1.0, train_cpu_s=0.3, idle_s=0.0, spu=1.05, rollout_s=0.3, rollout_cpu_s=0.1, rate=10e6,
          payload=FULL_BF16_BYTES, pipeline=1) -> pd.DataFrame:
    """Two updates of a pipelined cell: the learner trains while the update crosses the link."""
    return pd.DataFrame({"seed": [1, 1], "pipeline": pipeline, "seconds_per_update": spu, "idle_s": idle_s,
                         "train_s": train_s, "train_cpu_s": train_cpu_s, "encode_s": 0.0, "encode_cpu_s": 0.0,
                         "decode_replay_s": 0.0, "decode_replay_cpu_s": 0.0, "worker_rollout_s": rollout_s,
                         "worker_rollout_cpu_s": rollout_cpu_s, "worker_decode_replay_s": 0.01,
                         "worker_send_rollouts_s": 0.01, "payload_bytes_down": payload, "wire_bytes_up": 3000,
                         "contributors": 2, "workers": 2, "rate_bit_s": rate, "delay_s": 0.0})


def test_at_depth_1_a_download_that_overlapped_training_is_charged_in_full():
    g = _deep()
    down = (FULL_BF16_BYTES + compare.FRAME_HEADER_BYTES) * 8 / (10e6 * compare.GOODPUT)
    assert down == pytest.approx(0.492, abs=1e-3)
    assert compare.link_seconds(g).tolist() == pytest.approx([down] * 2)
    # The old rule took the whole 0.7 s train wait out: 1.05 - 0.7 = 0.35 s, below the 0.49 s download
    # that ran beside the training. Now the loop at CPU time is bound by the link: exactly the download.
    assert compare.cpu_charged(g).tolist() == pytest.approx([down] * 2)


def test_at_depth_1_waits_come_out_only_as_far_as_the_critical_path_shrinks():
    quiet = _deep(train_cpu_s=1.0, rollout_cpu_s=0.3)
    assert compare.cpu_charged(quiet).tolist() == pytest.approx([1.05] * 2)      # no wait: the wall figure
    # Unshaped link, the learner the bottleneck: its 0.7 s wait comes out (the workers' 0.32 s stage and
    # half the loop, (0.35 + 0.12) / 2, stay below the learner's 0.35 s).
    assert compare.cpu_charged(_deep(rate=float("nan"))).tolist() == pytest.approx([0.35] * 2)
    # The loop bound (250 ms each way: L = 0.55, W = 1.05, P = (0.55 + 0.25 + 1.05 + 0.25) / 2 = 1.05, idle
    # 0.5 s): the learner's 0.4 s train wait and the worker's 0.6 s rollout wait shorten the two-update
    # loop by half their sum.
    loop = _deep(train_s=0.5, train_cpu_s=0.1, idle_s=0.5, rollout_s=1.03, rollout_cpu_s=0.43,
                 rate=float("nan")).assign(delay_s=0.25)
    assert compare.cpu_charged(loop).tolist() == pytest.approx([1.05 - (0.4 + 0.6) / 2] * 2)


def test_at_depth_0_the_rule_is_the_serial_one_and_the_link_floor_does_not_bind():
    g = _deep(pipeline=0, idle_s=0.9, spu=1.95, rate=10e6)     # idle holds the 0.49 s download and the rollout
    # serial: 1.95 - 0.7 train wait - min(0.2 rollout wait, 0.9 idle)
    assert compare.cpu_charged(g).tolist() == pytest.approx([1.05] * 2)
    assert compare.cpu_charged(g.drop(columns=["pipeline"])).tolist() == pytest.approx([1.05] * 2)
    link = compare.link_seconds(g).iloc[0]
    assert 0.49 < link < 1.05


def test_cpu_charged_is_never_above_the_wall_figure_nor_below_the_link():
    g = _deep(spu=0.3, train_s=0.25, train_cpu_s=0.05)      # a row faster than the shaped rate allows (a burst)
    assert compare.cpu_charged(g).tolist() == pytest.approx([0.3] * 2)


def test_the_depth_1_fixture_charges_each_update_at_least_its_download():
    """tests/fixtures/runs/run-spar-20mbit: depth 1, 20 Mbit/s, recorded before the CPU columns (so its
    figures stay the wall ones); with a train phase that got 10 % of a core and rollouts 10 %, every
    update is still charged at least the time its download took on the link."""
    from harness.results import tables

    u = tables.read(FIXTURES / "run-spar-20mbit").updates
    assert (u["pipeline"] == 1).all()
    assert compare.cpu_charged(u).tolist() == u["seconds_per_update"].tolist()
    busy = u.assign(train_cpu_s=u["train_s"] * 0.1, worker_rollout_cpu_s=u["worker_rollout_s"] * 0.1)
    down = (u["payload_bytes_down"] + compare.FRAME_HEADER_BYTES) * 8 / (u["rate_bit_s"] * compare.GOODPUT)
    charged = compare.cpu_charged(busy)
    assert (charged >= down - 1e-12).all() and (charged <= u["seconds_per_update"]).all()
    full = u["method"] == "full"
    assert down[full].min() > 0.03        # full's 78 kB update: 33 ms at 20 Mbit/s
    assert (charged[full] < u["seconds_per_update"][full]).any()     # the waits still come out where they may


# ---- the headline speedup: CPU time when the run was contended, wall time when it was quiet ----

def _heldout(**assign):
    from harness.results import tables

    t = tables.read(FIXTURES / "run-heldout")      # recorded at load ~19 on 2 cores: contended
    return t.updates.assign(**assign), t.cells


def _quiet(u: pd.DataFrame) -> dict:
    return {"load1": 0.5, "train_cpu_s": u["train_s"], "steal_frac": 0.0}


def test_a_contended_runs_headline_is_the_cpu_time_speedup_with_its_interval_over_seeds():
    comp = compare.comparison(*_heldout())
    spar = comp[comp["variant"] == "spar@12.8%"].iloc[0]
    assert spar["contended"] and spar["run_contended"] and spar["speedup_headline_basis"] == "cpu"
    assert (spar["speedup_headline"], spar["speedup_headline_lo"], spar["speedup_headline_hi"]) == \
        (spar["speedup_cpu"], spar["speedup_cpu_lo"], spar["speedup_cpu_hi"])
    assert spar["speedup_cpu_lo"] < spar["speedup_cpu"] < spar["speedup_cpu_hi"]
    assert spar["speedup"] != spar["speedup_headline"] and spar["speedup_ci_lo"] is not None   # the wall figures stay


def test_a_quiet_runs_headline_is_the_wall_clock_speedup():
    u, cells = _heldout()
    comp = compare.comparison(u.assign(**_quiet(u)), cells)
    for _, r in comp.iterrows():
        assert r["run_contended"] is False and r["speedup_headline_basis"] == "wall"
        assert (r["speedup_headline"], r["speedup_headline_lo"], r["speedup_headline_hi"]) == \
            (r["speedup_seed_mean"], r["speedup_ci_lo"], r["speedup_ci_hi"])


def test_one_contended_variant_puts_both_sides_of_the_comparison_on_cpu_time():
    u, cells = _heldout()
    quiet = u.assign(**_quiet(u))
    spar = quiet["variant"] == "spar@12.8%"
    quiet.loc[spar, "load1"] = 4.0           # only the spar cells ran while something else did
    comp = compare.comparison(quiet, cells).set_index("variant")
    assert comp.loc["spar@12.8%", "contended"] and not comp.loc["full-bf16", "contended"]
    assert comp["run_contended"].tolist() == [True, True] and set(comp["speedup_headline_basis"]) == {"cpu"}


@pytest.mark.parametrize("slowed", [{"straggler": "w2:exp:500ms"}, {"cpu_limited": True}])
def test_workers_slowed_on_purpose_keep_a_contended_run_on_the_wall_clock(slowed):
    """A CPU share or an injected delay is what such a run measures; CPU time would erase it (a
    throttled or sleeping worker's wall exceeds its CPU like a contended one's), so the headline and
    time to quality stay on the wall clock, and the verdict says why."""
    from harness.results import verdict

    comp = compare.comparison(*_heldout(**slowed))
    spar = comp[comp["variant"] == "spar@12.8%"].iloc[0]
    assert spar["run_contended"] and spar["run_slowed"] and spar["speedup_headline_basis"] == "wall"
    assert spar["speedup_headline"] == spar["speedup_seed_mean"]
    assert set(comp.filter(like="_seconds_basis").stack()) <= {"wall"}
    assert "slowed on purpose" in verdict.speed(spar)[0]


def test_rows_without_load_columns_keep_the_wall_headline():
    u, cells = _heldout()
    old = u.drop(columns=[c for c in u if c.endswith("cpu_s") or c in ("load1", "cores", "steal_frac")])
    comp = compare.comparison(old, cells)
    assert comp["run_contended"].isna().all() and set(comp["speedup_headline_basis"]) == {"wall"}
    assert comp["speedup_headline"].tolist() == comp["speedup_seed_mean"].tolist()


def test_without_a_paired_seed_the_headline_is_the_ratio_of_the_medians_and_has_no_interval():
    u, cells = _heldout()
    u = u[(u["variant"] == "full-bf16") & (u["seed"] == 1) | (u["variant"] == "spar@12.8%") & (u["seed"] == 2)]
    spar = compare.comparison(u, cells).set_index("variant").loc["spar@12.8%"]
    assert spar["speedup_seeds"] == 0 and spar["speedup_headline_basis"] == "cpu"
    assert spar["speedup_headline"] == pytest.approx(1 / spar["s_per_update_cpu_median"] * u.loc[
        u["variant"] == "full-bf16"].pipe(compare.cpu_charged).median())
    assert pd.isna(spar["speedup_headline_lo"]) and pd.isna(spar["speedup_headline_hi"])


# ---- seconds_vs_bandwidth: CPU-charged seconds when the sweep was contended, wall beside ----

def _sweep_comp(contended: bool) -> pd.DataFrame:
    """tests/fixtures/runs/sweep-bw (10 and 50 Mbit/s), its rows loaded or quiet."""
    from harness.results import tables

    t = tables.read(FIXTURES / "sweep-bw")
    u = t.updates.assign(load1=4.0 if contended else 0.5, cores=2, steal_frac=0.0,
                         train_cpu_s=t.updates["train_s"] * (0.3 if contended else 1.0),
                         worker_rollout_cpu_s=t.updates["worker_rollout_s"])
    return compare.comparison(u, t.cells)


def test_seconds_vs_bandwidth_plots_cpu_time_when_contended_and_wall_time_beside():
    from harness.results import plots

    comp = _sweep_comp(contended=True)
    plot = plots.draw_seconds_vs_bandwidth(comp)
    ax = plot.fig.axes[0]
    assert "compute charged at CPU time" in plot.caption and "faint dashed lines: the wall-clock" in plot.caption
    for variant, g in comp.groupby("variant"):
        g = g.sort_values("rate_bit_s")
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert list(lines[f"{variant}, wall clock"].get_ydata()) == pytest.approx(g["s_per_update_median"].tolist())
        assert lines[f"{variant}, wall clock"].get_linestyle() == "--"
        bars = {c.get_label(): c.lines[0] for c in ax.containers}          # the error-bar series
        assert list(bars[variant].get_ydata()) == pytest.approx(g["s_per_update_cpu_median"].tolist())
    assert (comp["s_per_update_cpu_median"] < comp["s_per_update_median"]).all()


def test_seconds_vs_bandwidth_stays_on_the_wall_clock_when_quiet():
    from harness.results import plots

    comp = _sweep_comp(contended=False)
    plot = plots.draw_seconds_vs_bandwidth(comp)
    assert "(wall clock)" in plot.caption and "CPU time" not in plot.caption
    ax = plot.fig.axes[0]
    ys = sorted(y for c in ax.containers for y in c.lines[0].get_ydata())
    assert ys == pytest.approx(sorted(comp["s_per_update_median"]))
    assert not [line for line in ax.get_lines() if line.get_linestyle() == "--"]
