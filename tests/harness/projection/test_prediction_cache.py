"""The prediction from cached adapter shapes (harness run's in-process path) equals the one that sizes the
adapter on the meta device, and a cache entry that is missing or broken sends it back there."""
import json
import sys

from harness.projection import prediction
from tests.harness.projection.test_dpbytes import FIXTURE as DP_RUN
from tests.harness.projection.test_prediction import HELDOUT


def test_cached_shapes_give_the_same_prediction_and_keep_torch_out(tmp_path):
    cfg = json.loads((HELDOUT / "config.json").read_text())
    model, rank = cfg["model"], int(cfg["lora_rank"])
    assert prediction.cached_shapes(tmp_path, model, rank) is None
    assert not prediction.in_process(HELDOUT, tmp_path)
    sized = prediction.build(HELDOUT, tmp_path)               # sizes the adapter (torch) and caches its shapes
    shapes = prediction.cached_shapes(tmp_path, model, rank)
    assert shapes and all(len(s) == 2 for _, s in shapes)
    assert prediction.in_process(HELDOUT, tmp_path)
    assert prediction.build(HELDOUT, tmp_path) == sized


def test_a_broken_cache_entry_is_recomputed(tmp_path):
    cfg = json.loads((HELDOUT / "config.json").read_text())
    model, rank = cfg["model"], int(cfg["lora_rank"])
    path = prediction._shapes_file(tmp_path, model, rank)
    path.parent.mkdir(parents=True)
    path.write_text('{"shapes": [["a", "not a shape"]]}')
    assert prediction.cached_shapes(tmp_path, model, rank) is None and not prediction.in_process(HELDOUT, tmp_path)
    prediction.build(HELDOUT, tmp_path)
    assert prediction.cached_shapes(tmp_path, model, rank)


def test_the_in_process_prediction_imports_no_torch(tmp_path):
    """In a fresh process that only reads cached shapes, torch stays unimported (harness run's process)."""
    import subprocess

    prediction.build(HELDOUT, tmp_path)
    code = ("import sys; from harness.projection import prediction; from pathlib import Path; "
            f"assert prediction.in_process(Path({str(HELDOUT)!r}), Path({str(tmp_path)!r})); "
            f"prediction.build(Path({str(HELDOUT)!r}), Path({str(tmp_path)!r})); print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"


def test_a_data_parallel_run_is_predicted_from_cached_parameter_shapes_too(tmp_path):
    """A data-parallel run's byte rules read every parameter of the model (--dp-train full; a run older than
    the flag trained the full model): cached under rank None, its prediction then needs no torch either."""
    import subprocess

    cfg = json.loads((DP_RUN / "config.json").read_text())
    methods = [v["method"] for v in cfg["variants"]]
    assert prediction.needed_ranks(methods, int(cfg["lora_rank"]), cfg.get("dp_train")) == [None]
    assert not prediction.in_process(DP_RUN, tmp_path)
    sized = prediction.build(DP_RUN, tmp_path)
    shapes = prediction.cached_shapes(tmp_path, cfg["model"], None)
    assert shapes and prediction.in_process(DP_RUN, tmp_path)
    assert prediction.cached_shapes(tmp_path, cfg["model"], int(cfg["lora_rank"])) is None   # another key
    code = ("import sys; from harness.projection import prediction; from pathlib import Path; "
            f"doc = prediction.build(Path({str(DP_RUN)!r}), Path({str(tmp_path)!r})); "
            "import json; print(json.dumps(doc['dataparallel'])); print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    doc, torch_imported = done.stdout.strip().splitlines()[-2:]
    assert json.loads(doc) == sized["dataparallel"] and torch_imported == "False"
