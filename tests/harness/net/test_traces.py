"""Traces (harness/net/traces.py): formats, conversion, generation, resampling, and traces as
part of profiles and plans. Pure: no kernel."""
import math

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

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
    with pytest.raises(traces.TraceError, match="^m:3: timestamp 4 is before the previous one"):
        traces.parse_mahimahi("1\n5\n4\n", "m")


@pytest.mark.parametrize("name", ["bare", "link.txt", "x.log", "t.csv", "t.mahi", "Verizon-LTE.down"])
def test_mahimahi_is_recognised_by_content_whatever_the_file_is_called(tmp_path, name):
    path = tmp_path / name
    path.write_text(MAHI)
    t = traces.load(path)
    assert t.period_s == 1.0 and t.bits(0, 1.0) == pytest.approx(5 * 12000)


@pytest.mark.parametrize("name", ["c.csv", "c.txt", "c.trace"])
def test_a_csv_stays_a_csv_whatever_the_file_is_called(tmp_path, name):
    for text, rates in [("0,10\n1,20\n", (10e6, 20e6)),                       # integers, but two a row
                        ("time_s,rate_mbit_s\n0,1.5\n1,3\n", (1.5e6, 3e6)),    # header, decimals
                        ("100 3\n101 6\n", (3e6, 6e6))]:                       # Pensieve's cooked form
        (tmp_path / name).write_text(text)
        assert traces.load(tmp_path / name).rate_bit_s == rates


@pytest.mark.parametrize("name, text, error", [
    ("t.txt", "5\n10\n7\n", r"^t\.txt:3: timestamp 7 is before the previous one \(10\)"),   # Mahimahi, backwards
    ("t.txt", "a trace\nof words\n", r"^t\.txt:2: 'of words' is not numbers"),            # neither: the CSV's word
    ("t.mahi", "1\n2,3\nx\n", r"^t\.mahi:2: '2,3' is not a millisecond timestamp"),      # named Mahimahi: its word
    ("t.txt", "0\n0\n", r"^t\.txt: no delivery opportunity after 0 ms"),
])
def test_anything_else_is_one_line_naming_the_file(tmp_path, name, text, error):
    (tmp_path / name).write_text(text)
    with pytest.raises(traces.TraceError, match=error) as err:
        traces.load(tmp_path / name)
    assert "\n" not in str(err.value)


def mm_rate_to_events(kilobits_per_ms):
    """Mahimahi's scripts/mm-rate-to-events (Perl), in Python: for ms k from 0 add its bits to a
    reserve, print k for every 12000 bits the reserve holds."""
    out, reserve = [], 0
    for k, kbits in enumerate(kilobits_per_ms):
        reserve += 1000 * kbits
        while reserve >= 12000:
            out.append(k)
            reserve -= 12000
    return out


def _lines(text):
    return [int(x) for x in text.split()]


def test_to_mahimahi_writes_mm_rate_to_events_events_and_its_last_on_the_period():
    # 50 kbit/s, 1.2 Mbit/s, an outage, 7 Mbit/s: whole bits a ms, so the float sums are exact
    t = traces.Trace("x", (0.0, 0.3, 0.5, 0.9), (50e3, 1.2e6, 0.0, 7e6), 1.0)
    kbits = [50 / 1000] * 300 + [1.2] * 200 + [0] * 400 + [7] * 100
    lines = _lines(traces.to_mahimahi(t))
    # one loop carries 955 000 bit = 79.58 packets; 12 loops carry 955 whole ones
    assert len(lines) == 955 and lines[-1] == 12_000
    assert lines[:-1] == mm_rate_to_events(kbits * 12)[:-1]
    assert mm_rate_to_events(kbits * 12)[-1] == 11_999           # moved 1 ms onto the period, not added


def test_a_loop_ending_in_an_outage_moves_its_last_packet_onto_the_period_and_adds_none():
    t = traces.Trace("x", (0.0, 0.5), (1.2e6, 0.0), 1.0)          # 50 packets, then 500 ms of nothing
    lines = _lines(traces.to_mahimahi(t))
    assert lines[:-1] == mm_rate_to_events([1.2] * 500 + [0] * 500)[:-1] and lines[-1] == 1000
    assert len(lines) == 50


