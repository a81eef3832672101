"""The report's "baselines a user would pick instead" section (harness/results/rivals.py) on hand-made tables."""
import pandas as pd

from harness.results import rivals


def tables():
    updates = pd.DataFrame([
        {"variant": v, "method": m, "lora_rank": 16, "update_index": i, "delta_density": d}
        for v, m, d in (("full-bf16", "full-bf16", None), ("delta", "delta", 0.5), ("rank-1", "rank-1", None),
                        ("spar@6.4%", "spar", None))
        for i, d in ((1, d), (2, None if d is None else d / 2))])
    comp = pd.DataFrame([
        {"variant": "full-bf16", "method": "full-bf16", "payload_bytes_down": 1000.0, "fraction_of_full": 1.0,
         "heldout_name": "pass@4", "heldout_mean": 0.7, "heldout_ci95": 0.01, "ttq_updates_mean": 20.0,
         "ttq_reached": 3, "heldout_seeds": 3, "s_per_update_median": 0.5},
        {"variant": "delta", "method": "delta", "payload_bytes_down": 800.0, "fraction_of_full": 0.8,
         "heldout_name": "pass@4", "heldout_mean": 0.7, "heldout_ci95": 0.01, "ttq_updates_mean": 20.0,
         "ttq_reached": 3, "heldout_seeds": 3, "s_per_update_median": 0.6},
        {"variant": "rank-1", "method": "rank-1", "payload_bytes_down": 125.0, "fraction_of_full": 0.125,
         "heldout_name": "pass@4", "heldout_mean": 0.6, "heldout_ci95": None, "ttq_updates_mean": None,
         "ttq_reached": 0, "heldout_seeds": 3, "s_per_update_median": 0.4},
        {"variant": "spar@6.4%", "method": "spar", "payload_bytes_down": 64.0, "fraction_of_full": 0.064,
         "heldout_name": "pass@4", "heldout_mean": 0.65, "heldout_ci95": 0.02, "ttq_updates_mean": 30.0,
         "ttq_reached": 2, "heldout_seeds": 3, "s_per_update_median": 0.45}])
    return updates, comp


def test_every_row_has_its_training_rank_bytes_quality_and_delta_its_density():
    updates, comp = tables()
    head, rows = rivals.rows(updates, comp)
    by = {r[1]: dict(zip(head, r)) for r in rows}
    assert by["rank-1"]["training rank"] == "1" and by["spar@6.4%"]["training rank"] == "16"
    assert by["delta"]["delta density median [min, max]"] == "37.50% [25.00, 50.00] (n=2)"
    assert by["full-bf16"]["delta density median [min, max]"] == "-"
    assert by["delta"]["% of baseline"] == "80.00%" and by["rank-1"]["held-out quality (final, ± 95% CI)"] == "pass@4 0.600"
    # equal bytes: spar needs more updates, yet fewer bytes, to reach the target; rank-1 never reached it
    key = "cumulative B to the quality target (1 worker; seeds reaching it)"
    assert by["spar@6.4%"][key] == "1,920 (2 / 3)" and by["full-bf16"][key] == "20,000 (3 / 3)"
    assert by["rank-1"][key] == "- (0 / 3)"


def test_section_only_for_runs_with_a_rival():
    updates, comp = tables()
    assert rivals.section(updates, comp)[0] == "## The baselines a user would pick instead"
    plain = comp[comp["method"].isin(["full-bf16", "spar"])]
    assert rivals.section(updates, plain) == []
