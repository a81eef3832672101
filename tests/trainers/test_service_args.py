"""The services' own flags (spec.SERVICE_PARAMS) are parsed by one helper (trainers/service_args.py): the argv
the launcher builds is what each service parses, a bad flag is one line naming it with exit 2 before
anything is written, the help shows every flag, and the spec's defaults are the services' own."""
from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from trainers import service_args, spec

SERVICES = {"trainers.hilo.learner": "LEARNER_FLAGS", "trainers.dataparallel.aggregator": "AGGREGATOR_FLAGS",
            "trainers.hilo.worker": "WORKER_FLAGS", "trainers.dataparallel.worker": "DP_WORKER_FLAGS"}


def flags_of(module: str) -> tuple[str, ...]:
    import importlib

    return getattr(importlib.import_module(module), SERVICES[module])


def test_the_launchers_argv_is_what_the_services_parse(tmp_path, monkeypatch):
    from harness.run import config

    monkeypatch.setenv("RUN_TOKEN", "t")
    cfg = config.build(emulation=False, worker_timeout="42", liveness="7.5")
    cell = cfg.cells[0]
    centre = spec.service_argv(run_dir=str(tmp_path), listen="10.0.0.1:0", join_timeout=180.0,
                               worker_timeout=cfg.worker_timeout, liveness=cfg.liveness)
    for module in ("trainers.hilo.learner", "trainers.dataparallel.aggregator"):
        _, got = service_args.parse(module, None, flags_of(module), [*centre, *cell.argv], run="given")
        assert (got.run_dir, got.listen, got.join_timeout, got.worker_timeout, got.liveness) == (
            str(tmp_path), ("10.0.0.1", 0), 180.0, 42.0, 7.5)
        assert got.params == spec.RunParams(**cell.values) and got.token == "t"
    argv = spec.service_argv(learner="10.0.0.1:29500", worker_id=3, run_dir=str(tmp_path))
    _, got = service_args.parse("trainers.hilo.worker", None, flags_of("trainers.hilo.worker"), argv, run="expected")
    assert (got.learner, got.worker_id, got.reconnects) == (("10.0.0.1", 29500), 3, 3)
    assert set(got.expect.values()) == {None}   # a worker given no run parameter checks none
    _, got = service_args.parse("trainers.dataparallel.worker", None, flags_of("trainers.dataparallel.worker"), argv)
    assert (got.learner, got.worker_id, got.run_dir, got.connect_timeout, got.token) == (
        ("10.0.0.1", 29500), 3, str(tmp_path), spec.service_param("connect_timeout").default, "t")


def test_both_workers_take_the_flags_the_launcher_passes_them(tmp_path, monkeypatch):
    """One name per flag: the launcher hands either family's worker the same argv (no alias such as
    --aggregator), and each worker names every flag of it among the ones it takes."""
    from harness.run import launch

    passed = {"learner", "worker_id", "run_dir"}   # harness/run/launch.py run_cell: the workers' service_argv
    for method in ("full", "ddp"):
        _, worker = launch.service_modules(method)
        assert passed <= set(flags_of(worker)), worker


def test_the_launcher_refuses_a_bad_service_value_before_a_process_starts():
    with pytest.raises(spec.SpecError, match=r"^--join-timeout: 0 is outside \[0.5, 86400\] s$"):
        spec.service_argv(join_timeout=0)


