"""Traces (harness/net/traces.py): formats, conversion, generation, resampling, and traces as
part of profiles and plans. Pure: no kernel."""
import pytest

from harness.net import profiles, traces
from harness.net.plan import build_plan, delay_queue_packets
from harness.net.topology import Topology

MAHI = "\n".join(["1", "1", "2", "500", "1000"]) + "\n"     # 4 deliveries in the first 100 ms of a 1 s loop


def test_mahimahi_bins_deliveries_and_loops_at_the_last_timestamp():
    t = traces.parse_mahimahi(MAHI, "m")
    assert t.period_s == 1.0
    assert t.rate_bit_s[0] == pytest.approx(3 * 12000 / 0.1)      # three 1500-byte deliveries in bin 0
    assert t.bits(0, 1.0) == pytest.approx(5 * 12000)              # every delivery counted once
    assert t.bits(1.0, 2.0) == pytest.approx(t.bits(0, 1.0))       # it loops


def test_csv_reads_header_pensieve_form_and_delay_loss_columns():
    t = traces.parse_csv("time_s,rate_mbit_s,delay_ms,loss_pct\n0,10,20,0\n1,20,40,1\n", "c")
    assert t.rate_bit_s == (10e6, 20e6) and t.delay_s == (0.02, 0.04) and t.loss_frac == (0.0, 0.01)
    assert t.period_s == 2.0                      # the last row holds for the median step
    cooked = traces.parse_csv("100.5 3.2\n101.5 1.6\n102.5 6.4\n", "cooked")   # Pensieve/FCC: time throughput
    assert cooked.times_s == (0.0, 1.0, 2.0) and cooked.rate_bit_s == (3.2e6, 1.6e6, 6.4e6)


@pytest.mark.parametrize("text, where", [("0,1\n0,2\n", "times must increase"), ("0,-1\n", "rate >= 0"),
                                         ("0,1\nx,y\n", "c:2"), ("", "no rows"), ("0,1,20000\n", "delay_ms")])
def test_bad_csv_names_the_problem(text, where):
    with pytest.raises(traces.TraceError, match=where):
        traces.parse_csv(text, "c")


def test_bad_mahimahi_names_the_line():
    with pytest.raises(traces.TraceError, match="m:2"):
        traces.parse_mahimahi("1\nabc\n", "m")


@pytest.mark.parametrize("kind", traces.KINDS)
def test_generated_traces_are_seeded_and_keep_their_mean(kind):
    a = traces.generate(kind, seconds=60, mean_bit_s=30e6, seed=7, step_s=0.5)
    assert a == traces.generate(kind, seconds=60, mean_bit_s=30e6, seed=7, step_s=0.5)
    tol = {"normal": 0.1, "outages": 0.4}.get(kind, 1e-6)
    assert a.stats()["mean_bit_s"] == pytest.approx(30e6, rel=tol)


def test_conversion_round_trips_the_bytes(tmp_path):
    t = traces.generate("normal", seconds=10, mean_bit_s=20e6, step_s=1.0, seed=1)
    mahi = traces.load(traces.save(t, tmp_path / "t.mahi"))
    back = traces.load(traces.save(mahi, tmp_path / "t.csv"))
    assert mahi.period_s == back.period_s == 10.0
    # Mahimahi stamps whole ms, so a delivery may land one ms (one bin) late: each second within 3
    # packets of the original, the whole loop within 2 (the budget's remainder and the period's line)
    for lo in range(10):
        assert back.bits(lo, lo + 1) == pytest.approx(t.bits(lo, lo + 1), abs=3 * 12000)
    assert back.bits(0, 10) == pytest.approx(t.bits(0, 10), abs=2 * 12000)


def test_steps_are_window_means_and_outages_play_at_the_floor():
    t = traces.Trace("x", (0.0, 0.5), (10e6, 0.0), 1.0)
    assert [s["rate_bit_s"] for s in t.steps(1.0, 2.0)] == [5e6, 5e6]
    assert [s["rate_bit_s"] for s in t.steps(0.5, 1.0)] == [10e6, traces.OUTAGE_RATE_BIT_S]


