"""Column names a reader cannot misread: no column of any results table shares a name with a run
parameter (trainers/spec.py) unless it holds that very parameter's value, and none shadows a
DataFrame attribute (`df.update` is a method; `df["update"]` was the update index). Checked over
every checked-in run (tests/fixtures/runs/*: old result folders still load) and every derived
table (comparison, held-out quality, curves)."""
import json
from pathlib import Path

import pandas as pd
import pytest

from harness.results import compare, quality, tables
from trainers import spec

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "runs"
RUNS = sorted(p.parent for p in FIXTURES.rglob("config.json") if (p.parent / "cells").is_dir())
PARAMS = {p.name: p for p in spec.PARAMS}
# Parameters a results column holds resolved: the backend the run used (the parameter may be unset
# = chosen at run time; meta.json says which) and the profile by name.
RESOLVED = {"backend": lambda cfg, meta: meta.get("backend") if cfg.get("backend") is None else cfg["backend"],
            "profile": lambda cfg, meta: cfg.get("profile_name", cfg.get("profile"))}


def all_tables(run: Path) -> dict[str, pd.DataFrame]:
    t = tables.read(run)
    out = {name: getattr(t, name) for name in tables.TABLES}
    out["comparison"] = compare.comparison(t.updates, t.cells, t.evals)
    if not t.evals.empty:
        keys = [k for k in compare.coords(t.evals) if k in t.evals]
        out["quality"], out["curves"] = quality.quality_table(t.evals, keys), quality.curves(t.evals, keys)
    return out


def expected(run: Path, name: str, row: pd.Series):
    cfg, meta = (json.loads((run / f).read_text()) for f in ("config.json", "meta.json"))
    if name in RESOLVED:
        return RESOLVED[name](cfg, meta)
    if name == "method":  # each cell runs one of the methods or the baseline
        return [*cfg.get("method", []), cfg.get("baseline", compare.BASELINE)]
    if PARAMS[name].many:  # budget, seed: one of the run's values (each cell holds one)
        return cfg.get("seeds" if name == "seed" else name)
    return cfg.get(name)


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.relative_to(FIXTURES).as_posix())
def test_a_column_named_after_a_run_parameter_holds_that_parameter(run):
    for table, df in all_tables(run).items():
        for name in sorted(set(df.columns) & set(PARAMS)):
            for _, row in df.iterrows():
                want = expected(run, name, row)
                got = row[name]
                if PARAMS[name].many:
                    assert got in want, f"{table}.{name} = {got!r}, not one of the run's {want!r}"
                elif not (want is None and pd.isna(got)):
                    assert got == want, f"{table}.{name} = {got!r}, but the run's {name} is {want!r}"


def test_the_renamed_columns_are_gone_and_their_successors_say_what_they_hold():
    t = tables.read(FIXTURES / "run-spar-20mbit")
    for old in ("update", "budget", "loss", "quality"):
        assert old not in t.updates.columns
    if "quality_metric" in t.updates:  # now only ever the run parameter (pass_at_k, ...), never distill_loss
        assert not t.updates["quality_metric"].isin(["distill_loss", "reward_mean", "lm_loss"]).any()
    assert {"update_index", "budget_frac", "train_loss", "train_metric", "train_metric_name"} <= set(t.updates.columns)
    assert "update_index" in t.phases.columns and "update" not in t.phases.columns
    spar = t.updates[t.updates["method"] == "spar"]
    assert (spar["budget_frac"] == 0.016).all() and spar["budget_frac"].dtype.kind == "f"
    assert t.updates[t.updates["method"] == "full"]["budget_frac"].isna().all()
    assert (spar["variant"] == "spar@1.6%").all()                       # the label stays in variant
    assert (t.updates["train_metric"] == t.updates["train_loss"]).all()  # distill: the batch's loss, named so


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.relative_to(FIXTURES).as_posix())
def test_no_column_shadows_a_dataframe_attribute(run):
    for table, df in all_tables(run).items():
        shadows = [c for c in df.columns if isinstance(c, str) and hasattr(pd.DataFrame, c)]
        assert not shadows, f"{table}: {shadows} shadow DataFrame attributes"


def test_the_comparison_has_a_numeric_speedup_per_method():
    t = tables.read(FIXTURES / "run-spar-20mbit")
    comp = compare.comparison(t.updates, t.cells, t.evals).set_index("variant")
    assert comp["speedup"].dtype.kind == "f" and comp.loc["full", "speedup"] == pytest.approx(1.0)
    assert comp.loc["spar@1.6%", "speedup"] == pytest.approx(
        comp.loc["full", "s_per_update_median"] / comp.loc["spar@1.6%", "s_per_update_median"])
