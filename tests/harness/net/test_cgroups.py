"""Uneven compute (harness/net/cgroups.py, trainers/spec.py Straggle): a CPU share per worker as a real
CFS quota in a real cgroup, removed by the run, swept after a SIGKILLed owner; the straggler's delay
seeded. The kernel's own counters (cpu.stat nr_throttled) show the quota bites; nothing asserts a time."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.net import cgroups, clean, doctor, profiles
from trainers import spec

ROOT = Path(__file__).resolve().parents[3]
BUSY = [sys.executable, "-c", "while True: pass"]
HIER = cgroups.hierarchy()
needs_cgroups = pytest.mark.skipif(HIER is None or os.geteuid() != 0, reason="needs root and a cgroup cpu controller")


def test_worker_cpu_is_one_share_per_worker_or_one_for_all():
    assert spec.parse_worker_cpu("1,1,0.5,0.25", 4) == (1.0, 1.0, 0.5, 0.25)
    assert spec.parse_worker_cpu("0.5", 3) == (0.5, 0.5, 0.5)
    assert spec.parse_worker_cpu(None, 3) == ()
    for text, words in (("1,0.5", "gives 2 shares for 3 workers"), ("1,x,1", "'x' is not a number of CPUs"),
                        ("0", "outside [0.01, 256] CPUs"), ("nan", "outside"), ("1,-1,1", "outside")):
        with pytest.raises(spec.SpecError, match="^--worker-cpu: ") as err:
            spec.parse_worker_cpu(text, 3)
        assert words in str(err.value) and "\n" not in str(err.value)


def test_the_flag_wins_over_the_profiles_cpu_key():
    prof = profiles.from_doc({"defaults": {"rate": "10mbit"}, "workers": {"w2": {"cpu": 0.25}}}, "p")
    assert prof.cpu_shares(3) == {"w2": 0.25}
    assert prof.cpu_shares(3, spec.parse_worker_cpu("1,0.5,1", 3)) == {"w1": 1.0, "w2": 0.5, "w3": 1.0}


def test_a_run_refuses_a_bad_worker_cpu_before_anything_runs():
    from harness.run import config
    with pytest.raises(config.ConfigError, match=r"^--worker-cpu: '1,1,1' gives 3 shares for 2 workers"):
        config.build(workers=2, worker_cpu="1,1,1", comm_ratio="off")
    with pytest.raises(config.ConfigError, match=r"^--straggler: names w3, but the run has 2 workers"):
        config.build(workers=2, straggler="w3:exp:1s", comm_ratio="off")


def test_the_straggler_delay_is_seeded_by_seed_worker_and_batch():
    got = spec.parse_straggler("w2:exp:2s,w3:fixed:500ms")
    assert got == {2: spec.Straggle("exp", 2.0), 3: spec.Straggle("fixed", 0.5)}
    draws = [got[2].delay(1, 2, t) for t in range(2000)]
    assert draws == [got[2].delay(1, 2, t) for t in range(2000)]          # the same every time
    assert draws != [got[2].delay(2, 2, t) for t in range(2000)]          # another seed, other delays
    assert sum(draws) / len(draws) == pytest.approx(2.0, rel=0.1)        # exponential of mean 2 s
    assert got[3].delay(1, 3, 7) == 0.5
    for bad in ("w2:exp", "2:exp:1s", "w2:normal:1s", "w2:exp:0s", "w2:exp:1s,w2:fixed:1s", "w2:exp:4000s"):
        with pytest.raises(spec.SpecError, match="^--straggler: "):
            spec.parse_straggler(bad)


def _wait(pred, what: str, guard_s: float = 60.0):
    end = time.monotonic() + guard_s
    while not pred():
        assert time.monotonic() < end, f"guard: {what}"
        time.sleep(0.05)


def _throttled(group: Path) -> int:
    stat = dict(line.split()[:2] for line in (group / "cpu.stat").read_text().splitlines() if line.strip())
    return int(stat["nr_throttled"])


@pytest.mark.root
@needs_cgroups
def test_a_share_is_a_cfs_quota_the_process_is_held_to_and_remove_leaves_nothing():
    groups = cgroups.CpuGroups({"w1": 0.25, "w2": 1.0})
    busy = subprocess.Popen(BUSY)
    try:
        groups.place("w1", busy.pid)
        groups.place("learner", os.getpid())            # a name without a share: left where it is
        w1 = groups.parent / "w1"
        assert HIER.read_limit(w1) == 0.25 and HIER.read_limit(groups.parent / "w2") == 1.0
        assert str(busy.pid) in (w1 / "cgroup.procs").read_text().split()
        assert f"{cgroups.TOP}/{groups.parent.name}/w1" in Path(f"/proc/{busy.pid}/cgroup").read_text()
        assert str(os.getpid()) not in (w1 / "cgroup.procs").read_text().split()
        _wait(lambda: _throttled(w1) > 0, "the busy loop was never throttled")   # the kernel holds it to 25 ms/100 ms
        _wait(lambda: groups.throttled()["w1"]["throttled_s"] > 0, "no throttled time counted")
        held = groups.throttled()
        assert held["w1"]["throttled_periods"] > 0 and set(held) == {"w1", "w2"}
        groups.remove()                                  # the busy loop is still inside: killed, then removed
        assert busy.wait(timeout=30) == -signal.SIGKILL
        assert not groups.parent.exists()
        groups.remove()                                  # twice is fine
    finally:
        busy.kill()
        busy.wait()
        groups.remove()


HOLDER = """
import sys, time
from harness.net import cgroups
g = cgroups.CpuGroups({"w1": 0.5})
g.place("w1", int(sys.argv[1]))
print(g.parent, flush=True)
time.sleep(600)
"""


@pytest.mark.root
@needs_cgroups
def test_a_sigkilled_owners_groups_are_swept_and_a_live_owners_kept():
    busy = [subprocess.Popen(BUSY) for _ in range(2)]
    holders = [subprocess.Popen([sys.executable, "-c", HOLDER, str(b.pid)], cwd=ROOT, stdout=subprocess.PIPE,
                                text=True, env=dict(os.environ, PYTHONPATH=str(ROOT))) for b in busy]
    try:
        dead_parent, live_parent = (Path(h.stdout.readline().strip()) for h in holders)
        assert dead_parent.name.startswith(f"o{holders[0].pid}-") and (dead_parent / "w1").is_dir()
        holders[0].kill()
        holders[0].wait()
        removed = clean.clean(run_id=None)           # `harness clean`: dead owners only
        assert f"removed cgroup {dead_parent}" in removed.lines() and not dead_parent.exists()
        assert busy[0].wait(timeout=30) == -signal.SIGKILL      # what was left in the dead run's group
        assert live_parent.exists() and f"removed cgroup {live_parent}" not in removed.lines()
        assert busy[1].poll() is None
    finally:
        for p in (*holders, *busy):
            p.kill()
            p.wait()
        cgroups.sweep()
    assert not [p for p, _ in cgroups.parents() if p.name.startswith((f"o{holders[0].pid}-", f"o{holders[1].pid}-"))]


def _harness_run(tmp_path: Path, run_id: str, *extra: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "harness.cli", "run", "--workers", "2", "--method", "spar", "--budget", "12.8%",
            "--baseline", "none", "--model", "micro", "--seeds", "1", "--objective", "grpo", "--max-new-tokens",
            "4", "--base-steps", "0", "--eval-problems", "0", "--no-emulation", "--worker-cpu", "1,0.25",
            "--straggler", "w1:exp:50ms", "--run-id", run_id, "--out", str(tmp_path), "--quiet", *extra]
    return subprocess.Popen(argv, cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def _worker_pid(run_dir: Path, worker: int) -> int | None:
    for entry in os.listdir("/proc"):
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(run_dir).encode() in b" ".join(cmd) and b"--worker-id" in cmd and \
                cmd[cmd.index(b"--worker-id") + 1] == str(worker).encode():
            return int(entry)
    return None


def _live_group(harness_pid: int) -> Path | None:
    return next((p for p, _ in cgroups.parents() if p.name.startswith(f"o{harness_pid}-")), None)


@pytest.mark.root
@pytest.mark.slow
@needs_cgroups
def test_a_run_puts_each_worker_in_its_share_and_leaves_no_cgroup(tmp_path):
    proc = _harness_run(tmp_path, "cpu-run", "--updates", "6")
    run_dir = (tmp_path / "cpu-run").resolve()
    seen = {}
    end = time.monotonic() + 900
    while proc.poll() is None and time.monotonic() < end:   # while it runs: read w2's group and its members
        parent = _live_group(proc.pid)
        pid = _worker_pid(run_dir, 2)
        if parent is not None and pid is not None and (parent / "w2").exists():
            try:
                seen = {"limit": HIER.read_limit(parent / "w2"), "w1": HIER.read_limit(parent / "w1"),
                        "member": str(pid) in (parent / "w2" / "cgroup.procs").read_text().split()}
            except OSError:
                pass                             # the cell ended between the reads
            if seen.get("member"):
                break
        time.sleep(0.1)
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    assert seen == {"limit": 0.25, "w1": 1.0, "member": True}
    assert _live_group(proc.pid) is None                         # removed by the run
    cell = run_dir / "cells" / "spar-12.8pct-s1"
    launch = json.loads((cell / "launch.json").read_text())
    assert launch["cpu_shares"] == {"w1": 1.0, "w2": 0.25} and set(launch["cpu_throttled"]) == {"w1", "w2"}
    rows = [json.loads(x) for x in (cell / "events-w1.jsonl").read_text().splitlines()]
    late = {r["batch"]: r["straggle_s"] for r in rows if r.get("kind") == "rollouts"}
    assert late and late == {t: spec.Straggle("exp", 0.05).delay(1, 1, t) for t in late}   # seeded, recorded
    w2 = [json.loads(x) for x in (cell / "events-w2.jsonl").read_text().splitlines()]
    assert all(r["straggle_s"] == 0.0 for r in w2 if r.get("kind") == "rollouts")
    report = (run_dir / "report.md").read_text()                # the report names shares, delays, the straggler
    assert "## Workers: uneven compute and stragglers" in report and "| w2 | 0.25 (" in report
    assert "| w1 | 1 (" in report and "exp 0.05 s" in report and "the straggler was w" in report


@pytest.mark.root
@pytest.mark.slow
@needs_cgroups
def test_a_sigkilled_run_leaves_its_groups_to_the_sweep_and_nothing_after(tmp_path):
    proc = _harness_run(tmp_path, "cpu-kill", "--updates", "100000")
    run_dir = (tmp_path / "cpu-kill").resolve()
    try:
        _wait(lambda: (p := _live_group(proc.pid)) is not None and _worker_pid(run_dir, 2) is not None
              and str(_worker_pid(run_dir, 2)) in (p / "w2" / "cgroup.procs").read_text().split(),
              "w2 never ran in its group", guard_s=900)
        parent = _live_group(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
        assert parent.exists()                                   # nobody removed it: the owner is dead
        # what `harness clean` runs for cgroups (the whole command would also sweep other sessions' dead runs)
        assert str(parent) in cgroups.sweep()
        assert not parent.exists() and _live_group(proc.pid) is None
    finally:
        proc.kill()
        cgroups.sweep()


def test_a_dry_run_and_doctor_say_the_cpu_shares():
    """`--dry-run` lists each worker's share (the plan of links has no cgroups in it); `harness doctor`
    says whether shares can be applied here, as information: a run without them needs no controller."""
    from typer.testing import CliRunner

    from harness.cli import app

    result = CliRunner().invoke(app, ["run", "--dry-run", "--no-emulation", "--workers", "2", "--worker-cpu", "0.5,0.25"])
    assert result.exit_code == 0, result.output
    assert "CPU shares (cgroup cpu.max per worker): w1 0.5 CPUs, w2 0.25 CPUs; the learner unlimited" in result.stdout
    plain = CliRunner().invoke(app, ["run", "--dry-run", "--no-emulation", "--workers", "2"])
    assert "CPU shares" not in plain.stdout
    said = [line for line in doctor.check(root=True).ok if line.startswith("cgroups: ")]
    assert len(said) == 1 and said[0].startswith("cgroups: a cpu controller" if cgroups.problem() is None
                                                 else "cgroups: no CPU shares here, a run without them is unaffected")