def _profile(link):
    return profiles.from_doc({"defaults": link, "learner": {"rate": "1gbit"}}, "p")


def test_a_traced_profile_changes_with_time_and_loops():
    prof = _profile({"delay": "10ms", "trace": {"file": "leo-satellite.csv", "interval": "500ms"}})
    assert prof.link("w1", 0).up.rate_bit_s == 64e6 and prof.link("w1", 8.0).down.rate_bit_s == 16e6
    assert prof.link("w1", 120 + 8.0) == prof.link("w1", 8.0)
    assert prof.link("w1", 8.0).up.delay_s == 0.01
    times = prof.timeline(["learner", "w1"])
    assert [next(times) for _ in range(3)] == [0.5, 1.0, 1.5]


@pytest.mark.parametrize("link, where", [
    ({"rate": "10mbit", "trace": "cellular-lte.csv"}, "p.defaults.up.rate"),
    ({"trace": "no-such-trace.csv"}, "p.defaults.up.trace"),
    ({"trace": {"file": "cellular-lte.csv", "interval": "1us"}}, "p.defaults.up.trace.interval"),
    ({"trace": {"file": "cellular-lte.csv", "every": "1s"}}, "p.defaults.up.trace.every"),
])
def test_bad_trace_fields_fail_at_load_naming_the_field(link, where):
    with pytest.raises(profiles.ProfileError, match=where.replace(".", r"\.")):
        _profile(link)


def test_trace_flag_replaces_the_profile_rate():
    prof = profiles.with_link(profiles.load("paper-62.5mbit"), {"trace": "cellular-lte.csv"})
    assert prof.link("w1", 3.0).up.rate_bit_s == pytest.approx(traces.load("cellular-lte.csv").mean_rate(3, 4), rel=1e-6)


def test_the_plan_lists_each_traced_link_schedule_and_sizes_queues_for_the_peak():
    prof = _profile({"delay": "10ms", "trace": {"file": "leo-satellite.csv", "interval": "500ms"}})
    topo = Topology.plan("0000", 1)
    plan = build_plan(prof, topo, "fallback", at_s=8.0)
    assert {(t["node"], t["dir"]) for t in plan.traces} == {("w1", "up"), ("w1", "down")}
    steps = plan.traces[0]["steps"]
    assert len(steps) == 240 and steps[16] == [8.0, 16e6, None, None]
    assert [op["rate_bit_s"] for op in plan.ops if op["op"] == "htb_class" and op["ns"].endswith("w1")] == [16e6]
    # the delay line is sized for 64 Mbit/s at every step: a rate step never restarts it
    queues = [op["queues"] for op in plan.ops if op["op"] == "delayline"]
    assert queues == [op["queues"] for op in build_plan(prof, topo, "fallback", at_s=0.0).ops if op["op"] == "delayline"]
    assert delay_queue_packets(prof.link("w1", 8.0).up) == delay_queue_packets(prof.link("w1", 0).up)
    assert type(plan).from_json(plan.to_json()).traces == plan.traces


def test_static_plans_print_no_traces_key():
    plan = build_plan(profiles.load("transatlantic"), Topology.plan("0000", 1), "fallback")
    assert "traces" not in plan.to_json()


def test_the_trace_flag_resolves_a_file_and_names_itself_when_bad(tmp_path, monkeypatch):
    from harness.run import config
    monkeypatch.chdir(tmp_path)
    traces.save(traces.generate("constant", seconds=4, mean_bit_s=5e6), "mine.csv")
    cfg = config.build(trace="mine.csv", workers=1)
    assert cfg.profile_doc["defaults"]["trace"] == str(tmp_path / "mine.csv")     # config.json works from anywhere
    assert cfg.load_profile().link("w1", 2.0).down.rate_bit_s == 5e6
    with pytest.raises(config.ConfigError, match="^--trace: .*no-such.csv"):
        config.build(trace="no-such.csv")
