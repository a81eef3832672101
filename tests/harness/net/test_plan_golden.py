"""Golden plans: harness.net.plan's operations for fixed profiles, both backends (pure, no kernel).

Regenerate after an intended change with ``UPDATE_GOLDEN=1 pytest tests/harness/net/test_plan_golden.py``
and review the diff of tests/golden/.
"""
import hashlib
import json
import os
from pathlib import Path

import pytest

from harness.net import delayline, profiles
from harness.net.plan import BURST_S, Plan, build_plan
from harness.net.backend import BACKENDS
from harness.net.topology import Topology

GOLDEN = Path(__file__).resolve().parents[2] / "golden"
HERE = Path(__file__).resolve().parent
CASES = [("paper-62.5mbit", 2, 0.0), ("transatlantic", 1, 0.0), ("home-broadband", 1, 0.0),
         ("heterogeneous-edge", 3, 0.0), ("heterogeneous-edge", 3, 30.0), (str(HERE / "ge-burst.yaml"), 1, 0.0)]


def _plan(name, workers, at_s, backend):
    return build_plan(profiles.load(name), Topology.plan("0000", workers), backend, at_s=at_s)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name,workers,at_s", CASES)
def test_plan_matches_golden(name, workers, at_s, backend):
    plan = _plan(name, workers, at_s, backend)
    stem = Path(name).name.removesuffix(".yaml")
    path = GOLDEN / f"plan-{stem}-w{workers}-t{at_s:g}-{backend}.json"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(plan.to_json())
    assert plan.to_json() == path.read_text()
    assert Plan.from_json(path.read_text()).ops == plan.ops


def test_fallback_plan_structure():
    """What the golden files encode, stated as rules (a regenerated golden cannot hide a regression)."""
    plan = _plan("transatlantic", 1, 0.0, "fallback")
    kinds = [op["op"] for op in plan.ops]
    assert "netem" not in kinds
    htb = {op["dev"]: op for op in plan.ops if op["op"] == "htb_class"}
    assert htb["eth0"]["rate_bit_s"] in (100e6, 1e9) and htb["p1"]["rate_bit_s"] == 100e6
    assert htb["p1"]["burst_bytes"] == int(100e6 / 8 * BURST_S)     # 2 ms of the rate
    [dl] = [op for op in plan.ops if op["op"] == "delayline" and op["node"] == "w1"]
    assert [(q["num"], q["dir"], q["delay_us"], q["jitter_us"]) for q in dl["queues"]] == [(2, "up", 35000, 1000), (3, "down", 35000, 1000)]
    rules = [" ".join(op["rule"]) for op in plan.ops if op["op"] == "iptables"]
    assert "-i p1 -j NFQUEUE --queue-num 2 --queue-bypass" in rules
    # receive paths only, each after its HTB: up in the router's FORWARD, down in the node's INPUT
    [down_rule] = [op for op in plan.ops if op["op"] == "iptables" and "3" in op["rule"]]
    assert (down_rule["ns"], down_rule["chain"], down_rule["rule"][:2]) == ("wh0000-w1", "INPUT", ["-i", "eth0"])
    assert any(r.startswith("-o p1 -m statistic --mode random --probability 0.0001000000") for r in rules)
    # loss rules come before queue rules: a dropped packet never takes a delay-line slot
    assert max(i for i, r in enumerate(rules) if "statistic" in r) < min(i for i, r in enumerate(rules) if "NFQUEUE" in r)


def test_netem_plan_sizes_limit_to_bdp():
    plan = _plan("satellite-geo", 1, 0.0, "netem")
    [down] = [op for op in plan.ops if op["op"] == "netem" and op["dev"] == "p1"]
    assert down["delay_us"] == 300000 and down["jitter_us"] == 10000 and down["loss_pct"] == pytest.approx(0.1)
    bdp = 25e6 * 0.31 / (8 * 1500)
    assert down["limit_pkts"] >= max(1000, bdp)
    assert down["parent"] == "1:1"   # netem under the HTB rate class


def test_ge_and_limit_in_plans():
    fb = _plan(str(HERE / "ge-burst.yaml"), 1, 0.0, "fallback")
    [dl] = [op for op in fb.ops if op["op"] == "delayline" and op["node"] == "w1"]
    down = [q for q in dl["queues"] if q["dir"] == "down"][0]
    assert down["ge"] == pytest.approx([0.01, 0.25, 0.5, 0.0])
    pf = {op["dev"]: op["limit_pkts"] for op in fb.ops if op["op"] == "pfifo" and op["ns"].endswith("-w1")}
    assert pf == {"eth0": 200}
    ne = _plan(str(HERE / "ge-burst.yaml"), 1, 0.0, "netem")
    assert [op["gemodel"] for op in ne.ops if op["op"] == "netem" and op["dev"] == "p1"] == [pytest.approx([0.01, 0.25, 0.5, 0.0])]


def test_unknown_backend_is_named():
    with pytest.raises(ValueError, match=r"^backend: 'tbf' is unknown \(valid: netem, fallback\)$"):
        _plan("lan", 1, 0.0, "tbf")


def test_plan_is_json_data():
    plan = _plan("mobile-4g", 2, 0.0, "fallback")
    assert json.loads(plan.to_json())["ops"] == plan.ops


def _seed(run_id, num):
    """An independent restatement of the seed rule: sha256 of '<run id>/<queue>', first 4 bytes."""
    return int.from_bytes(hashlib.sha256(f"{run_id}/{num}".encode()).digest()[:4], "big")


def test_delay_line_seeds_come_from_the_run_id():
    queues = [q for op in _plan("heterogeneous-edge", 3, 0.0, "fallback").ops if op["op"] == "delayline"
              for q in op["queues"]]
    assert [q["seed"] for q in queues] == [_seed("0000", q["num"]) for q in queues]
    assert len({q["seed"] for q in queues}) == len(queues)            # every queue draws its own stream
    other = build_plan(profiles.load("heterogeneous-edge"), Topology.plan("abcd", 3), "fallback")
    assert {q["seed"] for op in other.ops if op["op"] == "delayline" for q in op["queues"]}.isdisjoint(
        q["seed"] for q in queues)                                      # another run, other draws


def test_delay_line_draws_are_reproducible_per_run():
    """Two delay lines started from the same plan draw the same jitter and burst loss per packet."""
    fb = _plan(str(HERE / "ge-burst.yaml"), 1, 0.0, "fallback")
    [op] = [op for op in fb.ops if op["op"] == "delayline"]
    config = json.dumps({"run_id": fb.run_id, "queues": op["queues"]})

    def draws(queues):
        return [(q.num, q.ge_drop() if q.ge else None, q.release_time(1.0 + i)) for q in queues for i in range(200)]
    assert draws(delayline.parse_config(config)) == draws(delayline.parse_config(config))
    reseeded = json.dumps({"run_id": "beef", "queues": [dict(q, seed=q["seed"] + 1) for q in op["queues"]]})
    assert draws(delayline.parse_config(config)) != draws(delayline.parse_config(reseeded))
