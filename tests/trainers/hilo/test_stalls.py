"""A member that stalls (a token holder that joins, only sends HEARTBEATs, and rejoins after each
drop) against a real learner and a genuine worker: it is dropped for its missed contribution,
kept out for a while, dropped again, then kept out for the rest of the run (its HELLO gets a
STOP): two --worker-timeouts in all, where it used to cost one per update. The summary counts
the stalls and the run is degraded. Nothing here asserts a time.
"""
from __future__ import annotations

import socket
import threading
import time

from tests.trainers.flood import refusals
from tests.trainers.hilo.cluster import TOKEN, Cluster
from tests.trainers.hilo.test_hostile import WAIT_S, rows_of
from trainers.protocol import wire
from trainers.protocol.wire import Connection, MessageType


def stalling_member(address, worker: int, stop: threading.Event, outcomes: list[str]) -> threading.Thread:
    """Join as `worker`, send only HEARTBEATs until the learner closes the connection, join again;
    until STOP or `stop`. `outcomes`: "welcome", "refused" or "stop" per HELLO."""
    def run():
        while not stop.is_set():
            welcomed = False
            try:
                with socket.create_connection(address, timeout=WAIT_S) as s:
                    conn = Connection(s, token=TOKEN, sender=worker, peer="learner")
                    conn.send(MessageType.HELLO, wire.pack_json({"worker": worker}))
                    first = conn.recv(deadline=time.monotonic() + WAIT_S)
                    if first.type == MessageType.STOP:
                        outcomes.append("stop")
                        return
                    outcomes.append("welcome")
                    welcomed = True
                    s.settimeout(0.25)
                    while not stop.is_set():
                        conn.send(MessageType.HEARTBEAT, wire.pack_json({}))
                        try:
                            while conn.recv(deadline=time.monotonic() + 0.25):  # catch-up and updates: ignored
                                pass
                        except wire.DeadlineExceeded:
                            continue
            except (wire.PeerClosed, ConnectionError, OSError, wire.WireError):
                if not welcomed:  # closed before any frame: kept out for now
                    outcomes.append("refused")
                time.sleep(0.2)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_a_stalling_member_costs_at_most_two_worker_timeouts(tmp_path):
    updates, stop, outcomes = 8, threading.Event(), []
    with Cluster(tmp_path / "run", workers=2, autostart=False, method="spar", updates=updates,
                 learner_flags=["--worker-timeout", "4"]) as c:
        c.start_worker(1)
        c.wait_for("w1 joined", lambda rows: any(r["kind"] == "joined" and r["worker"] == 1 for r in rows), WAIT_S)
        member = stalling_member(c.address, 2, stop, outcomes)
        try:
            s = c.wait(timeout=WAIT_S)
        finally:
            stop.set()
            member.join(30)
        learner = c.events("learner")
    assert s["complete"] is True and s["updates"] == updates, s
    assert c.returncodes["learner"] == 0 and c.returncodes["w1"] == 0, c.log("learner")
    drops = [r for r in rows_of("dropped", learner) if r["worker"] == 2]
    assert len(drops) == 2, drops  # each drop is one --worker-timeout: two in all, never one per update
    assert all(d["stall"] for d in drops), drops
    assert isinstance(drops[0]["kept_out_until"], int) and drops[1]["kept_out_until"] == "never", drops
    assert s["stalls"] == 2 and s["degraded"] is True, s
    assert outcomes.count("welcome") == 2, outcomes
    joins = [r for r in rows_of("joined", learner) if r["worker"] == 2]
    assert joins[1]["version"] >= drops[0]["kept_out_until"], (joins, drops)  # not let back in before
    refused = refusals(learner)
    assert all("worker 2 is kept out" in r for r in refused), refused  # its only refusals: kept out
    if "stop" in outcomes:  # it came back after its second stall before the run ended: told to stop
        assert "worker 2 is kept out for the rest of the run after 2 drops" in refused, refused
    waited = sum(r["durations_s"].get("idle", 0) for r in rows_of("update", learner))
    print(f"\nthe stalling member: {len(drops)} drops over {updates} updates; learner idle {waited:.1f} s in all "
          f"with --worker-timeout 4; HELLOs: {outcomes.count('welcome')} welcomed, {outcomes.count('refused')} "
          f"refused, {outcomes.count('stop')} stopped")
