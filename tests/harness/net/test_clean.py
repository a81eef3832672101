"""`harness clean` removes only runs whose owner process is dead.

Every topology records its owner (pid + /proc start time) in /run/wan-harness/<run id>.json; a bare
`harness clean` keeps a run whose owner lives, `--run-id` removes one run whoever owns it, `--all`
every run (never run here: it would remove other test sessions' live runs).
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.net import clean, topology

from harness import owner
from harness.cli import app

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
HARNESS = [sys.executable, "-m", "harness.cli"]


def test_an_owner_is_a_pid_and_its_start_time():
    me = owner.owner_record()
    assert me["pid"] == os.getpid() and me["start_time"] == owner.process_start_time(os.getpid()) > 0
    assert owner.owner_alive(me)
    assert not owner.owner_alive({**me, "start_time": me["start_time"] + 1})   # the pid, recycled
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    record = owner.owner_record(child.pid)
    child.wait()
    assert not owner.owner_alive(record)
    for bad in (None, {}, {"pid": "1"}, {"pid": True, "start_time": 0}, []):
        assert not owner.owner_alive(bad)


def test_all_and_run_id_together_is_a_usage_error():
    result = CliRunner().invoke(app, ["clean", "--all", "--run-id", "abcdef"])
    assert result.exit_code == 2 and result.stderr.strip() == "error: --all and --run-id: give one of them"


def _start_holder():
    """A controller that builds a 2-worker topology with delay lines, prints its run id and sleeps."""
    proc = subprocess.Popen([sys.executable, str(HERE / "hold_shaping.py"), "mobile-4g", "2"],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)
    run_id = proc.stdout.readline().strip()
    assert run_id, "holder did not start"
    return proc, run_id


@pytest.mark.root
def test_bare_clean_removes_only_runs_whose_owner_is_dead():
    alive, alive_id = _start_holder()
    dead, dead_id = _start_holder()
    try:
        for proc, rid in ((alive, alive_id), (dead, dead_id)):
            assert topology.read_state(rid)["owner"]["pid"] == proc.pid
            assert len(clean.leftovers(rid)) == 4 and len(clean.orphan_delaylines(rid)) == 2
        dead.kill()
        dead.wait()
        listed = subprocess.run(HARNESS + ["clean", "--list"], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert f"wh{alive_id}-rt\towner pid {alive.pid}, alive" in listed.stdout
        assert f"wh{dead_id}-rt\towner pid {dead.pid}, dead" in listed.stdout
        res = subprocess.run(HARNESS + ["clean"], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        assert f"removed namespace wh{dead_id}-rt" in res.stdout and f"wh{alive_id}" not in res.stdout.replace(
            f"kept run {alive_id}", "")
        assert f"kept run {alive_id} (4 namespaces): owner pid {alive.pid}, alive" in res.stdout
        assert clean.leftovers(dead_id) == [] and clean.orphan_delaylines(dead_id) == []
        assert topology.read_state(dead_id) is None
        assert len(clean.leftovers(alive_id)) == 4 and len(clean.orphan_delaylines(alive_id)) == 2
        assert topology.read_state(alive_id) is not None and alive.poll() is None
    finally:
        for proc in (alive, dead):
            proc.kill()
            proc.wait()
            proc.stdout.close()
        for rid in (alive_id, dead_id):
            clean.clean(rid)
    assert clean.leftovers(alive_id) == [] and topology.read_state(alive_id) is None


@pytest.mark.root
def test_a_topology_records_its_owner_until_destroyed():
    topo = topology.Topology.create(topology.new_run_id(), 1)
    try:
        state = topology.read_state(topo.run_id)
        assert state["owner"] == owner.owner_record() and sorted(state["namespaces"]) == sorted(topo.namespaces())
        assert clean.owner_status(topo.run_id) == (f"owner pid {os.getpid()}, alive", True)
    finally:
        topo.destroy()
    assert topology.read_state(topo.run_id) is None and not os.path.exists(topology.state_path(topo.run_id))


@pytest.mark.parametrize("bad", ["../x", "ABCDEF", "12", "wh1234-w1"])
def test_a_run_id_no_run_can_have_is_bad_input_not_nothing_to_clean(bad):
    """`harness clean --run-id ../x` said "nothing to clean", exit 0, as if it had looked."""
    result = CliRunner().invoke(app, ["clean", "--run-id", bad])
    assert result.exit_code == 2
    assert f"--run-id: {bad!r} is no namespace run id (4-8 hex digits" in result.output
