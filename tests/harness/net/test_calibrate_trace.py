"""calibrate against a trace, the arithmetic (harness/net/calibrate.py): the trace over the receiver's
window, and the schedule's lag from a step log. Pure: no namespaces."""
import pytest

from harness.net import calibrate, profiles

HEAD = "at_s,due_t_s,applied_t_s,lag_s,skipped,node,direction,rate_bit_s,delay_s,loss_frac\n"


def _leo():
    return profiles.from_doc({"defaults": {"trace": {"file": "leo-satellite.csv", "interval": "500ms"}},
                              "learner": {"rate": "1gbit"}}, "leo")


def test_the_trace_window_is_the_path_rate_over_the_receivers_bins():
    start = 1000.0                       # the schedule's time 0 on the monotonic clock
    # the receiver's marks from 6.5 s to 8.5 s of the trace: 64 Mbit/s until 7.5 s, 16 after
    series = [[start + 6.5 + 0.1 * k, int(k * 0.4e6)] for k in range(21)]   # marks every 0.1 s: 32 Mbit/s achieved
    w = calibrate.trace_window(_leo(), "w1", "down", series, start)
    assert w["window_s"] == [6.5, 8.5]
    assert w["trace_bins_bit_s"] == [64e6, 64e6, 16e6, 16e6]
    assert w["trace"]["mean_bit_s"] == pytest.approx(40e6)
    assert w["achieved"]["mean_bit_s"] == pytest.approx(32e6)


def test_the_path_rate_is_the_slower_of_the_worker_and_learner_links():
    prof = profiles.from_doc({"defaults": {"trace": "leo-satellite.csv"}, "learner": {"rate": "20mbit"}}, "p")
    assert calibrate.path_rate(prof, "w1", "up", 1.0) == 20e6       # learner downlink caps 64 Mbit/s
    assert calibrate.path_rate(prof, "w1", "up", 8.0) == 16e6


def test_schedule_lag_counts_each_step_once_and_the_skipped_apart(tmp_path):
    log = tmp_path / "s.csv"
    rows = ["0,0,0,0,False,w1,up,1,0,0", "1,1,1.01,0.01,False,w1,up,2,0,0", "1,1,1.01,0.01,False,w1,down,2,0,0",
            "2,2,2.5,0.5,True,w1,up,3,0,0", "3,3,3.03,0.03,False,w1,up,4,0,0"]
    log.write_text(HEAD + "\n".join(rows) + "\n")
    lag = calibrate.schedule_lag(log)
    assert (lag["steps"], lag["skipped"]) == (2, 1)
    assert lag["lag_max_s"] == pytest.approx(0.03) and lag["lag_median_s"] == pytest.approx(0.02)


def test_playback_error_compares_carried_bytes_with_the_recorded_traces_per_window():
    trace = profiles.from_doc({"defaults": {"trace": "leo-satellite.csv"}}, "p").link("w1").down.trace.load()
    start = 100.0                                            # 64 Mbit/s until 7.5 s, 16 after
    # 0.1 s marks from 7.0 to 8.0 s: the link carried 50 kB of payload per mark (4 Mbit/s) all along
    series = [[start + 7.0 + 0.1 * k, k * 50_000] for k in range(11)]
    e100 = calibrate.playback_error(trace, series, start, 0.1)
    e1 = calibrate.playback_error(trace, series, start, 1.0)
    offered = [r * 0.1 / 8 * calibrate.PAYLOAD_OVER_WIRE for r in [64e6] * 5 + [16e6] * 5]
    assert e100["windows"] == 10 and e100["trace_bytes"] == [round(o) for o in offered]
    mean = sum(offered) / 10
    assert e100["max_abs"] == pytest.approx(max(abs(50_000 - o) for o in offered) / mean)
    assert e1["windows"] == 1 and e1["total"] == pytest.approx(500_000 / sum(offered) - 1)
    assert e1["mean_abs"] == pytest.approx(abs(e1["total"]))  # one window: its error is the total's


@pytest.mark.root
def test_calibrate_states_the_playback_error_of_a_shaped_traced_link(tmp_path):
    """A real traced link (namespaces, HTB, the schedule's thread): 8 / 2 Mbit/s halves of a second,
    played at a 100 ms step; the receiver's 100 ms and 1 s windows against the recorded trace."""
    path = tmp_path / "swing.csv"
    path.write_text("time_s,rate_mbit_s\n0,8\n0.5,2\n")
    prof = profiles.from_doc({"defaults": {"delay": "5ms", "trace": {"file": str(path), "interval": "100ms"}},
                              "learner": {"rate": "1gbit"}}, "swing")
    rows = calibrate.calibrate(prof, 1, secs=3.0, rtt_count=10, loss_count=100, backend="fallback", out_dir=tmp_path)
    down = next(r for r in rows if r.direction == "down")
    by_window = {e["window_s"]: e for e in down.playback}
    assert set(by_window) == {0.1, 1.0}
    assert by_window[0.1]["windows"] >= 25 and by_window[1.0]["windows"] >= 2
    assert sum(by_window[0.1]["trace_bytes"]) > 0
    # the link never carries more than the trace offers over the whole window (plus one window's queue)
    assert by_window[1.0]["total"] < 0.2
    assert (tmp_path / "calibration.json").exists()
    assert "playback" in (tmp_path / "calibration.json").read_text()


@pytest.mark.parametrize("flags, error", [
    (["--trace-step", "100ms"], "error: --trace-step: the step of a --trace; give --trace too"),
    (["--trace", "cellular-lte.csv", "--trace-step", "1ms"], "trace.interval: '1ms' must be within 10ms and ")])
def test_a_bad_trace_step_is_one_line_and_builds_nothing(flags, error):
    from typer.testing import CliRunner
    from harness.cli import app
    result = CliRunner().invoke(app, ["calibrate", "--profile", "lan", *flags])
    assert result.exit_code == 2 and error in result.stderr and len(result.stderr.strip().splitlines()) == 1
