"""The fork server (`--spawn fork`, harness/run/forkserver.py + trainers/forkserver.py): a forked service
is what `python -m module args` would have been, the harness's own child, in its node's namespace, and
nothing of it outlives the harness; a run with forked services trains the same bits as one with exec'ed ones.

The waits are guards against a hang; nothing asserts how long anything took.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.net import clean
from harness.run.forkserver import ForkServer, ForkServerError, Service
from harness.run.launch import python_env
from tests.harness.faults.test_faults import pids_of
from tests.harness.run.test_run_e2e import harness

ROOT = Path(__file__).resolve().parents[3]
CHILD = "tests.harness.run.forkchild"
GUARD_S = 120


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("forkserver") / "forkserver.log"
    with ForkServer.started([CHILD], python_env(ROOT / ".cache", threads=1), log) as srv:
        yield srv


def spawn(srv: ForkServer, tmp_path: Path, *args: str, env: dict | None = None, netns: str | None = None):
    report = tmp_path / f"report-{len(list(tmp_path.iterdir()))}.json"
    argv = [sys.executable, "-m", CHILD, str(report), *args]
    with open(tmp_path / "child.log", "ab") as log:
        proc = srv.spawn(argv, cwd=tmp_path, env=env or {"WAN_TEST": "1"}, stdout=log, netns=netns)
    return proc, report, argv


def read_report(report: Path, proc=None) -> dict:
    """What the service wrote (`proc`: ours, watched for an early end; None: another process's)."""
    end = time.monotonic() + GUARD_S
    while not report.exists():
        assert (proc is None or proc.poll() is None) and time.monotonic() < end, \
            f"the service ended ({proc and proc.returncode}) without a report"
        time.sleep(0.02)
    return json.loads(report.read_text())


def test_a_forked_service_is_our_child_with_its_argv_env_cwd_and_log(server, tmp_path):
    proc, report, argv = spawn(server, tmp_path, "--exit", "3")
    assert proc.wait(timeout=GUARD_S) == 3
    seen = read_report(report, proc)
    assert seen["ppid"] == os.getpid()                      # handed to us: we wait for it and reap it
    assert seen["cwd"] == str(tmp_path) and seen["env"] == {"WAN_TEST": "1"}
    assert seen["cmdline"] == argv                          # ps and /proc show the service, not the server
    assert seen["sid"] == seen["pid"]                       # its own session, as start_new_session
    assert seen["threads"] == 1
    assert (tmp_path / "child.log").read_text().splitlines() == ["to stdout", "to stderr"]


def test_the_server_runs_ahead_of_its_services_which_get_our_priority(server, tmp_path):
    """The fork server is scheduled ahead (nice -10, its session's autogroup too, as root) so that a
    start does not wait behind N busy services; each service runs at our nice in a fresh autogroup."""
    proc, report, _ = spawn(server, tmp_path)
    seen = read_report(report, proc)
    assert proc.wait(timeout=GUARD_S) == 0
    assert seen["nice"] == os.getpriority(os.PRIO_PROCESS, 0)
    if os.geteuid() == 0:
        assert os.getpriority(os.PRIO_PROCESS, server.proc.pid) == -10
        if seen["autogroup"] is not None:
            assert seen["autogroup"].split()[-1] == "0"  # "/autogroup-N nice 0": its own session's, default
            assert Path(f"/proc/{server.proc.pid}/autogroup").read_text().split()[-1] == "-10"


def test_a_service_collects_garbage_over_the_frozen_imports_of_its_server(server, tmp_path):
    """The server imports with the collector off and freezes what it imported before its first fork
    (trainers/forkserver.py `preload`): the service finds those objects frozen (never scanned, so their
    pages stay shared), no full collection run over them (the counts are the server's, inherited), and
    its collector on for what it makes itself."""
    proc, report, _ = spawn(server, tmp_path)
    seen = read_report(report, proc)
    assert proc.wait(timeout=GUARD_S) == 0
    assert seen["gc_enabled"] is True
    assert seen["gc_frozen"] > 1000      # the interpreter's and the preloaded modules' objects
    assert seen["gc_full_collections"] == 0


def test_each_service_gets_fresh_random_seeds(server, tmp_path):
    draws = []
    for _ in range(2):
        proc, report, _ = spawn(server, tmp_path)
        proc.wait(timeout=GUARD_S)
        draws.append(read_report(report, proc)["random"])
    assert draws[0] != draws[1]


def test_signals_and_exit_codes_read_like_popen(server, tmp_path):
    proc, report, _ = spawn(server, tmp_path, "--sleep", "600")
    read_report(report, proc)
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=GUARD_S) == -signal.SIGTERM
    proc.send_signal(signal.SIGTERM)                         # reaped: a no-op, like Popen's
    sleeper = spawn(server, tmp_path, "--sleep", "600")[0]
    with pytest.raises(subprocess.TimeoutExpired):
        sleeper.wait(timeout=0.2)
    sleeper.kill()
    assert sleeper.wait(timeout=GUARD_S) == -signal.SIGKILL


