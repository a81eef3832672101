"""`harness run`'s fork server: a check that fails before it starts leaves none, a Ctrl-C while it imports
stops it; and the server sizes the adapter for the cost model while the cells run (launch.AdapterShapes),
so finalize predicts in process on a first run into a models cache."""
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.run import config, launch
from harness.run.forkserver import ForkServer
from tests.harness.faults.test_faults import pids_of
from tests.harness.run.test_run_e2e import harness

RUN = ["--model", "micro", "--workers", "1", "--updates", "3", "--method", "spar", "--baseline", "none",
       "--seeds", "1", "--no-emulation", "--quiet"]


def test_a_taken_run_id_is_one_line_and_leaves_nothing(tmp_path):
    """A taken --run-id is refused: one line, exit 2, no server process (found by its label, the run
    folder), and the taken folder untouched."""
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("x")
    proc = harness("run", *RUN, "--run-id", "taken", "--out", str(tmp_path))
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 2, stderr
    assert stderr.strip().count("\n") == 0 and "--run-id" in stderr and "taken" in stderr, stderr
    assert pids_of("trainers.forkserver", str(taken)) == []
    assert sorted(p.name for p in taken.iterdir()) == ["keep.txt"]


def test_ctrl_c_while_the_server_imports_stops_it(tmp_path):
    """SIGINT as soon as the server is up (its label names the run folder), its imports under way:
    exit 130, no server left."""
    run_dir = tmp_path / "early"
    proc = harness("run", *RUN, "--run-id", "early", "--out", str(tmp_path))
    end = time.monotonic() + 300
    while not pids_of("trainers.forkserver", str(run_dir)):
        assert proc.poll() is None and time.monotonic() < end, proc.communicate()[1][-3000:]
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 130, stderr[-3000:]
    assert pids_of("trainers.forkserver", str(run_dir)) == []


@pytest.mark.parametrize("method, rank", [("spar", 4), ("lordo-global", None)])
def test_the_fork_server_sizes_the_tables_the_cost_model_then_reads_in_process(tmp_path, monkeypatch, method, rank):
    """AdapterShapes forks trainers.model.shapes from the run's server; the shapes it keeps in the models
    cache are the ones the harness's own sizing on the meta device reads, and the prediction then needs
    no process of its own; a second run finds them cached and forks nothing. HiLo reads the adapter's
    factors (rank 4); a data-parallel run under --dp-train full every parameter of the model (`--full`)."""
    from harness.projection import inputs, prediction

    monkeypatch.delenv("WAN_CACHE_DIR")   # a models cache of this test's own: <out>/.cache
    cfg = config.build(model="micro", method=method, baseline="none", lora_rank="4", emulation=False,
                       out_dir=str(tmp_path), run_id="r")
    cache, run_dir = launch.cache_dir(cfg), tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps(cfg.to_json()))
    assert not prediction.in_process(run_dir, cache)
    with ForkServer.started(launch.server_modules(cfg), launch.python_env(cache, threads=1),
                            run_dir / "forkserver.log") as server:
        shapes = launch.AdapterShapes.start(cfg, run_dir, server)
        assert [key[2] for _, _, key in shapes.children] == [rank]
        shapes.finish(wait_s=launch.SHAPES_TIMEOUT_S)
        assert prediction.in_process(run_dir, cache)
        assert launch.AdapterShapes.start(cfg, run_dir, server).children == []   # cached: nothing to size
    expected = inputs.dp_tensors("micro", "full", 4) if rank is None else inputs.adapter_for("micro", 4).tensors
    assert prediction.cached_shapes(cache, "micro", rank) == [(n, tuple(s)) for n, s in expected]
    assert sorted(p.name for p in (cache / prediction.SHAPES_DIR).iterdir()) == \
        [prediction._shapes_file(cache, "micro", rank).name]   # no pending or temporary file left


def test_what_runs_before_the_fork_server_starts_leaves_its_heavy_imports_for_later():
    """A run's first seconds are the fork server's imports: the CLI gets there without pyroute2,
    pandas, matplotlib or torch (each imported once the server is on its way: the network, finalize)."""
    probe = ("import sys; import harness.cli, harness.run.commands, harness.run.launch, harness.run.regime; "
             "print(','.join(m for m in ('pyroute2', 'pandas', 'matplotlib', 'torch') if m in sys.modules) or '-')")
    done = subprocess.run([sys.executable, "-c", probe], cwd=launch.ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "-"


def test_finishing_no_shape_child_imports_nothing():
    """A run stopped by SIGTERM during its report imports (pandas half-loaded) then failed its wind-up with
    "could not write the partial results: ImportError: ... numpy": finishing the shape children imported the
    cost model (and pandas) again although there was no child."""
    probe = ("import sys; from harness.run import launch; launch.AdapterShapes().finish(wait_s=0.0); "
             "print('pandas' in sys.modules, 'harness.projection.prediction' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "False"]
