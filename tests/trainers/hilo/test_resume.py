"""A learner killed mid-run and started again from its snapshot file (`--resume`) continues
bit-identically: the real services on loopback, as `harness run` starts them.

Two runs of the same parameters: one straight through; one whose learner is SIGKILLed after its
first snapshots and restarted on the same address with `--resume <run>/learner-snapshot.safetensors`,
while its workers (paused around the kill, so the learner cannot run ahead) rejoin and are caught
up. Every update row either learner life wrote must carry the straight run's policy hash and
payload size at that version, and the final snapshot files (adapter, AdamW state, compressor
residual, warm starts and generators, kept policies) must hold the same tensors, bit for bit.
"""
from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load as st_load

from harness.results.files import read_cell
from tests.trainers.hilo.cluster import Cluster
from trainers.hilo.learner import SNAPSHOT_FILE
from trainers.model.replica import snapshot_meta

UPDATES, SNAPSHOT_EVERY, KILL_AFTER = 8, 2, 3   # the kill comes after version 3: snapshot 2 (or 4) exists
PARAMS = dict(updates=UPDATES, snapshot_every=SNAPSHOT_EVERY, hash_every=1, pipeline=0, eval_problems=4,
              eval_every=4, eval_samples=2, pass_k=1)
METHODS = {  # stateful compressors: spar with the sketch (warm starts + generator), powersgd (Q + generator)
    "spar": dict(method="spar", budget="10%", spar_svd="sketch", spar_sketch=2),
    "powersgd": dict(method="powersgd", budget="10%"),
}


def update_rows(cluster: Cluster) -> list[dict]:
    return [r for r in cluster.events("learner") if r["kind"] == "update"]


def eval_rows(cluster: Cluster) -> dict[int, tuple]:
    return {r["version"]: (r["pass_at_1"], r["pass_at_k"], r["mean_reward"], r["reverse_kl"], r["gold_prob"])
            for r in cluster.events("learner") if r["kind"] == "eval"}


def same_snapshot(a: bytes, b: bytes) -> bool:
    """The same tensors, bit for bit, and the same metadata (safetensors writes its metadata map in
    no fixed order, so the files' bytes may differ)."""
    ta, tb = st_load(a), st_load(b)
    return (snapshot_meta(a) == snapshot_meta(b) and sorted(ta) == sorted(tb)
            and all(ta[k].dtype == tb[k].dtype and torch.equal(ta[k], tb[k]) for k in ta)
            and any(k.startswith("extra/compressor/residual/") for k in ta))


def straight_run(root: Path, params: dict) -> tuple[dict[int, tuple], dict, bytes]:
    with Cluster(root / "straight", workers=2, **params) as c:
        summary = c.wait()
        assert summary["complete"] and summary["consistent"], c.log("learner")
        rows = {r["version"]: (r["hash"], r["update_payload_bytes"]) for r in update_rows(c)}
        return rows, eval_rows(c), (c.run_dir / SNAPSHOT_FILE).read_bytes()


def killed_and_resumed_run(root: Path, params: dict) -> tuple[Cluster, int]:
    """The run whose learner is killed after version KILL_AFTER and resumed; returns it (finished)
    and the version the second learner started at."""
    c = Cluster(root / "resumed", workers=2, **params)
    with c:
        c.wait_for_version(KILL_AFTER)
        workers = [c.procs[f"w{w}"] for w in (1, 2)]
        for proc in workers:   # no rollouts while the learner dies: it cannot run past the snapshot we take
            proc.send_signal(signal.SIGSTOP)
        c.procs["learner"].kill()
        c.procs["learner"].wait()
        snapshot = c.run_dir / SNAPSHOT_FILE
        resumed_at = int(snapshot_meta(snapshot.read_bytes())["version"])
        cmd = [*c.processes.launches["learner"][1]]
        listen = cmd.index("--listen") + 1
        cmd[listen] = f"{c.address[0]}:{c.address[1]}"      # where the workers rejoin
        c.processes.start("learner", "learner", [*cmd, "--resume", str(snapshot)], c.run_dir, c.env)
        for proc in workers:
            proc.send_signal(signal.SIGCONT)
        summary = c.wait()
        assert summary["complete"] and summary["consistent"], c.log("learner")
        # the summary's medians cover both lives: every version once, the later life's where twice
        assert summary["update_rows"] == UPDATES, summary
    return c, resumed_at


@pytest.mark.parametrize("name", sorted(METHODS))
def test_a_learner_resumed_from_its_snapshot_continues_bit_identically(tmp_path, name):
    params = {**PARAMS, **METHODS[name]}
    expected, evals, final = straight_run(tmp_path, params)
    assert sorted(expected) == list(range(1, UPDATES + 1))
    c, resumed_at = killed_and_resumed_run(tmp_path, params)
    assert SNAPSHOT_EVERY <= resumed_at <= KILL_AFTER + 1 and resumed_at % SNAPSHOT_EVERY == 0
    events = c.events("learner")
    cut = next(i for i, r in enumerate(events) if r["kind"] == "resumed")
    first = [r for r in events[:cut] if r["kind"] == "update"]
    second = [r for r in events[cut:] if r["kind"] == "update"]
    assert events[cut]["version"] == resumed_at and events[cut]["policies"] == [0]
    assert [r["version"] for r in first] == list(range(1, len(first) + 1)) and len(first) >= KILL_AFTER
    assert [r["version"] for r in second] == list(range(resumed_at + 1, UPDATES + 1))
    for r in first + second:   # the versions after the snapshot twice: both lives must match the straight run
        assert (r["hash"], r["update_payload_bytes"]) == expected[r["version"]], f"version {r['version']}"
    # adapter, AdamW state, compressor residual + warm starts + generators, kept policies: the same bits
    assert same_snapshot((c.run_dir / SNAPSHOT_FILE).read_bytes(), final)
    assert eval_rows(c) == evals and sorted(evals) == [0, 4, 8]
    # what the report reads: every version once, the resumed life's row where both lives wrote one
    marks = read_cell(c.run_dir).updates
    assert [m.version for m in marks] == list(range(1, UPDATES + 1))
    assert [m.t for m in marks[resumed_at:]] == [r["t"] for r in second]


def test_resume_refuses_a_snapshot_of_another_run(tmp_path, capsys, monkeypatch):
    """A snapshot taken under other parameters (here another seed) is refused in one line, exit 2."""
    from trainers.hilo import learner

    monkeypatch.setenv("RUN_TOKEN", "t")
    monkeypatch.delenv("WAN_PARENT_PID", raising=False)

    params = {**PARAMS, **METHODS["powersgd"], "updates": 2}
    with Cluster(tmp_path / "a", workers=1, **params) as c:
        assert c.wait()["complete"]
    argv = ["--run-dir", str(tmp_path / "b"), *c.flags(), "--seed", "7",
            "--resume", str(c.run_dir / SNAPSHOT_FILE)]
    with pytest.raises(SystemExit) as exit_:
        learner.main(argv)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_.value.code == 2 and "a snapshot of a run with other parameters: seed=" in err
    assert not (tmp_path / "b").exists()   # refused before anything is written
