"""The comm ratio: the paper's derivation, the rate chosen for a known compute and adapter size, the
scaled profile (delay, loss and a trace's shape kept), and the achieved ratio read from a run's rows."""

import pandas as pd
import pytest

from harness.net import profiles, traces
from harness.projection import commratio, costmodel as cm


def test_paper_ratio_is_derived_from_the_papers_figures():
    # 147.7 MB at 62.5 Mbit/s = 18.9 s of a 33 s update: compute 14.1 s, ratio 1.34, link share 57 %
    assert commratio.PAPER_LINK_S == pytest.approx(18.9, abs=0.01)
    assert commratio.PAPER_RATIO == pytest.approx(1.34, abs=0.005)
    assert commratio.share(commratio.PAPER_RATIO) == pytest.approx(18.9 / 33, abs=0.002)
    assert commratio.parse("paper") == commratio.PAPER_RATIO
    assert commratio.parse("off") is None and commratio.parse(None) is None
    assert commratio.parse(" 2.5 ") == 2.5


@pytest.mark.parametrize("bad", ["fast", "0", "-1", "1e9", "nan"])
def test_a_bad_ratio_is_refused_in_one_line(bad):
    with pytest.raises(commratio.RatioError, match="--comm-ratio"):
        commratio.parse(bad)


def test_the_rate_chosen_for_a_known_compute_and_adapter_size():
    # 0.5 s of compute, a 300 kB update frame to each of 2 workers, 4 kB of rollouts back, target 1.34:
    # the links' time must be 0.67 s, and the rate is near the naive bytes / time (TCP's headers and a
    # slow-start round or two on an idle link make it somewhat higher, never lower)
    m = commratio.Measured(compute_s=0.5, down_bytes=300_000, up_bytes=4_000)
    prof = profiles.load("paper-62.5mbit")
    at = commratio.network_at(prof, 2, cc="cubic")
    f = commratio.scale_for(commratio.PAPER_RATIO, m, at, *commratio.factor_bounds(prof, 2))
    rate = profiles.scaled(prof, f).link("w1").down.rate_bit_s
    assert commratio.ratio_at(at(f), m) == pytest.approx(commratio.PAPER_RATIO, rel=1e-4)
    naive = (m.down_bytes + m.up_bytes) * 8 / (commratio.PAPER_RATIO * m.compute_s)
    assert naive <= rate <= 1.3 * naive
    # the cost model's own account of that link: the update's stream + the rollouts' = 0.67 s
    net = cm.Network.uniform(2, rate, cc="cubic")
    assert commratio.link_s(net, m) == pytest.approx(commratio.PAPER_RATIO * 0.5, rel=1e-3)


def test_a_smaller_compute_needs_a_faster_link():
    prof = profiles.load("paper-62.5mbit")
    at = commratio.network_at(prof, 2, cc="cubic")
    lo, hi = commratio.factor_bounds(prof, 2)
    slow = commratio.scale_for(1.0, commratio.Measured(1.0, 300_000, 4_000), at, lo, hi)
    fast = commratio.scale_for(1.0, commratio.Measured(0.1, 300_000, 4_000), at, lo, hi)
    assert fast > 5 * slow


def test_a_target_no_rate_reaches_is_refused():
    # 100 ms of one-way delay costs more than a 10 ms link budget at any rate
    prof = profiles.resolve("paper-62.5mbit", {"delay": "100ms"})
    m = commratio.Measured(compute_s=0.1, down_bytes=1_000, up_bytes=100)
    with pytest.raises(ValueError, match="no link rate gives a comm ratio of 0.1"):
        commratio.scale_for(0.1, m, commratio.network_at(prof, 1, cc="cubic"), *commratio.factor_bounds(prof, 1))


def test_scaled_profile_keeps_delay_loss_and_schedule_and_scales_every_rate():
    prof = profiles.load("heterogeneous-edge")
    half = profiles.scaled(prof, 0.5)
    for node in ("learner", "w1", "w2", "w3"):
        for a, b in ((prof.link(node).up, half.link(node).up), (prof.link(node).down, half.link(node).down)):
            assert (a.delay_s, a.jitter_s, a.loss_frac) == (b.delay_s, b.jitter_s, b.loss_frac)
            assert (a.rate_bit_s is None) == (b.rate_bit_s is None)
            if a.rate_bit_s:
                assert b.rate_bit_s == pytest.approx(a.rate_bit_s / 2, rel=1e-5)
    assert prof.change_times() == half.change_times()
    # the document round-trips (config.json keeps the scaled profile)
    assert profiles.from_doc(half.to_doc(), half.name).to_doc() == half.to_doc()


