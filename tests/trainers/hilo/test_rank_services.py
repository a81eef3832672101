"""`rank-R` as real processes: train at rank R, ship the whole adapter in bf16 like full-bf16;
every replica holds the bf16-rounded adapter, and its hash is the one compared."""
import pytest

from tests.trainers.hilo.cluster import Cluster
from tests.trainers.hilo.test_services import adapter_bytes


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    with Cluster(tmp_path_factory.mktemp("runs") / "rank-1", workers=2, method="rank-1", updates=5) as c:
        yield c, c.wait()


def test_rank1_replicas_are_hash_equal_at_every_checked_version(run):
    c, s = run
    assert s["complete"] and s["consistent"] is True, s["hash_mismatches"]
    assert s["hash_checks"] >= 2 * 6                       # every version (K = 1) of both workers, and the joins
    assert set(s["state_hashes"]) == {"learner", "w1", "w2"} and len(set(s["state_hashes"].values())) == 1
    checks = [r for r in c.events("learner") if r["kind"] == "hash"]
    assert checks and all(r["equal"] for r in checks)


def test_rank1_ships_bf16_half_the_fp32_bytes(run):
    c, s = run
    fp32 = adapter_bytes(1)                                # the rank-1 micro adapter in fp32
    rows = [r for r in c.events("learner") if r["kind"] == "update"]
    assert len(rows) == 5
    for r in rows:                                         # bf16 values (fp32 / 2) + the tensor table (< 4 KiB)
        assert fp32 // 2 < r["update_payload_bytes"] < fp32 // 2 + 4096
    worker = [r["payload_bytes"] for r in c.events("w1") if r["kind"] == "update"]
    assert worker == [r["update_payload_bytes"] for r in rows]
