"""`harness wrap` end to end (root: real namespaces, real processes, gloo across them):

- the env contract: every rank sees RANK/WORLD_SIZE/LOCAL_RANK/MASTER_*/WAN_*, runs in its own node's
  namespace, and a gloo all_reduce across the namespaces gives the right sum; the job marks no steps,
  so the report gives totals; nothing of the run is left afterwards;
- a rank that exits non-zero: --on-fail stop ends the others (exit code and report name the node),
  --on-fail wait lets them finish;
- the harness SIGKILLed mid-run: no job process survives it, and `harness clean` leaves no namespace,
  state file or process; SIGINT tears everything down by itself;
- bad commands and flags: one line, exit 2, nothing created.

The DDP and DiLoCo examples run in test_wrap_examples.py; the hook table in test_wrap_bench.py.
"""
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.net import clean, topology

ROOT = Path(__file__).resolve().parents[3]
JOBS = Path(__file__).resolve().parent / "jobs"
FAST = ["--bw", "50mbit", "--delay", "2ms", "--calibrate-s", "0"]


def harness(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=kw.pop("timeout", 600), **kw)


def spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "harness.cli", *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def run_folder(done: subprocess.CompletedProcess) -> Path:
    return Path(done.stdout.strip().splitlines()[-1])


def pids_of(needle: str) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if needle in Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode():
                    out.append(int(entry))
            except OSError:
                continue
    return out


def left_behind(run: Path, marker: str) -> list[str]:
    rid = json.loads((run / "meta.json").read_text()).get("netns_run_id")
    found = clean.leftovers(rid) if rid else []
    found += [f"state file {rid}"] if rid and topology.read_state(rid) else []
    return found + [f"pid {p}" for p in pids_of(marker)]


def wait_until(cond, proc: subprocess.Popen, timeout_s: float = 300) -> None:
    end = time.monotonic() + timeout_s
    while not cond():
        assert proc.poll() is None and time.monotonic() < end, proc.communicate()[1][-3000:]
        time.sleep(0.2)


# ---- bad input: no root needed, nothing built -----------------------------------------------------

@pytest.mark.parametrize("command, says", [
    (["no-such-program-xyz"], "'no-such-program-xyz' not found on PATH"),
    (["/no/such/file"], "'/no/such/file' does not exist"),
    (["NOTEXEC"], "is not executable"),
    ([], "Missing argument"),
])
def test_a_bad_command_is_one_line_and_creates_nothing(tmp_path, command, says):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(stat.S_IRUSR | stat.S_IWUSR)        # not executable
    command = [str(script) if c == "NOTEXEC" else c for c in command]
    proc = spawn("wrap", *FAST, "--nodes", "2", "--out", str(tmp_path / "out"), "--", *command)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 2, stderr
    assert says in stderr
    if command:
        assert len(stderr.strip().splitlines()) == 1, stderr
    assert not (tmp_path / "out").exists()
    owners = [topology.read_state(rid) for rid in topology.state_run_ids()]   # no topology was ever ours
    assert not [o for o in owners if o and o.get("owner", {}).get("pid") == proc.pid]


@pytest.mark.parametrize("flags, says", [
    (["--comm-ratio", "paper"], "--comm-ratio paper: a ratio needs the compute time"),   # parsed, not in --help
    (["--nodes", "0"], "--nodes: 0 must be within"),
    (["--on-fail", "retry"], "--on-fail: 'retry' must be one of stop, wait"),
    (["--no-emulation", "--bw", "10mbit"], "--bw: shape the emulated link"),
    (["--bw", "fast"], "--bw"),
    (["--worker-cpu", "1,0.5,0.25"], "--worker-cpu: '1,0.5,0.25' gives 3 shares for 2 nodes"),
    (["--no-emulation", "--worker-cpu", "0.5"], "--worker-cpu: CPU shares go with the emulated nodes"),
])
def test_a_bad_flag_is_one_line_and_creates_nothing(tmp_path, flags, says):
    flags = flags if "--nodes" in flags else [*flags, "--nodes", "2"]
    done = harness("wrap", *flags, "--out", str(tmp_path / "out"), "--", "true")
    assert done.returncode == 2, done.stderr
    assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "out").exists()