def test_a_module_that_was_not_preloaded_is_refused(server, tmp_path):
    with open(tmp_path / "x.log", "ab") as log, pytest.raises(ForkServerError, match="not preloaded"):
        server.spawn([sys.executable, "-m", "trainers.hilo.worker", "--help"], cwd=tmp_path, env={}, stdout=log)
    proc, _, _ = spawn(server, tmp_path, "--exit", "0")     # and the server goes on serving
    assert proc.wait(timeout=GUARD_S) == 0


@pytest.mark.root
def test_the_service_enters_the_named_network_namespace(server, tmp_path):
    from pyroute2 import netns

    name = f"wanfork{os.getpid() % 10000}"
    netns.create(name)
    try:
        proc, report, _ = spawn(server, tmp_path, netns=name)
        proc.wait(timeout=GUARD_S)
        assert read_report(report, proc)["netns"] == os.stat(f"/run/netns/{name}").st_ino
    finally:
        netns.remove(name)


def batch(tmp_path: Path, n: int, *args: str, netns: list[str] | None = None) -> tuple[list[Service], list[Path]]:
    """n services of one batch, each with its own report and log (and namespace, when given)."""
    reports = [tmp_path / f"batch-{i}.json" for i in range(n)]
    return [Service([sys.executable, "-m", CHILD, str(r), *args], {"WAN_TEST": str(i)}, tmp_path,
                    tmp_path / f"batch-{i}.log", netns[i] if netns else None) for i, r in enumerate(reports)], reports


def test_a_batch_is_forked_in_one_request_each_service_with_its_own_argv_env_and_log(server, tmp_path):
    services, reports = batch(tmp_path, 4, "--exit", "5")
    procs = server.spawn_many(services)
    assert [p.args for p in procs] == [s.argv for s in services]
    assert [p.wait(timeout=GUARD_S) for p in procs] == [5] * 4
    seen = [read_report(r, p) for r, p in zip(reports, procs)]
    assert [s["pid"] for s in seen] == [p.pid for p in procs] and {s["ppid"] for s in seen} == {os.getpid()}
    assert [s["env"] for s in seen] == [{"WAN_TEST": str(i)} for i in range(4)]
    assert [s["cmdline"] for s in seen] == [s.argv for s in services]
    assert [(tmp_path / f"batch-{i}.log").read_text().splitlines() for i in range(4)] == [["to stdout", "to stderr"]] * 4


