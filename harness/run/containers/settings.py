"""The containers front door's settings: the run from the environment, through the run spec (every
parameter by its upper-case name, the profile as WAN_PROFILE, WAN_EXTRA for the rest); one line
naming the variable for a bad one."""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Mapping

from harness.net import profiles
from harness.run import commands, config
from harness.run.config import ConfigError
from trainers import spec

SERVICE_USER = "harness"     # the image's non-root user (Dockerfile) that runs learner and workers
SERVICE_UID = 1000
FIND_TIMEOUT_S = 120.0       # how long the controller waits for its learner and workers to run
ENV_NAMES = {"profile": "WAN_PROFILE", "seed": "SEEDS"}   # every other parameter: NAME.upper()
ROLE_LABEL = "wan-harness.role"
# the compose healthcheck's file: the settings are valid, so the learner and workers may start
# (docker-compose.yml: they depend on the controller being healthy; a bad setting never starts them).
# It holds the controller's pid, which the check signals (0): a file left by an earlier run is stale.
READY_FILE = Path("/tmp/wan-harness-ready")
CALIBRATION_POLICIES = ("fail", "warn")   # CALIBRATION: a link that misses its profile stops the run, or marks it


class ContainersError(RuntimeError):
    """The stack is not as the run needs it (a container missing, no engine); one line."""


class CalibrationMissed(ContainersError):
    """A container link measured off its profile (CALIBRATION=fail): the run would not measure the
    WAN it names (once, a worker's RTT measured 0.2 ms where the profile wanted 71 ms)."""

    def __init__(self, misses: list[str]):
        self.misses = misses
        super().__init__(f"harness containers: calibration missed the profile on {len(misses)} link "
                         f"direction(s): {'; '.join(misses)}; no cell was run (CALIBRATION=warn runs it, "
                         "marked invalid)")


def env_name(param: spec.Param) -> str:
    return ENV_NAMES.get(param.name, param.name.upper())


def values_from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    """Spec values from the environment: non-empty ``WAN_PROFILE``, ``METHOD``, ``UPDATES``, ...,
    and ``WAN_EXTRA`` ("lora_rank=4 hash_every=2") for any other parameter."""
    given: dict[str, Any] = {}
    for p in spec.PARAMS:
        raw = environ.get(env_name(p), "").strip()
        if raw:
            given[p.name] = raw
    for key, value in extra_values(environ.get("WAN_EXTRA", "")).items():
        if key not in {p.name for p in spec.PARAMS}:   # run_id=x was a TypeError: only run parameters go here
            raise spec.SpecError(f"WAN_EXTRA: {key[:60]!r} is not a run parameter (harness run --help lists them; "
                                 "RUN_ID and RESULTS_DIR name the run's folder)")
        if key in given:  # two values for one parameter: neither silently wins
            raise spec.SpecError(f"WAN_EXTRA: {key} is also set by {env_name(spec.get(key))}; give it once")
        given[key] = value
    return given


def extra_values(text: str) -> dict[str, str]:
    """WAN_EXTRA's name=value items, split as a POSIX shell would (a value with spaces is quoted:
    task_options="max_people=3, min_people=2"); SpecError on unbalanced quotes, an item that is not
    name=value, or a name given twice."""
    try:
        items = shlex.split(text)
    except ValueError as err:  # "No closing quotation", "No escaped character"
        raise spec.SpecError(f"WAN_EXTRA: {str(err).lower()} in {text[:200]!r}") from None
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        name = key.strip().replace("-", "_")
        if not sep or not name:
            raise spec.SpecError(f"WAN_EXTRA: {item[:200]!r} is not name=value")
        if name in out:
            raise spec.SpecError(f"WAN_EXTRA: {name} is given twice ({out[name]!r} and {value!r})")
        out[name] = value
    return out


def env_message(line: str) -> str:
    """A config error names the flag (`--updates: ...`); here the variable is what was typed (UPDATES)."""
    flags = {f"--{(p.flag_name or p.name).replace('_', '-')}": env_name(p) for p in spec.PARAMS}
    head, sep, rest = line.partition(":")
    return f"{flags[head]}{sep}{rest}" if head in flags else line


def check_profile(name: str) -> None:
    """An unknown WAN_PROFILE names the valid ones (before any container is touched)."""
    valid = profiles.list_profiles()
    if name not in valid:
        raise spec.SpecError(f"WAN_PROFILE: unknown profile {name!r} (valid: {', '.join(valid)})")


def config_from_env(environ: Mapping[str, str]):

    given = values_from_env(environ)
    check_profile(str(given.get("profile", spec.get("profile").default)))
    # the containers front door plays WAN_PROFILE's own rates: its links are shaped before a pilot could
    # measure anything (COMM_RATIO=off unless the environment says otherwise; harness run places a regime)
    given.setdefault("comm_ratio", "off")
    if str(given["comm_ratio"]).strip().lower() != "off":
        raise spec.SpecError(f"COMM_RATIO: {given['comm_ratio']!r}: the containers front door plays WAN_PROFILE's own "
                             "rates (harness run --comm-ratio places a run in a regime)")
    run_id = environ.get("RUN_ID", "").strip() or None
    return config.build(**given, run_id=run_id, out_dir=environ.get("RESULTS_DIR", "results"))


def settings(environ: Mapping[str, str]):
    """(RunConfig, calibration seconds, calibration policy) from the environment; ConfigError names
    the variable. Every check runs here, before the learner and workers are started."""
    cfg = config_from_env(environ)
    secs = _calibrate_secs(environ)
    policy = environ.get("CALIBRATION", "").strip() or "fail"
    if policy not in CALIBRATION_POLICIES:
        raise ConfigError(f"CALIBRATION: {policy!r} is not one of {', '.join(CALIBRATION_POLICIES)}")
    if not cfg.emulation:
        raise ConfigError("EMULATION: the containers front door always shapes the links")
    cfg = commands.claim_run_id(cfg, "RUN_ID", "choose another RUN_ID, or leave it empty for a new one")
    return cfg, secs, policy


def _calibrate_secs(environ: Mapping[str, str]) -> float:
    """CALIBRATE_SECS: seconds of TCP per direction and link measured before the run (0: none)."""
    raw = environ.get("CALIBRATE_SECS", "").strip() or "2"
    try:
        secs = float(raw)
    except ValueError:
        secs = -1.0
    if not 0 <= secs <= 60:
        raise ConfigError(f"CALIBRATE_SECS: {raw!r} must be a number of seconds within 0 and 60")
    return secs
