"""The equal-bytes flag of the comparison and the report (harness/results/compare.py `_equal_bytes`).

Expected values are recomputed from the raw learner events of the checked-in run
(tests/fixtures/runs/run-spar-20mbit: spar@1.6 % and full on the micro adapter), independently
of harness.results.tables: the budget target is 1.6 % of the adapter in bf16, estimated from full's fp32
payload; a second budgeted method is made by copying spar's cells as `topk` with twice the bytes.
"""
import json
import shutil
import statistics
from pathlib import Path

import pytest

from harness.results import compare, report, tables

RUN = Path(__file__).resolve().parents[2] / "fixtures" / "runs" / "run-spar-20mbit"


def payloads(run: Path, stem: str) -> list[int]:
    """update_payload_bytes of every update of every seed of the cells `<stem>-s<seed>`."""
    out = []
    for cell in sorted((run / "cells").glob(f"{stem}-s*")):
        out += [r["update_payload_bytes"] for r in map(json.loads, (cell / "events-learner.jsonl").read_text().splitlines())
                if r.get("kind") == "update"]
    return out


def expected(run: Path) -> dict[str, tuple[float, float]]:
    """variant stem -> (payload / budget target, spread among budgeted methods at 1.6 %)."""
    target = 0.016 * statistics.median(payloads(run, "full")) / 4 * 2     # fp32 adapter -> bf16 bytes
    medians = {s: statistics.median(payloads(run, s)) for s in ("spar-1.6pct", "topk-1.6pct") if payloads(run, s)}
    spread = max(medians.values()) / min(medians.values())
    return {s: (m / target, spread) for s, m in medians.items()}


def comparison(run: Path):
    run_tables = tables.read([run])
    return compare.comparison(run_tables.updates, run_tables.cells), report.build(run_tables)[0]


def add_topk_at_double_bytes(run: Path) -> None:
    for src in sorted((run / "cells").glob("spar-1.6pct-s*")):
        dst = run / "cells" / src.name.replace("spar", "topk")
        shutil.copytree(src, dst)
        rows = [json.loads(line) for line in (dst / "events-learner.jsonl").read_text().splitlines()]
        for r in rows:
            if r.get("kind") == "start":
                r["params"]["method"] = "topk"
            if r.get("kind") == "update":
                r["update_payload_bytes"] *= 2
        (dst / "events-learner.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (dst / "summary.json").write_text((dst / "summary.json").read_text().replace('"spar"', '"topk"'))


def test_spar_alone_is_checked_against_its_budget(tmp_path):
    run = tmp_path / RUN.name
    shutil.copytree(RUN, run)
    comp, md = comparison(run)
    (ratio, _), = expected(run).values()
    spar = comp[comp["method"] == "spar"].iloc[0]
    assert spar["bytes_vs_budget"] == pytest.approx(ratio)
    assert bool(spar["unequal_bytes"]) == (abs(ratio - 1) > compare.EQUAL_BYTES_TOL)
    assert not bool(comp[comp["method"] == "full"].iloc[0]["unequal_bytes"])   # the baseline takes no budget
    assert "bytes vs budget" in md and f"{100 * ratio:.0f}% of" in md
    assert ("**Unequal bytes**" in md) == bool(spar["unequal_bytes"])


def test_methods_at_the_same_budget_with_unequal_bytes_are_flagged(tmp_path):
    run = tmp_path / RUN.name
    shutil.copytree(RUN, run)
    add_topk_at_double_bytes(run)
    comp, md = comparison(run)
    want = expected(run)
    for method, stem in (("spar", "spar-1.6pct"), ("topk", "topk-1.6pct")):
        row = comp[comp["method"] == method].iloc[0]
        ratio, spread = want[stem]
        assert row["bytes_vs_budget"] == pytest.approx(ratio) and row["bytes_spread"] == pytest.approx(spread)
        assert bool(row["unequal_bytes"]) == (abs(ratio - 1) > 0.1 or spread > 1.1)
    assert comp[comp["method"] == "topk"].iloc[0]["unequal_bytes"]
    assert "**Unequal bytes**" in md and "UNEQUAL" in md