def test_50_kbit_for_one_second_reads_back_as_50_kbit():
    """The old writer added a line on the period every loop: 5 packets a 1 s loop, 60 kbit/s."""
    t = traces.generate("constant", seconds=1, mean_bit_s=50e3)
    back = traces.parse_mahimahi(traces.to_mahimahi(t), "back")
    assert back.period_s == 6.0                                  # 6 loops hold 25 whole packets
    assert back.mean_rate(0, back.period_s) == pytest.approx(50e3, rel=1e-12)
    assert back.stats(bin_s=1.0)["p50_bit_s"] == pytest.approx(48e3)   # 4 packets in most seconds, 5 in one


def _trace(steps):
    times, t = [], 0
    for ms, _ in steps:
        times.append(t / 1000)
        t += ms
    return traces.Trace("h", tuple(times), tuple(r for _, r in steps), t / 1000)


def _per_bin_error_packets(t, back):
    """Per 100 ms bin over the file's period: packets read back - packets the trace offers; and the
    whole file's shortfall in packets."""
    period, n = back.period_s, math.ceil(back.period_s / traces.MAHIMAHI_BIN_S - 1e-9)
    assert period / t.period_s == pytest.approx(round(period / t.period_s))    # whole loops of the trace
    edges = [min(period, k * traces.MAHIMAHI_BIN_S) for k in range(n + 1)]
    errors = [(back.bits(a, b) - t.bits(a, b)) / 12000 for a, b in zip(edges, edges[1:]) if b > a]
    return errors, (t.bits(0, period) - back.bits(0, period)) / 12000


ROUND = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@ROUND
@given(st.lists(st.tuples(st.integers(1, 8).map(lambda k: 100 * k),                 # 100 ms steps
                          st.one_of(st.just(0), st.integers(1, 400)).map(lambda kbit: kbit * 1e3)),
                min_size=1, max_size=4))
def test_round_trip_of_whole_kbit_rates_is_within_one_packet_per_bin_and_exact_over_the_file(steps):
    """Tolerance: one packet (12000 bit) per 100 ms bin. The events are the floor of the cumulative
    bits at each ms, so a bin's count is a difference of two floors (off by under one); moving the
    file's last packet onto the period keeps it within one (the cumulative bits are whole there).
    Whole kbit/s over 100 ms steps always close on whole packets within 120 loops, so the file's
    total is exact."""
    t = _trace(steps)
    back = traces.parse_mahimahi(traces.to_mahimahi(t), "back")
    errors, shortfall = _per_bin_error_packets(t, back)
    assert max(map(abs, errors)) <= 1 + 1e-6
    assert shortfall == pytest.approx(0, abs=1e-6) or t.bits(0, t.period_s) == 0


@ROUND
@given(st.lists(st.tuples(st.integers(1, 700),                                           # any ms length
                          st.one_of(st.just(0.0), st.floats(1e3, 3e6, allow_nan=False))),
                min_size=1, max_size=5))
def test_round_trip_of_any_piecewise_constant_trace_is_within_one_packet_per_bin(steps):
    """Tolerance: one packet per 100 ms bin, plus the file's shortfall (< 1 packet) where no loop count
    within the unrolling bound closes on whole packets: then the loop keeps mm-rate-to-events's count
    (its bits rounded down), and the remainder the trace offers after the last packet is not
    delivered, in the bins between that packet and the period."""
    t = _trace(steps)
    back = traces.parse_mahimahi(traces.to_mahimahi(t), "back")
    errors, shortfall = _per_bin_error_packets(t, back)
    if t.bits(0, t.period_s) >= 12000:
        assert -1e-6 <= shortfall < 1
        assert max(map(abs, errors)) <= 1 + shortfall + 1e-6


@pytest.mark.parametrize("kind", traces.KINDS)
def test_generated_traces_are_seeded_and_keep_their_mean(kind):
    a = traces.generate(kind, seconds=60, mean_bit_s=30e6, seed=7, step_s=0.5)
    assert a == traces.generate(kind, seconds=60, mean_bit_s=30e6, seed=7, step_s=0.5)
    assert a.stats()["mean_bit_s"] == pytest.approx(30e6, rel=1e-12)


