"""The learner and workers as real processes over real localhost TCP (micro model, tiny batches)."""
import os
import signal
import socket
import statistics
import struct

import pytest

from tests.trainers.flood import refusals
from tests.trainers.hilo.cluster import TOKEN, Cluster
from trainers.protocol import wire
from trainers.protocol.wire import MessageType

METHODS = ("full", "identity", "spar")


def adapter_bytes(rank: int) -> int:
    """fp32 bytes of the micro model's LoRA adapter at `rank`."""
    from trainers.model.models import LoraSpec, build_model, lora_parameters

    return sum(p.numel() * 4 for p in lora_parameters(build_model("micro", LoraSpec(rank=rank))).values())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """1 learner + 3 workers, 5 updates, for each method; every worker talks through a counting proxy."""
    out = {}
    for method in METHODS:
        run_dir = tmp_path_factory.mktemp("runs") / method
        with Cluster(run_dir, workers=3, proxies=True, method=method, updates=5) as c:
            summary = c.wait()
            counted = {w: p.drain() for w, p in c.proxies.items()}
            out[method] = (c, summary, counted)
    return out


@pytest.mark.parametrize("method", METHODS)
def test_all_replicas_end_equal(runs, method):
    c, s, _ = runs[method]
    assert s["complete"] and s["status"] == "complete" and s["updates"] == 5
    assert set(c.returncodes.values()) == {0}
    assert s["consistent"] is True, s["hash_mismatches"]
    assert set(s["state_hashes"]) == {"learner", "w1", "w2", "w3"}
    assert len(set(s["state_hashes"].values())) == 1
    if method != "full":
        assert len(set(s["optimizer_hashes"].values())) == 1
    assert s["hash_checks"] >= 3 * 6  # every version (K = 1) after version 0, plus the join checks
    # The adapter moved: training happened, so equal hashes are not equal *initial* states.
    version0 = [r for r in c.events("learner") if r["kind"] == "hash" and r["version"] == 0][0]
    assert version0["learner_policy_hash"] != s["state_hashes"]["learner"]
    for p in ("learner", "w1", "w2", "w3"):
        assert (c.run_dir / f"events-{p}.jsonl").exists()


def test_identity_and_full_end_bit_identical(runs):
    # The policy hash covers the raw bytes of every adapter tensor.
    assert runs["identity"][1]["state_hashes"]["learner"] == runs["full"][1]["state_hashes"]["learner"]
    assert runs["spar"][1]["state_hashes"]["learner"] != runs["full"][1]["state_hashes"]["learner"]
    # Same adapters at every version + rollouts seeded by (seed, worker, batch): the two runs
    # sampled the same tokens and computed the same losses, in separate processes.
    rows = {m: [r for r in runs[m][0].events("learner") if r["kind"] == "update"] for m in ("full", "identity")}
    assert [r["loss"] for r in rows["full"]] == [r["loss"] for r in rows["identity"]]
    assert [r["hash"] for r in rows["full"]] == [r["hash"] for r in rows["identity"]]
    seeds = {m: [(r["batch"], r["seed"]) for r in runs[m][0].events("w2") if r["kind"] == "rollouts"]
             for m in ("full", "identity")}
    assert seeds["full"] == seeds["identity"] and len({s for _, s in seeds["full"]}) == 5


