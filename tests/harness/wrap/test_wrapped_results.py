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


def _wrapped_run(root, run_id, *, label="python job.py", bw="50mbit", shares=None, secs=(1.0, 1.0, 1.0),
                 **meta):
    """A wrapped run's folder as `harness wrap` leaves it: meta.json and w1's step marks."""
    run = root / run_id
    (run / "nodes" / "w1").mkdir(parents=True)
    rate = {"50mbit": 50e6, "20mbit": 20e6}[bw]
    (run / "meta.json").write_text(json.dumps({
        "kind": "wrap", "run_id": run_id, "nodes": ["w1", "w2"], "label": label, "status": "complete",
        "command": ["python", "job.py"], "emulation": True, "backend": "fallback", "profile": "paper-62.5mbit",
        "profile_doc": {"name": "paper-62.5mbit", "defaults": {"rate": bw, "delay": "2ms"}},
        "link": {"rate_bit_s": rate, "delay_s": 0.002, "jitter_s": 0.0, "loss_frac": 0.0, "trace": None},
        "cpu_shares": shares or {}, "job_started_wall": 100.0, "job_ended_wall": 110.0, **meta}))
    t, marks = 100.0, []
    for i, s in enumerate((0.5, *secs)):
        marks.append(json.dumps({"step": i, "t0": t, "t1": t + s}))
        t += s
    (run / "nodes" / "w1" / "events.jsonl").write_text("\n".join(marks) + "\n")
    return run


def test_a_comparison_never_pools_one_label_at_two_links_or_two_cpu_shares(tmp_path):
    # `harness wrap`'s default label is the command: the same command at another --bw or --worker-cpu
    # used to be counted as a repeat of one label
    runs = [_wrapped_run(tmp_path, "a"), _wrapped_run(tmp_path, "b", secs=(1.1, 1.1, 1.1)),
            _wrapped_run(tmp_path, "c", bw="20mbit", secs=(2.0, 2.0, 2.0)),
            _wrapped_run(tmp_path, "d", shares={"w1": 0.5, "w2": 0.5}, secs=(3.0, 3.0, 3.0))]
    summaries = [wrapped.summarize(r) for r in runs]
    by = wrapped.groups(summaries)
    assert [[s["run_id"] for s in members] for members in by.values()] == [["a", "b"], ["c"], ["d"]]
    text = wrapped.compare_md(summaries)
    rows = [line for line in text.splitlines() if line.startswith("| python job.py")]
    assert len(rows) == 3, text
    assert "50mbit" in rows[0] and "none" in rows[0] and "| 2 |" in rows[0]
    assert "20mbit" in rows[1] and "| 1 |" in rows[1] and "0.52x" in rows[1]     # 1.05 / 2.0 s per step
    assert "50mbit" in rows[2] and "0.5 CPU each" in rows[2] and "| 1 |" in rows[2]
    assert "| label | link | CPU shares | runs |" in text
    assert "Baseline: 'python job.py' (profile paper-62.5mbit, 50mbit, 2 ms one-way [fallback]; CPU shares none)" in text


def test_the_wrapped_report_gives_the_cpu_shares_and_their_throttling(tmp_path):
    run = _wrapped_run(tmp_path, "r", shares={"w1": 1.0, "w2": 0.25},
                       cpu_throttled={"w1": {"periods": 100, "throttled_periods": 0, "throttled_s": 0.0},
                                      "w2": {"periods": 100, "throttled_periods": 80, "throttled_s": 6.5}})
    text = wrapped.report_md(run, wrapped.write(run))
    assert "- CPU shares: w1 1, w2 0.25 CPU; throttled: w1 0.000 s (0 of 100 periods), w2 6.500 s (80 of 100 periods)" \
        in text, text
    plain = _wrapped_run(tmp_path, "p")
    assert "- CPU shares: none (each node's job may use every core)" in wrapped.report_md(plain, wrapped.write(plain))


@pytest.mark.parametrize("meta, words", [
    ({"failed_node": "w2", "failure": "exit code 3"}, "node w2 exit code 3"),
    ({"failure": "timed out after 3 s", "timed_out_nodes": ["w1", "w2"]}, "the job timed out after 3 s"),
    ({"failure": "timed out after 3 s", "timed_out_nodes": ["w2"]}, "node w2 timed out after 3 s"),
    ({"failure": "timed out after 3 s", "timed_out_nodes": ["w2", "w3"], "nodes": ["w1", "w2", "w3"]},
     "nodes w2, w3 timed out after 3 s"),
])
def test_a_failure_names_the_node_or_the_job(meta, words):
    assert wrapped.failure_words({"nodes": ["w1", "w2"], **meta}) == words


def test_the_headline_says_which_marks_its_steps_leave_out():
    """"over 11 steps" for 12 marked steps, without saying the first was left out as warm-up."""
    from harness.results.wrapped import headline

    st = {"s_per_step": 0.1, "s_per_step_ci": 0.01, "counted": 11, "marked": 12, "node": "w1"}
    assert headline({"steps": st}).endswith("over 11 steps (w1's marks; 12 marked, the first 1 left out as warm-up)")
    assert headline({"steps": {**st, "marked": 11}}).endswith("over 11 steps (w1's marks)")
