"""The codecs' memory-floor paths give the same answers as the plain ones: zero-copy
views where the layout allows, a kept decode buffer, top-k from a sampled threshold."""
import pytest
import torch

from trainers.compress import get_compressor
from trainers.compress.kernels import contiguous_span, flatten, shape_groups, stacked, zeros_for
from trainers.compress.topk import SAMPLE, top_indices


def _layered(layers: int = 3, width: int = 24) -> dict[str, torch.Tensor]:
    """A model-like layout (two projections per layer, A and B each) as views of one flat buffer."""
    shapes = []
    for i in range(layers):
        shapes += [(f"layers.{i}.q.A", (4, width)), (f"layers.{i}.q.B", (width, 4)),
                   (f"layers.{i}.k.A", (4, width)), (f"layers.{i}.k.B", (16, 4))]
    out = zeros_for(shapes)
    g = torch.Generator().manual_seed(0)
    for t in out.values():
        t.copy_(torch.randn(t.shape, generator=g))
    return out


def test_flatten_is_a_view_of_a_back_to_back_buffer_and_a_copy_otherwise():
    m = _layered()
    flat = flatten(m)
    assert flat.data_ptr() == next(iter(m.values())).data_ptr()
    assert torch.equal(flat, torch.cat([t.reshape(-1) for t in m.values()]))
    loose = {k: v.clone() for k, v in m.items()}
    assert torch.equal(flatten(loose), flat) and contiguous_span(list(loose.values())) is None


def test_stacked_views_one_projections_factors_across_layers_without_a_copy():
    m = _layered()
    groups = shape_groups(m)
    assert [len(g) for g in groups] == [3, 3, 3, 3]          # q.A and k.A share a shape, not a group
    for names in groups:
        s = stacked([m[n] for n in names])
        assert torch.equal(s, torch.stack([m[n] for n in names]))
        assert s.data_ptr() == m[names[0]].data_ptr()         # a view
    mixed = stacked([m["layers.0.q.A"], m["layers.0.k.A"], m["layers.2.q.A"]])   # not equally spaced
    assert torch.equal(mixed, torch.stack([m["layers.0.q.A"], m["layers.0.k.A"], m["layers.2.q.A"]]))
    assert mixed.data_ptr() != m["layers.0.q.A"].data_ptr()


@pytest.mark.parametrize("n,k", [(8 * SAMPLE + 13, 500), (8 * SAMPLE, 5000), (1000, 17)])
def test_top_indices_from_a_sampled_threshold_are_the_exact_top_k(n, k):
    flat = torch.randn(n, generator=torch.Generator().manual_seed(n)) * torch.linspace(0.1, 3, n)
    got = top_indices(flat, k)
    want = torch.sort(torch.topk(flat.abs(), k).indices).values
    assert got.dtype == torch.int32 and torch.equal(got.long(), want)


@pytest.mark.parametrize("name", ["spar", "powersgd", "topk", "int8", "identity"])
def test_a_kept_decode_buffer_gives_the_same_bits_and_is_reused(name):
    m = _layered()
    opts = {} if name == "identity" else {"budget": "20%"}
    enc, dec = get_compressor(name, **opts), get_compressor(name, **opts)
    first, second = enc.encode(m), enc.encode({k: v * 0.5 for k, v in m.items()})
    a = dec.decode(bytearray(first), reuse=True)
    a_bits = {k: v.clone() for k, v in a.items()}
    b = dec.decode(bytearray(second), reuse=True)
    for payload, got in ((first, a_bits), (second, b)):
        fresh = get_compressor(name, **opts).decode(payload)
        assert all(torch.equal(fresh[k], got[k]) for k in fresh)
    if name != "identity":                                    # identity fp32 aliases the receive buffer
        assert next(iter(a.values())).data_ptr() == next(iter(b.values())).data_ptr()


@pytest.mark.parametrize("name, budget", [("topk", "5%"), ("int8", "5%"), ("int8", "100%"), ("identity", None),
                                          ("identity", "bf16")])
def test_error_feedback_keeps_the_bits_of_residual_minus_decode(name, budget):
    """The sparse residual updates (topk, int8 under a budget: only the sent elements) and identity's
    fp32 shortcut leave E = M - decode(payload) with the bits of the dense subtraction, update after update."""
    m = _layered(4, 6 * SAMPLE // 64)       # > 4 * SAMPLE elements: topk takes its sampled path
    opts = {"dtype": budget} if name == "identity" and budget else ({"budget": budget} if budget else {})
    enc = get_compressor(name, **opts)
    residual = {k: torch.zeros_like(v) for k, v in m.items()}
    for step in range(3):
        grads = {k: v * (1 + step) for k, v in m.items()}
        decoded = get_compressor(name, **opts).decode(enc.encode(grads))
        residual = {k: (residual[k] + grads[k]).sub_(decoded[k]) for k in m}
        got = enc.residual()
        assert all(torch.equal(got[k], residual[k]) for k in m), f"update {step}"
