"""Aggregator + dp workers over real TCP sockets (threads of this process; the services' own classes
and functions): the bytes counted at the sockets equal each method's formula plus the framing.

Framing per SYNC frame: the 44-byte header (exactly) and the tensor table's u32 length + JSON
(names, dtypes, shapes, meta): at most TABLE_BYTES_PER_TENSOR per tensor + META_BYTES."""
import threading

import pytest

from trainers.protocol import wire
from trainers.dataparallel.aggregator import Aggregator
from trainers.dataparallel.worker import join, train
from trainers.events import EventLog, read_events
from trainers.spec import RunParams

TOKEN = "t" * 32
TABLE_BYTES_PER_TENSOR = 120   # {"name": "...layers.1.mlp.gate_proj.weight", "dtype": "fp32", "shape": [176, 64]}
META_BYTES = 300               # {"step": s, "losses": [K floats]}
NAMES = ["ddp", "lowrank-ddp", "diloco", "lordo-global", "lordo-local", "lordo-global-none"]


def run_star(tmp_path, method: str, workers: int = 2, steps: int = 4, **changes):
    p = RunParams(method=method, workers=workers, updates=steps, model="micro", seed=1, lr=3e-3, lordo_k=2,
                  lordo_k_states=2, lowrank_ddp_refresh=3, lordo_rank=4, dp_batch=2, dp_seq_len=16, dp_heldout=4,
                  **changes)
    agg = Aggregator(p, TOKEN, str(tmp_path), ("127.0.0.1", 0))
    errors = []

    def worker(w):
        try:
            conn, params = join(("127.0.0.1", agg.address[1]), w, TOKEN, 30)
            events = EventLog(tmp_path, f"w{w}")
            train(conn, params, w, events)
            events.close()
            conn.close()
        except Exception as err:  # surfaced by the assertion below
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(1, workers + 1)]
    for t in threads:
        t.start()
    try:
        agg.accept(60)
        summary = agg.run()
    finally:
        agg.close()
        for t in threads:
            t.join(60)
    assert not errors, errors
    return summary, read_events(tmp_path / "events-learner.jsonl")


@pytest.mark.parametrize("method", NAMES)
def test_measured_bytes_are_formula_plus_framing(tmp_path, method):
    summary, rows = run_star(tmp_path, method)
    assert summary["complete"] and summary["consistent"], summary
    assert summary["heldout_ppl"] > 1
    syncs = [r for r in rows if r["kind"] == "update" and r["sync"]]
    assert [r["version"] for r in rows if r["kind"] == "update"] == [1, 2, 3, 4]
    for r in syncs:
        frames_down = r["update_frame_bytes"]
        assert all(n == r["update_payload_bytes"] + wire.HEADER_BYTES for n in frames_down.values())
        assert r["wire_bytes_up"] == r["payload_bytes_up"] + 2 * wire.HEADER_BYTES
        for measured, claimed in ((r["payload_bytes_up"] / 2, r["claimed_bytes_up"]),
                                  (r["update_payload_bytes"], r["claimed_bytes_down"])):
            overhead = measured - claimed
            assert 0 < overhead <= 4 + META_BYTES + TABLE_BYTES_PER_TENSOR * 3 * 30, (method, r["version"], overhead)
    assert sum(r["claimed_bytes_up"] for r in syncs) > 0
    assert syncs[-1]["heldout_ppl"] == summary["heldout_ppl"]


def test_bad_token_is_rejected(tmp_path):
    """A worker without the run token never gets WELCOME: the frame fails the token check."""
    p = RunParams(method="ddp", workers=1, updates=1, model="micro")
    agg = Aggregator(p, TOKEN, str(tmp_path), ("127.0.0.1", 0))
    try:
        t = threading.Thread(target=lambda: pytest.raises(Exception, join, ("127.0.0.1", agg.address[1]), 1,
                                                          "wrong" * 8, 5))
        t.start()
        with pytest.raises(TimeoutError):
            agg.accept(3)
        t.join(10)
    finally:
        agg.close()
    assert any(r["kind"] == "rejected" for r in read_events(tmp_path / "events-learner.jsonl"))


def test_lora_mode_over_the_wire_ships_only_the_adapter(tmp_path):
    """--dp-train lora through the services: the aggregator and the workers build the same adapter,
    the upload's tensor table names only LoRA factors, and its bytes are the formula's."""
    summary, rows = run_star(tmp_path, "lordo-global", dp_train="lora", lora_rank=16)
    assert summary["complete"] and summary["consistent"], summary
    syncs = [r for r in rows if r["kind"] == "update" and r["sync"]]
    assert syncs and all(r["claimed_bytes_up"] > 0 for r in syncs)
    from trainers.dataparallel.inprocess import replica
    _, adapter = replica("micro", seed=1, train="lora", lora_rank=16)
    _, full = replica("micro", seed=1, train="full")
    adapter_bytes = 4 * sum(t.numel() for t in adapter.values())
    for r in syncs:   # the upload is at most the adapter plus its two moments, far below the full model
        assert r["claimed_bytes_up"] <= 3 * adapter_bytes < 4 * sum(t.numel() for t in full.values())
        assert 0 < r["payload_bytes_up"] / 2 - r["claimed_bytes_up"] <= 4 + META_BYTES + TABLE_BYTES_PER_TENSOR * 3 * 30
