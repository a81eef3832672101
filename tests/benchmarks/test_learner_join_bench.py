"""Benchmark: the learner's join work and threads against the number of workers (trainers/hilo/links.py).

    .venv/bin/python -m pytest tests/benchmarks/test_learner_join_bench.py -m benchmark -s
    WAN_BENCH_JOIN_WORKERS=1,8,32,64,128,256 (the default)  WAN_BENCH_RUN_WORKERS=1,8,32 (harness runs; root)

1. In process: a real Learner (micro model) listens; a client process opens N connections, then
   (on a signal) sends every HELLO at once and reads every WELCOME. Printed per N: the wall and the
   learner process's CPU seconds from that signal until all N are members, the same for one
   broadcast of a 1 MiB update to all N, and the learner's threads. The fitted exponent b of
   CPU ~ N^b (least squares on log-log, N >= 8) says how the work grows: 1 is linear.
2. End to end (root only, WAN_BENCH_RUN_WORKERS): `harness run --model micro --workers N --updates 2`
   on emulated links; printed per N: join s (learner listening -> the last worker joined), of it the
   harness starting the workers one after another (listening -> the last worker started) and the
   rest (the last start -> the last join: the learner's share and the last worker's start-up), the
   peak of the learner's threads (sampled from /proc every 0.2 s), and the run's wall. Every run must complete with hash-equal replicas; no time is asserted.
Each part prints the load average (`os.getloadavg`) at its start and end.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.benchmark]
TOKEN = "join-bench"
JOIN_WORKERS = [int(n) for n in os.environ.get("WAN_BENCH_JOIN_WORKERS", "1,8,32,64,128,256").split(",")]
RUN_WORKERS = [int(n) for n in os.environ.get("WAN_BENCH_RUN_WORKERS", "1,8,32").split(",") if n]

CLIENT = textwrap.dedent("""
    import socket, sys, time
    from trainers.protocol import wire
    from trainers.protocol.wire import Connection, MessageType
    host, port, n, token = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    conns = []
    for w in range(1, n + 1):
        s = socket.create_connection((host, port), timeout=120)
        conns.append(Connection(s, token=token, sender=w, peer="learner"))
    print("ready", flush=True)
    sys.stdin.readline()
    for w, c in enumerate(conns, 1):
        c.send(MessageType.HELLO, wire.pack_json({"worker": w}))
    for c in conns:
        assert c.recv(deadline=time.monotonic() + 120).type == MessageType.WELCOME
    print("welcomed", flush=True)
    for c in conns:
        assert c.recv(deadline=time.monotonic() + 120).type == MessageType.UPDATE
    print("updated", flush=True)
    sys.stdin.readline()
