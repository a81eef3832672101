"""--comm-ratio: when a run is placed in a regime, the flags it refuses, and a real pilot placing one
(measured once, then cached; the links scaled so that full sync's ratio is the target)."""
import json
import os

import pytest

from harness.projection import commratio
from harness.run import config, regime
from harness.run.config import ConfigError


@pytest.mark.parametrize("given, target", [
    ({}, commratio.PAPER_RATIO),                                  # the default run: the paper's regime
    ({"delay": "20ms"}, commratio.PAPER_RATIO),                   # a delay is no rate
    ({"bw": "20mbit"}, None),                                     # a literal rate wins
    ({"profile": "transatlantic"}, None),                         # a named profile's rates are literal
    ({"profile": "transatlantic", "comm_ratio": "2"}, 2.0),       # ... unless a ratio is asked for
    ({"comm_ratio": "off"}, None),
    ({"emulation": False}, None),
    ({"method": "lordo-global", "baseline": "ddp"}, None),                 # data-parallel: not HiLo's ratio
    ({"preset": "hilo-kk"}, commratio.PAPER_RATIO),
    ({"preset": "hilo-countdown"}, commratio.PAPER_RATIO),
])
def test_which_runs_are_placed_in_a_regime(given, target):
    assert config.build(**given).comm_ratio_target == target


@pytest.mark.parametrize("given, words", [
    ({"comm_ratio": "paper", "bw": "10mbit"}, "both set the link rate"),
    ({"comm_ratio": "1", "trace": "cellular-lte.csv"}, "both set the link rate"),
    ({"comm_ratio": "fast"}, "is not 'paper', 'off' or a number"),
    ({"comm_ratio": "1", "emulation": False}, "no link is shaped"),
    ({"comm_ratio": "1", "method": "lordo-global", "baseline": "ddp"}, "data-parallel"),
])
def test_conflicting_or_bad_ratios_are_one_line_errors(given, words):
    with pytest.raises(ConfigError, match=words) as err:
        config.build(**given)
    assert "\n" not in str(err.value)


def test_config_json_keeps_the_target():
    doc = config.build().to_json()
    assert doc["comm_ratio_target"] == commratio.PAPER_RATIO and doc["regime"] == {}


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="the run's preflight needs root")
def test_a_real_pilot_places_the_run_and_is_cached(tmp_path):
    cfg = config.build(model="micro", objective="grpo", max_new_tokens=4, workers=1, seed="1", updates=4,
                       out_dir=str(tmp_path), run_id="placed")
    regime.cache_file(cfg).unlink(missing_ok=True)    # the cache may be shared ($WAN_CACHE_DIR): measure afresh
    said: list[str] = []
    placed = regime.place(cfg, said.append)
    assert said[0].startswith("regime: measuring full sync's compute") and "link/compute ratio of 1.34" in said[-1]
    pilot = json.loads(regime.cache_file(cfg).read_text())
    assert pilot["key"]["model"] == "micro" and pilot["measured"]["compute_s"] > 0
    r = placed.regime
    assert r["cached"] is False and r["target"] == "paper" and r["literal_rate_bit_s"] == 62.5e6
    # the placed links give the pilot's full sync the paper's ratio in the cost model
    net = commratio.network_at(placed.load_profile(), 1)(1.0)
    assert commratio.ratio_at(net, commratio.Measured(**pilot["measured"])) == pytest.approx(commratio.PAPER_RATIO, rel=1e-3)
    assert placed.rate_bit_s == placed.load_profile().link("w1").down.rate_bit_s == pytest.approx(r["rate_bit_s"])
    assert placed.rate_bit_s < 62.5e6         # a micro model's full sync needs a far slower link than the paper's
    assert placed.to_json()["profile_doc"]["defaults"]["rate"] != "62.5mbit"
    # a second run with the same machine, model, task and workers reuses the measurement
    again: list[str] = []
    second = regime.place(cfg, again.append)
    assert len(again) == 1 and second.regime["cached"] is True and second.rate_bit_s == placed.rate_bit_s
    # the pilot loaded the run's own cached models: none were built under the regime folder
    assert not list((regime.cache_file(cfg).parent).rglob("*.safetensors"))


def test_the_placement_line_names_each_worker_link_of_an_uneven_profile(tmp_path, monkeypatch):
    """heterogeneous-edge placed: the line said "worker links at 40.3 Mbit/s" (w1's) while w2 ran at a fifth of
    it and w3's uplink at a tenth. A cached pilot measurement stands in for the pilot run (no root needed)."""
    monkeypatch.setenv("WAN_CACHE_DIR", str(tmp_path / "cache"))
    cfg = config.build(model="micro", profile="heterogeneous-edge", comm_ratio="paper", workers=3, seed="1", updates=4,
                       out_dir=str(tmp_path), run_id="edge")
    path = regime.cache_file(cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"measured": {"compute_s": 2.0, "down_bytes": 4_000_000, "up_bytes": 800_000}}))
    said: list[str] = []
    placed = regime.place(cfg, said.append)
    rates = [placed.load_profile().link(f"w{i}").down.rate_bit_s / 1e6 for i in (1, 2, 3)]
    assert rates[1] == pytest.approx(rates[0] / 5)
    [line] = said
    assert "; worker links w1 " in line and ", w2 " in line and " up" in line and "worker links at" not in line
