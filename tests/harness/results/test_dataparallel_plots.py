"""The subspace overlap as a results column, its report table, and the data-parallel figures, on
real event rows: tests/fixtures/runs/dp-micro-excerpt is an excerpt of a `harness run` (micro model,
2 workers, 20 Mbit/s, K = 32, 192 steps; lordo-global (full-rank QHM) x 3 seeds, lordo-global-none
x 2, lordo-local x 1). Its config.json, meta.json and summary.json files are verbatim; its event files
keep their rows verbatim but only: every non-update row, the aggregator's update rows of steps
1..64 and 192 (the last, carrying the held-out perplexity), the workers' sync rows of those steps.
Expected values are recomputed here from the raw rows (json), not through harness/results/tables.py."""
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from harness.results import style as style_mod
from harness.results import compare, dataparallel_plots, dataparallel_report, plots, report
from harness.results.tables import read
from harness.results.quality import ci95

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "runs" / "dp-micro-excerpt"


def raw(cell: str, process: str) -> list[dict]:
    path = FIXTURE / "cells" / cell / f"events-{process}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def raw_overlaps() -> dict[tuple[str, int, int], float]:
    """(method, seed, step) -> mean over the workers' overlap at that sync, from the raw rows."""
    out = {}
    for cell in sorted(p.name for p in (FIXTURE / "cells").iterdir()):
        method, seed = cell.rsplit("-s", 1)
        per: dict[int, list[float]] = {}
        for w in ("w1", "w2"):
            for r in raw(cell, w):
                if r.get("kind") == "update" and "overlap" in r:
                    per.setdefault(r["version"], []).append(r["overlap"])
        out.update({(method, int(seed), v): sum(o) / len(o) for v, o in per.items()})
    return out


@pytest.fixture(scope="module")
def tables():
    return read(FIXTURE)


def test_overlap_is_a_column_of_the_updates_rows(tables):
    expect = raw_overlaps()
    u = tables.updates
    got = {(r.method, r.seed, r.update_index): r.overlap for r in u[u["overlap"].notna()].itertuples()}
    assert got.keys() == expect.keys() and len(got) == 6 * 3      # 6 cells x syncs at steps 32, 64, 192
    assert all(got[k] == pytest.approx(expect[k], abs=1e-12) for k in expect)
    assert u[u["update_index"] == 1]["overlap"].isna().all()               # no sync, no overlap
    # lordo-local: each worker has its own Q, so the column is a real mean of two different values
    w1 = {r["version"]: r["overlap"] for r in raw("lordo-local-s1", "w1") if "overlap" in r}
    w2 = {r["version"]: r["overlap"] for r in raw("lordo-local-s1", "w2") if "overlap" in r}
    assert w1[32] != w2[32] and got[("lordo-local", 1, 32)] == pytest.approx((w1[32] + w2[32]) / 2)


def test_report_shows_mean_and_min_overlap_per_variant(tables):
    expect = raw_overlaps()
    t = dataparallel_report.overlap_table(tables.updates).set_index("method")
    assert set(t.index) == {"lordo-global", "lordo-global-none", "lordo-local"}
    for method, row in t.iterrows():
        vals = {k: v for k, v in expect.items() if k[0] == method}
        seeds = sorted({k[1] for k in vals})
        per_seed = [sum(v for k, v in vals.items() if k[1] == s) / sum(1 for k in vals if k[1] == s) for s in seeds]
        mean, ci = ci95(per_seed)
        assert row["seeds"] == len(seeds) and row["syncs"] == 3
        assert row["overlap_mean"] == pytest.approx(mean) and row["overlap_min"] == pytest.approx(min(vals.values()))
        assert (row["overlap_ci95"] is None or pd.isna(row["overlap_ci95"])) if ci is None \
            else row["overlap_ci95"] == pytest.approx(ci)
    # the review's falsifier, in the real rows: without full-rank QHM Q never moves; with it, it does
    assert t.loc["lordo-global-none", "overlap_min"] == pytest.approx(1.0, abs=1e-6)
    assert t.loc["lordo-global", "overlap_max"] < 0.9
    md = "\n".join(dataparallel_report.section(tables.updates))
    g = t.loc["lordo-global"]
    assert "### Subspace overlap per sync" in md
    assert (f"| 2 | lordo-global | 3 x 3 | {g['overlap_mean']:.4f} ± {g['overlap_ci95']:.4f} | "
            f"{g['overlap_min']:.4f} | {g['overlap_max']:.4f} |") in md
    assert "| 2 | lordo-local | 1 x 3 | " in md                      # one seed: no CI


def test_no_overlap_column_no_overlap_table():
    df = pd.DataFrame({"method": ["ddp"], "seed": [1], "update_index": [1], "workers": [2]})
    assert dataparallel_report.overlap_table(df).empty and dataparallel_report.overlap_lines(df) == []


