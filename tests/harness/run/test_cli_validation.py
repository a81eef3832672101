"""`harness run` / `sweep` / `report` / `plot` reject bad input: one line naming the problem, exit 2,
nothing built (no results folder, no namespace)."""
import os

import pytest
from typer.testing import CliRunner

from harness.run import config

from harness.net import topology
from harness.cli import app

BAD_RUN = [
    (["--method", "nope"], "--method: unknown method 'nope'"),
    (["--method", ""], "--method: no method given"),
    (["--method", "spar,spar"], "--method: 'spar,spar' repeats a value"),
    (["--task", "sudoku"], "--task: unknown task 'sudoku'"),
    (["--task", "knights_knaves", "--task-options", "max_people=9"], "--task-options: knights_knaves max_people='9' is outside [2, 8]"),
    (["--task-options", "width=3"], "--task-options: digits has no option 'width'"),
    (["--objective-options", "clip=3"], "--objective-options: distill has no option 'clip'; "
                                         "valid: estimator=full (full|sampled)"),
    (["--objective", "grpo", "--objective-options", "aggregation=mean"],
     "--objective-options: grpo aggregation='mean' is not one of token, sequence"),
    (["--budget", "0%"], "--budget: '0%' is outside [0.001%, 100%]"),
    (["--budget", "1e-30%"], "--budget: '1e-30%' is outside"),
    (["--budget", "0.016"], "--budget: '0.016' is not a percentage like 1.6%"),
    (["--budget", "150%"], "--budget"),
    (["--budget", "abc"], "--budget"),
    (["--workers", "0"], "--workers: '0' is outside [1, 1024]"),
    (["--workers", "-3"], "--workers: '-3' is outside [1, 1024]"),
    (["--workers", "1025"], "--workers: '1025' is outside [1, 1024]"),
    (["--workers", "abc"], "--workers: 'abc' is not an integer"),
    (["--updates", "0"], "--updates: '0' is outside [1, 1000000]"),
    (["--lora-rank", "0"], "--lora-rank: '0' is outside [1, 4096]"),
    (["--lr", "nan"], "--lr: 'nan' is not a finite number"),
    (["--max-new-tokens", "1000000000"], "--max-new-tokens: '1000000000' is outside [1, 4096] tokens"),
    (["--group-size", "100000"], "--group-size: '100000' is outside [1, 1024]"),
    (["--objective", "grpo", "--group-size", "1"], "--group-size: 1 gives grpo no group"),
    (["--eval-samples", "4", "--pass-k", "4"], "--eval-samples: 4 must be at least 2 x --pass-k (4)"),
    (["--spar-sketch", "0"], "--spar-sketch: '0' is outside [1, 4096]"),
    (["--powersgd-dtype", "int4"], "--powersgd-dtype: 'int4' is not one of fp32, bf16, fp16"),
    (["--baseline", "nope"], "--baseline: unknown method 'nope'"),
    # one family per comparison: the data-parallel methods pre-train the generated corpus, HiLo's train --task
    (["--method", "spar,lordo-global"], "--method lordo-global: a data-parallel method pre-trains the generated "
                                        "corpus, not the task that full-bf16 (HiLo's) trains"),
    (["--method", "lordo-global", "--baseline", "full-bf16"], "compare it against --baseline ddp"),
    (["--straggler", "w2:exp:2"], "--straggler: 'w2:exp:2' needs a unit: w2:exp:2s, w2:exp:2ms"),
    (["--method", "full-bf16"], "--method full-bf16: the only method is the baseline itself, so nothing is "
                                "compared; give another method beside it, or --baseline none"),
    (["--method", "spar", "--baseline", "spar"], "--method spar: the only method is the baseline itself"),
    (["--method", "spar", "--baseline", "ddp"], "--method spar: a HiLo method trains --task, not the generated "
                                                "corpus that ddp (data-parallel) pre-trains"),
    (["--bw", "10foo"], "--bw:"),
    (["--bw", "-5mbit"], "--bw:"),
    (["--bw", "1e30tbit"], "--bw: '1e30tbit': rate must be within 1kbit and 100gbit"),
    (["--bw", "0.001bit"], "--bw: '0.001bit': rate must be within 1kbit"),
    (["--loss", "100%"], "--loss: '100%': loss must be below 100%"),
    (["--delay", "11s"], "--delay: '11s': must be within 0 and 10s"),
    (["--delay", "20 parsecs"], "--delay:"),
    (["--delay", "20"], "--delay: '20' needs a unit: 20ms, 20s"),          # not tc's 20 us, nor 20 s
    (["--loss", "0.1"], "--loss:"),
    (["--jitter", "5ms", "--delay", "1ms"], "jitter"),
    (["--seeds", "1,x"], "--seeds:"),
    (["--seeds", "1,1"], "--seeds:"),
    (["--seeds", "1e23"], "--seeds: '1e23' is not an integer"),
    (["--pipeline", "2"], "--pipeline: '2' is outside [0, 1]"),
    (["--model", "/no/such/model"], "--model: '/no/such/model'"),
    (["--model", "/etc/passwd"], "--model: '/etc/passwd' is neither a built-in model"),
    (["--objective", "ppo"], "--objective: 'ppo' is not one of distill, grpo"),
    (["--profile", "nowhere"], "--profile:"),
    (["--profile", "heterogeneous-edge", "--bw", "10mbit"], "--bw: contradicts profile 'heterogeneous-edge'"),
    (["--backend", "magic"], "--backend: 'magic' is not one of netem, fallback"),
    (["--run-id", "../escape"], "--run-id:"),
    (["--run-id", ".hidden"], "--run-id: '.hidden' must start with a letter or digit, then up to 80 more letters"),
    (["--run-id", "a" * 300], "... must start with a letter or digit, then up to 80 more"),
]


