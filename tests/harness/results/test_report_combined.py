"""`harness report A B ...`: a combined report in a new folder (or --out), never over an input,
keeping held-out quality and time to quality; the verdict paragraph at the top; CIs only where n
allows. From checked-in real runs (tests/fixtures/runs/, see test_figures.py)."""
import hashlib
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.results import compare, files, report, tables, verdict

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "runs"
RUN, HELDOUT = FIXTURES / "run-spar-20mbit", FIXTURES / "run-heldout"


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture()
def two_runs(tmp_path, heldout_copy):
    """The held-out run twice, the second as if run at another bandwidth (a sweep's shape)."""
    a, b = heldout_copy(tmp_path / "a"), heldout_copy(tmp_path / "b")
    cfg = json.loads((b / "config.json").read_text())
    cfg["profile_doc"]["defaults"]["rate"] = "20mbit"
    (b / "config.json").write_text(json.dumps(cfg))
    return a, b


def test_combined_report_goes_to_a_new_folder_and_leaves_the_inputs_alone(two_runs, tmp_path):
    a, b = two_runs
    before = {a: digest(a), b: digest(b)}
    res = CliRunner().invoke(app, ["report", str(a), str(b), "--quiet"])
    assert res.exit_code == 0, res.output
    assert before == {a: digest(a), b: digest(b)}          # no input touched (was: a's report.md overwritten)
    made = [d for d in tmp_path.iterdir() if d.name.startswith("report-")]
    assert len(made) == 1
    md = (made[0] / "report.md").read_text()
    assert "2 runs" in md and "`a`" in md and "`b`" in md
    assert (made[0] / "report.html").is_file() and (made[0] / "figures" / "quality_vs_time.png").is_file()


def test_combined_report_keeps_heldout_quality_and_time_to_quality(two_runs, tmp_path):
    a, b = two_runs
    out = tmp_path / "combined"
    assert CliRunner().invoke(app, ["report", str(a), str(b), "--out", str(out), "-q"]).exit_code == 0
    md = (out / "report.md").read_text()
    assert "## Held-out quality and time to quality" in md
    t = tables.read([a, b])
    comp = compare.comparison(t.updates, t.cells, t.evals)
    assert sorted(comp["rate_bit_s"].unique()) == [20e6, 62.5e6]
    assert comp["heldout_mean"].notna().all()               # was '-' for every method in a combined report
    name = comp["heldout_name"].iloc[0]
    for _, r in comp.iterrows():
        assert f"held-out {name} {r['heldout_mean']:.3f} ± {r['heldout_ci95']:.3f}" in md


def test_out_may_not_be_an_input(two_runs):
    a, b = two_runs
    res = CliRunner().invoke(app, ["report", str(a), str(b), "--out", str(a)])
    assert res.exit_code == 2 and "one of the folders being combined" in res.output
    assert not (a / "report.md").exists() or "2 runs" not in (a / "report.md").read_text()


def test_one_folder_is_rebuilt_in_place(tmp_path):
    run = tmp_path / "r"
    shutil.copytree(RUN, run)
    assert CliRunner().invoke(app, ["report", str(run), "-q"]).exit_code == 0
    assert (run / "report.md").is_file() and (run / "figures" / "link_throughput.png").is_file()
    assert not (run / "combined.json").exists() and [d.name for d in tmp_path.iterdir()] == ["r"]


def test_the_verdict_states_speed_quality_time_to_quality_and_regime_first(heldout_run):
    md, comp = report.build(tables.read(heldout_run))
    top = md.split("## Runs")[0]
    assert top.index("## Verdict") < top.index("**Regime**") < top.index("- **`spar@12.8%`")
    spar = comp[comp["method"] == "spar"].iloc[0]
    # the headline: CPU time on this contended fixture, with its interval over paired seeds, wall beside it
    assert spar["speedup_headline_basis"] == "cpu"
    assert (f"speed: {spar['speedup_headline']:.2f}x [{spar['speedup_headline_lo']:.2f}, "
            f"{spar['speedup_headline_hi']:.2f}] per update on CPU time (the machine was contended)") in top
    assert f"wall-clock {spar['speedup_seed_mean']:.2f}x" in top
    # quality.py's paired difference of the decision metric, and every fraction of the common target
    assert f"held-out {spar['heldout_name']}" in top and f"paired difference {spar['heldout_diff_mean']:+.3f}" in top
    assert all(f"{p} %:" in top for p in (50, 75, 90))


