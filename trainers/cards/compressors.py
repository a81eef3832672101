"""The in-tree compressors' cards (trainers/compress/*.py implement them): options, budget, byte rule,
plot style. One `Card(...)` per compressor is its whole registration; the byte rules re-derive each
encoder's layout from shapes alone, and tests/harness/projection/test_costmodel.py holds them equal to
real payloads."""
from __future__ import annotations

from typing import Any, Mapping

from trainers.cards import Card, Option, Tensors
from trainers.cards.sizes import DTYPE_BYTES, FLOAT_DTYPES, container_bytes, container_header_bytes, n_params

TOPK_INDEX_BYTES = 4                      # trainers/compress/topk.py _INDEX_BYTES
SPAR_SIGMA_BYTES = 4                      # trainers/compress/spar.py _SIGMA_BYTES


def _dtype(default: str) -> Option:
    return Option(default, "payload value dtype", choices=FLOAT_DTYPES)


def _seed() -> Option:
    return Option(0, "seed of the random projections", type=int, lo=0, hi=2**31 - 1)


def _warm_start() -> Option:
    return Option(True, "start each power iteration from the previous update's subspace", type=bool)


def identity_bytes(t: Tensors, opts: Mapping[str, Any], cap: int | None) -> int:
    return container_bytes("identity", t, [("values", opts["dtype"], n_params(t))])


def int8_bytes(t: Tensors, opts: Mapping[str, Any], cap: int | None) -> int:
    """trainers/compress/int8.py `plan`: dense if it fits, else the top blocks, halving the block size
    until at least 16 blocks fit."""
    n, bs = n_params(t), int(opts["block_size"])
    dense = container_bytes("int8", t, [("scales", "fp32", -(-n // bs)), ("q", "int8", n)], {"block_size": bs})
    if dense <= cap:
        return dense
    while True:
        nb = -(-n // bs)
        head = container_header_bytes("int8", t, [("blocks", "int32", nb), ("scales", "fp32", nb),
                                                  ("q", "int8", nb * bs)], {"block_size": bs})
        k = (cap - head) // (bs + 8)
        if k >= 16 or bs == 1:
            break
        bs //= 2

    def sparse(k: int) -> int:
        return container_bytes("int8", t, [("blocks", "int32", k), ("scales", "fp32", k), ("q", "int8", k * bs)],
                               {"block_size": bs})

    k = max(0, min(k, nb))
    while k > 1 and sparse(k) > cap:   # zlib: the header bound can be a byte short
        k -= 1
    return sparse(k)


def powersgd_bytes(t: Tensors, opts: Mapping[str, Any], cap: int | None) -> int:
    if opts["rank"] is None:   # per-factor ranks picked by energy to fit the budget: the budget, to one direction
        return cap
    ranks = [min(int(opts["rank"]), *s) for _, s in t]
    p = sum(k * s[0] for k, (_, s) in zip(ranks, t))
    q = sum(k * s[1] for k, (_, s) in zip(ranks, t))
    return container_bytes("powersgd", t, [("p", opts["dtype"], p), ("q", opts["dtype"], q)], {"ranks": ranks})


def topk_bytes(t: Tensors, opts: Mapping[str, Any], cap: int | None) -> int:
    n, dtype = n_params(t), opts["dtype"]
    head = container_header_bytes("topk", t, [("index", "int32", n), ("values", dtype, n)])
    k = min(n, max(0, (cap - head) // (DTYPE_BYTES[dtype] + TOPK_INDEX_BYTES)))
    while k > 1 and container_bytes("topk", t, [("index", "int32", k), ("values", dtype, k)]) > cap:
        k -= 1                             # topk.py `_k`: zlib's header bound can be a byte short
    return container_bytes("topk", t, [("index", "int32", k), ("values", dtype, k)])


def spar_bytes(t: Tensors, opts: Mapping[str, Any], cap: int | None) -> int:
    """Its budget (the greedy selection fills it to within one triplet), or every singular triplet of
    every factor when the budget buys them all."""
    dtype, ks = opts["dtype"], [min(s) for _, s in t]
    everything = container_bytes("spar", t, [
        ("counts", "int16", len(t)), ("sigma", "fp32", sum(ks)),
        ("left", dtype, sum(k * s[0] for k, (_, s) in zip(ks, t))),
        ("right", dtype, sum(k * s[1] for k, (_, s) in zip(ks, t)))])
    return min(cap, everything)


IDENTITY = Card("compressor", "identity", "trainers.compress.identity:IdentityCompressor",
                {"dtype": _dtype("fp32")}, payload_bytes=identity_bytes, style=("#CC79A7", "X"))
INT8 = Card("compressor", "int8", "trainers.compress.int8:Int8Compressor",
            {"block_size": Option(256, "values per absmax scale", type=int, unit="values", lo=1, hi=1 << 20)},
            budgeted=True, payload_bytes=int8_bytes, style=("#D55E00", "P"))
POWERSGD = Card("compressor", "powersgd", "trainers.compress.powersgd:PowerSGDCompressor", {
    "rank": Option(None, "rank of every factor; unset: per-factor ranks that fit --budget", type=int, lo=1, hi=4096,
                   optional=True),
    "dtype": _dtype("fp16"), "warm_start": _warm_start(), "seed": _seed()},
    budgeted=True, payload_bytes=powersgd_bytes, style=("#E69F00", "^"))
# svd "gram" (exact spectra): at equal bytes the sketch of 8 lost to PowerSGD on real gradients.
SPAR = Card("compressor", "spar", "trainers.compress.spar:SparCompressor", {
    "dtype": _dtype("fp16"),
    "select": Option("energy", "how triplets are ranked for the budget", choices=("energy", "energy_per_byte")),
    "svd": Option("gram", "sketched or exact (Gram) spectra", choices=("sketch", "gram")),
    "sketch": Option(8, "directions estimated per factor by the range finder", type=int, lo=1, hi=4096),
    "warm_start": _warm_start(), "seed": _seed()},
    budgeted=True, payload_bytes=spar_bytes, style=("#0072B2", "s"))
TOPK = Card("compressor", "topk", "trainers.compress.topk:TopKCompressor", {"dtype": _dtype("fp16")},
            budgeted=True, payload_bytes=topk_bytes, style=("#009E73", "v"))