def test_ppl_vs_bytes_points_from_the_raw_rows(tables):
    pts = dataparallel_plots.ppl_points(tables.updates).set_index("method")
    for method in pts.index:
        cells = sorted(p.name for p in (FIXTURE / "cells").iterdir() if p.name.rsplit("-s", 1)[0] == method)
        ppl, per_step = [], []
        for cell in cells:
            rows = [r for r in raw(cell, "learner") if r.get("kind") == "update"]
            ppl.append(rows[-1]["heldout_ppl"])
            up = sum(r["wire_bytes_up"] for r in rows) / 2                        # all workers -> per worker
            down = sum(sum(r["update_frame_bytes"].values()) for r in rows) / 2
            per_step.append((up + down) / len(rows))
        mean, ci = ci95(ppl)
        assert pts.loc[method, "seeds"] == len(cells) and pts.loc[method, "ppl_mean"] == pytest.approx(mean)
        assert pts.loc[method, "bytes"] == pytest.approx(sum(per_step) / len(per_step))
        if ci is not None:
            assert pts.loc[method, "ppl_ci95"] == pytest.approx(ci)


def test_overlap_bands_mean_over_seeds(tables):
    expect = raw_overlaps()
    b = dataparallel_plots.overlap_bands(tables.updates).set_index(["method", "update_index"])
    at = [v for k, v in expect.items() if k[0] == "lordo-global" and k[2] == 64]
    assert b.loc[("lordo-global", 64), "mean"] == pytest.approx(sum(at) / 3)
    assert b.loc[("lordo-global", 64), "ci95"] == pytest.approx(ci95(at)[1])
    assert b.loc[("lordo-local", 64), "ci95"] == 0.0                 # one seed: no band


def test_plot_writes_the_dp_figures_with_the_others(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    paths = plots.write(run)
    names = {p.name for p in paths}
    assert {"dp_equal_bytes.pdf", "dp_equal_bytes.png", "dp_overlap.pdf", "dp_overlap.png"} <= names
    assert "seconds_vs_bandwidth.pdf" not in names          # one bandwidth: one x value, no figure
    # perplexity against bytes per step is dp_equal_bytes' left panel; quality_vs_bytes draws HiLo methods only
    assert not {"dp_ppl_vs_bytes.png", "quality_vs_bytes.png"} & names
    pdf = (run / "figures" / "dp_overlap.pdf").read_bytes()
    assert pdf[:4] == b"%PDF" and b"/FontFile2" in pdf                # TrueType (Type 42) embedded
    assert (run / "figures" / "dp_overlap.png").stat().st_size > 1000


def test_seconds_vs_bandwidth_over_a_bandwidth_sweep(tmp_path):
    """The same cells at two link rates (a sweep's shape): one line per method over both rates."""
    for name, rate in (("a", "20mbit"), ("b", "62.5mbit")):
        shutil.copytree(FIXTURE, tmp_path / name)
        cfg = json.loads((tmp_path / name / "config.json").read_text())
        cfg["profile_doc"]["defaults"]["rate"] = rate
        (tmp_path / name / "config.json").write_text(json.dumps(cfg))
    t = read([tmp_path / "a", tmp_path / "b"])
    comp = compare.comparison(t.updates, t.cells, t.evals)
    rates = comp.groupby("variant")["rate_bit_s"].apply(lambda s: sorted(s.unique()))
    assert all(r == [20e6, 62.5e6] for r in rates)
    ax = plots.draw_seconds_vs_bandwidth(comp).fig.axes[0]
    assert sorted({x for line in ax.get_lines() for x in line.get_xdata()}) == [20.0, 62.5]
    labels = dataparallel_plots.ppl_points(t.updates)                            # the sweep point shows in the label
    assert len(labels) == 2 * 3 and set(labels["rate_bit_s"]) == {20e6, 62.5e6}


def test_every_data_parallel_method_has_its_own_style():
    """Left to the CRC, diloco and lowrank-ddp drew alike (and lordo-local and lordo-global-none)."""
    pairs = list(style_mod.DP_STYLE.values())
    assert len(set(pairs)) == len(pairs) and not set(pairs) & set(style_mod.METHOD_STYLE.values())
    assert not {m for _, m in pairs} & set(style_mod.MARKERS)             # never an unlisted method's pick
    main = ("ddp", "lowrank-ddp", "diloco", "lordo-global", "lordo-global-none", "lordo-local")
    assert len({style_mod.style(m) for m in main}) == len({style_mod.style(m)[1] for m in main}) == len(main)


def test_a_data_parallel_run_without_emulation_draws_no_figure_of_nothing():
    """lordo-global against ddp on localhost (tests/fixtures/runs/dp-vs-ddp): quality_vs_bytes was an empty
    frame (it draws HiLo methods only), link_throughput said "nothing is drawn" (no link to sample), and
    dp_ppl_vs_bytes repeated dp_equal_bytes' left panel, with overlapping tick labels and a caption that
    named a file instead of saying what it drew."""
    t = read(FIXTURE.parent / "dp-vs-ddp")
    drawn = {p.name: p for p in plots.render(t)}
    assert set(drawn) == {"phase_breakdown", "timeline", "dp_equal_bytes", "dp_overlap"}
    assert drawn["dp_overlap"].caption.startswith("Subspace overlap mean(σ²(Q_{t+1}ᵀ Q_t)) at each sync")
    md, _ = report.build(t, [(f"{p.name}.png", p.caption) for p in drawn.values()])
    assert "data-parallel figure (" not in md
