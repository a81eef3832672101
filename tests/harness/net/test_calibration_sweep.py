"""Calibration sweeps against the issue's accuracy targets (slow: ~8 minutes; run by hand with
``pytest -m slow tests/harness/net/test_calibration_sweep.py -s``). Each case prints its measured row.

Targets (fallback backend on this machine): goodput 90-100 % of the rate from 1 to 1000 Mbit/s;
RTT within 2 ms (or 5 %) of the requested delay from 1 to 300 ms at rates up to 100 Mbit/s;
loss within the 99 % binomial interval.

Router bottlenecks: when the learner's link is much faster than a worker's downlink (e.g.
paper-62.5mbit leaves the learner unshaped), the downlink's HTB in the router is a drop-tail
bottleneck fed at line rate; single-flow TCP then runs the usual loss sawtooth and measured
82 % of 500 Mbit/s and 69-80 % of 1 Gbit/s here (95.5 % at <= 100 Mbit/s). That is TCP over a
drop-tail bottleneck, not an emulation error, so the sweep shapes the learner to the same rate.
"""
import dataclasses

import pytest

from harness.net import calibrate, profiles

pytestmark = [pytest.mark.root, pytest.mark.slow]

RATES = ["1mbit", "10mbit", "100mbit", "500mbit", "1000mbit"]
DELAYS = ["500us", "5ms", "50ms", "150ms"]       # one way on the worker link: RTT 1 ms .. 300 ms
LOSSES = ["0.1%", "1%", "5%"]


def _rows(**link):
    """One worker; the learner's link has the worker's rate and no delay or loss, so the path is
    rate-limited at its sender on both directions (see the module note on router bottlenecks)."""
    prof = profiles.with_link(profiles.load("paper-62.5mbit"), link)
    prof = dataclasses.replace(prof, learner={"rate": link.get("rate", "62.5mbit")})
    rows = calibrate.calibrate(prof, 1, secs=3.0, rtt_count=50, loss_count=4000)
    for r in rows:
        print(f"\n{link} {r.direction}: goodput {r.goodput_bit_s / 1e6:.3f} Mbit/s ({r.goodput_ratio:.3f} of rate), "
              f"RTT {r.rtt_median_s * 1e3:.2f} ms for {r.rtt_want_s * 1e3:.2f} ms, lost {r.loss_lost}/{r.loss_sent} "
              f"(99% interval {r.loss_interval})")
    return rows


@pytest.mark.parametrize("rate", RATES)
def test_goodput_tracks_rate(rate):
    for r in _rows(rate=rate):
        assert 0.90 <= r.goodput_ratio <= 1.0, r


@pytest.mark.parametrize("delay", DELAYS)
def test_rtt_tracks_delay(delay):
    for r in _rows(rate="100mbit", delay=delay):
        assert r.ok_rtt and 0.90 <= r.goodput_ratio <= 1.0, r


@pytest.mark.parametrize("loss", LOSSES)
def test_loss_within_binomial_interval(loss):
    for r in _rows(rate="10mbit", delay="5ms", loss=loss):
        assert r.ok_loss and r.ok_rtt, r


def test_jitter_keeps_mean_rtt():
    for r in _rows(rate="50mbit", delay="20ms", jitter="5ms"):
        assert r.ok_rtt and r.ok_goodput, r
