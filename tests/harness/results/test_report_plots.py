"""Tables, report and figures rebuilt from checked-in results folders (real runs, no training here).

tests/fixtures/runs/ holds the raw files of real `harness run` / `harness sweep` runs on the
emulated network (config.json, meta.json, the services' event files, summary.json, links.csv):
    run-spar-20mbit/  spar@1.6% and full, 2 workers, 4 updates, seeds 1,2, 20mbit + 5ms, pipeline 1, distill
    sweep-bw/         spar@1.6% and full at 10mbit and 50mbit, 2 workers, 3 updates, seed 1
    run-interrupted/  a run stopped with SIGINT during its first cell (partial, marked incomplete)
Every expected value below is recomputed from the raw event files, independently of harness.results.tables.
"""
import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner


from harness.results import style as style_mod
from harness.results import compare, files, plots, report, tables

from harness.run import launch
from harness.cli import app

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "runs"
RUN, SWEEP, PARTIAL = FIXTURES / "run-spar-20mbit", FIXTURES / "sweep-bw", FIXTURES / "run-interrupted"
REQUIRED = ["method", "seed", "update_index", "seconds_per_update", "train_s", "encode_s", "send_update_s",
            "decode_replay_s", "worker_rollout_s", "payload_bytes_down", "wire_bytes_down", "payload_bytes_up",
            "wire_bytes_up", "lag", "train_metric", "train_metric_name"]


def learner_rows(cell: Path) -> list[dict]:
    return [json.loads(line) for line in (cell / "events-learner.jsonl").read_text().splitlines()
            if '"kind": "update"' in line]


@pytest.fixture()
def run_copy(tmp_path):
    shutil.copytree(RUN, tmp_path / RUN.name)
    return tmp_path / RUN.name


def test_updates_table_has_one_row_per_method_seed_update():
    df = tables.load(RUN)
    assert set(REQUIRED) <= set(df.columns)
    assert len(df) == 2 * 2 * 4
    assert sorted(df.groupby(["method", "seed"]).size().items()) == [(("full", 1), 4), (("full", 2), 4),
                                                                     (("spar", 1), 4), (("spar", 2), 4)]
    for cell in (RUN / "cells").iterdir():
        raw = learner_rows(cell)
        got = df[df["cell"] == cell.name].sort_values("update_index")
        assert list(got["seconds_per_update"]) == [r["seconds_per_update"] for r in raw]
        assert list(got["payload_bytes_down"]) == [r["update_payload_bytes"] for r in raw]
        assert list(got["wire_bytes_down"]) == [sum(r["update_frame_bytes"].values()) for r in raw]
        assert list(got["train_s"]) == [r["durations_s"]["train"] for r in raw]
        assert list(got["lag"]) == [r["lag"] for r in raw]


def test_comparison_values_match_the_event_files():
    comp = compare.comparison(tables.load(RUN), tables.load_cells(RUN)).set_index("method")
    spu = {m: statistics.median(r["seconds_per_update"] for c in (RUN / "cells").glob(f"{m}-*")
                                for r in learner_rows(c)) for m in ("spar", "full")}
    payload = {m: statistics.median(r["update_payload_bytes"] for c in (RUN / "cells").glob(f"{m}-*")
                                    for r in learner_rows(c)) for m in spu}
    assert comp.loc["spar", "s_per_update_median"] == pytest.approx(spu["spar"])
    assert comp.loc["full", "s_per_update_median"] == pytest.approx(spu["full"])
    assert comp.loc["spar", "speedup"] == pytest.approx(spu["full"] / spu["spar"])
    assert comp.loc["full", "speedup"] == pytest.approx(1.0)
    assert comp.loc["spar", "fraction_of_full"] == pytest.approx(payload["spar"] / payload["full"])
    assert payload["spar"] < 0.02 * payload["full"]   # the 1.6 % budget is of the bf16 adapter; full ships fp32
    assert comp["consistent"].all() and comp["complete"].all()
    assert (comp["seeds"] == 2).all()
    link = comp.loc["full", "link_bytes_down_per_update"]
    assert link > comp.loc["full", "wire_bytes_down"]  # IP/TCP headers on top of the frames


def test_train_metric_is_the_last_updates_loss_with_spread_over_seeds():
    comp = compare.comparison(tables.load(RUN), tables.load_cells(RUN)).set_index("method")
    for method in ("spar", "full"):
        per_seed = [statistics.mean(r["loss"] for r in learner_rows(c)[-3:])
                    for c in sorted((RUN / "cells").glob(f"{method}-*"))]
        assert comp.loc[method, "train_metric_name"] == "distill_loss"
        assert comp.loc[method, "train_metric_mean"] == pytest.approx(statistics.mean(per_seed))
        assert comp.loc[method, "train_metric_sd"] == pytest.approx(statistics.stdev(per_seed))
        assert comp.loc[method, "train_metric_sd"] > 0   # the seeds really differ