def test_the_verdict_says_when_a_speed_figure_is_not_a_result():
    """A new user's 1-seed run on a busy box read "rank-1 is 1.16x faster": the summary says when the
    interval over seeds includes 1 (or there is none), and leads with CPU time when the machine was contended."""
    row = {"speedup_headline": 1.16, "speedup_headline_lo": None, "speedup_headline_hi": None, "speedup_seeds": 1,
           "speedup_headline_basis": "cpu", "speedup_seed_mean": 1.4}
    line, clause = verdict.speed(row)
    assert clause == "is 1.16x faster per update (one seed: no interval)"
    assert line.startswith("1.16x per update on CPU time (the machine was contended)") and "wall-clock 1.40x" in line
    row.update(speedup_headline_lo=0.51, speedup_headline_hi=1.49, speedup_seeds=3, speedup_headline_basis="wall",
               speedup_cpu=1.1, speedup_cpu_lo=0.9, speedup_cpu_hi=1.3)
    line, clause = verdict.speed(row)
    assert clause == "is no faster per update at this resolution (1.16x, its interval includes 1)"
    assert "on wall-clock" in line and "CPU time 1.10x [0.90, 1.30]" in line
    row.update(speedup_headline_lo=1.05, speedup_headline_hi=1.3)
    assert verdict.speed(row)[1] == "is 1.16x faster per update"
    row.update(speedup_headline=0.8, speedup_headline_lo=0.7, speedup_headline_hi=0.9)
    assert verdict.speed(row)[1] == "is 1.25x slower per update"


def test_a_ci_over_two_seeds_is_printed_as_n(tmp_path, heldout_copy):
    run = heldout_copy(tmp_path / "r")
    for cell in (run / "cells").glob("*-s3"):
        shutil.rmtree(cell)
    md, comp = report.build(tables.read(run))
    assert (comp["heldout_seeds"] == 2).all()
    assert "(n=2)" in md and "too few for an interval" in md
    r = comp.iloc[0]
    assert f"{r['heldout_mean']:.3f} ± " not in md         # no interval over 2 seeds anywhere


def test_captions_say_train_batch_or_heldout(heldout_run):
    md, _ = report.build(tables.read(heldout_run))
    assert "Quality over the last" not in md               # the old caption beside a held-out column
    assert "not held-out quality" in md and "problems never trained on" in md
    head = md.split("## Seconds per update")[1].split("\n| link")[1].split("\n")[0]
    assert "held-out quality" in head and "train-batch metric" in head


def test_runs_that_repeat_a_variant_and_seed_are_each_compared_within_themselves(tmp_path, heldout_copy):
    """Two runs at the same link that both ran full-bf16 at the same seeds (the README's order: a
    run, then another method later): pooled, each method met both runs' baseline cells as one and
    a verdict could flip. Each run's methods now meet their own run's baseline, named by run."""
    a, b = heldout_copy(tmp_path / "a"), heldout_copy(tmp_path / "b")
    single = tables.read(a)
    single = compare.comparison(single.updates, single.cells, single.evals).set_index("variant")["speedup"]
    t = tables.read([a, b])
    updates = t.updates.copy()
    slow = (updates["run_id"] == "b") & (updates["variant"] == "full-bf16")
    updates.loc[slow, "seconds_per_update"] *= 3    # b's baseline 3x slower: pooled, a's ratios would move too
    comp = compare.comparison(updates, t.cells, t.evals)
    assert "run_id" in compare.coords(updates) and sorted(comp["run_id"].unique()) == ["a", "b"]
    mine = comp[comp["run_id"] == "a"].set_index("variant")["speedup"]
    assert mine.to_dict() == pytest.approx(single.to_dict())
    theirs = comp[comp["run_id"] == "b"].set_index("variant")["speedup"]
    assert all(theirs[v] == pytest.approx(3 * single[v]) for v in single.index if v != "full-bf16")
    out = tmp_path / "combined"
    assert CliRunner().invoke(app, ["report", str(a), str(b), "--out", str(out), "-q"]).exit_code == 0
    md = (out / "report.md").read_text()
    assert "| run a: " in md and "| run b: " in md


def test_the_verdict_tells_apart_two_runs_that_differ_beyond_their_link(tmp_path, heldout_copy):
    """Two runs at one link with other worker counts: each verdict block names its workers (the link's
    own words are the same for both)."""
    a, b = heldout_copy(tmp_path / "a"), heldout_copy(tmp_path / "b")
    cfg = json.loads((b / "config.json").read_text())
    cfg["workers"] = 4
    (b / "config.json").write_text(json.dumps(cfg))
    t = tables.read([a, b])
    comp = compare.comparison(t.updates, t.cells, t.evals)
    assert "workers" in compare.coords(comp) and "run_id" not in compare.coords(comp)
    heads = [line for line in verdict.verdict(comp, t.runs, t.cells) if line.startswith("- **`")]
    assert [h.split(" is ")[0] for h in heads] == ["- **`spar@12.8%` (paper-62.5mbit: 62.5mbit [fallback], 2 workers)",
                                                  "- **`spar@12.8%` (paper-62.5mbit: 62.5mbit [fallback], 4 workers)"]