@pytest.mark.parametrize("kind", traces.KINDS)
@pytest.mark.parametrize("seconds, step, period", [(30, 1.0, 20.0), (50, 0.5, 7.0), (9, 3.0, 4.0), (4, 1.0, 4.0)])
def test_every_generator_keeps_its_mean_over_the_whole_loop_whatever_the_period(tmp_path, kind, seconds, step, period):
    """A 30 s square loop of a 20 s period was 12.33 Mbit/s for a 10 Mbit/s mean (one and a half
    periods, the extra half high); normal and outages missed by their draws. The file read back
    keeps it too (its CSV loop is --seconds long)."""
    t = traces.generate(kind, seconds=seconds, mean_bit_s=10e6, step_s=step, period_s=period, seed=3,
                        outage_every_s=5.0, outage_s=1.0)
    assert t.period_s == seconds and t.mean_rate(0, seconds) == pytest.approx(10e6, rel=1e-12)
    back = traces.load(traces.save(t, tmp_path / "t.csv"))
    assert back.period_s == seconds and back.mean_rate(0, seconds) == pytest.approx(10e6, rel=1e-5)
    if kind == "square":
        assert len(set(t.rate_bit_s)) == 2          # still two levels


def test_a_loop_shorter_than_one_period_or_not_whole_steps_is_refused_in_one_line(tmp_path):
    from typer.testing import CliRunner
    from harness import cli
    out = tmp_path / "sq.csv"
    res = CliRunner().invoke(cli.app, ["traces", "generate", "square", str(out), "--mean", "10mbit", "--seconds", "10"])
    assert res.exit_code == 2 and not out.exists()
    assert "--seconds" in res.output and "--period" in res.output and len(res.output.strip().splitlines()) == 1
    with pytest.raises(traces.TraceError, match="--step that divides --seconds"):
        traces.generate("constant", seconds=50, step_s=0.7)
    res = CliRunner().invoke(cli.app, ["traces", "generate", "square", str(out), "--mean", "10mbit", "--seconds", "30"])
    assert res.exit_code == 0 and "mean over the whole loop  10.00 Mbit/s" in res.output


def test_conversion_round_trips_the_bytes(tmp_path):
    t = traces.generate("normal", seconds=10, mean_bit_s=20e6, step_s=1.0, seed=1)
    mahi = traces.load(traces.save(t, tmp_path / "t.mahi"))
    back = traces.load(traces.save(mahi, tmp_path / "t.csv"))
    assert mahi.period_s == back.period_s == 10.0
    # random rates never close on whole packets: one loop, its bits rounded down (under one packet
    # short), each second within one packet plus that remainder
    for lo in range(10):
        assert back.bits(lo, lo + 1) == pytest.approx(t.bits(lo, lo + 1), abs=2 * 12000)
    assert 0 <= t.bits(0, 10) - back.bits(0, 10) < 12000


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
    ({"rate": "10mbit", "trace": "cellular-lte.csv"}, "p.defaults.rate"),
    ({"trace": "no-such-trace.csv"}, "p.defaults.trace"),
    ({"trace": {"file": "cellular-lte.csv", "interval": "1us"}}, "p.defaults.trace.interval"),
    ({"trace": {"file": "cellular-lte.csv", "every": "1s"}}, "p.defaults.trace.every"),
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


def test_a_mahimahi_gap_is_one_outage_step_not_one_a_bin():
    """Steps in proportion to the lines, whatever the timestamps: two packets a day apart are a few steps."""
    t = traces.parse_mahimahi("1\n86400000\n", "m")
    assert len(t.times_s) <= 4 and t.period_s == 86400.0
    assert t.bits(0, t.period_s) == pytest.approx(2 * 12000)
    assert t.rate_bit_s[t.index_at(3600)] == 0.0                       # the gap plays as an outage


def test_the_steps_a_loop_plays_are_bounded(tmp_path):
    path = tmp_path / "day.csv"
    path.write_text("0,10\n43200,20\n")                                 # a 2-row file looping over a day
    with pytest.raises(profiles.ProfileError, match="steps, more than 100000"):
        profiles.from_doc({"defaults": {"trace": {"file": str(path), "interval": "100ms"}}}, "p")
    prof = profiles.from_doc({"defaults": {"trace": {"file": str(path), "interval": "1s"}}}, "p")
    assert prof.link("w1").up.trace.interval_s == 1.0