def test_report_md_shows_the_table(run_copy):
    path = report.write(run_copy)
    md = path.read_text()
    comp = compare.comparison(tables.load(run_copy), tables.load_cells(run_copy)).set_index("method")
    assert "| paper-62.5mbit: 20mbit, 5ms [fallback] | 2 | spar@1.6% | 2 x 4 |" in md
    assert f"| {comp.loc['spar', 'speedup']:.2f}x |" in md
    payload = {m: statistics.median(r["update_payload_bytes"] for c in (run_copy / "cells").glob(f"{m}-*")
                                    for r in learner_rows(c)) for m in ("spar", "full")}
    assert f"| {payload['spar']:,.0f} |" in md and "| 77,972 |" in md
    assert f"| {100 * payload['spar'] / payload['full']:.2f}% |" in md
    assert "INCOMPLETE" not in md and "backend `fallback`" in md
    page = (run_copy / "report.html").read_text()   # the whole report (test_report_html.py checks it in a browser)
    assert "<th>speedup vs baseline</th>" in page and page.count("<td>spar@1.6%</td>") >= 1


def test_sweep_report_is_one_table_compared_per_bandwidth():
    comp = compare.comparison(tables.load(SWEEP), tables.load_cells(SWEEP))
    assert sorted(comp["rate_bit_s"].unique()) == [10e6, 50e6]
    for rate, g in comp.groupby("rate_bit_s"):
        g = g.set_index("method")
        assert g.loc["spar", "speedup"] == pytest.approx(g.loc["full", "s_per_update_median"]
                                                         / g.loc["spar", "s_per_update_median"])
    md, _ = report.build(tables.read(SWEEP))
    assert md.count("## Seconds per update") == 1 and "10mbit" in md and "50mbit" in md


def test_physical_floor_holds_in_the_fixture_runs():
    df = tables.load(SWEEP)
    full = df[df["method"] == "full"]
    floor = full["payload_bytes_down"] * 8 / full["rate_bit_s"]
    assert (full["seconds_per_update"] >= floor).all()


def test_interrupted_run_is_reported_as_incomplete(tmp_path):
    shutil.copytree(PARTIAL, tmp_path / "p")
    md = report.write(tmp_path / "p").read_text()
    assert "INCOMPLETE" in md
    cells = tables.load_cells(tmp_path / "p")
    assert not cells["complete"].all()


def pdf_fonts_are_type42(pdf: Path) -> bool:
    data = pdf.read_bytes()
    return b"/FontFile2" in data and b"/Subtype /Type3" not in data and b"/Subtype/Type3" not in data


def test_figures_are_written_with_type42_fonts(run_copy):
    files = plots.write(run_copy)
    names = {p.stem for p in files}
    # one bandwidth and no held-out evaluation: no seconds_vs_bandwidth, no quality_vs_time
    assert names == {"phase_breakdown", "quality_vs_bytes", "timeline", "link_throughput"}
    for p in files:
        assert p.stat().st_size > 1000
        if p.suffix == ".pdf":
            assert pdf_fonts_are_type42(p), p
        else:
            assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_pdfs_from_the_forked_writer_and_from_a_threaded_process_are_the_same_figures(run_copy, tmp_path):
    """save_all writes the PDFs in a forked child when we are single-threaded, here when another thread
    runs (the live display): the same files either way, Type-42 fonts, no child left."""
    import threading

    t = tables.read(run_copy)
    out = {}
    for how in ("forked", "threaded"):
        hold = threading.Event()
        other = threading.Thread(target=hold.wait) if how == "threaded" else None
        if other is not None:
            other.start()
        try:
            assert (threading.active_count() > 1) == (how == "threaded")
            out[how] = plots.save_plots(plots.render(t), tmp_path / how)
        finally:
            hold.set()
    for how, files in out.items():
        assert [p.name for p in files] == [p.name for p in out["forked"]]
        for p in files:
            assert p.stat().st_size > 1000 and (p.suffix == ".png" or pdf_fonts_are_type42(p)), p
    with pytest.raises(ChildProcessError):   # the writer was reaped
        os.waitpid(-1, os.WNOHANG)


NEW_METHODS = ["ddp", "lowrank-ddp", "diloco", "lordo-global", "lordo-local", "rank-4", "some-new-method"]


def test_every_listed_method_has_its_own_colour_and_marker():
    styles = [style_mod.style(m) for m in style_mod.METHOD_STYLE]
    assert len({c for c, _ in styles}) == len({m for _, m in styles}) == len(styles)


def test_an_unlisted_method_never_takes_a_listed_methods_style():
    listed = set(style_mod.METHOD_STYLE.values())
    for method in NEW_METHODS:
        colour, marker = style_mod.style(method)
        assert (colour, marker) not in listed and colour in style_mod.OKABE_ITO, method
    assert len({style_mod.style(m) for m in NEW_METHODS}) > len(style_mod.MARKERS)  # colour and marker vary independently


def test_style_is_the_same_in_every_process():
    """Figures drawn by separate `harness plot` calls must agree: no per-process hash()."""
    code = f"from harness.results import style; print([style.style(m) for m in {NEW_METHODS!r}])"
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           cwd=Path(__file__).resolve().parents[3],
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert outs == {repr([style_mod.style(m) for m in NEW_METHODS]) + "\n"}


