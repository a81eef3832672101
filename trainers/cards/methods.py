"""The HiLo methods that ship the adapter itself (trainers/hilo/methods.py builds them): full, full-bf16,
delta and the rank-R family. Each card gives the method's name (rank-R: its grammar), the settings the
name fixes (`implies`: the shipped dtype, the training rank), its options (delta's), its byte rule and its
plot style. The compressors, whose methods are HiLo replay, are on their own cards (compressors.py)."""
from __future__ import annotations

import math
import re
from typing import Any, Mapping

from trainers.cards import Card, Option, Tensors
from trainers.cards.sizes import DTYPE_BYTES, FLOAT_DTYPES, tensor_table_bytes

# A version number in the full methods' tensor-table meta ({"version": v}): its digits count, so one
# typical width stands in for every update.
TYPICAL_VERSION = 100
DELTA_HEADER_BYTES = 48        # trainers/compress/delta.py HEADER
DELTA_INDEX_BYTES = 4          # trainers/compress/delta.py GAP: one uint32 gap per changed element
DELTA_CODECS = ("zstd", "lz4")  # trainers/compress/delta.py CODECS
RANK_NAME = re.compile(r"^rank-?([1-9][0-9]*)$")   # rank-R (or rankR): train at LoRA rank R, ship like full-bf16


def adapter_bytes(t: Tensors, opts: Mapping[str, Any], cap: int | None) -> int:
    """The whole adapter in its shipped dtype: a wire tensor table (trainers/protocol/wire.py pack_tensors).
    rank-R's layout is the adapter at rank R (the cost model reshapes it: `lora_rank` is implied)."""
    return tensor_table_bytes(t, opts["ship_dtype"], {"version": TYPICAL_VERSION})


def delta_bytes(t: Tensors, opts: Mapping[str, Any], cap: int | None) -> int:
    """Header + codec(uint32 gaps + values) of the changed elements: `density` (the changed fraction per
    update) and `compression` (the codec's compressed / raw ratio) are the cost model's options
    (--opt delta_density=..., delta_compression=...), measured by a run."""
    changed = opts["density"] * sum(math.prod(s) for _, s in t)
    raw = changed * (DELTA_INDEX_BYTES + DTYPE_BYTES[opts["dtype"]])
    return DELTA_HEADER_BYTES + math.ceil(raw * opts["compression"])


def rank_names(name: str) -> dict[str, Any] | None:
    m = RANK_NAME.match(name)
    if not m:
        return None
    digits = m.group(1)   # Python refuses int() of thousands of digits; 19 or more are beyond any rank anyway
    return {"lora_rank": int(digits) if len(digits) <= 18 else 10 ** 18}


FULL = Card("method", "full", "trainers.hilo.methods:full_sync", implies={"ship_dtype": "fp32"},
            payload_bytes=adapter_bytes, style=("#000000", "o"))
FULL_BF16 = Card("method", "full-bf16", "trainers.hilo.methods:full_sync", implies={"ship_dtype": "bf16"},
                 payload_bytes=adapter_bytes, style=("#999999", "D"))
# full protocol, the changed elements only (trainers/compress/delta.py); a darker grey than full-bf16
# (a CRC colour clashed)
DELTA = Card("method", "delta", "trainers.hilo.methods:delta_sync", {
    "codec": Option("zstd", "codec of the changed elements' indices + values (zstd: fewer bytes; lz4: faster)",
                    choices=DELTA_CODECS),
    "dtype": Option("bf16", "dtype of the shipped adapter whose changed elements are sent (bf16: what full-bf16 "
                    "ships)", choices=FLOAT_DTYPES)},
    payload_bytes=delta_bytes, style=("#555555", "*"), rival=True)
# The lower-rank baseline: in the dtype the full-sync baseline and RL frameworks ship.
RANK = Card("method", "rank-R", "trainers.hilo.methods:full_sync", implies={"ship_dtype": "bf16"},
            names=rank_names, payload_bytes=adapter_bytes, styles={"rank-1": ("#56B4E9", "<")},
            rival=True)