def test_runs_with_other_seeds_pool_as_more_seeds(tmp_path, heldout_copy):
    """The same experiment run twice with disjoint seeds is one experiment with more seeds: no run column."""
    a, b = heldout_copy(tmp_path / "a"), heldout_copy(tmp_path / "b")
    t = tables.read([a, b])
    updates = t.updates.copy()
    updates.loc[updates["run_id"] == "b", "seed"] += 100
    assert "run_id" in compare.coords(t.updates) and "run_id" not in compare.coords(updates)


def test_a_combined_report_names_its_folder_and_a_later_glob_over_it_still_reads(two_runs, tmp_path):
    """`harness report A B` printed only the report (its new folder unnamed), and that folder then broke
    `harness report results/*` ("not a run or sweep folder")."""
    a, b = two_runs
    res = CliRunner().invoke(app, ["report", str(a), str(b)])
    assert res.exit_code == 0, res.output
    [made] = [d for d in tmp_path.iterdir() if d.name.startswith("report-")]
    assert f"combined report of 2 run(s): {made / 'report.md'}" in res.stderr
    assert json.loads((made / "combined.json").read_text()) == {"runs": [str(a.resolve()), str(b.resolve())]}
    again = CliRunner().invoke(app, ["report", *map(str, sorted(tmp_path.iterdir())), "--out", str(tmp_path / "all"),
                                     "-q"])
    assert again.exit_code == 0, again.output
    alone = CliRunner().invoke(app, ["report", str(made)])
    assert alone.exit_code == 2 and "only combined reports, no run folder" in alone.stderr


def test_a_config_whose_baseline_is_not_a_name_still_reports(tmp_path):
    """config.json with `baseline: null` (a malformed or hand-edited run) beside a run that has one: the
    title names the baseline that is a name; no TypeError from sorting a name with a NaN (found by the fuzz test)."""
    sweep = tmp_path / "sweep"
    shutil.copytree(Path(__file__).resolve().parents[2] / "fixtures" / "runs" / "sweep-bw", sweep)
    cfg_path = sorted(sweep.glob("runs/*/config.json"))[0]
    cfg = json.loads(cfg_path.read_text())
    cfg["baseline"] = None
    cfg_path.write_text(json.dumps(cfg))
    md, _ = report.build(tables.read(sweep))
    assert md.startswith("# Comparison against `full`: 2 runs")


def test_a_folder_of_runs_gets_a_report_folder_of_its_own_without_the_hidden_pilot(tmp_path, heldout_copy):
    """`harness report results` on a fresh clone's results/: the regime pilot's run under the hidden
    .cache/regime/<hash> was reported as a run of its own, and report.md, report.html and combined.json
    were written straight into results/."""
    results = tmp_path / "results"
    a, b = heldout_copy(results / "a"), heldout_copy(results / "b")
    pilot = heldout_copy(results / ".cache" / "regime" / "0123abcd")
    assert files.find_runs([results]) == [a, b]
    assert files.find_runs([pilot]) == [pilot]             # named on its own, it is a run like any other
    before = digest(results)
    res = CliRunner().invoke(app, ["report", str(results)])
    assert res.exit_code == 0, res.output
    [made] = [d for d in results.iterdir() if d.name.startswith("report-")]
    assert not (results / "report.md").exists() and not (results / "combined.json").exists()
    assert {k: v for k, v in digest(results).items() if not k.startswith("report-")} == before
    assert json.loads((made / "combined.json").read_text()) == {"runs": [str(a.resolve()), str(b.resolve())]}
    assert "2 runs" in (made / "report.md").read_text()
    assert f"combined report of 2 run(s): {made / 'report.md'}" in res.stderr



def test_a_combined_title_says_which_runs_ran_no_baseline(tmp_path, heldout_copy):
    """A run compared against full-bf16 beside one run with `--baseline none`: the title read
    "Comparison against `full-bf16`: 2 runs", as if both were compared."""
    a, b = heldout_copy(tmp_path / "a"), heldout_copy(tmp_path / "b")
    cfg = json.loads((b / "config.json").read_text())
    cfg.update(baseline="none", variants=[v for v in cfg["variants"] if v["method"] == "spar"])
    (b / "config.json").write_text(json.dumps(cfg))
    for seed in (1, 2, 3):
        shutil.rmtree(b / "cells" / f"full-bf16-s{seed}")
    md, _ = report.build(tables.read([a, b]))
    assert md.splitlines()[0] == ("# Comparison against `full-bf16`: 2 runs (1 of them ran no baseline: "
                                  "`--baseline none`)")
    both, _ = report.build(tables.read([a, heldout_copy(tmp_path / "c")]))
    assert both.splitlines()[0] == "# Comparison against `full-bf16`: 2 runs"