def test_pareto_front():
    pts = pd.DataFrame({"bytes": [10, 100, 1000, 50], "quality": [0.1, 0.5, 0.4, 0.05]})
    front = plots.pareto(pts, higher_is_better=True)
    assert list(front["bytes"]) == [10, 100]
    front = plots.pareto(pts, higher_is_better=False)
    assert list(front["bytes"]) == [10, 50]  # 50 bytes buys a lower loss than 10


@pytest.mark.parametrize("cmd", ["report", "plot"])
def test_commands_rebuild_from_the_folder(tmp_path, cmd):
    shutil.copytree(SWEEP, tmp_path / "s")
    result = CliRunner().invoke(app, [cmd, str(tmp_path / "s")])
    assert result.exit_code == 0, result.output
    if cmd == "report":
        assert (tmp_path / "s" / "report.md").exists() and "spar@1.6%" in result.stdout
    else:
        assert len(list((tmp_path / "s" / "figures").glob("*.pdf"))) == 5   # two rates; no held-out evals


def test_tables_written_as_parquet_and_csv(run_copy):
    t = tables.write_tables(run_copy)
    compare.write_summary(run_copy, t)
    back = pd.read_parquet(run_copy / "updates.parquet")
    pd.testing.assert_frame_equal(back, t.updates, check_dtype=False)
    assert len(pd.read_csv(run_copy / "updates.csv")) == len(back)
    summary = json.loads((run_copy / "summary.json").read_text())
    assert summary["complete"] and {m["variant"] for m in summary["methods"]} == {"spar@1.6%", "full"}


def test_results_side_imports_no_torch_and_of_trainers_only_the_torch_free_modules():
    # trainers.plugins: spec's entry-point reader (names only, torch-free); trainers.cards: the torch-free cards
    # (style.py reads each compressor's plot style from its card)
    code = ("import sys, harness.results.tables, harness.results.compare, harness.results.report, harness.results.plots, "
            "harness.results.tracking; bad = [m for m in sys.modules if m == 'torch' or m.startswith('trainers') "
            "and m not in ('trainers', 'trainers.events', 'trainers.spec', 'trainers.plugins') "
            "and not m.startswith('trainers.cards')]; assert not bad, bad")   # the cards: torch-free
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[3])


def test_the_comparison_names_import_without_pandas():
    """Every `harness` command imports config, which names variants through the spec; neither may
    pay for pandas (~1 s on a busy box)."""
    code = ("import sys, harness.run.config; from harness.results.compare import BASELINE; "
            "from trainers.spec import variant_label, variant_slug; "
            "assert variant_slug(variant_label('spar', '1.6%')) == 'spar-1.6pct' and BASELINE == 'full-bf16'; "
            "assert variant_label('full', '1.6%') == 'full'; assert 'pandas' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[3])


def test_finalize_reads_each_file_of_the_run_once(run_copy, monkeypatch):
    """Tables, summary, report and figures of a finished run come from one parse of its folder."""
    reads = collections.Counter()

    def counted(fn):
        def wrapper(path, *args, **kwargs):
            reads[Path(path).relative_to(run_copy).as_posix()] += 1
            return fn(path, *args, **kwargs)
        return wrapper

    monkeypatch.setattr(files, "open_regular", counted(files.open_regular))   # every results file opens here
    launch.finalize(run_copy)
    raw = {p.relative_to(run_copy).as_posix() for p in (run_copy / "cells").rglob("*") if p.is_file()}
    assert set(reads) == raw | {"config.json", "meta.json"}
    assert set(reads.values()) == {1}, reads
    for name in ("updates.parquet", "summary.json", "report.md", "report.html", "figures/timeline.pdf"):
        assert (run_copy / name).exists(), name


def test_measured_container_links_are_part_of_the_report_and_survive_a_rebuild(run_copy):
    """The containers front door writes calibration.json before the cells; the report renders it
    from the run folder, so `harness report` rebuilding report.md keeps the section."""
    from dataclasses import asdict

    from harness.net.calibrate import Row

    row = Row(node="w1", direction="down", rate_bit_s=100e6, goodput_bit_s=95.5e6, goodput_ratio=0.955,
              rtt_want_s=0.071, rtt_median_s=0.0722, rtt_err_s=0.0012, loss_want=0.0, loss_sent=100, loss_lost=0,
              loss_interval=(0, 3), ok_goodput=True, ok_rtt=True, ok_loss=True)
    (run_copy / "calibration.json").write_text(json.dumps(
        {"profile": "transatlantic", "backend": "fallback", "secs": 2, "rows": [asdict(row)]}))
    for _ in range(2):  # written, then rebuilt
        md = report.write(run_copy).read_text()
        assert "## Container links (measured)" in md
        assert "| w1 | down | 100.00 | 95.50 | 71.0 | 72.2 | 0.00% | 0/100 |" in md
