"""Trace playback on this kernel: the HTB class of a traced link changes its rate in place at
every step, and each step is logged with when it was due and when it was applied."""
import csv
import time

import pytest
from pyroute2 import IPRoute

from harness.net import profiles, shaper, topology
from harness.net.plan import build_plan
from harness.net.topology import Topology

pytestmark = pytest.mark.root


def _class(ns, dev):
    """(rate in bytes/s, bytes sent) of the device's HTB class, read through netlink."""
    with IPRoute(netns=ns, flags=0) as ipr:
        (cls,) = [c for c in ipr.get_classes(index=ipr.link_lookup(ifname=dev)[0]) if c.get_attr("TCA_KIND") == "htb"]
        rate = cls.get_attr("TCA_OPTIONS").get_attr("TCA_HTB_PARMS")["rate"]
        return {"rate": rate, "bytes": cls.get_attr("TCA_STATS2").get_attr("TCA_STATS_BASIC")["bytes"]}


@pytest.fixture
def topo1():
    topo = Topology.create(topology.new_run_id(), 1)
    yield topo
    topo.destroy()


def test_trace_steps_change_the_class_in_place_and_are_logged(topo1, tmp_path):
    doc = {"defaults": {"trace": {"file": "leo-satellite.csv", "interval": "100ms"}}}
    prof = profiles.from_doc(doc, "leo")
    with shaper.Shaper(build_plan(prof, topo1, "fallback")) as sh:
        w1 = topo1.nodes["w1"]
        # some traffic through w1's uplink class, so its byte counter is not 0
        topo1.run_in("w1", ["python3", "-c", "import socket;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);"
                            f"[s.sendto(b'x'*1000,('{topo1.nodes['learner'].address}',9)) for _ in range(50)]"]).wait()
        before = _class(w1.netns, "eth0")
        log = tmp_path / "schedule.csv"
        sh.restart_schedule(prof, topo1, log)
        time.sleep(8.3)      # the square wave drops 64 -> 16 Mbit/s at 7.5 s
        sh.stop_schedule()
        after = _class(w1.netns, "eth0")
    assert before["rate"] == 8_000_000 and after["rate"] == 2_000_000          # bytes/s: 64 and 16 Mbit/s
    assert after["bytes"] >= before["bytes"] > 0           # the same class: counters kept
    rows = list(csv.DictReader(log.open()))
    assert {(r["node"], r["direction"]) for r in rows} >= {("w1", "up"), ("w1", "down")}
    drop = [r for r in rows if float(r["at_s"]) == 7.5 and r["node"] == "w1"]
    assert [float(r["rate_bit_s"]) for r in drop] == [16e6, 16e6]
    assert all(float(r["lag_s"]) >= 0 and float(r["applied_t_s"]) >= float(r["due_t_s"]) for r in rows)


def test_a_trace_with_a_loss_column_swaps_the_loss_rule(topo1, tmp_path):
    trace = tmp_path / "lossy.csv"
    trace.write_text("time_s,rate_mbit_s,delay_ms,loss_pct\n0,20,0,0\n1,10,0,2\n")
    prof = profiles.from_doc({"defaults": {"trace": str(trace)}}, "lossy")
    with shaper.Shaper(build_plan(prof, topo1, "fallback")) as sh:
        assert "--probability" not in shaper.iptables_save(topo1.router_ns)
        sh.update(build_plan(prof, topo1, "fallback", at_s=1.0))
        rules = shaper.iptables_save(topo1.router_ns)
        assert rules.count("--probability 0.02") == 2            # w1's up and down loss rules
        assert _class(topo1.nodes["w1"].netns, "eth0")["rate"] == 10e6 / 8
