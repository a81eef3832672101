"""The containers front door without an engine: every setting checked before a container starts,
compose's defaults equal to `harness run`'s, a calibration miss that stops the run (or marks it),
and a model cache the services' uid can read. tests/docker/ runs the same against a real engine."""
import json
import os
import re
from pathlib import Path

import pytest
import yaml

from harness.run import containers
from harness.run.containers import controller
from harness.run.config import ConfigError
from trainers import spec

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("env,needle", [
    ({"WAN_PROFILE": "nosuch"}, "WAN_PROFILE: unknown profile 'nosuch' (valid: "),
    ({"WORKERS": "0"}, "WORKERS: "),
    ({"UPDATES": "many"}, "UPDATES: "),
    ({"CALIBRATION": "maybe"}, "CALIBRATION: 'maybe' is not one of fail, warn"),
    ({"CALIBRATE_SECS": "-1"}, "CALIBRATE_SECS: '-1' must be a number of seconds within 0 and 60"),
    ({"WAN_EXTRA": "lora_rank"}, "WAN_EXTRA: 'lora_rank' is not name=value"),
    ({"BW": "62.5mbps"}, "'62.5mbps' is ambiguous"),
])
def test_every_setting_is_checked_by_the_controller_before_the_services_start(env, needle, tmp_path):
    with pytest.raises(ConfigError) as err:
        containers.settings({**env, "RESULTS_DIR": str(tmp_path)})
    assert needle in containers.env_message(str(err.value)), str(err.value)


def test_main_exits_2_and_is_never_healthy_on_a_bad_setting(tmp_path, capsys, monkeypatch):
    ready = tmp_path / "ready"
    ready.write_text("1\n")                                  # an earlier run's file
    monkeypatch.setattr(controller, "READY_FILE", ready)
    assert containers.main({"WAN_PROFILE": "nosuch", "RESULTS_DIR": str(tmp_path / "results")}) == 2
    assert not ready.exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("harness containers: WAN_PROFILE: unknown profile 'nosuch'")
    assert not (tmp_path / "results").exists()


def test_good_settings_are_the_run_specs_defaults(tmp_path):
    cfg, secs, policy = containers.settings({"RESULTS_DIR": str(tmp_path)})
    assert cfg.workers == spec.get("workers").default and cfg.profile_name == spec.get("profile").default
    assert (secs, policy) == (2.0, "fail") and cfg.run_id


def test_compose_defaults_equal_harness_runs_and_the_services_wait_for_the_controller():
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = doc["services"]
    replicas = re.fullmatch(r"\$\{WORKERS:-(\d+)\}", str(services["worker"]["deploy"]["replicas"]))
    assert replicas and int(replicas.group(1)) == spec.get("workers").default
    env = services["controller"]["environment"]
    for name in ("WAN_PROFILE", "WORKERS", "METHOD", "BUDGET", "UPDATES", "SEEDS", "MODEL", "BASELINE"):
        assert env[name] == f"${{{name}:-}}", (name, env[name])     # empty: the spec's default applies
    for name in ("learner", "worker"):
        assert services[name]["depends_on"] == {"controller": {"condition": "service_healthy"}}
    assert "depends_on" not in services["controller"]
    assert str(containers.READY_FILE) in " ".join(services["controller"]["healthcheck"]["test"])


def _row(node, direction, rtt_got, rtt_want, ok_rtt=True, ok_goodput=True, ok_loss=True):
    return {"node": node, "direction": direction, "rate_bit_s": 62.5e6, "goodput_bit_s": 60e6, "goodput_ratio": 0.96,
            "rtt_want_s": rtt_want, "rtt_median_s": rtt_got, "rtt_err_s": None, "loss_want": 0.0, "loss_sent": 300,
            "loss_lost": 0, "loss_interval": [0, 3], "ok_goodput": ok_goodput, "ok_rtt": ok_rtt, "ok_loss": ok_loss}


def test_a_calibration_miss_names_the_link_and_what_it_wanted(tmp_path):
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"rows": [_row("w1", "up", 0.0002, 0.071, ok_rtt=False),
                                         _row("w1", "down", 0.0712, 0.071)]}))
    assert containers.calibration_misses(path) == ["w1 up RTT 0.2 ms vs 71.0 ms wanted"]
    err = containers.CalibrationMissed(containers.calibration_misses(path))
    assert "w1 up RTT 0.2 ms vs 71.0 ms wanted" in str(err) and "CALIBRATION=warn" in str(err)


