"""prediction.json's bottleneck words (harness/projection/prediction.py) from the model's terms."""
import pytest

from harness.projection import costmodel as cm
from harness.projection.prediction import _bottleneck


def _p(down, up, rollout, train, where="w1 link"):
    return cm.Prediction(method="m", variant="m", pipeline=0, seconds_per_update=down + up + rollout + train,
                         bound="serial", rollout_s=rollout, train_s=train, encode_s=0.0, transfer_down_s=down,
                         transfer_up_s=up, replay_s=0.0, other_s=0.0, payload_bytes=1, bytes_down_per_worker=1,
                         link_bytes_down_per_worker=1, bytes_out_learner=1, bottleneck=where)


@pytest.mark.parametrize("pred, workers, cores, want", [
    (_p(0.1, 0.01, 3.0, 0.5), 8, 2, "CPU oversubscription"),        # 8 workers on 2 cores, compute-heavy
    (_p(2.0, 0.1, 0.3, 0.2), 8, 2, "worker link"),                   # the link dominates even when oversubscribed
    (_p(2.0, 0.1, 0.3, 0.2, "learner uplink (shared by 8)"), 8, 16, "learner uplink"),
    (_p(0.1, 0.01, 0.5, 0.5), 2, 2, "compute"),
])
def test_bottleneck_is_named_with_its_evidence(pred, workers, cores, want):
    name, words = _bottleneck(pred, workers, cores, 4.6)
    assert name == want
    assert "s per update on the links" in words
    if want == "CPU oversubscription":
        assert "8 workers and the learner share 2 cores" in words and "load 4.6 per core" in words