@pytest.mark.parametrize("method", METHODS)
def test_reported_bytes_equal_bytes_on_the_sockets(runs, method):
    c, s, counted = runs[method]
    by_peer = {}
    for row in s["bytes_by_peer"]:
        by_peer.setdefault((row["peer"], row["direction"]), 0)
        by_peer[(row["peer"], row["direction"])] += row["frame_bytes"]
    for w, n in counted.items():
        assert by_peer[(f"w{w}", "sent")] == n["down"]
        assert by_peer[(f"w{w}", "received")] == n["up"]
        # The worker's own rows count the same bytes from its side.
        rows = c.events(f"w{w}")
        got = sum(v for r in rows if r["kind"] == "update" for v in r["bytes"]["received"].values())
        sent = sum(v for r in rows if r["kind"] == "rollouts" for v in r["bytes"]["sent"].values())
        updates = [r for r in s["bytes_by_peer"] if r["peer"] == f"w{w}" and r["direction"] == "sent"
                   and r["type"] in ("UPDATE", "SNAPSHOT")]
        assert got == sum(r["frame_bytes"] for r in updates)
        assert sent == sum(r["frame_bytes"] for r in s["bytes_by_peer"] if r["peer"] == f"w{w}"
                           and r["direction"] == "received" and r["type"] == "ROLLOUTS")
    per_update = [r for r in c.events("learner") if r["kind"] == "update"]
    # Spar's payload size varies a little between updates (how many triplets fit the budget).
    one = statistics.median(v for r in per_update for v in r["update_frame_bytes"].values())
    assert s["payload_bytes_per_update"]["learner_to_one_worker"] == one
    for r in per_update:
        assert set(r["update_frame_bytes"].values()) == {r["update_payload_bytes"] + wire.HEADER_BYTES}


def test_spar_ships_fewer_bytes_than_full(runs):
    spar = runs["spar"][1]["payload_bytes_per_update"]["update_payload"]
    full = runs["full"][1]["payload_bytes_per_update"]["update_payload"]
    assert spar < full


def test_rows_record_phases_and_depth0_lag_is_zero(runs):
    c, s, _ = runs["spar"]
    rows = [r for r in c.events("learner") if r["kind"] == "update"]
    assert [r["version"] for r in rows] == [1, 2, 3, 4, 5]
    assert [r["lag"] for r in rows] == [0] * 5 and s["lag"]["max"] == 0
    for r in rows:
        assert {"idle", "train", "encode", "decode_replay", "send_update"} <= set(r["durations_s"])
        assert 0 < r["harness_s"] < r["seconds_per_update"]
        assert r["bytes"]["sent"]["UPDATE"] == 3 * (r["update_payload_bytes"] + wire.HEADER_BYTES)
    worker_rows = c.events("w1")
    assert {"rollout", "send_rollouts"} <= set([r for r in worker_rows if r["kind"] == "rollouts"][0]["durations_s"])
    assert {"receive", "decode_replay"} <= set([r for r in worker_rows if r["kind"] == "update"][0]["durations_s"])


def test_pipelining_depth1_trains_with_lag_one(tmp_path):
    # full-bf16: workers sample with the bf16-rounded adapter, and that is the policy compared.
    with Cluster(tmp_path / "run", workers=2, method="full-bf16", updates=5, pipeline=1) as c:
        s = c.wait()
    assert s["consistent"] is True and s["optimizer_hashes"] is None
    assert s["payload_bytes_per_update"]["update_payload"] < adapter_bytes(8) // 2 + 4096  # bf16 + the table
    rows = [r for r in c.events("learner") if r["kind"] == "update"]
    assert [r["lag"] for r in rows] == [0, 1, 1, 1, 1]  # warm-up: the first batch is on-policy
    assert all(r["policy_versions"] == {"w1": r["version"] - 1 - r["lag"], "w2": r["version"] - 1 - r["lag"]}
               for r in rows)


