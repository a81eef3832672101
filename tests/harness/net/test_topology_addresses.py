"""Addresses for hundreds of workers: every node's link is its own /30 of the harness's /16, planned for
300 workers without touching the kernel, and a few of the high-index links built for real and joined
through the router."""
import ipaddress
import subprocess
import sys

import pytest

from harness.net import clean, topology
from harness.net.topology import Topology


def test_three_hundred_workers_get_distinct_links_inside_the_harness_subnet():
    topo = Topology.plan("abcd12", 300)
    subnet = ipaddress.ip_network(f"{topology.SUBNET}.0.0/16")
    links = set()
    for node in topo.nodes.values():
        link = ipaddress.ip_interface(f"{node.address}/{topology.LINK_PREFIX_LEN}").network
        assert ipaddress.ip_address(node.gateway) in link and node.gateway != node.address
        assert link.subnet_of(subnet) and link not in links
        links.add(link)
        assert len(node.port) <= 15 and len(node.netns) <= 64          # interface and namespace name limits
    assert len(links) == 301 and topo.nodes["learner"].address == f"{topology.SUBNET}.0.2"
    assert topo.nodes["w300"].address == f"{topology.SUBNET}.4.178"


def test_the_plan_refuses_more_workers_than_it_addresses():
    with pytest.raises(ValueError, match="within 1 and"):
        Topology.plan("abcd12", topology.MAX_WORKERS + 1)
    with pytest.raises(ValueError, match="outside"):
        topology.link_addresses(1 << 14)


@pytest.mark.root
def test_high_index_links_are_built_and_reach_the_learner():
    """The learner and workers 299 and 300 of a 300-worker plan, built: their /30 links route through the
    router (the addresses a /24 per node could not give)."""
    planned = Topology.plan(topology.new_run_id(), 300)
    keep = ("learner", "w299", "w300")
    topo = Topology(run_id=planned.run_id, nodes={n: planned.nodes[n] for n in keep}, router_ns=planned.router_ns)
    topo.built()
    try:
        for src, dst in (("w300", "learner"), ("w299", "w300")):
            assert _connects(topo, src, dst), f"{src} -> {dst}"
    finally:
        topo.destroy()
    assert clean.leftovers(topo.run_id) == []


def _connects(topo, src: str, dst: str, port: int = 7000) -> bool:
    """A TCP handshake from `src` to a listener in `dst`, at `dst`'s planned address."""
    server = topo.run_in(dst, [sys.executable, "-c",
                               "import socket;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
                               f"s.bind(('{topo.nodes[dst].address}',{port}));s.listen();print('up',flush=True);"
                               "c,_=s.accept();c.close()"], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "up"
        client = topo.run_in(src, [sys.executable, "-c", "import socket;socket.create_connection("
                                   f"('{topo.nodes[dst].address}',{port}),timeout=10).close()"])
        return client.wait(timeout=30) == 0
    finally:
        server.kill()
        server.wait()
        server.stdout.close()
