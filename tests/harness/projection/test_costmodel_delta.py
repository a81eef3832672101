"""The cost model's byte rule for `delta` (harness/projection/costmodel.py) against the real encoder."""
import pytest
import torch

from harness.projection import costmodel as cm, inputs
from trainers.compress.delta import HEADER, DeltaSync


def test_delta_rule_is_the_encoder_given_its_measured_density_and_codec_ratio():
    shapes = [("a.lora_A.weight", (8, 64)), ("a.lora_B.weight", (96, 8))]
    g = torch.Generator().manual_seed(0)
    start = {n: torch.randn(s, generator=g) for n, s in shapes}
    moved = {n: t + 1e-3 * torch.randn(t.shape, generator=g) for n, t in start.items()}
    payload, changed = DeltaSync(start).encode(moved, 1)
    total = sum(t.numel() for t in start.values())
    raw = changed * (4 + 2)
    opts = {"delta_density": changed / total, "delta_compression": (len(payload) - HEADER.size) / raw}
    adapter = cm.Adapter.from_shapes(shapes, rank=8)
    assert cm.DELTA_HEADER_BYTES == HEADER.size
    assert cm.payload_bytes("delta", adapter, options=opts) == pytest.approx(len(payload), abs=1)
    # defaults: every element changed, no codec gain (an upper bound for a codec that compresses at all)
    assert cm.payload_bytes("delta", adapter) == HEADER.size + total * 6


@pytest.mark.parametrize("value", ["0", "1.5", "x"])
def test_model_options_out_of_range_fail_with_one_line(value):
    with pytest.raises(ValueError, match="delta_density=.*fraction in \\(0, 1\\]"):
        inputs.parse_options([f"delta_density={value}"])


def test_project_from_a_delta_run_uses_the_density_and_compression_it_measured(tmp_path):
    """`harness project --from RUN` took delta at its worst case (every element, no zstd): 55 MB per worker
    where full-bf16's is 18.5 MB, while the run itself measured delta at ~0.8x full-bf16's bytes."""
    import subprocess
    import sys
    from pathlib import Path

    from harness.results import tables

    root = Path(__file__).resolve().parents[3]
    run = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--no-emulation", "--model", "micro",
                          "--method", "delta", "--updates", "3", "--seeds", "1", "--workers", "1",
                          "--out", str(tmp_path), "--run-id", "d", "--quiet"],
                         cwd=root, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    ups = tables.read(tmp_path / "d").updates
    d = ups[ups["variant"] == "delta"]
    got = inputs.measured_delta(str(tmp_path / "d"))
    assert got["delta_density"] == pytest.approx(d["delta_density"].median())
    raw = d["delta_changed"] * (cm.DELTA_INDEX_BYTES + 2)
    assert got["delta_compression"] == pytest.approx(min(1.0, ((d["payload_bytes_down"] - HEADER.size) / raw).median()))
    assert inputs.measured_delta(str(root / "tests" / "fixtures" / "runs" / "run-spar-20mbit")) == {}  # no delta there
    import json

    from harness.projection import prediction

    cfg = json.loads((tmp_path / "d" / "config.json").read_text())
    (tmp_path / "d" / "config.json").write_text(json.dumps({**cfg, "emulation": True}))   # its profile's link
    pred = prediction.build(tmp_path / "d")["variants"]           # the report's model section
    assert 0 < pred["delta"]["transfer_down_s"] < pred["full-bf16"]["transfer_down_s"]
    proj = subprocess.run([sys.executable, "-m", "harness.cli", "project", "--from", str(tmp_path / "d"), "--json"],
                          cwd=root, capture_output=True, text=True, timeout=300)
    assert proj.returncode == 0, proj.stderr[-3000:]
    rows = {m["variant"]: m for m in json.loads(proj.stdout)["methods"] if m["pipeline"] == 0}
    assert "delta's density" in " ".join(json.loads(proj.stdout)["inputs"]["notes"])
    assert rows["delta"]["bytes_down_per_worker"] < rows["full-bf16"]["bytes_down_per_worker"]   # as the run measured