@pytest.mark.parametrize("method", ["spar", "full"])
def test_killed_worker_restarts_and_catches_up(tmp_path, method):
    with Cluster(tmp_path / "run", workers=2, method=method, updates=12, snapshot_every=2,
                 learner_flags=["--worker-timeout", "120"]) as c:
        c.wait_for_version(5)
        c.procs["w2"].kill()
        c.procs["w2"].wait()
        c.start_worker(2)
        s = c.wait()
    assert s["complete"] and s["consistent"] is True
    assert s["state_hashes"]["w2"] == s["state_hashes"]["learner"]
    joins = [r for r in c.events("learner") if r["kind"] == "joined" and r["worker"] == 2]
    assert len(joins) == 2 and joins[1]["version"] >= 5
    rejoined = [r for r in c.events("w2") if r["kind"] in ("joined", "update")]
    rejoined = rejoined[[i for i, r in enumerate(rejoined) if r["kind"] == "joined"][1] + 1:]
    if method == "spar":  # replay: the newest snapshot, then every logged update after it, in order
        assert s["optimizer_hashes"]["w2"] == s["optimizer_hashes"]["learner"]
        base = joins[1]["snapshot_version"]
        assert base > 0 and base % 2 == 0 and joins[1]["replayed"] == joins[1]["version"] - base
        assert rejoined[0]["type"] == "SNAPSHOT" and rejoined[0]["version"] == base
        assert [r["version"] for r in rejoined[1:joins[1]["replayed"] + 1]] == list(range(base + 1, joins[1]["version"] + 1))
    else:  # full sync: the newest adapter is the whole policy
        assert rejoined[0]["type"] == "UPDATE" and rejoined[0]["version"] == joins[1]["version"]
    # The restarted worker's hash right after catching up was checked against the learner's.
    checks = [r for r in c.events("learner") if r["kind"] == "hash" and r["replica"] == "w2"
              and r["version"] == joins[1]["version"]]
    assert checks and all(r["equal"] for r in checks)
    assert not s["dropped"]


def test_a_worker_whose_connection_breaks_rejoins_and_catches_up(tmp_path):
    with Cluster(tmp_path / "run", workers=2, proxies=True, method="spar", updates=10, snapshot_every=3) as c:
        c.wait_for_version(3)
        c.proxies[1].cut()
        s = c.wait()
    assert s["complete"] and s["consistent"] is True and not s["dropped"]
    assert set(c.returncodes.values()) == {0}
    assert s["state_hashes"]["w1"] == s["state_hashes"]["learner"]
    assert any(r["kind"] == "connection_lost" for r in c.events("w1"))
    kinds = [r["kind"] for r in c.events("learner") if r.get("worker") == 1]
    assert kinds == ["joined", "disconnected", "joined"]


def test_dead_and_silent_workers_are_dropped_after_the_timeout(tmp_path):
    # w3 is killed (its connection closes): the learner drops it after the worker timeout; w2 is
    # SIGSTOPped (the connection stays open, no byte arrives, not even a heartbeat): it is dropped
    # after the liveness deadline (10 s). The learner finishes with w1. The timeout is far above what
    # w1 needs per update on a busy machine, so that w1 is never the one dropped; the test waits for
    # the learner's own events, never for a time.
    timeout = 30.0
    with Cluster(tmp_path / "run", workers=3, method="rank-2", updates=8,
                 learner_flags=["--worker-timeout", str(timeout)]) as c:
        c.wait_for_version(2)
        c.procs["w3"].kill()
        c.procs["w2"].send_signal(signal.SIGSTOP)
        c.wait_for("both drops", lambda rows: {r["worker"] for r in rows if r["kind"] == "dropped"} >= {2, 3})
        c.procs["w2"].kill()  # it would otherwise try to rejoin
        s = c.wait()
    assert c.returncodes["learner"] == 0
    assert s["complete"] and s["updates"] == 8 and s["consistent"] is True
    assert sorted(d["worker"] for d in s["dropped"]) == [2, 3]
    reasons = {d["worker"]: d["reason"] for d in s["dropped"]}
    assert f"within {timeout} s" in reasons[3] and "silent for 10 s (the liveness deadline)" in reasons[2], reasons
    assert set(s["state_hashes"]) == {"learner", "w1"}
    # rank-2 ships the whole (small) adapter in bf16: 2/8 of the rank-8 adapter, half its fp32 bytes, plus the table.
    assert adapter_bytes(2) // 2 < s["payload_bytes_per_update"]["update_payload"] < adapter_bytes(2) // 2 + 4096
    kinds = [r["kind"] for r in c.events("learner") if r.get("worker") == 3]
    assert kinds.index("disconnected") < kinds.index("dropped")
    assert "disconnected" not in [r["kind"] for r in c.events("learner") if r.get("worker") == 2]


