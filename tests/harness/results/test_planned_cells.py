"""Cells are labelled by their folder name, whatever order the run used (`--schedule interleaved`)."""
from harness.results import tables

CFG = {"seeds": [1, 2], "variants": [{"method": "spar", "budget": "12.8%", "label": "spar@12.8%"},
                                     {"method": "full-bf16", "budget": None, "label": "full-bf16"}]}


def test_interleaved_cells_keep_their_own_variant():
    meta = {"cells": ["spar-12.8pct-s1", "full-bf16-s1", "full-bf16-s2", "spar-12.8pct-s2"]}  # A1 B1 B2 A2
    planned = tables.planned_cells(CFG, meta)
    assert list(planned) == meta["cells"]   # the run's order
    for name, (variant, seed) in planned.items():
        assert name == f"{variant['label'].replace('@', '-').replace('%', 'pct')}-s{seed}"


def test_cells_missing_from_meta_are_still_planned():
    planned = tables.planned_cells(CFG, {"cells": ["full-bf16-s1"]})
    assert set(planned) == {"spar-12.8pct-s1", "full-bf16-s1", "spar-12.8pct-s2", "full-bf16-s2"}
    assert planned["spar-12.8pct-s2"] == (CFG["variants"][0], 2)


def test_the_interleaved_fixture_reads_one_method_per_variant():
    t = tables.read("tests/fixtures/runs/run-heldout")
    pairs = t.evals[["method", "variant"]].drop_duplicates()
    assert sorted(map(tuple, pairs.values)) == [("full-bf16", "full-bf16"), ("spar", "spar@12.8%")]
