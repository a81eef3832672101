"""The wrapped run's arithmetic, on folders written here (no root): step marks, counters between
samples, the socket ledger's closed connections, the comparison's speedup interval, and the ring
all-reduce model against its closed form."""
import json
import math

import pytest

from harness.projection.network import Network, flow_rate_Bps, path
from harness.projection.ring import payload_from_sent, ring_allreduce_s
from harness.results import wrapped


def test_step_marks_skip_what_is_not_a_mark(tmp_path):
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join([
        json.dumps({"step": 0, "t0": 10.0, "t1": 11.0, "phases": {"compute": 0.4, "comm": "x"}}),
        "not json", json.dumps({"step": 1, "t0": 12.0}), json.dumps({"step": 2, "t0": 13.0, "t1": 12.0}),
        json.dumps([1, 2]), json.dumps({"step": 3, "t0": 14.0, "t1": 14.5, "loss": 0.1}), ""]))
    marks, ignored = wrapped.steps(events)
    assert [m["step"] for m in marks] == [0, 3] and ignored == 4
    assert marks[0]["phases"] == {"compute": 0.4}


def test_counters_are_interpolated_and_clamped():
    series = [(0.0, 0.0), (1.0, 100.0), (3.0, 300.0)]
    assert wrapped.counter_at(series, 0.5) == 50.0
    assert wrapped.counter_at(series, 2.0) == 200.0
    assert wrapped.counter_at(series, -1.0) == 0.0 and wrapped.counter_at(series, 9.0) == 300.0
    assert wrapped.counter_at([], 1.0) is None


def test_a_closed_connection_keeps_its_final_counters_and_loopback_is_left_out():
    rows = [{"wall_s": "1", "node": "w1", "local": "a:1", "remote": "10.88.2.2:5", "bytes_sent": "100"},
            {"wall_s": "1", "node": "w1", "local": "a:2", "remote": "127.0.0.1:7", "bytes_sent": "999"},
            {"wall_s": "2", "node": "w1", "local": "a:1", "remote": "10.88.2.2:5", "bytes_sent": "500"},
            {"wall_s": "2", "node": "w1", "local": "a:3", "remote": "10.88.3.2:5", "bytes_sent": "50"},
            {"wall_s": "3", "node": "w1", "local": "a:3", "remote": "10.88.3.2:5", "bytes_sent": "80"}]
    series = wrapped.socket_series([r for r in rows if wrapped.off_host(r)], "bytes_sent", start=0.5)
    assert series["w1"] == [(0.5, 0.0), (1.0, 100.0), (2.0, 550.0), (3.0, 580.0)]


def test_speedup_interval_over_independent_repeats():
    point, lo, hi = wrapped.speedup([2.0, 2.2, 1.8], [1.0, 1.1, 0.9])
    assert point == pytest.approx(2.0, rel=0.02) and lo < point < hi
    assert wrapped.speedup([2.0], [1.0]) == (2.0, None, None)
    assert wrapped.speedup([], [1.0]) == (None, None, None)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_allreduce_is_the_closed_form_on_identical_links(n):
    rate, delay, nbytes = 20e6, 0.005, 4e6
    net = Network.uniform(n, rate, delay)
    goodput = flow_rate_Bps(path(net.workers[0], net.workers[1]), net)
    got = ring_allreduce_s(nbytes, net)
    # each hop crosses two access links: one-way delay = 2 x the per-link delay
    assert got["seconds"] == pytest.approx(2 * (n - 1) / n * nbytes / goodput + 2 * (n - 1) * 2 * delay)
    assert got["bandwidth_s"] + got["latency_s"] == pytest.approx(got["seconds"])
    assert payload_from_sent(2 * (n - 1) / n * nbytes, n) == pytest.approx(nbytes)


def test_ring_allreduce_waits_for_the_slowest_hop():
    from harness.projection.network import Access, Node

    fast, slow = Node(Access(100e6), Access(100e6)), Node(Access(10e6), Access(10e6))
    net = Network(fast, (fast, slow, fast))
    got = ring_allreduce_s(3e6, net)
    assert got["bottleneck"] in ("w1 -> w2", "w2 -> w3")
    assert got["seconds"] == pytest.approx(4 * 1e6 / flow_rate_Bps(path(fast, slow), net))
    assert ring_allreduce_s(1e6, Network.uniform(1, 10e6))["seconds"] == 0.0
    assert math.isfinite(ring_allreduce_s(1e6, Network.uniform(2, None))["seconds"])


def test_a_totals_summary_from_a_folder(tmp_path):
    run = tmp_path / "run"
    (run / "nodes" / "w1").mkdir(parents=True)
    (run / "meta.json").write_text(json.dumps({"kind": "wrap", "run_id": "r", "nodes": ["w1", "w2"], "label": "x",
                                               "status": "complete", "job_started_wall": 100.0,
                                               "job_ended_wall": 104.0, "command": ["true"]}))
    (run / "links.csv").write_text("t_s,wall_s,node,direction,bytes,packets,qdisc_drops,loss_drops\n"
                                   "0,100,w1,up,0,0,0,0\n0,104,w1,up,4000,4,0,0\n"
                                   "0,100,learner,up,0,0,0,0\n0,104,learner,up,99,1,0,0\n")
    s = wrapped.write(run)
    assert s["per"] == "run" and s["wall_s"] == 4.0 and s["links"] == {"w1": {"up": 4000.0}}
    assert s["wire_up_bytes"] == 4000.0 and s["model"] is None
    assert "totals over the run" in (run / "report.md").read_text()
    assert wrapped.find([tmp_path]) == [run] and wrapped.find([tmp_path / "nope"]) == []
