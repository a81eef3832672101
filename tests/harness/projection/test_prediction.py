"""prediction.json's bottleneck words (harness/projection/prediction.py) from the model's terms."""
import dataclasses
import re
from pathlib import Path

import pytest

from harness.projection import costmodel as cm
from harness.projection import prediction
from harness.projection.prediction import _bottleneck
from harness.results import compare
from harness.results import tables


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


# ---- a contended run: compute at CPU time (costmodel.fit clock="cpu"), the wall figure beside ----

def test_the_bottleneck_words_use_cpu_time_when_contended_and_keep_the_wall_figure():
    wall = _p(1.0, 0.0, 0.5, 1.5)            # compute 2.0 s at wall time: the link 33 % of the update
    cpu = _p(1.0, 0.0, 0.3, 0.34)            # the same run at CPU time: the link 61 %
    name, words = _bottleneck(cpu, 2, 2, 2.4, wall=wall)
    assert name == "worker link" and _bottleneck(wall, 2, 2, 2.4)[0] == "compute"
    assert words.startswith("compute at CPU time: the machine was contended, load 2.4 per core; ")
    assert "61% of the update is link time" in words and "(at wall time: compute, the link 33% of the update)" in words
    assert "CPU time" not in _bottleneck(wall, 2, 2, 2.4)[1]


HELDOUT = Path(__file__).resolve().parents[2] / "fixtures" / "runs" / "run-heldout"


def test_fit_at_cpu_time_takes_the_cpu_columns_and_refuses_an_unknown_clock():
    u = tables.read(HELDOUT).updates
    late = u[u["update_index"] > 1]
    wall, cpu = cm.fit(u).compute, cm.fit(u, clock="cpu").compute
    assert wall.train_s == pytest.approx(late["train_s"].median())
    assert cpu.train_s == pytest.approx(late["train_cpu_s"].median()) and cpu.train_s < wall.train_s / 2
    spar = late[late["variant"] == "spar@12.8%"]
    assert cpu.codecs["spar@12.8%"].encode_s == pytest.approx(spar["encode_cpu_s"].median())
    assert cpu.learner_other_s == wall.learner_other_s            # no CPU column: stays at wall time
    old = u.drop(columns=[c for c in u if c.endswith("_cpu_s")])  # a run recorded before the CPU columns
    assert cm.fit(old, clock="cpu").compute == cm.fit(old).compute
    with pytest.raises(ValueError, match="wall, cpu"):
        cm.fit(u, clock="process")


def test_a_contended_runs_prediction_reads_its_bottleneck_at_cpu_time(monkeypatch):
    doc = prediction.build(HELDOUT)                               # recorded at load ~8 per core
    for v in doc["variants"].values():
        assert v["clock"] == "cpu" and v["evidence"].startswith("compute at CPU time: the machine was contended, load ")
        assert v["predicted_cpu_s"] < v["predicted_s"] and v["measured_cpu_s"] < v["measured_s"]
        assert v["link_share"] > v["link_share_wall"] and v["bottleneck_wall"] == "compute"
    t = tables.read(HELDOUT)
    quiet = t.updates.assign(load1=0.5, train_cpu_s=t.updates["train_s"], steal_frac=0.0)
    monkeypatch.setattr(prediction, "read", lambda _: dataclasses.replace(t, updates=quiet))
    for v in prediction.build(HELDOUT)["variants"].values():
        assert v["clock"] == "wall" and "CPU time" not in v["evidence"] and "predicted_cpu_s" not in v


def test_the_results_side_mirrors_the_cost_models_frame_and_goodput():
    assert compare.FRAME_HEADER_BYTES == cm.FRAME_HEADER_BYTES and compare.GOODPUT == pytest.approx(cm.goodput_ratio())


def test_the_compute_in_the_words_is_the_sum_of_the_parts_it_names():
    """'0.226 s on compute (rollouts 0.0806 s, training 0.138 s)' left 7 ms unnamed: every part is named."""
    p = dataclasses.replace(_p(0.1, 0.01, 0.0806, 0.138), encode_s=0.002, replay_s=0.004, other_s=0.0014)
    words = _bottleneck(p, 2, 2, None)[1]
    total, parts = re.search(r"and ([\d.]+) s on compute \((.*?)\)", words).groups()
    named = {name.strip(): float(s) for name, s in re.findall(r"([a-z +']+?) ([\d.]+) s", parts)}
    assert set(named) == {"rollouts", "training", "encode", "decode + replay", "the harness's own work"}
    assert sum(named.values()) == pytest.approx(float(total), abs=1e-3)
    plain = _bottleneck(_p(0.1, 0.01, 0.5, 0.5), 2, 2, None)[1]   # no codec, no overhead: nothing else named
    assert "(rollouts 0.5 s, training 0.5 s)" in plain