def test_a_trace_is_scaled_by_the_same_factor_its_shape_kept(tmp_path):
    path = traces.save(traces.generate("square", seconds=10, period_s=10, mean_bit_s=20e6, seed=1), tmp_path / "sq.csv")
    prof = profiles.resolve("paper-62.5mbit", {"trace": str(path)})
    tenth = profiles.scaled(prof, 0.1)
    a, b = prof.link("w1").down.trace.load(), tenth.link("w1").down.trace.load()
    assert a.times_s == b.times_s
    assert all(y == pytest.approx(x / 10) for x, y in zip(a.rate_bit_s, b.rate_bit_s))
    assert tenth.link("w1", at_s=3.0).down.rate_bit_s == pytest.approx(prof.link("w1", at_s=3.0).down.rate_bit_s / 10,
                                                                       rel=1e-3)
    net = cm.Network.from_profile(tenth, 1)
    assert net.workers[0].down.rate_bit_s == pytest.approx(a.stats()["mean_bit_s"] / 10)
    assert tenth.link("w1").down.trace.to_doc()["scale"] == pytest.approx(0.1)


def test_a_bad_trace_scale_names_the_field(tmp_path):
    path = traces.save(traces.generate("constant", seconds=5, mean_bit_s=1e6), tmp_path / "c.csv")
    with pytest.raises(profiles.ProfileError, match=r"trace\.scale"):
        profiles.from_doc({"defaults": {"trace": {"file": str(path), "scale": "fast"}}}, "x")


def _rows(compute_parts, down, up_total, workers=2, n=5):
    train, rollout = compute_parts
    return pd.DataFrame({"method": ["full-bf16"] * n, "update_index": list(range(1, n + 1)),
                         "train_cpu_s": [train] * n, "encode_cpu_s": [0.0] * n, "decode_replay_cpu_s": [0.0] * n,
                         "worker_rollout_cpu_s": [rollout] * n, "payload_bytes_down": [down] * n,
                         "payload_bytes_up": [up_total] * n, "workers": [workers] * n})


def test_achieved_ratio_is_the_runs_own_link_over_its_cpu_compute():
    rows = _rows((0.2, 0.3), down=300_000, up_total=8_000)
    m = commratio.measure(rows)
    assert m.compute_s == pytest.approx(0.5)
    assert m.down_bytes == 300_000 + cm.FRAME_HEADER_BYTES and m.up_bytes == 4_000 + cm.FRAME_HEADER_BYTES
    literal = profiles.load("paper-62.5mbit")
    doc = commratio.achieved(rows, "full-bf16", literal, 2, "cubic")
    assert doc["target_ratio"] is None and doc["placed"] == {}
    assert doc["ratio"] == pytest.approx(commratio.ratio_at(cm.Network.from_profile(literal, 2, cc="cubic"), m))
    assert doc["ratio"] < 0.1                     # 62.5 Mbit/s carries 300 kB in ~40 ms: compute-bound
    # what --comm-ratio paper would have used: the rate at which this run's full sync has the paper's ratio
    placed = profiles.scaled(literal, doc["paper_rate_bit_s"] / 62.5e6)
    again = commratio.achieved(rows, "full-bf16", placed, 2, "cubic", {"target_ratio": commratio.PAPER_RATIO})
    assert again["ratio"] == pytest.approx(commratio.PAPER_RATIO, rel=1e-3)
    assert commratio.achieved(rows.assign(method="spar"), "full", literal, 2, "cubic") == {}   # no full sync rows
    # the ratio is of full-bf16 (the paper's full sync) whatever the run's baseline, where the run has it
    assert commratio.achieved(rows, "full", literal, 2, "cubic")["method"] == "full-bf16"
    assert commratio.achieved(rows, "full-bf16", None, 2, "cubic")["ratio"] is None