def test_a_missed_calibration_is_in_meta_json(tmp_path):
    run = tmp_path / "r1"
    run.mkdir()
    (run / "meta.json").write_text(json.dumps({"run_id": "r1", "status": "interrupted", "complete": False,
                                               "errors": []}))
    containers.mark_calibration(run, ["w1 up RTT 0.2 ms vs 71.0 ms wanted"], failed=True)
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "failed" and meta["calibration_ok"] is False and not meta["complete"]
    assert meta["errors"] == ["calibration missed the profile: w1 up RTT 0.2 ms vs 71.0 ms wanted"]


@pytest.mark.root
def test_the_cache_is_made_the_services(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root: chown to the services' uid")
    cache = tmp_path / ".cache"
    (cache / "bases").mkdir(parents=True)
    model = cache / "bases" / "digits-tiny-0123.safetensors"
    model.write_bytes(b"x")
    model.chmod(0o600)                              # what a host run before the fix left
    containers.share_cache(cache)
    assert model.stat().st_mode & 0o777 == 0o644
    assert {p.stat().st_uid for p in (cache, cache / "bases")} == {containers.SERVICE_UID}


def test_a_learner_that_did_not_start_shows_its_last_log_line(tmp_path):
    log = tmp_path / "learner.log"
    log.write_text("Traceback ...\nPermissionError: cannot read the cached model /x (mode 0600, owner uid 0)\n\n")
    tail = controller._log_tail(f"the learner did not start (see {log})")
    assert tail == ": PermissionError: cannot read the cached model /x (mode 0600, owner uid 0)"
    assert controller._log_tail("no log named") == ""


@pytest.mark.parametrize("extra, needle", [
    ('lora_rank="4', "WAN_EXTRA: no closing quotation in 'lora_rank=\"4'"),   # was a ValueError traceback
    ("lora_rank=4 hash_every=2\\", "WAN_EXTRA: no escaped character"),
    ("lora_rank=4 lora_rank=8", "WAN_EXTRA: lora_rank is given twice ('4' and '8')"),  # the last one won
    ("=4", "WAN_EXTRA: '=4' is not name=value"),
    ("updates=7", "WAN_EXTRA: updates is also set by UPDATES; give it once"),   # UPDATES=3 below won silently
])
def test_wan_extra_is_split_like_a_shell_and_refused_with_one_line(extra, needle, tmp_path):
    with pytest.raises(ConfigError) as err:
        containers.settings({"WAN_EXTRA": extra, "UPDATES": "3", "RESULTS_DIR": str(tmp_path)})
    assert needle in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_wan_extra_keeps_a_quoted_value_with_spaces_whole(tmp_path):
    cfg, _, _ = containers.settings({"WAN_EXTRA": "task=knights_knaves task_options='max_people=3, min_people=2' "
                                                  "lora-rank=4", "RESULTS_DIR": str(tmp_path)})
    assert cfg.to_json()["task_options"] == "max_people=3, min_people=2" and cfg.to_json()["lora_rank"] == 4


def test_a_run_id_that_already_holds_a_run_is_refused_before_any_container(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(containers, "READY_FILE", tmp_path / "ready")
    taken = tmp_path / "results" / "dkr-1"
    taken.mkdir(parents=True)
    (taken / "meta.json").write_text('{"run_id": "dkr-1", "status": "complete"}')
    assert containers.main({"RUN_ID": "dkr-1", "RESULTS_DIR": str(tmp_path / "results")}) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("harness containers: RUN_ID: 'dkr-1' is taken: "), err
    assert not (tmp_path / "ready").exists()                  # never healthy: no service was started
    assert json.loads((taken / "meta.json").read_text())["status"] == "complete"  # the first run is untouched
    cfg, _, _ = containers.settings({"RUN_ID": "dkr-2", "RESULTS_DIR": str(tmp_path / "results")})
    assert cfg.run_id == "dkr-2"                              # a new id is fine
