"""The tables built chunk by chunk (tables.Chunked, CHUNK_ROWS rows at a time, categories joined)
equal the tables built in one piece: same columns, values and dtypes, on recorded runs."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from harness.results import tables

RUNS = Path(__file__).resolve().parents[2] / "fixtures" / "runs"


@pytest.mark.parametrize("run", ["run-heldout", "run-interrupted", "run-spar-20mbit", "dp-micro-excerpt"])
def test_chunked_tables_equal_the_one_piece_tables(run, monkeypatch):
    whole = tables.read_run(RUNS / run)
    monkeypatch.setattr(tables, "CHUNK_ROWS", 2)   # many chunks per cell, cells sharing chunks
    chunked = tables.read_run(RUNS / run)
    for name in ("updates", "phases"):
        a, b = getattr(whole, name), getattr(chunked, name)
        assert len(a) > 2, f"{run} {name}: too few rows to chunk"
        pd.testing.assert_frame_equal(a, b, check_categorical=True)


def test_string_columns_are_categories_but_method():
    t = tables.read_run(RUNS / "run-heldout")
    assert isinstance(t.updates["variant"].dtype, pd.CategoricalDtype)
    assert isinstance(t.phases["phase"].dtype, pd.CategoricalDtype)
    assert not isinstance(t.updates["method"].dtype, pd.CategoricalDtype)
    assert t.updates["method"].map(str.upper).dtype != "category"