def test_an_out_that_is_a_file_is_one_line_and_leaves_it_alone(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    done = harness("wrap", "--bw", "10mbit", "--nodes", "2", "--out", str(afile), "--", "true")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == f"error: --out: {afile} exists and is not a folder; name a folder for the results"
    assert afile.read_text() == "mine\n"


def test_without_nodes_it_says_nodes_is_required(tmp_path):
    done = harness("wrap", "--bw", "10mbit", "--out", str(tmp_path / "out"), "--", "true")
    assert done.returncode == 2 and done.stderr.strip() == "error: --nodes is required (1-1024)", done.stderr
    assert not (tmp_path / "out").exists()


def test_the_help_lists_the_link_flags_but_not_the_refused_comm_ratio():
    done = harness("wrap", "--help", env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    assert "--bw" in done.stdout and "--worker-cpu" in done.stdout and "--comm-ratio" not in done.stdout


def test_a_timeout_names_the_job_not_a_node(tmp_path):
    # --timeout stops the whole job: it used to say "node ? timeout after 1 s"
    done = harness("wrap", "--no-emulation", "--nodes", "2", "--timeout", "1", "--out", str(tmp_path), "--",
                   "sleep", "60", timeout=120)
    assert done.returncode == 1
    assert "harness wrap: the job timed out after 1 s (status timeout;" in done.stderr, done.stderr
    run = run_folder(done)
    assert "**TIMEOUT**: the job timed out after 1 s" in (run / "report.md").read_text()
    assert json.loads((run / "meta.json").read_text())["timed_out_nodes"] == ["w1", "w2"]


# ---- the env contract ----------------------------------------------------------------------------

@pytest.mark.root
def test_env_contract_gloo_sum_and_a_totals_report(tmp_path):
    nodes = 3
    done = harness("wrap", *FAST, "--nodes", str(nodes), "--out", str(tmp_path), "--", sys.executable,
                   str(JOBS / "allreduce_sum.py"))
    assert done.returncode == 0, done.stderr[-3000:]
    run = run_folder(done)
    meta = json.loads((run / "meta.json").read_text())
    topo = topology.Topology.plan(meta["netns_run_id"], nodes)
    for rank in range(nodes):
        node = f"w{rank + 1}"
        got = json.loads((run / f"result-{rank}.json").read_text())
        assert got["sum"] == nodes * (nodes + 1) / 2 and got["big"] == nodes
        assert got["env"] == {"RANK": str(rank), "WORLD_SIZE": str(nodes), "LOCAL_RANK": "0",
                              "MASTER_ADDR": topo.nodes["w1"].address, "MASTER_PORT": "29500", "WAN_NODE": node,
                              "WAN_RUN_DIR": str(run), "WAN_EVENTS": str(run / "nodes" / node / "events.jsonl")}
        assert got["local_address"] == topo.nodes[node].address     # its own namespace, its own link
        assert (run / "nodes" / node / "stdout.log").exists() and (run / "nodes" / node / "stderr.log").exists()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["complete"] and summary["steps"] is None and summary["per"] == "run"
    for node in (f"w{r + 1}" for r in range(nodes)):   # the 1 MB all_reduce crossed every node's link
        assert summary["links"][node]["up"] > 1e6 and summary["sockets"][node]["sent"] > 1e6
    assert {r["node"] for r in summary["calibration"]} == {"w1", "w2", "w3"}
    assert "no step marks: totals over the run" in (run / "report.md").read_text()
    assert left_behind(run, str(JOBS / "allreduce_sum.py")) == []
    again = harness("report", str(run))                 # rebuilt from the folder alone
    assert again.returncode == 0 and "totals over the run" in again.stdout, again.stderr


# ---- a failing rank --------------------------------------------------------------------------------

FAILING = 'if [ "$RANK" = 1 ]; then echo dying >&2; exit 3; fi; exec sleep {sleep}'


@pytest.mark.root
def test_on_fail_stop_ends_the_others_and_names_the_node(tmp_path):
    done = harness("wrap", *FAST, "--nodes", "3", "--out", str(tmp_path), "--", "sh", "-c", FAILING.format(sleep=301))
    assert done.returncode == 1
    assert "node w2 exit code 3" in done.stderr
    run = run_folder(done)
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "failed" and meta["failed_node"] == "w2"
    assert meta["exits"] == {"w1": "killed by SIGTERM", "w2": "exit code 3", "w3": "killed by SIGTERM"}
    assert "FAILED**: node w2 exit code 3" in (run / "report.md").read_text()
    assert (run / "nodes" / "w2" / "stderr.log").read_text() == "dying\n"
    assert left_behind(run, "sleep 301") == []


@pytest.mark.root
def test_worker_cpu_puts_each_node_s_job_and_its_children_in_its_share(tmp_path):
    """--worker-cpu: each node's process joins its CPU-share cgroup before exec, so a child it starts is
    inside too; the quota is the one asked for, and no group is left after the run."""
    from harness.net import cgroups

    if (why := cgroups.problem()) is not None:
        pytest.skip(f"no cgroup cpu controller: {why}")
    job = "sh -c 'cat /proc/self/cgroup' | grep -E 'cpu[,:]|^0::' | head -1"
    done = harness("wrap", *FAST, "--nodes", "2", "--worker-cpu", "1,0.5", "--out", str(tmp_path), "--", "sh", "-c", job)
    assert done.returncode == 0, done.stderr
    run = run_folder(done)
    meta = json.loads((run / "meta.json").read_text())
    assert meta["cpu_shares"] == {"w1": 1.0, "w2": 0.5}
    assert set(meta["cpu_throttled"]) == {"w1", "w2"}
    for node in ("w1", "w2"):
        line = (run / "nodes" / node / "stdout.log").read_text()
        assert f"/{cgroups.TOP}/" in line and line.strip().endswith(f"/{node}"), line   # the child (cat) too
    assert not [g for g, owner in cgroups.parents() if owner["pid"] == meta["owner"]["pid"]]   # ours removed


@pytest.mark.root
def test_on_fail_wait_lets_the_others_finish(tmp_path):
    done = harness("wrap", *FAST, "--nodes", "2", "--on-fail", "wait", "--out", str(tmp_path), "--",
                   "sh", "-c", FAILING.format(sleep=2))
    assert done.returncode == 1
    meta = json.loads((run_folder(done) / "meta.json").read_text())
    assert meta["exits"] == {"w1": "exit code 0", "w2": "exit code 3"} and meta["failed_node"] == "w2"


# ---- the harness killed --------------------------------------------------------------------------

def _started_job(tmp_path: Path, marker: str) -> tuple[subprocess.Popen, Path]:
    job = [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(600)", marker]
    proc = spawn("wrap", *FAST, "--nodes", "2", "--run-id", "killed", "--out", str(tmp_path), "--quiet", "--", *job)
    run = tmp_path / "killed"
    logs = [run / "nodes" / n / "stdout.log" for n in ("w1", "w2")]
    wait_until(lambda: all(p.exists() and "started" in p.read_text() for p in logs), proc)
    return proc, run


@pytest.mark.root
def test_a_sigkilled_harness_leaves_no_job_and_clean_leaves_nothing(tmp_path):
    marker = f"wrap-sigkill-{os.getpid()}"
    proc, run = _started_job(tmp_path, marker)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    end = time.monotonic() + 60                      # PR_SET_PDEATHSIG: the kernel kills them
    while pids_of(marker) and time.monotonic() < end:
        time.sleep(0.2)
    assert pids_of(marker) == []
    rid = json.loads((run / "meta.json").read_text())["netns_run_id"]
    assert clean.leftovers(rid), "a SIGKILLed harness cannot tear down: its namespaces must still be there"
    done = harness("clean", "--run-id", rid)         # this run only: other runs on the box are not ours
    assert done.returncode == 0, done.stderr
    assert left_behind(run, marker) == []
    assert harness("report", str(run)).returncode == 0   # what was measured is readable


@pytest.mark.root
def test_sigint_tears_everything_down(tmp_path):
    marker = f"wrap-sigint-{os.getpid()}"
    proc, run = _started_job(tmp_path, marker)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert json.loads((run / "meta.json").read_text())["status"] == "interrupted"
    assert left_behind(run, marker) == []