def test_a_batch_with_one_bad_service_starts_none_of_it_in_one_line(server, tmp_path):
    """A module not preloaded (refused by the server) or a namespace that does not exist (found here):
    one line naming the service, nothing of the batch runs, and the server goes on serving."""
    services, reports = batch(tmp_path, 3, "--exit", "0")
    bad = services[1]._replace(argv=[sys.executable, "-m", "trainers.hilo.worker", "--help"])
    with pytest.raises(ForkServerError, match=r"service 2 of 3: module 'trainers.hilo.worker' was not preloaded") as err:
        server.spawn_many([services[0], bad, services[2]])
    assert "\n" not in str(err.value)
    with pytest.raises(ForkServerError, match="No such file or directory: .*no-such-namespace") as err:
        server.spawn_many([services[0], services[1]._replace(netns="no-such-namespace"), services[2]])
    assert "\n" not in str(err.value)
    procs = server.spawn_many(services)                      # in step still: the next batch is served
    assert [p.wait(timeout=GUARD_S) for p in procs] == [0] * 3
    assert all(read_report(r, p)["ppid"] == os.getpid() for r, p in zip(reports, procs))
    assert [(tmp_path / f"batch-{i}.log").read_text().count("to stdout") for i in range(3)] == [1] * 3  # once each


SIGKILLED_BATCH = """
import json, os, sys, time
from pathlib import Path
from harness.run.forkserver import ForkServer, Service
from harness.run.launch import python_env
out, module, spaces = Path(sys.argv[1]), sys.argv[2], sys.argv[3].split(",")
srv = ForkServer.start([module], python_env(out / ".cache", threads=1), out / "fs.log", label=str(out))
procs = srv.spawn_many([Service([sys.executable, "-m", module, str(out / f"r{i}.json"), "--sleep", "600"],
                                {"WAN_PARENT_PID": str(os.getpid())}, out, out / f"w{i}.log", space)
                        for i, space in enumerate(spaces)])
print(json.dumps([srv.proc.pid, *[p.pid for p in procs]]), flush=True)
time.sleep(600)
"""


@pytest.mark.root
def test_a_batch_puts_each_service_in_its_namespace_and_a_sigkilled_harness_leaves_none(tmp_path):
    from pyroute2 import netns

    names = [f"wanbatch{os.getpid() % 10000}-{i}" for i in range(3)]
    for name in names:
        netns.create(name)
    try:
        proc = subprocess.Popen([sys.executable, "-c", SIGKILLED_BATCH, str(tmp_path), CHILD, ",".join(names)],
                                cwd=ROOT, env=python_env(tmp_path / ".cache", threads=1), stdout=subprocess.PIPE, text=True)
        server_pid, *pids = json.loads(proc.stdout.readline())
        seen = [read_report(tmp_path / f"r{i}.json") for i in range(3)]
        assert [s["pid"] for s in seen] == pids and {s["ppid"] for s in seen} == {proc.pid}
        assert [s["netns"] for s in seen] == [os.stat(f"/run/netns/{n}").st_ino for n in names]
        assert len(set(s["netns"] for s in seen)) == 3
        assert all(Path(f"/proc/{p}").exists() for p in [server_pid, *pids])
        proc.kill()
        proc.wait()
        assert_nothing_left(tmp_path)
    finally:
        for name in names:
            netns.remove(name)


def test_a_server_started_without_waiting_serves_once_its_imports_are_done(tmp_path):
    """wait=False (a run builds its network meanwhile): start returns with the imports under way; the
    first spawn waits for them, then serves as usual."""
    with ForkServer.started([CHILD], python_env(tmp_path / ".cache", threads=1), tmp_path / "fs.log",
                            wait=False) as srv:
        assert not srv.ready
        proc, report, _ = spawn(srv, tmp_path, "--exit", "0")
        assert srv.ready and proc.wait(timeout=GUARD_S) == 0
        assert read_report(report, proc)["ppid"] == os.getpid()


