"""`--log tensorboard|wandb|mlflow`: each cell's per-update metrics, logged offline into the run
folder under the field's names, read back with each tracker's own reader (TensorBoard's event
accumulator, the MLflow file store's client, W&B's offline record file). A backend whose library is
not installed is skipped with the reason. From a checked-in real run (tests/fixtures/runs/run-heldout)."""
import json
import shutil
import struct
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.results import tables, tracking

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "runs"
HELDOUT = FIXTURES / "run-heldout"


def need(module: str):
    return pytest.importorskip(module, reason=f"{module} is not installed (pip install -e '.[tracking]')")


@pytest.fixture()
def run(tmp_path):
    shutil.copytree(HELDOUT, tmp_path / "run")
    return tmp_path / "run"


def expected(run: Path, cell: str) -> dict[int, dict[str, float]]:
    """What the tracker must hold for `cell`: recomputed from the raw learner events."""
    rows = [json.loads(line) for line in (run / "cells" / cell / "events-learner.jsonl").read_text().splitlines()]
    out: dict[int, dict[str, float]] = {}
    for r in rows:
        if r.get("kind") == "update":
            out.setdefault(r["version"], {})["seconds_per_update"] = r["seconds_per_update"]
            out[r["version"]]["bytes_sent"] = sum(r["update_frame_bytes"].values())
        elif r.get("kind") == "eval":
            out.setdefault(r["version"], {})[f"heldout/pass_at_{r['k']}"] = r["pass_at_k"]
            out[r["version"]]["heldout/pass_at_1"] = r["pass_at_1"]
    return out


def test_metric_names_are_the_fields(run):
    t = tables.read_run(run)
    cell = t.cells["cell"].iloc[0]
    steps = dict(tracking.cell_steps(t, cell))
    assert list(steps) == sorted(steps)                      # increasing steps (W&B drops a step out of order)
    names = set().union(*steps.values())
    assert {"seconds_per_update", "weight_sync_time", "bytes_sent", "bytes_received", "heldout/pass_at_1",
            "heldout/reverse_kl", "train/distill_loss"} <= names
    assert any(n.startswith("heldout/pass_at_") and n != "heldout/pass_at_1" for n in names)
    u = t.updates[t.updates["cell"] == cell].set_index("update_index")
    v = int(u.index[1])
    phases = [u.loc[v, c] for c in tracking.SYNC_PHASES if u.loc[v, c] == u.loc[v, c] and u.loc[v, c] is not None]
    assert steps[v]["weight_sync_time"] == pytest.approx(sum(phases))


def test_tensorboard_event_files_read_back(run):
    need("tensorboardX")
    ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator",
                             reason="tensorboard (the reader) is not installed")
    tr = tracking.Tracker("tensorboard", run)
    tr.log_rest()
    cells = sorted(d.name for d in (run / "cells").iterdir())
    assert sorted(d.name for d in (run / "tensorboard").iterdir()) == cells
    for cell in cells:
        acc = ea.EventAccumulator(str(run / "tensorboard" / cell))
        acc.Reload()
        want = expected(run, cell)
        for name in ("seconds_per_update", "bytes_sent", "heldout/pass_at_1"):
            got = {e.step: e.value for e in acc.Scalars(name)}
            assert got == pytest.approx({s: m[name] for s, m in want.items() if name in m}, rel=1e-6)


def test_mlflow_file_store_reads_back(run):
    mlflow = need("mlflow")
    tracking.Tracker("mlflow", run).log_rest()
    client = mlflow.MlflowClient(tracking_uri=(run / "mlruns").resolve().as_uri())
    exp = client.get_experiment_by_name(run.name)
    found = {r.info.run_name: r for r in client.search_runs([exp.experiment_id])}
    assert sorted(found) == sorted(d.name for d in (run / "cells").iterdir())
    for cell, r in found.items():
        want = expected(run, cell)
        hist = {m.step: m.value for m in client.get_metric_history(r.info.run_id, "seconds_per_update")}
        assert hist == pytest.approx({s: m["seconds_per_update"] for s, m in want.items() if "seconds_per_update" in m})
        assert r.data.params["cell"] == cell


def wandb_history(path: Path) -> list[dict]:
    """The history records of a W&B offline run file (.wandb: LevelDB-log framing of protobuf Records:
    32 KiB blocks, 7-byte headers crc32/length/type, type 1 full, 2/3/4 first/middle/last)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, buf, out = path.read_bytes(), 7, b"", []
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            break
        buf, pos = buf + data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(buf)
            buf = b""
            if rec.WhichOneof("record_type") == "history":
                out.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item})
    return out


def test_wandb_offline_run_reads_back(run, monkeypatch):
    need("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    tracking.Tracker("wandb", run).log_rest()
    files = sorted((run / "wandb").glob("offline-run-*/*.wandb"))
    assert len(files) == len(list((run / "cells").iterdir()))
    steps = {}
    for f in files:
        for h in wandb_history(f):
            steps.setdefault(f, {})[h["_step"]] = h
    got = sorted(h["seconds_per_update"] for hs in steps.values() for h in hs.values() if "seconds_per_update" in h)
    want = sorted(m["seconds_per_update"] for d in (run / "cells").iterdir()
                  for m in expected(run, d.name).values() if "seconds_per_update" in m)
    assert got == pytest.approx(want)


def test_unknown_tracker_is_one_line_and_exit_2(tmp_path):
    res = CliRunner().invoke(app, ["run", "--no-emulation", "--log", "neptune", "--run-id", "x", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "--log: unknown tracker 'neptune' (valid: tensorboard, wandb, mlflow)" in res.output
    assert not (tmp_path / "x").exists()                     # nothing built, nothing written


def test_harness_run_hands_each_cell_over_when_the_next_starts(run):
    """harness/run/commands.CellLogger: the progress callback sees cell A, then B: A is logged then,
    B when the run ends (finish)."""
    need("tensorboardX")
    from types import SimpleNamespace

    from harness.run.commands import CellLogger

    cells = sorted(d.name for d in (run / "cells").iterdir())
    logger = CellLogger("tensorboard", run)
    for name in (cells[0], cells[0], cells[1]):
        logger(SimpleNamespace(name=name), run / "cells" / name)
    assert logger.tracker.logged == {cells[0]}
    logger.finish()
    assert logger.tracker.logged == set(cells)
    assert all((run / "tensorboard" / c).is_dir() for c in cells)
