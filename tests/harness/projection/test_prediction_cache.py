"""The prediction from cached adapter shapes (harness run's in-process path) equals the one that sizes the
adapter on the meta device, and a cache entry that is missing or broken sends it back there."""
import json
import sys

from harness.projection import prediction
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
