"""Malformed payloads: every case is a clear PayloadError naming the compressor, never a crash."""
from __future__ import annotations

import json
import struct
import zlib

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.trainers.compress.common import options, warm_gradients
from trainers.protocol import dtypes
from trainers.compress import PayloadError, available, get_compressor
from trainers.compress.container import MAGIC, pack, Segment, unpack

NAMES = available()


@pytest.fixture(scope="module")
def payloads():
    g = warm_gradients(2)[0]
    return {name: get_compressor(name, **options(name)).encode(g) for name in NAMES}


def decoder(name):
    return get_compressor(name, **options(name))


def repack(name: str, payload: bytes, *, tensors=None, segments=None, meta=None) -> bytes:
    """Re-serialise a valid payload with one part replaced: a well-formed container that lies."""
    p = unpack(name, payload, 1 << 28)
    segs = segments(p.segments) if segments else p.segments
    seg_list = [Segment(k, dtypes.NAMES[v.dtype], v) for k, v in segs.items()]
    return pack(name, tensors if tensors is not None else p.tensors, seg_list,
                meta if meta is not None else p.meta)


@pytest.mark.parametrize("name", NAMES)
def test_every_truncation_is_an_error(name, payloads):
    payload = payloads[name]
    cuts = sorted({0, 1, 3, 5, 6, 9, 10, 20, len(payload) // 2, len(payload) - 1} & set(range(len(payload))))
    for cut in cuts:
        with pytest.raises(PayloadError, match=f"^{name}: "):
            decoder(name).decode(payload[:cut])


@pytest.mark.parametrize("name", NAMES)
def test_wrong_magic_version_and_sender(name, payloads):
    payload = payloads[name]
    with pytest.raises(PayloadError, match="bad magic"):
        decoder(name).decode(b"XXXX" + payload[4:])
    with pytest.raises(PayloadError, match="format version 9"):
        decoder(name).decode(payload[:4] + bytes([9]) + payload[5:])
    other = next(n for n in NAMES if n != name)
    with pytest.raises(PayloadError, match=f"written by compressor '{name}'"):
        decoder(other).decode(payload)


@pytest.mark.parametrize("name", NAMES)
def test_huge_table_length_is_refused_without_allocating(name, payloads):
    payload = payloads[name]
    pos = 6 + len(name)
    forged = payload[:pos] + struct.pack("<I", 0xFFFFFFF0) + payload[pos + 4:]
    with pytest.raises(PayloadError, match="table length"):
        decoder(name).decode(forged)


@pytest.mark.parametrize("name", NAMES)
def test_trailing_bytes_are_refused(name, payloads):
    with pytest.raises(PayloadError, match="trailing bytes"):
        decoder(name).decode(payloads[name] + b"\0\0\0\0")


@pytest.mark.parametrize("name", NAMES)
def test_shape_table_that_does_not_match_the_body(name, payloads):
    p = unpack(name, payloads[name], 1 << 28)
    shrunk = [(n, (shape[0] - 1, shape[1])) for n, shape in p.tensors]  # every factor: one may carry no data
    grown = [(n, (shape[0] + 1, shape[1])) for n, shape in p.tensors]
    forgeries = [shrunk, p.tensors[1:], grown]
    if name in ("topk", "int8"):
        # Global indices (topk's elements, budgeted int8's blocks) stay valid in any table at least
        # as large as the highest index: only a table too small for them is detectable.
        forgeries = [[(p.tensors[0][0], (1, 1))]]
    for tensors in forgeries:
        with pytest.raises(PayloadError, match=f"^{name}: "):
            decoder(name).decode(repack(name, payloads[name], tensors=tensors))


@pytest.mark.parametrize("name", NAMES)
def test_nan_and_inf_in_float_segments(name, payloads):
    p = unpack(name, payloads[name], 1 << 28)
    float_keys = [k for k, v in p.segments.items() if v.is_floating_point() and v.numel()]
    assert float_keys, f"{name} has no float segment to corrupt"
    for bad in (float("nan"), float("inf")):
        def poison(segs, key=float_keys[0], bad=bad):
            segs = dict(segs)
            t = segs[key].clone()
            t[0] = bad
            segs[key] = t
            return segs
        with pytest.raises(PayloadError, match="NaN or inf"):
            decoder(name).decode(repack(name, payloads[name], segments=poison))


@pytest.mark.parametrize("name", NAMES)
def test_declared_size_beyond_the_cap_is_refused(name, payloads):
    p = unpack(name, payloads[name], 1 << 28)
    huge = [(p.tensors[0][0], (1 << 20, 1 << 20))] + p.tensors[1:]
    with pytest.raises(PayloadError, match="max_decoded_elements"):
        decoder(name).decode(repack(name, payloads[name], tensors=huge))


@pytest.mark.parametrize("name", NAMES)
def test_zip_bomb_table_is_refused(name):
    bomb = zlib.compress(b"[" + b" " * (64 << 20) + b"]", 9)  # 64 MiB of JSON from a few KiB
    payload = MAGIC + bytes([1, len(name)]) + name.encode() + struct.pack("<I", len(bomb)) + bomb
    with pytest.raises(PayloadError, match="inflates beyond"):
        decoder(name).decode(payload)


@pytest.mark.parametrize("name", NAMES)
def test_table_of_the_wrong_types(name):
    for table in ([], {"tensors": "x", "segments": [], "meta": {}},
                  {"tensors": [["a", [-1, 2]]], "segments": [], "meta": {}},
                  {"tensors": [["a", [2, 2]], ["a", [2, 2]]], "segments": [], "meta": {}},
                  {"tensors": [["a", [2, 2]]], "segments": [["x", "complex", 4]], "meta": {}},
                  {"tensors": [["a", [2, 2]]], "segments": [], "meta": []}):
        raw = zlib.compress(json.dumps(table).encode())
        payload = MAGIC + bytes([1, len(name)]) + name.encode() + struct.pack("<I", len(raw)) + raw
        with pytest.raises(PayloadError, match=f"^{name}: "):
            decoder(name).decode(payload)


def test_inconsistent_contents_name_the_problem(payloads):
    # A topk payload whose indices run backwards, an int8 payload with a negative scale.
    def reverse(segs):
        return {**segs, "index": segs["index"].flip(0), "values": segs["values"].flip(0)}
    with pytest.raises(PayloadError, match="strictly increasing"):
        decoder("topk").decode(repack("topk", payloads["topk"], segments=reverse))

    def negate(segs):
        return {**segs, "scales": -segs["scales"] - 1}
    with pytest.raises(PayloadError, match="negative block scale"):
        decoder("int8").decode(repack("int8", payloads["int8"], segments=negate))

    def overcount(segs):
        c = segs["counts"].clone()
        c[0] = 30000
        return {**segs, "counts": c}
    with pytest.raises(PayloadError, match="bad count 30000"):
        decoder("spar").decode(repack("spar", payloads["spar"], segments=overcount))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=400), name=st.sampled_from(NAMES), flip=st.integers(min_value=0))
def test_fuzzed_payloads_only_ever_raise_payload_error(data, name, flip, payloads):
    # Random bytes, and a valid payload with one byte flipped: decode returns or raises PayloadError.
    valid = bytearray(payloads[name])
    valid[flip % len(valid)] ^= 0xFF
    for candidate in (data, MAGIC + bytes([1, len(name)]) + name.encode() + data, bytes(valid)):
        try:
            out = decoder(name).decode(candidate)
        except PayloadError:
            continue
        assert all(torch.isfinite(t).all() for t in out.values())