def test_a_server_that_cannot_import_its_modules_fails_its_wait_not_its_start(tmp_path):
    with ForkServer.started(["tests.harness.run.no_such_module"], python_env(tmp_path / ".cache", threads=1),
                            tmp_path / "fs.log", wait=False) as srv:
        for _ in range(2):   # closed after the first failure: the second wait says the same, at once
            with pytest.raises(ForkServerError, match="did not start"):
                srv.wait_ready()
        assert srv.proc.poll() is not None
        with open(tmp_path / "x.log", "ab") as log, pytest.raises(ForkServerError, match="did not start"):
            srv.spawn([sys.executable, "-m", CHILD, str(tmp_path / "r.json")], cwd=tmp_path, env={}, stdout=log)
    assert "no_such_module" in (tmp_path / "fs.log").read_text()


def assert_nothing_left(tmp_path) -> None:
    """No process of this test's run outlives GUARD_S after its harness died (any left are killed)."""
    end = time.monotonic() + GUARD_S
    while pids_of(str(tmp_path)) and time.monotonic() < end:
        time.sleep(0.1)
    left = pids_of(str(tmp_path))
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == []


SIGKILLED_WHILE_IMPORTING = """
import sys, time
from pathlib import Path
from harness.run.forkserver import ForkServer
from harness.run.launch import python_env
out = Path(sys.argv[1])
srv = ForkServer.start(["trainers.hilo.learner"], python_env(out / ".cache", threads=1), out / "fs.log",
                       label=str(out), wait=False)
print(srv.proc.pid, flush=True)
time.sleep(600)
"""


def test_a_harness_sigkilled_while_its_server_imports_takes_the_server_with_it(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", SIGKILLED_WHILE_IMPORTING, str(tmp_path)], cwd=ROOT,
                            env=python_env(tmp_path / ".cache", threads=1), stdout=subprocess.PIPE, text=True)
    server = int(proc.stdout.readline())
    assert Path(f"/proc/{server}").exists()
    proc.kill()
    proc.wait()
    assert_nothing_left(tmp_path)


SIGKILLED_HARNESS = """
import sys, time
from pathlib import Path
from harness.run.forkserver import ForkServer
from harness.run.launch import python_env
out = Path(sys.argv[1])
srv = ForkServer.start([sys.argv[2]], python_env(out / ".cache", threads=1), out / "fs.log", label=str(out))
with open(out / "child.log", "ab") as log:
    child = srv.spawn([sys.executable, "-m", sys.argv[2], str(out / "r.json"), "--sleep", "600"], cwd=out,
                      env={"WAN_PARENT_PID": str(__import__("os").getpid())}, stdout=log)
print(srv.proc.pid, child.pid, flush=True)
time.sleep(600)
"""


def test_a_sigkilled_harness_takes_the_server_and_its_services_with_it(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", SIGKILLED_HARNESS, str(tmp_path), CHILD], cwd=ROOT,
                            env=python_env(tmp_path / ".cache", threads=1), stdout=subprocess.PIPE, text=True)
    pids = [int(x) for x in proc.stdout.readline().split()]
    assert len(pids) == 2 and all(Path(f"/proc/{p}").exists() for p in pids)
    proc.kill()
    proc.wait()
    assert_nothing_left(tmp_path)


# ---- a run ------------------------------------------------------------------------------------------

RUN = ["--bw", "20mbit", "--workers", "3", "--method", "spar", "--model", "micro", "--seeds", "1",
       "--objective", "grpo", "--baseline", "none", "--quiet"]
CELL = "spar-12.8pct-s1"


def final_hash(run_dir: Path) -> str:
    rows = [json.loads(x) for x in (run_dir / "cells" / CELL / "events-learner.jsonl").read_text().splitlines()]
    return [r for r in rows if r.get("kind") == "update"][-1]["hash"]


def worker_namespaces(run_dir: Path) -> dict[str, tuple[int, int]]:
    """Per worker: (the namespace its process is in, the one its node was given)."""
    from harness.net.topology import ns_name

    rid = json.loads((run_dir / "meta.json").read_text())["netns_run_id"]
    out = {}
    for w in range(1, 4):
        (pid,) = pids_of(str(run_dir / "cells" / CELL), "trainers.hilo.worker", f"--worker-id {w} ")
        out[f"w{w}"] = (os.stat(f"/proc/{pid}/ns/net").st_ino, os.stat(f"/run/netns/{ns_name(rid, f'w{w}')}").st_ino)
    return out


