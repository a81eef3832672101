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