def test_paired_lines_name_their_link_where_the_report_holds_two(tmp_path, heldout_copy):
    """Two runs at two rates: "Paired differences" and "Quality at equal training time" printed two lines
    that read alike ("`spar@12.8%` − baseline: ..."), neither saying which link it was."""
    a, b = heldout_copy(tmp_path / "a"), heldout_copy(tmp_path / "b")
    cfg = json.loads((b / "config.json").read_text())
    cfg["profile_doc"]["defaults"]["rate"] = "20mbit"
    (b / "config.json").write_text(json.dumps(cfg))
    md, _ = report.build(tables.read([a, b]))
    paired = md.split("## Paired differences from the baseline")[1].split("\n## ")[0]
    lines = [line for line in paired.splitlines() if line.startswith("- `spar@12.8%`")]
    assert len(lines) == 2 and lines[0] != lines[1]
    assert {line.split(" − baseline")[0] for line in lines} == {"- `spar@12.8%` (paper-62.5mbit: 62.5mbit [fallback])",
                                                               "- `spar@12.8%` (paper-62.5mbit: 20mbit [fallback])"}


def test_two_runs_of_one_name_are_told_apart_by_their_folders(tmp_path, heldout_copy):
    """Two sweeps without an axis each name their run `default`: the Runs section and the INCOMPLETE line read
    "`default` (interrupted), `default` (interrupted)"."""
    a, b = heldout_copy(tmp_path / "s1" / "runs" / "default"), heldout_copy(tmp_path / "s2" / "runs" / "default")
    md, _ = report.build(tables.read([a, b]))
    assert "- `s1/runs/default`: status" in md and "- `s2/runs/default`: status" in md


def test_seeds_that_ran_different_numbers_of_updates_show_the_range(tmp_path, heldout_copy):
    """A cell cut short at 5 of 8 updates beside one that ran 8 read "2 x 6" (13 // 2)."""
    run = heldout_copy(tmp_path / "r")
    t = tables.read(run)
    u = t.updates
    cut = u[~((u["variant"] == "spar@12.8%") & (u["seed"] == 1) & (u["update_index"] > 5))]
    comp = compare.comparison(cut, t.cells, t.evals)
    head, rows = report.table_rows(comp)
    col = head.index("seeds x updates")
    assert {r[2]: r[col] for r in rows} == {"spar@12.8%": "3 x 5-12", "full-bf16": "3 x 12"}


def test_the_main_table_names_a_swept_run_parameter(tmp_path):
    """A --lordo-k 2,4 sweep: the main table's rows read "lordo-global" twice at one link and worker count."""
    for k in (2, 4):
        shutil.copytree(FIXTURES / "dp-vs-ddp", tmp_path / f"k{k}")
        cfg = json.loads((tmp_path / f"k{k}" / "config.json").read_text())
        cfg["lordo_k"] = k
        (tmp_path / f"k{k}" / "config.json").write_text(json.dumps(cfg))
    head, rows = report.table_rows(compare.comparison(*(lambda t: (t.updates, t.cells, t.evals))(
        tables.read([tmp_path / "k2", tmp_path / "k4"]))))
    methods = [r[head.index("method")] for r in rows]
    assert sorted(methods) == ["ddp (lordo_k 2)", "ddp (lordo_k 4)", "lordo-global (lordo_k 2)",
                               "lordo-global (lordo_k 4)"]


def test_every_quality_table_names_a_swept_run_parameter(tmp_path, heldout_copy):
    """A --lora-rank 4,8 sweep: the speedup, quality and time-to-quality tables each showed two identical
    `localhost | topk@12.8%` rows."""
    runs = []
    for rank in (4, 8):
        run = heldout_copy(tmp_path / f"r{rank}")
        cfg = json.loads((run / "config.json").read_text())
        cfg["lora_rank"] = rank
        (run / "config.json").write_text(json.dumps(cfg))
        runs.append(run)
    md, _ = report.build(tables.read(runs))
    for section in ("## Speedup over seeds and machine load", "## Held-out quality and time to quality",
                    "## Every held-out figure, side by side"):
        body = md.split(section, 1)[1].split("\n## ", 1)[0]
        assert "| spar@12.8% (lora_rank 4) |" in body and "| spar@12.8% (lora_rank 8) |" in body, section
