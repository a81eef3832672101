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
    series = [[start + 6.5 + 0.5 * k, int(k * 2e6)] for k in range(5)]   # 2 MB per 0.5 s = 32 Mbit/s achieved
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
