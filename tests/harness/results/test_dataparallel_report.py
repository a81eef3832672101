"""The report's claimed-vs-measured table on a hand-made updates table (numbers checked by hand)."""
import pandas as pd
import pytest

from harness.results import dataparallel_report


def rows(method, seed, syncs, claimed, payload, steps=4, workers=2, ppl=10.0):
    """`steps` update rows; on sync steps each worker uploads and downloads `payload` bytes."""
    out = []
    for v in range(1, steps + 1):
        s = v in syncs
        out.append({"profile": "p", "rate_bit_s": 62.5e6, "delay_s": 0.0, "loss_frac": 0.0, "workers": workers,
                    "method": method, "seed": seed, "update_index": v, "seconds_per_update": 0.5,
                    "claimed_bytes_up": claimed if s else 0, "claimed_bytes_down": claimed if s else 0,
                    "payload_bytes_up": workers * payload if s else 0, "wire_bytes_up": workers * (payload + 44) if s else 0,
                    "payload_bytes_down": payload if s else 0, "wire_bytes_down": workers * (payload + 44) if s else 0,
                    "heldout_ppl": ppl + seed if v == steps else None})
    return out


def test_per_step_bytes_and_ratios():
    df = pd.DataFrame(rows("ddp", 1, {1, 2, 3, 4}, 1000, 1100) + rows("ddp", 2, {1, 2, 3, 4}, 1000, 1100)
                      + rows("lowrank-ddp", 1, {1, 2, 3, 4}, 200, 250) + rows("lowrank-ddp", 2, {1, 2, 3, 4}, 200, 250)
                      + rows("lowrank-ddp-dense", 1, {1, 2, 3, 4}, 1000, 1150)
                      + rows("lordo-global", 1, {4}, 1600, 1700) + rows("lordo-global", 2, {4}, 1600, 1700))
    t = dataparallel_report.table(df).set_index("method")
    lordo = t.loc["lordo-global"]
    assert lordo["claimed_up"] == 400 and lordo["payload_up"] == 425 and lordo["wire_up"] == 436
    assert lordo["vs_ddp"] == pytest.approx(850 / 2200)
    # `lowrank-ddp` (results before the split) is the projected variant; the review's baseline is the dense one
    assert lordo["vs_lowrank-ddp-projected"] == pytest.approx(850 / 500)
    assert lordo["vs_lowrank-ddp-dense"] == pytest.approx(850 / 2300)
    assert lordo["ppl_mean"] == pytest.approx(11.5) and lordo["ppl_ci95"] == pytest.approx(12.706 * 0.5)
    md = "\n".join(dataparallel_report.section(df))
    assert "| 2 | lordo-global | 2 x 4 | 400 | 425 | 436 |" in md


def test_ratios_need_the_same_number_of_steps():
    df = pd.DataFrame(rows("ddp", 1, {1, 2}, 1000, 1100, steps=2) + rows("lordo-global", 1, {4}, 1600, 1700))
    assert pd.isna(dataparallel_report.table(df).set_index("method").loc["lordo-global", "vs_ddp"])


def test_no_data_parallel_cells_no_section():
    assert dataparallel_report.section(pd.DataFrame({"method": ["spar"], "update_index": [1]})) == []


def test_falsifier_figure_from_csv(tmp_path):
    from harness.results import dataparallel_plots

    data = [{"variant": v, "seed": s, "kind": k, "index": i, "value": 1.0 if v.endswith("none") else 0.9 - 0.01 * s}
            for v in ("lordo-global-none", "lordo-global-fullrank") for s in (1, 2, 3)
            for k in ("overlap", "loss") for i in range(1, 5)]
    pd.DataFrame(data).to_csv(tmp_path / "falsifier.csv", index=False)
    b = dataparallel_plots.band(pd.DataFrame(data).query("kind == 'overlap' and variant == 'lordo-global-fullrank'"))
    assert b["mean"].tolist() == pytest.approx([0.88] * 4) and (b["ci"] > 0).all()
    paths = dataparallel_plots.figure(tmp_path)
    assert all(p.stat().st_size > 1000 for p in paths) and paths[0].read_bytes()[:4] == b"%PDF"


def test_main_table_counts_a_k_step_method_per_optimizer_step_not_its_median_zero():
    """lordo ships at 1 step in 4: the main table's bytes per update are the mean per step (425 up
    per worker), as in the claimed-vs-measured table, never the median over steps (0)."""
    from harness.results import compare

    g = pd.DataFrame(rows("lordo-global", 1, {4}, 1600, 1700))
    for c in ("lag", "train_metric"):
        g[c] = 0.0
    g["budget_frac"], g["train_metric_name"] = None, "lm_loss"
    r = compare._method_row(g, pd.DataFrame())
    assert r["payload_bytes_down"] == pytest.approx(1700 / 4) and r["payload_bytes_up"] == pytest.approx(2 * 1700 / 4)
    h = pd.DataFrame(rows("lordo-global", 1, {4}, 1600, 1700))
    h["method"] = "full"
    for c in ("lag", "train_metric"):
        h[c] = 0.0
    h["budget_frac"], h["train_metric_name"] = None, "distill_loss"
    assert compare._method_row(h, pd.DataFrame())["payload_bytes_down"] == 0     # HiLo rows: the median


def test_a_partial_last_window_is_left_out_of_k_step_bytes_and_named():
    """10 steps at K = 4: lordo syncs at 4, 8 and (the tail) 10; per-step bytes over steps 1-8 only."""
    df = pd.DataFrame(rows("lordo-global", 1, {4, 8, 10}, 400, 425, steps=10)
                      + rows("ddp", 1, set(range(1, 11)), 100, 110, steps=10)).assign(lordo_k=4)
    t = dataparallel_report.table(df).set_index("method")
    assert t.loc["lordo-global", "steps"] == 8 and t.loc["lordo-global", "tail"] == 2
    assert t.loc["lordo-global", "claimed_up"] == 100 and t.loc["ddp", "steps"] == 10 and t.loc["ddp", "tail"] == 0
    assert t.loc["lordo-global", "ppl_mean"] == pytest.approx(11.0)  # the held-out figure is still the last step's
    assert "1 x 8 (+2 tail steps left out)" in "\n".join(dataparallel_report.section(df))
