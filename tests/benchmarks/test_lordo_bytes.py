"""LoRDO's bytes vs K, a short version of `python -m tests.benchmarks.lordo_bytes` (the full one and
its figures: docs/ALGORITHMS.md section 4, "LoRDO's byte reduction, measured"). ~5 s here.
Run by hand: `pytest -m benchmark -s tests/benchmarks/test_lordo_bytes.py`."""
import pytest

from tests.benchmarks.lordo_bytes import LORDO, markdown, measure, parse, summarise

pytestmark = pytest.mark.benchmark


def test_lordo_bytes_are_the_formulas_and_grow_linearly_with_k():
    a = parse(["--ks", "4,8", "--steps", "16", "--seeds", "1,2"])
    s = summarise(a, measure(a, log=lambda line: None))
    print(markdown(a, s))
    rows = {(r["method"], r["k"]): r for r in s["rows"]}
    for r in s["rows"]:
        # measured = the review's formula in a steady window, = the cost model's rule over the run
        assert (r["steady_up"], r["steady_down"]) == (r["formula_up"], r["formula_down"]), r["method"]
        assert r["run"] == r["run_cost_model"] == r["run_claimed"], r["method"]
        # a SYNC frame is the tensor data plus its header and JSON table (~100 B per tensor, up to 63
        # tensors at a LoRDO state sync): under 16 kB per sync, up + down
        assert 0 < r["steady_frame"] - r["steady_up"] - r["steady_down"] < 16_000 / (r["k"] or 1)
    assert 0.2 < s["dense_share"] < 0.35   # micro: embeddings + head + norms (33472 of 125632)
    for method in LORDO:   # a LoRDO sync costs the same at every K: the reduction is K / (sync bytes / N)
        four, eight = rows[(method, 4)]["reduction"], rows[(method, 8)]["reduction"]
        for base in four:
            assert eight[base] == pytest.approx(2 * four[base], rel=1e-12)
    # the full-rank QHM term costs its dense pseudo-gradients: more bytes than the factored variant
    full, factored = rows[("lordo-global", 8)]["reduction"], rows[("lordo-global-none", 8)]["reduction"]
    assert full["lowrank-ddp-dense"] < factored["lowrank-ddp-dense"]
    # the two low-rank DDP readings take the same steps (up to float rounding) for different bytes
    gap = rows[("lowrank-ddp-projected", None)]["gap_lowrank-ddp-dense"]
    assert abs(gap["mean"]) < 1e-3