@pytest.mark.parametrize("module, argv, message", [
    ("trainers.hilo.learner", ["--max-frame-bytes", "12"], "--max-frame-bytes: '12' is outside [1024, "),
    ("trainers.hilo.learner", ["--token-timeout", "-1"], "--token-timeout: '-1' is outside [0.01, 86400] s"),
    ("trainers.hilo.learner", ["--liveness", "soon"], "--liveness: 'soon' is not a number"),
    ("trainers.hilo.learner", ["--threads", "0"], "--threads: '0' is outside [1, 1024]"),
    ("trainers.hilo.learner", ["--workers", "2", "--listen", "nohost"], "--listen: address 'nohost' is not HOST:PORT"),
    ("trainers.hilo.learner", ["--nope", "1"], "unrecognized arguments: --nope 1"),
    ("trainers.hilo.learner", ["--objective", "grpo", "--group-size", "2", "--objective-options", "kl_coef=-1"],
     "--objective-options: grpo kl_coef='-1' is below 0"),
    ("trainers.dataparallel.aggregator", ["--method", "ddp", "--join-timeout", "inf"],
     "--join-timeout: 'inf' is not a finite number"),
    ("trainers.dataparallel.aggregator", ["--method", "ddp", "--max-frame-bytes", "4096"],
     "unrecognized arguments: --max-frame-bytes 4096"),   # a learner flag the aggregator does not take
    ("trainers.hilo.worker", ["--learner", "127.0.0.1:1", "--worker-id", "1", "--reconnects", "-1"],
     "--reconnects: '-1' is outside [0, 1000]"),
    ("trainers.hilo.worker", ["--worker-id", "1"], "--learner: a value is required"),
    ("trainers.dataparallel.worker", ["--worker-id", "1"], "--learner: a value is required"),
    ("trainers.dataparallel.worker", ["--learner", "127.0.0.1:1", "--worker-id", "0"],
     "--worker-id: '0' is outside [1, "),
    ("trainers.dataparallel.worker", ["--learner", "127.0.0.1:1", "--worker-id", "1", "--connect-timeout", "0"],
     "--connect-timeout: '0' is outside [0.1, 86400] s"),
    ("trainers.dataparallel.worker", ["--learner", "nohost", "--worker-id", "1"],
     "--learner: address 'nohost' is not HOST:PORT"),
    ("trainers.dataparallel.worker", ["--aggregator", "127.0.0.1:1", "--worker-id", "1"],
     "unrecognized arguments: --aggregator 127.0.0.1:1"),   # the old alias is gone: one name, --learner
    ("trainers.dataparallel.worker", ["--learner", "127.0.0.1:1", "--worker-id", "1", "--method", "ddp"],
     "unrecognized arguments: --method ddp"),   # its run parameters come in the WELCOME, not as flags
])
def test_a_bad_service_flag_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys, module, argv, message):
    import importlib

    monkeypatch.setenv("RUN_TOKEN", "t")
    monkeypatch.delenv("WAN_PARENT_PID", raising=False)
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_:
        importlib.import_module(module).main(["--run-dir", str(run_dir), *argv])
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"python -m {module}: error: {message}"), lines[0]
    assert not run_dir.exists()


def test_a_bad_service_flag_is_one_line_from_python_dash_m(tmp_path):
    """As the launcher starts it: argparse's own usage (every run flag, ~40 lines) no longer precedes the line."""
    res = subprocess.run([sys.executable, "-m", "trainers.dataparallel.aggregator", "--run-dir", str(tmp_path / "run"),
                          "--liveness", "0"], capture_output=True, text=True, timeout=300,
                         env={"RUN_TOKEN": "t", "PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)})
    assert res.returncode == 2 and res.stderr == ("python -m trainers.dataparallel.aggregator: error: --liveness: '0' "
                                                  "is outside [0.5, 86400] s\n"), res.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("module", SERVICES)
def test_every_service_flag_is_in_the_help_with_its_unit_and_range(module, capsys, monkeypatch):
    import importlib

    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("WAN_PARENT_PID", raising=False)
    with pytest.raises(SystemExit) as exit_:
        importlib.import_module(module).main(["--help"])   # as `python -m module --help` runs it
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for name in flags_of(module):
        p = spec.service_param(name)
        assert p.flag in text and " ".join(p.help_text().split()) in text, p.flag
    if module == "trainers.dataparallel.worker":   # the run's parameters come in the aggregator's WELCOME
        assert "--method" not in text and "--aggregator" not in text
    else:
        assert "--method" in text and "[unit: %]" in text   # the run's parameters beside them ('%' crashed argparse)


def test_the_spec_defaults_are_the_services_own():
    """A service class built without the flags (tests, an in-process cluster) keeps the spec's values."""
    from trainers.dataparallel.aggregator import Aggregator
    from trainers.hilo import membership
    from trainers.hilo.learner import Learner
    from trainers.hilo.worker import Worker

    default = {p.name: p.default for p in spec.SERVICE_PARAMS}
    learner = inspect.signature(Learner).parameters
    assert {k: learner[f"{k}_s" if k.endswith("timeout") else k].default for k in
            ("worker_timeout", "handshake_timeout", "max_frame_bytes", "max_pending_connections",
             "max_pending_per_source", "token_timeout")} == {k: default[k] for k in (
                "worker_timeout", "handshake_timeout", "max_frame_bytes", "max_pending_connections",
                "max_pending_per_source", "token_timeout")}
    assert learner["liveness_s"].default == membership.LIVENESS_S == default["liveness"]
    aggregator = inspect.signature(Aggregator).parameters
    assert (aggregator["worker_timeout_s"].default, aggregator["liveness_s"].default) == (
        default["worker_timeout"], default["liveness"])
    worker = inspect.signature(Worker).parameters
    assert (worker["connect_timeout_s"].default, worker["update_timeout_s"].default) == (
        default["connect_timeout"], default["update_timeout"])