@pytest.fixture
def no_network(monkeypatch):
    """Fail the test if anything tries to build a network: bad input must stop before that. (A
    comparison of the host's /run/netns would see other runs on a shared machine.)"""
    def refuse(*args, **kwargs):
        raise AssertionError("a network was built for bad input")

    monkeypatch.setattr(topology.Topology, "create", classmethod(refuse))


@pytest.mark.parametrize("args,message", BAD_RUN, ids=[" ".join(a) for a, _ in BAD_RUN])
def test_run_rejects_bad_input(tmp_path, no_network, args, message):
    result = CliRunner().invoke(app, ["run", "--out", str(tmp_path / "results"), *args])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr
    assert not (tmp_path / "results").exists()


def test_a_taken_run_id_is_refused_and_the_earlier_run_left_as_it_was(tmp_path, no_network):
    """`--run-id X` when results/X already holds a run: one line, exit 2, the first run untouched (it
    used to be overwritten: its config.json replaced and the new cells mixed into its folder)."""
    first = tmp_path / "results" / "x"
    first.mkdir(parents=True)
    (first / "config.json").write_text('{"first": true}')
    result = CliRunner().invoke(app, ["run", "--out", str(tmp_path / "results"), "--run-id", "x", "--no-emulation"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [f"error: --run-id: 'x' is taken: {first} already holds a run (choose another --run-id, or "
                     "remove the folder first)"], result.stderr
    assert [f.name for f in first.iterdir()] == ["config.json"] and "first" in (first / "config.json").read_text()


def test_flags_override_the_profile_and_are_parsed_once():
    cfg = config.build(bw="20mbit", delay="5ms", loss="0.1%", workers=3, seed="1,2")
    prof = cfg.load_profile()
    link = prof.link("w3").down
    assert (link.rate_bit_s, link.delay_s, link.loss_frac) == (20e6, 0.005, 0.001)
    assert cfg.rate_bit_s == 20e6 and cfg.seeds == (1, 2) and cfg.overrides["rate"] == "20mbit"
    # the default baseline, at the default budget (spec.RUN_BUDGET: the paper's directions per factor at rank 8)
    assert [v.label for v in cfg.variants] == ["spar@12.8%", "full-bf16"]
    assert [v.label for v in config.build(method="full,int8", baseline="full").variants] == ["full", "int8@12.8%"]  # int8 meets a budget
    assert [v.label for v in config.build(method="spar", baseline="none").variants] == ["spar@12.8%"]
    assert [v.label for v in config.build(method="spar", baseline="full-bf16", budget="1.6%").variants] == ["spar@1.6%", "full-bf16"]
    with pytest.raises(Exception):
        cfg.workers = 5  # frozen


def test_a_run_of_data_parallel_methods_is_compared_against_ddp_by_default():
    """`harness run --method lordo-global` compared lordo's corpus pre-training against full-bf16's distillation
    of another task (a speedup and bytes share of two different trainings); a baseline given still stands."""
    assert [v.label for v in config.build(method="lordo-global").variants] == ["lordo-global", "ddp"]
    assert [v.label for v in config.build(method="lordo-global,diloco", baseline="lordo-global-none").variants] == \
        ["lordo-global", "diloco", "lordo-global-none"]
    assert [v.label for v in config.build(method="spar,lordo-global", baseline="none").variants] == \
        ["spar@12.8%", "lordo-global"]       # no comparison, so no family rule


def test_dry_run_prints_plan_and_builds_nothing(tmp_path):
    result = CliRunner().invoke(app, ["run", "--dry-run", "--bw", "20mbit", "--workers", "2", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert '"rate_bit_s": 20000000.0' in result.stdout and "cell full-bf16-s1" in result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith("dry run: 6 cells planned")   # spar, full-bf16 x 3 seeds
    assert not any(tmp_path.iterdir())


@pytest.mark.skipif(os.geteuid() == 0, reason="checks the message a non-root user gets")
def test_without_root_points_to_no_emulation(tmp_path):
    result = CliRunner().invoke(app, ["run", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "--no-emulation" in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("cmd", ["report", "plot"])
def test_report_and_plot_reject_a_folder_that_is_not_a_run(tmp_path, cmd):
    result = CliRunner().invoke(app, [cmd, str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and "not a run or sweep folder" in result.stderr
    result = CliRunner().invoke(app, [cmd, str(tmp_path / "missing")])
    assert result.exit_code == 2 and "no such results folder" in result.stderr


def test_sweep_rejects_a_bad_grid_point(tmp_path):
    result = CliRunner().invoke(app, ["sweep", "--bw", "10mbit,fast", "--out", str(tmp_path / "s"), "--no-emulation"])
    assert result.exit_code == 2 and "grid point" in result.stderr and "--bw" in result.stderr
    grid = tmp_path / "grid.yaml"
    grid.write_text("bw: [10mbit]\ncolour: red\n")
    result = CliRunner().invoke(app, ["sweep", "--grid", str(grid), "--out", str(tmp_path / "s")])
    assert result.exit_code == 2 and "unknown key 'colour'" in result.stderr
    assert not (tmp_path / "s").exists()


def test_out_must_be_a_folder_that_holds_runs(tmp_path):
    """`harness run --out FILE` failed mid-run with a raw errno 20 (rc 1), and `--out SWEEP` wrote a run that
    `harness report SWEEP` then mixed into the sweep's verdict."""
    (tmp_path / "afile").write_text("x")
    sweep = tmp_path / "sw"
    sweep.mkdir()
    (sweep / "sweep.json").write_text('{"runs": []}')
    run = tmp_path / "r"
    (run / "cells").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    for out, words in ((run / "cells", f"is in a run's folder (inside {run})"),(tmp_path / "afile", "exists and is not a folder"),
                       (tmp_path / "afile" / "sub", f"{tmp_path / 'afile'} exists and is not a folder"),
                       (sweep, "is in a sweep's folder: a run there would be read as one of its points"),
                       (sweep / "runs", f"is in a sweep's folder (inside {sweep})")):
        res = CliRunner().invoke(app, ["run", "--out", str(out), "--no-emulation", "--model", "micro"])
        assert res.exit_code == 2 and words in res.stderr, res.output
    assert sorted(p.name for p in sweep.iterdir()) == ["sweep.json"]