""")


def exponent(points: list[tuple[int, float]]) -> float:
    """b of y ~ N^b, least squares on log-log."""
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(max(y, 1e-9)) for _, y in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def join_point(tmp_path: Path, n: int) -> dict:
    from trainers.hilo.learner import Learner
    from trainers.spec import RunParams

    learner = Learner(RunParams(method="identity", workers=n, updates=3, model="micro", objective="grpo"), TOKEN,
                      str(tmp_path / f"w{n}"), ("127.0.0.1", 0), max_pending_connections=max(64, 2 * n),
                      max_pending_per_source=max(48, 2 * n))
    client = None
    try:
        learner.members.listen()
        host, port = learner.address
        client = subprocess.Popen([sys.executable, "-c", CLIENT, host, str(port), str(n), TOKEN], cwd=ROOT,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  env=dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1"))
        assert client.stdout.readline().strip() == "ready"
        wall0, cpu0 = time.monotonic(), time.process_time()
        client.stdin.write("go\n")
        client.stdin.flush()
        end = wall0 + 300
        while len(learner.members.peers) < n or any(p.catching_up for p in learner.members.peers.values()):
            assert time.monotonic() < end, f"{len(learner.members.peers)} of {n} joined"  # and their WELCOME written
            list(learner.members.pump(0.05))
        join_wall, join_cpu = time.monotonic() - wall0, time.process_time() - cpu0
        assert client.stdout.readline().strip() == "welcomed"
        threads = threading.active_count()
        wall0, cpu0 = time.monotonic(), time.process_time()
        written = learner.members.broadcast(b"\1" * (1 << 20), 1)
        send_wall, send_cpu = time.monotonic() - wall0, time.process_time() - cpu0
        assert len(written) == n and client.stdout.readline().strip() == "updated"
        client.stdin.write("done\n")
        client.stdin.flush()
        return {"N": n, "join wall s": join_wall, "join cpu s": join_cpu, "join cpu ms/worker": 1e3 * join_cpu / n,
                "broadcast wall s": send_wall, "broadcast cpu s": send_cpu, "learner threads": threads}
    finally:
        if client is not None:
            client.kill()
            client.wait()
        learner.close()


def print_table(rows: list[dict]) -> None:
    keys = list(rows[0])
    print(" | ".join(keys))
    for r in rows:
        print(" | ".join(f"{r[k]:.4f}" if isinstance(r[k], float) else str(r[k]) for k in keys))


def test_join_and_threads_in_process(tmp_path):
    print(f"\nload average at the start: {os.getloadavg()}, cores: {os.cpu_count()}")
    rows = [join_point(tmp_path, n) for n in JOIN_WORKERS]
    print(f"load average at the end: {os.getloadavg()}")
    print_table(rows)
    fit = [r for r in rows if r["N"] >= 8]
    if len(fit) > 1:
        for key in ("join cpu s", "join wall s", "broadcast cpu s"):
            print(f"{key} ~ N^{exponent([(r['N'], r[key]) for r in fit]):.2f} (N {fit[0]['N']}..{fit[-1]['N']})")


def learner_threads_peak(root: int, done: threading.Event, out: dict) -> None:
    """The most threads the run's learner process had, sampled every 0.2 s."""
    from tests.benchmarks.test_light_workers_bench import descendants, role

    while not done.wait(0.2):
        for pid in descendants(root):
            try:
                if role(pid) == "learner":
                    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines()
                                if x.startswith("Threads:"))
                    out["threads"] = max(out.get("threads", 0), int(line.split()[1]))
            except (OSError, StopIteration):
                continue


@pytest.mark.root
@pytest.mark.skipif(not RUN_WORKERS, reason="WAN_BENCH_RUN_WORKERS is empty")
def test_join_and_threads_of_harness_runs(tmp_path):
    from tests.benchmarks.test_light_workers_bench import fixed_costs

    print(f"\nload average at the start: {os.getloadavg()}, cores: {os.cpu_count()}")
    rows = []
    for n in RUN_WORKERS:
        run_id, t0 = f"join-w{n}", time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "run", "--model", "micro", "--workers", str(n),
                                 "--updates", "2", "--seeds", "1", "--method", "spar", "--baseline", "none",
                                 "--objective", "grpo", "--quiet", "--run-id", run_id, "--out", str(tmp_path)],
                                cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        done, peak = threading.Event(), {}
        sampler = threading.Thread(target=learner_threads_peak, args=(proc.pid, done, peak), daemon=True)
        sampler.start()
        _, stderr = proc.communicate(timeout=3600)
        done.set()
        sampler.join()
        assert proc.returncode == 0, stderr[-3000:]
        cell = next((tmp_path / run_id / "cells").iterdir())
        summary = json.loads((cell / "summary.json").read_text())
        assert summary["complete"] and summary["consistent"], summary
        costs = fixed_costs(cell)
        rows.append({"N": n, "join s": costs["join s"], "start workers s": costs["start workers s"],
                     "join after the last start s": costs["join s"] - costs["start workers s"],
                     "learner threads (peak)": peak.get("threads", 0),
                     "loop s": costs["loop s"], "run wall s": time.monotonic() - t0, "load1": os.getloadavg()[0]})
    print(f"load average at the end: {os.getloadavg()}")
    print_table(rows)
    fit = [r for r in rows if r["N"] >= 8]
    if len(fit) > 1:
        for key in ("join s", "start workers s"):
            print(f"{key} ~ N^{exponent([(r['N'], r[key]) for r in fit]):.2f} (N {fit[0]['N']}..{fit[-1]['N']})")