def _frame(msg_type=MessageType.HELLO, body=b'{"worker":1}', token=TOKEN, seq=0, sender=1, **patch):
    f = bytearray(wire.encode_frame(msg_type, body, check=wire.token_check(token), sender=sender,
                                    version=0, seq=seq))
    for offset, value in patch.items():
        i = int(offset[1:])
        f[i:i + len(value)] = value
    return bytes(f)


FUZZ = {
    "random bytes": os.urandom(4096),
    "truncated header": _frame()[:30],
    "huge length": _frame(o36=struct.pack("!I", 2**32 - 1)),
    "wrong token": _frame(token="not-the-token"),
    "wrong version": _frame(o4=bytes([wire.FORMAT_VERSION + 1])),
    "out of sequence": _frame(seq=7),
    "not a HELLO first": _frame(MessageType.ROLLOUTS, b"\0" * 8),
    "unknown worker": _frame(body=b'{"worker":99}', sender=99),
    "bad checksum": _frame(o40=b"\0\0\0\0"),
}
EXPECTED = {"bad magic", "closed in the middle of a header", "frame too large", "wrong run token",
            f"unsupported format version {wire.FORMAT_VERSION + 1}", "out of sequence: expected 0, got 7", "expected HELLO",
            "names worker 99", "checksum mismatch"}


def _fuzz(address):
    for data in FUZZ.values():
        with socket.create_connection(address) as s:
            try:
                s.sendall(data)
                s.shutdown(socket.SHUT_WR)
                s.settimeout(10)
                s.recv(1)  # the learner closes the connection
            except OSError:
                pass


