"""Lossless delta sync (trainers/compress/delta.py): what the workers end up holding, and bad payloads."""
import struct

import pytest
import torch

from trainers.compress.container import PayloadError
from trainers.compress.delta import CODECS, HEADER, DeltaSync, is_delta
from trainers.protocol import wire


def adapter(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"a": torch.randn(64, 8, generator=g), "b": torch.randn(8, 96, generator=g), "c": torch.zeros(5, 3)}


def step(tensors, scale, seed):
    """An update that moves some elements (Adam moves all; at lr 1e-3 most stay bf16-identical)."""
    g = torch.Generator().manual_seed(seed)
    return {n: t + scale * torch.randn(t.shape, generator=g) for n, t in tensors.items()}


def bits(t):
    return t.contiguous().view(torch.int16 if t.element_size() == 2 else torch.int32)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("dtype, torch_dtype", [("bf16", torch.bfloat16), ("fp32", torch.float32)])
def test_workers_hold_the_rounded_adapter_bit_for_bit(codec, dtype, torch_dtype):
    start = adapter()
    learner, worker = DeltaSync(start, dtype, codec), DeltaSync(start, dtype, codec)
    current = start
    for v in range(1, 6):
        current = step(current, 1e-3, v)
        payload, changed = learner.encode(current, v)
        assert is_delta(payload)
        held, version = worker.apply(payload)
        assert version == v and 0 < changed <= learner.reference.numel()
        for name, t in current.items():  # exactly what full-bf16 (full) would have shipped
            assert torch.equal(bits(held[name]), bits(t.to(torch_dtype)))


def test_density_counts_changed_bit_patterns_only():
    start = adapter()
    sync = DeltaSync(start, "bf16", "zstd")
    same, changed = sync.encode(start, 1)
    assert changed == 0 and len(same) < HEADER.size + 32  # nothing moved: a header and an empty body
    # A change below half a bf16 ulp is not shipped (the learner's fp32 keeps it); a larger one is.
    nudged = {n: t.clone() for n, t in start.items()}
    nudged["a"][0, 0] += abs(float(nudged["a"][0, 0])) * 2**-12
    nudged["b"][0, 0] += abs(float(nudged["b"][0, 0])) * 2**-4
    _, changed = sync.encode(nudged, 2)
    assert changed == 1


def test_zstd_and_lz4_payloads_are_smaller_than_raw_pairs_and_than_the_whole_adapter():
    start = adapter()
    moved = step(start, 1e-3, 1)
    sizes = {}
    for codec in CODECS:
        payload, changed = DeltaSync(start, "bf16", codec).encode(moved, 1)
        sizes[codec] = len(payload)
        assert len(payload) < HEADER.size + 6 * changed
    whole = len(wire.pack_tensors({n: t.to(torch.bfloat16) for n, t in moved.items()}, meta={"version": 1}))
    assert max(sizes.values()) < whole


def test_a_keyframe_resets_a_late_worker():
    start = adapter()
    learner, late = DeltaSync(start), DeltaSync(start)
    a1 = step(start, 1e-2, 1)
    learner.encode(a1, 1)
    late.reset(learner.tensors(), 1)  # what the learner's replay log holds for version 1
    a2 = step(a1, 1e-2, 2)
    held, _ = late.apply(learner.encode(a2, 2)[0])
    assert all(torch.equal(held[n], a2[n].to(torch.bfloat16)) for n in a2)


def corrupt(payload, **fields):
    names = ["magic", "format", "codec", "dtype", "base", "version", "total", "changed", "raw"]
    values = dict(zip(names, HEADER.unpack_from(payload)))
    values.update(fields)
    return HEADER.pack(*[values[n] for n in names]) + payload[HEADER.size:]


@pytest.mark.parametrize("make, message", [
    (lambda p: p[:10], "no header"),
    (lambda p: corrupt(p, magic=b"XXXX"), "magic"),
    (lambda p: corrupt(p, base=1, version=2), "this replica holds 0"),
    (lambda p: corrupt(p, dtype=2), "this replica holds bf16"),
    (lambda p: corrupt(p, total=7), "this adapter has"),
    (lambda p: corrupt(p, raw=10**9), "raw bytes"),
    (lambda p: p[:-3], "decompress"),
    (lambda p: p + b"\0" * 40, "decompress"),
])
def test_bad_payloads_are_refused_and_leave_the_held_adapter(make, message):
    start = adapter()
    learner, worker = DeltaSync(start), DeltaSync(start)
    payload, _ = learner.encode(step(start, 1e-2, 1), 1)
    before = worker.reference.clone()
    with pytest.raises(PayloadError, match=message):
        worker.apply(make(payload))
    assert torch.equal(bits(worker.reference), bits(before)) and worker.version == 0


def forged(total, index, values):
    """A well-formed payload carrying the given (index, value) pairs."""
    from trainers.compress.delta import MAGIC, compress
    gaps = torch.diff(torch.tensor(index), prepend=torch.zeros(1, dtype=torch.int64)).to(torch.int32)
    raw = gaps.numpy().tobytes() + torch.tensor(values, dtype=torch.bfloat16).view(torch.int16).numpy().tobytes()
    return HEADER.pack(MAGIC, 1, 0, 0, 0, 1, total, len(index), len(raw)) + compress("zstd", raw)


@pytest.mark.parametrize("index, values, message", [
    ([3, 3], [1.0, 2.0], "strictly increasing"),
    ([5, 5000], [1.0, 2.0], "outside"),
    ([1], [float("inf")], "non-finite"),
])
def test_forged_indices_and_values_are_refused(index, values, message):
    start = adapter()
    worker = DeltaSync(start)
    with pytest.raises(PayloadError, match=message):
        worker.apply(forged(worker.reference.numel(), index, values))
    assert worker.version == 0


def test_a_keyframe_is_not_read_as_a_delta():
    table = wire.pack_tensors({"a": torch.zeros(3)}, meta={"version": 1})
    assert not is_delta(table) and struct.unpack_from("!I", table)[0] < 2**24


@pytest.mark.parametrize("kwargs, message", [({"codec": "gzip"}, "unknown codec"), ({"dtype": "int8"}, "unknown dtype")])
def test_unknown_options_fail_with_the_valid_ones(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DeltaSync(adapter(), **kwargs)