@pytest.mark.root
def test_a_forked_run_trains_the_same_bits_in_the_right_namespaces_and_leaves_nothing(tmp_path):
    runs = {}
    for how in ("fork", "exec"):
        run_dir = tmp_path / how
        proc = harness("run", *RUN, "--updates", "8", "--spawn", how,
                       "--run-id", how, "--out", str(tmp_path))
        if how == "fork":  # while it trains: each worker sits in its own node's namespace
            events = run_dir / "cells" / CELL / "events-learner.jsonl"
            end = time.monotonic() + 600
            while not (events.exists() and '"kind": "update"' in events.read_text()):
                assert proc.poll() is None and time.monotonic() < end, proc.communicate()[1][-3000:]
                time.sleep(0.1)
            spaces = worker_namespaces(run_dir)
            assert all(inside == given for inside, given in spaces.values()), spaces
            assert len({inside for inside, _ in spaces.values()}) == 3
        _, stderr = proc.communicate(timeout=900)
        assert proc.returncode == 0, stderr[-3000:]
        summary = json.loads((run_dir / "cells" / CELL / "summary.json").read_text())
        assert summary["complete"] and summary["consistent"], summary
        rid = json.loads((run_dir / "meta.json").read_text())["netns_run_id"]
        assert clean.leftovers(rid) == [] and pids_of(str(run_dir)) == []
        runs[how] = final_hash(run_dir)
        (cell,) = json.loads((run_dir / "summary.json").read_text())["cells"]
        assert cell["join_s"] >= 0  # the run's summary says how long its workers took to join
    assert (tmp_path / "fork" / "forkserver.log").exists() and not (tmp_path / "exec" / "forkserver.log").exists()
    assert runs["fork"] == runs["exec"]


@pytest.mark.root
def test_a_run_interrupted_before_its_first_cell_stops_its_importing_server_and_network(tmp_path):
    """The server starts first and imports while the network is built: a SIGTERM then (the network up,
    no cell yet, on any but an idle box) tears both down and leaves the run marked interrupted."""
    run_dir = tmp_path / "early"
    proc = harness("run", *RUN, "--updates", "8", "--run-id", "early", "--out", str(tmp_path))
    end = time.monotonic() + 600
    while not ((run_dir / "forkserver.log").exists() and (run_dir / "meta.json").exists()):
        assert proc.poll() is None and time.monotonic() < end, proc.communicate()[1][-3000:]
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 143, stderr[-3000:]
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "interrupted" and not meta["complete"]
    assert meta["netns_run_id"] and clean.leftovers(meta["netns_run_id"]) == []
    assert pids_of(str(run_dir)) == []


def test_the_models_step_forked_by_the_server_fills_the_cache_a_fresh_python_then_finds(tmp_path):
    """launch.prepare_models through the run's server (its torch imported once) builds the run's base
    into the cache; the exec'ed step (no server) then finds it there and rebuilds nothing."""
    from harness.run import config, launch

    cfg = config.build(model="tiny", objective="grpo", base_steps="2", emulation=False, out_dir=str(tmp_path))
    assert launch.models_to_build(cfg)
    cache = tmp_path / "cache"
    with ForkServer.started([launch.MODELS_MODULE], python_env(cache, threads=1), tmp_path / "fs.log") as srv:
        launch.prepare_models(cfg, cache, srv)
    built = {p: p.stat().st_mtime_ns for p in cache.rglob("*.safetensors")}
    assert built
    launch.prepare_models(cfg, cache)
    assert {p: p.stat().st_mtime_ns for p in cache.rglob("*.safetensors")} == built