def _rss_kib(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def test_fuzzed_frames_do_not_hurt_the_run(tmp_path):
    with Cluster(tmp_path / "run", workers=2, method="spar", updates=10,
                 learner_flags=["--handshake-timeout", "1"]) as c:
        learner = c.procs["learner"].pid
        with socket.create_connection(c.address) as silent:  # never says HELLO
            silent.settimeout(30)
            assert silent.recv(1) == b""  # closed by the learner, not by us
        _fuzz(c.address)  # while the learner waits for its workers
        rss_before = _rss_kib(learner)
        c.wait_for_version(2)
        for _ in range(3):  # and while it trains
            _fuzz(c.address)
        rss_after = _rss_kib(learner)
        s = c.wait()
    assert s["complete"] and s["updates"] == 10 and s["consistent"] is True and not s["dropped"]
    reasons = refusals(c.events("learner"))  # counted per source per interval: {reason: count}
    for expected in EXPECTED | {"handshake timed out"}:
        assert any(expected in r for r in reasons), (expected, reasons)
    assert sum(reasons.values()) >= 4 * len(FUZZ)
    assert rss_after - rss_before < 200 * 1024  # a 4 GiB length field allocated nothing


def test_interrupted_run_leaves_incomplete_summary_and_readable_events(tmp_path):
    with Cluster(tmp_path / "run", workers=1, autostart=False, method="identity", updates=500) as c:
        # A worker whose flags contradict the learner's parameters refuses to run.
        assert c.start_worker(1, extra=["--method", "spar"]).wait(timeout=120) == 2
        assert "--method='spar' contradicts the learner's 'identity'" in c.log("w1")
        c.start_worker(1)
        c.wait_for_version(2)
        c.procs["learner"].send_signal(signal.SIGTERM)
        assert c.procs["learner"].wait(timeout=60) == 1
        assert c.procs["w1"].wait(timeout=60) == 0  # told to stop, not crashed
        s = c.summary()
    assert s["complete"] is False and s["status"].startswith("interrupted") and s["consistent"] is False
    assert 2 <= s["updates"] < 500
    assert any(r["kind"] == "interrupted" for r in c.events("learner"))
    assert len([r for r in c.events("learner") if r["kind"] == "update"]) == s["updates"]


@pytest.mark.parametrize("main, argv, message", [
    ("learner", ["--method", "nope"], "unknown method 'nope'; valid methods: "),
    ("learner", ["--pipeline", "3"], "--pipeline: '3' is outside [0, 1]"),
    ("learner", ["--task", "nope"], "unknown task 'nope'"),
    ("learner", ["--objective", "nope"], "--objective: 'nope' is not one of distill, grpo"),
    ("learner", ["--listen", "nohost"], "is not HOST:PORT"),
    ("learner", ["--method", "spar", "--budget", "200%"], "--budget: '200%' is outside"),
    ("worker", ["--learner", "nohost", "--worker-id", "1"], "is not HOST:PORT"),
    ("worker", ["--learner", "127.0.0.1:1", "--worker-id", "0"], "--worker-id: '0' is outside [1, "),
])
def test_usage_errors_exit_2_with_one_line(tmp_path, monkeypatch, capsys, main, argv, message):
    from trainers.hilo import learner, worker

    monkeypatch.setenv("RUN_TOKEN", TOKEN)
    with pytest.raises(SystemExit) as exc:
        {"learner": learner, "worker": worker}[main].main(["--run-dir", str(tmp_path), *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_missing_run_token_is_a_usage_error(tmp_path, monkeypatch, capsys):
    from trainers.hilo import learner

    monkeypatch.delenv("RUN_TOKEN", raising=False)
    with pytest.raises(SystemExit) as exc:
        learner.main(["--run-dir", str(tmp_path)])
    assert exc.value.code == 2 and "RUN_TOKEN" in capsys.readouterr().err


def test_learner_rejects_rollouts_it_cannot_train_on(tmp_path):
    """Well-framed but unusable rollouts (ids outside the vocabulary, a batch from the future)
    are a protocol violation by that worker, never an exception in the training loop."""
    from trainers.hilo.learner import Learner
    from trainers.hilo.membership import Peer
    from trainers.model.rollout import Rollouts
    from trainers.spec import RunParams
    from trainers.protocol.wire import Frame, WireError

    learner = Learner(RunParams(method="identity", workers=1, updates=3, model="micro", objective="grpo"), TOKEN,
                      str(tmp_path), ("127.0.0.1", 0))
    try:
        peer = Peer(1, None, start_batch=0)

        def frame(ids, batch=0):
            r = Rollouts(problem_index=[0], prompt_ids=[[1, 2]], completion_ids=[ids], logprobs=[[-1.0] * len(ids)],
                         rewards=[0.0])
            return Frame(MessageType.ROLLOUTS, 1, 0, 1, wire.pack_tensors(r.to_tensors(), meta={"batch": batch}))

        with pytest.raises(WireError, match="outside the vocabulary"):
            learner.on_frame(peer, frame([5, 100000]))
        with pytest.raises(WireError, match="outside 0..2"):
            learner.on_frame(peer, frame([5], batch=7))
        with pytest.raises(WireError, match="while at version 0"):
            learner.on_frame(peer, frame([5], batch=2))
        learner.on_frame(peer, frame([5, 6]))
        assert 0 in peer.rollouts
        with pytest.raises(WireError, match="while at version 0"):  # the same batch twice
            learner.on_frame(peer, frame([5, 6]))
    finally:
        learner.close()


def test_held_out_evaluation_runs_after_the_loop_and_is_common_to_methods(runs):
    """The learner evaluates versions 0, every E and the last on the held-out set after its last
    update (so no evaluation second is inside an update's), with the same problems and sampling
    seed for every method: bit-identical policies (identity, full) get identical figures."""
    evals = {}
    for method, (c, s, _) in runs.items():
        rows = c.events("learner")
        updates = [r for r in rows if r["kind"] == "update"]
        ev = [r for r in rows if r["kind"] == "eval"]
        assert [r["version"] for r in ev] == [0, 5]  # eval_every 5, 5 updates
        assert min(r["t"] for r in ev) > max(r["t"] for r in updates)
        assert all(r["n"] >= 2 * r["k"] and r["problems"] > 0 and r["eval_s"] > 0 for r in ev)
        assert s["eval"]["version"] == 5
        evals[method] = [{k: r[k] for k in ("pass_at_1", "pass_at_k", "mean_reward", "objective")} for r in ev]
    assert evals["identity"] == evals["full"]
    assert evals["spar"][0] == evals["full"][0]  # version 0: the same policy for every method
