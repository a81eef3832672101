"""`delta` as real processes: workers hold exactly what full-bf16 ships, and a late worker catches up."""
import pytest

from tests.trainers.hilo.cluster import Cluster
from trainers.compress.delta import is_delta


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """delta and full-bf16 on the same seed: the same gradients, so the same shipped adapters."""
    out = {}
    for method in ("delta", "full-bf16"):
        with Cluster(tmp_path_factory.mktemp("runs") / method, workers=2, method=method, updates=5) as c:
            out[method] = (c, c.wait())
    return out


def test_delta_replicas_are_hash_equal_to_full_bf16_at_every_version(pair):
    (c, s), (cf, sf) = pair["delta"], pair["full-bf16"]
    assert s["consistent"] is True and s["hash_checks"] >= 2 * 6, s["hash_mismatches"]
    assert set(s["state_hashes"]) == {"learner", "w1", "w2"} and len(set(s["state_hashes"].values())) == 1
    rows = {m: [r for r in x[0].events("learner") if r["kind"] == "update"] for m, x in pair.items()}
    assert [r["hash"] for r in rows["delta"]] == [r["hash"] for r in rows["full-bf16"]]
    assert [r["loss"] for r in rows["delta"]] == [r["loss"] for r in rows["full-bf16"]]
    for r in rows["delta"]:  # density: changed elements of the bf16 adapter / all of them
        assert 0 < r["delta_density"] <= 1 and r["delta_changed"] > 0
    assert all("delta_density" not in r for r in rows["full-bf16"])
    worker_updates = [r for r in c.events("w1") if r["kind"] == "update"]
    assert [r["payload_bytes"] for r in worker_updates] == [r["update_payload_bytes"] for r in rows["delta"]]


def test_a_restarted_worker_catches_up_from_a_keyframe_then_applies_deltas(tmp_path):
    with Cluster(tmp_path / "run", workers=2, method="delta", updates=10,
                 learner_flags=["--worker-timeout", "120"]) as c:
        c.wait_for_version(4)
        c.procs["w2"].kill()
        c.procs["w2"].wait()
        c.start_worker(2)
        s = c.wait()
    assert s["complete"] and s["consistent"] is True, s["hash_mismatches"]
    assert s["state_hashes"]["w2"] == s["state_hashes"]["learner"]
    joins = [r for r in c.events("learner") if r["kind"] == "joined" and r["worker"] == 2]
    assert len(joins) == 2 and joins[1]["version"] >= 4
    rows = c.events("w2")
    second = [i for i, r in enumerate(rows) if r["kind"] == "joined"][1]
    after = [r for r in rows[second:] if r["kind"] == "update"]
    # the keyframe is the whole bf16 adapter (a tensor table); every later update is a small delta
    assert after[0]["version"] == joins[1]["version"] and after[0]["payload_bytes"] > max(r["payload_bytes"] for r in after[1:])
    assert [r["version"] for r in after] == list(range(joins[1]["version"], 11))


def test_is_delta_tells_the_keyframe_from_the_delta():
    assert is_delta(b"HLDT....") and not is_delta(b"\x00\x00\x01\x00{")
