"""Benchmark: seconds-per-update and its phases for `full` and `spar` with 1, 4 and 8 workers
on localhost (tiny model), and the harness's own overhead (framing, hashing, logging) as a
fraction of the update time.

    .venv/bin/python -m pytest tests/benchmarks/test_services_bench.py -m benchmark -s

Prints figures; asserts nothing about wall-clock time. The harness overhead is reported two
ways: "in run" is the learner's own `harness_s` per update (framing and checksums on every
connection, rollout validation, hashing, snapshots, event rows; summed over threads, so an
upper bound on the critical path); "probe" times exactly those operations again in this
process at the sizes the run used (update frames for N workers, N rollout bodies, a full
replica hash, one event row).
"""
import statistics
import time

import pytest
import torch

from tests.trainers.hilo.cluster import TOKEN, Cluster
from trainers.protocol import wire
from trainers.events import EventLog
from trainers.model.rollout import Rollouts
from trainers.hilo.methods import get_method
from trainers.hilo.stack import build_replica
from trainers.spec import RunParams

PARAMS = dict(model="tiny", updates=5, problems_per_worker=2, group_size=4, max_new_tokens=16,
              objective="distill", teacher_steps=20, hash_every=1)
PHASES_L = ("idle", "train", "encode", "decode_replay", "hash", "send_update")
PHASES_W = ("rollout", "send_rollouts", "idle", "receive", "decode_replay", "hash")


def _median(xs):
    return statistics.median(xs) if xs else 0.0


def _harness_seconds(method: str, n: int, rollout_frames: list[bytes], update: bytes, run_dir) -> float:
    """Time the harness's per-update work on the learner at the sizes of this run (median of 5)."""
    params = RunParams(method=method, model="tiny")
    _, replica = build_replica(params, get_method(params.method, **params.compressor_options()))
    log = EventLog(run_dir, "overhead-probe")
    check = wire.token_check(TOKEN)
    samples = []
    for _ in range(5):
        t0 = time.perf_counter()
        for i in range(n):  # one update frame per worker
            wire.encode_frame(wire.MessageType.UPDATE, update, check=check, sender=0, version=1, seq=i)
        for body in rollout_frames:  # parse + validate each worker's rollouts (CRC, table, offsets)
            frame = wire.encode_frame(wire.MessageType.ROLLOUTS, body, check=check, sender=1, version=0, seq=0)
            wire.verify_checksum(frame[:wire.HEADER_BYTES], frame[wire.HEADER_BYTES:],
                                 int.from_bytes(frame[40:44], "big"))
            Rollouts.from_tensors(wire.unpack_tensors(body)[0])
        replica.policy_hash(), replica.optimizer_hash()
        log.write("update", version=1, phases={p: [0.0, 1.0] for p in PHASES_L}, bytes={"sent": {"UPDATE": 1}})
        samples.append(time.perf_counter() - t0)
    log.close()
    return _median(samples)


def _rollout_bodies(c: Cluster, n: int) -> list[bytes]:
    """Rollout bodies of the sizes the workers sent (rebuilt from their event rows' byte counts)."""
    sizes = [_median([r["payload_bytes"] for r in c.events(f"w{w}") if r["kind"] == "rollouts"])
             for w in range(1, n + 1)]
    rows = 8  # problems_per_worker x group_size
    bodies = []
    for size in sizes:
        toks = max(1, int(size) // 12)  # ~8 bytes/token id + 4 bytes/logprob
        per = toks // rows
        r = Rollouts(problem_index=list(range(rows)), prompt_ids=[[1] * 4] * rows,
                     completion_ids=[[2] * per] * rows, logprobs=[[-0.5] * per] * rows, rewards=[0.0] * rows)
        bodies.append(wire.pack_tensors(r.to_tensors(), meta={"batch": 0}))
    return bodies


@pytest.mark.benchmark
@pytest.mark.timeout(3600)
def test_seconds_per_update_and_phases(tmp_path):
    torch.set_num_threads(1)
    lines = []
    for n in (1, 4, 8):
        for method in ("full", "spar"):
            run_dir = tmp_path / f"{method}-{n}"
            with Cluster(run_dir, workers=n, method=method, **PARAMS) as c:
                s = c.wait(timeout=1800)
            assert s["complete"] and s["consistent"], s
            rows = [r for r in c.events("learner") if r["kind"] == "update"][1:]  # first: warm-up
            spu = _median([r["seconds_per_update"] for r in rows])
            lp = {p: _median([r["durations_s"].get(p, 0.0) for r in rows]) for p in PHASES_L}
            wrows = [r for w in range(1, n + 1) for r in c.events(f"w{w}")]
            wp = {p: _median([r["durations_s"].get(p, 0.0) for r in wrows
                              if r["kind"] == ("rollouts" if p in ("rollout", "send_rollouts") else "update")])
                  for p in PHASES_W}
            update = b"\0" * int(s["payload_bytes_per_update"]["update_payload"])
            overhead = _harness_seconds(method, n, _rollout_bodies(c, n), update, tmp_path)
            measured = _median([r["harness_s"] for r in rows])
            lines.append(
                f"{method:5s} workers={n}  s/update={spu:7.3f}  update_bytes={int(s['payload_bytes_per_update']['update_payload']):8d}"
                f"  harness in run={measured * 1e3:6.2f} ms ({100 * measured / spu:4.2f} %)"
                f"  probe={overhead * 1e3:6.2f} ms ({100 * overhead / spu:4.2f} %)\n"
                f"      learner: " + " ".join(f"{p}={lp[p]:.3f}" for p in PHASES_L) + "\n"
                f"      worker:  " + " ".join(f"{p}={wp[p]:.3f}" for p in PHASES_W))
            print(lines[-1], flush=True)
    print("\n".join(["", "seconds per update (median, first update excluded), phases in seconds:", *lines]))
