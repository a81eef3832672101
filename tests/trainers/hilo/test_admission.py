"""Admission that cannot be starved (a real learner process, real workers, real floods).

Token-less connections, idle or sending a wrong token, from the workers' own address (127.0.0.1,
as in every --no-emulation run) or from a mix of addresses: the genuine workers still join and the
run completes, and the refused connections are counted as at most one `rejected` row per source
per interval, never one per connection. Join times are printed (`-s`), never asserted: the deadline
below only guards against a hang.
"""
from __future__ import annotations

import threading
import time

from tests.trainers.flood import garbage_flood, idle_flood
from tests.trainers.hilo.cluster import Cluster
from tests.trainers.hilo.test_hostile import WAIT_S, assert_survived, baseline, fds, rows_of, wait_rows

JOIN_DEADLINE_S = 120  # a generous guard: the case was 0 of 2 joined in 150 s
FLOOD = 32


def flooded_run(tmp_path, flood, sources: list[str]) -> tuple[Cluster, dict, dict[int, float], list]:
    """Two workers start while FLOOD token-less connections from `sources` hold the learner;
    returns the cluster, its summary, each worker's join time (s from its start to its `joined`
    row) and the learner's `rejected` rows."""
    stop = threading.Event()
    with Cluster(tmp_path / "run", workers=2, autostart=False, method="full", updates=3) as c:
        base_fds, _ = baseline(c)
        made = [0]
        attackers = flood(c.address, sources, FLOOD, stop, made=made)
        started = {}
        try:
            end = time.monotonic() + WAIT_S
            # the flood is in before the workers come: idle connections are held open (counted in the
            # learner's fds); wrong-token ones are refused at once, so count those opened instead
            while fds(c.procs["learner"].pid) < base_fds + FLOOD // 2 and made[0] < 4 * FLOOD:
                assert time.monotonic() < end, "the flood never reached the learner"
                time.sleep(0.01)
            for w in (1, 2):
                started[w] = time.monotonic()
                c.start_worker(w, extra=["--connect-timeout", str(JOIN_DEADLINE_S)])
            joined = wait_rows(c, "joined", 2)
        finally:
            stop.set()
            for t in attackers:
                t.join(30)
        s = c.wait()
        rejected = rows_of("rejected", c.events("learner"))
        hello = {w: rows_of("joined", c.events(f"w{w}"))[0] for w in (1, 2)}
    times = {r["worker"]: r["t"] - started[r["worker"]] for r in joined}
    print(f"\njoin under {FLOOD} {flood.__name__} connections from {sources}: "
          + ", ".join(f"w{w} {t:.2f} s from its start, {hello[w]['join_s']:.3f} s from its first connect "
                      f"({hello[w]['attempts']} attempts)" for w, t in sorted(times.items())))
    assert_survived(c, s, 3)
    assert not s["dropped"]
    assert sorted(times) == [1, 2]
    return c, s, times, rejected


def test_workers_join_under_idle_connections_from_their_own_address(tmp_path):
    """32 idle connections from 127.0.0.1 (the workers' address) used to keep both workers out
    (per-source cap 8, shared with them): the token-less budget now holds them all, and a worker
    leaves it as soon as its header shows the token."""
    flooded_run(tmp_path, idle_flood, ["127.0.0.1"])


def test_workers_join_under_garbage_from_many_addresses_and_the_log_stays_bounded(tmp_path):
    """32 threads sending wrong-token headers as fast as they are refused, from the workers'
    address and seven others: the workers join, and the refused connections (thousands) are
    counted in at most one row per source per interval, plus the last flush."""
    sources = [f"127.0.0.{i}" for i in range(1, 9)]
    c, s, times, rejected = flooded_run(tmp_path, garbage_flood, sources)
    assert {r["source"] for r in rejected} <= set(sources)
    total = sum(r["count"] for r in rejected)
    assert all("wrong run token" in r["reasons"] for r in rejected), rejected[:3]
    per_source = {src: len([r for r in rejected if r["source"] == src]) for src in sources}
    span = max(r["t"] for r in rejected) - min(r["t"] for r in rejected)
    assert max(per_source.values()) <= span / 10.0 + 2, per_source  # one per 10 s interval, plus the last flush
    assert total > len(rejected), (total, len(rejected))  # counted, not one row each
    print(f"rejected rows: {len(rejected)} for {total} refused connections over {span:.1f} s")
