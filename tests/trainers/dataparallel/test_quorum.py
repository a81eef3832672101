"""--quorum for the data-parallel family, over real sockets: the aggregator runs in this process
with the service's own class, worker 1 in a thread, worker 2 as a real process that the test holds
with SIGSTOP for a while (a straggler). At quorum 1 of 2 the syncs go on with worker 1's upload,
the late uploads (worker 2's while it is held) are read at the next sync and dropped (`stale_upload` rows with their
staleness), and since every worker applies every download the replicas end equal. At quorum 2
every sync has both uploads. Figures are printed, never asserted.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from harness.run.launch import service_env
from tests.trainers.dataparallel.test_hostile import TOKEN, params, start_one
from trainers.dataparallel.aggregator import Aggregator
from trainers.events import read_events

HOLD_S = 3  # the straggler's delay: under the 10 s liveness deadline, so it stays a member


@pytest.mark.parametrize("quorum", [pytest.param(2, marks=pytest.mark.slow), 1])  # 2: the comparison
def test_quorum_with_a_straggler_process(tmp_path, quorum):
    agg = Aggregator(params(updates=40, quorum=quorum), TOKEN, str(tmp_path), ("127.0.0.1", 0))
    errors: list = []
    w1 = start_one(agg, tmp_path, 1, errors)
    w2 = subprocess.Popen([sys.executable, "-m", "trainers.dataparallel.worker", "--learner",
                           f"127.0.0.1:{agg.address[1]}", "--worker-id", "2", "--run-dir", str(tmp_path)],
                          env=service_env(TOKEN, tmp_path / "cache"), stderr=subprocess.PIPE)
    try:
        agg.accept(120)

        def hold():  # once the run is under way: SIGSTOP, HOLD_S, SIGCONT
            rows = tmp_path / "events-learner.jsonl"
            end = time.monotonic() + 120
            while not any(r["kind"] == "update" for r in read_events(rows)) and time.monotonic() < end:
                time.sleep(0.01)
            os.kill(w2.pid, signal.SIGSTOP)
            time.sleep(HOLD_S)
            os.kill(w2.pid, signal.SIGCONT)

        holder = threading.Thread(target=hold, daemon=True)
        holder.start()
        summary = agg.run()
        holder.join(60)
    finally:
        agg.close()
        if w2.poll() is None:
            os.kill(w2.pid, signal.SIGCONT)
        w2.wait(60)
        w1.join(60)
    assert not errors, errors
    assert w2.returncode == 0, w2.stderr.read().decode()[-2000:]
    assert summary["complete"] and summary["consistent"], summary  # every replica applied every download
    rows = read_events(tmp_path / "events-learner.jsonl")
    syncs = [r for r in rows if r["kind"] == "update" and r.get("sync")]
    stale = [r for r in rows if r["kind"] == "stale_upload"]
    without = [r for r in syncs if r["left_out"]]
    if quorum == 2:
        assert not without and not stale and all(r["contributors"] == ["w1", "w2"] for r in syncs)
    else:
        # the first upload in wins: w2 while held, either worker otherwise
        assert any(r["left_out"] == ["w2"] for r in without), without
        assert all(len(r["contributors"]) == 1 and r["contributors"] + r["left_out"] in (["w1", "w2"], ["w2", "w1"])
                   for r in without)
        assert stale and all(s["staleness"] > 0 for s in stale)
    spu = sorted(r["seconds_per_update"] for r in syncs)
    print(f"\ndp quorum {quorum} of 2, w2 held {HOLD_S} s: {len(syncs)} syncs, {len(without)} without w2, "
          f"s/sync median {spu[len(spu) // 2]:.3f} max {spu[-1]:.2f}; stale uploads dropped "
          f"{[(s['step'], s['staleness']) for s in stale][:8]}")
