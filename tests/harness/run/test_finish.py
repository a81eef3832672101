"""The end of `harness run` (commands.finish): the verdict stays on screen. The whole report (160 lines on
the default run) was printed, so what the terminal kept was the figures' captions; now its first screen,
the title and the `## Verdict` section, then one line naming report.md / report.html and the folder.
`--quiet` prints the folder alone, `--json` one document. From a checked-in real run."""
import json
import shutil
from pathlib import Path

import pytest

from harness.results import report
from harness.run import commands

RUN = Path(__file__).resolve().parents[2] / "fixtures" / "runs" / "run-heldout"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("finish") / "run-heldout"
    shutil.copytree(RUN, run)
    report.write(run)
    return run


def test_a_run_ends_with_the_verdict_and_where_the_report_is(run_dir, capsys):
    commands.finish(run_dir, quiet=False, as_json=False)
    out, err = capsys.readouterr()
    md = (run_dir / "report.md").read_text()
    verdict = md[: md.index("\n## ", md.index("## Verdict"))].rstrip()
    assert out.rstrip("\n") == verdict
    assert out.startswith("# Comparison against `full-bf16`") and "- **`spar@12.8%`" in out
    assert "## Runs" not in out and "Figure" not in out and len(out.splitlines()) < len(md.splitlines()) / 3
    assert err.strip().splitlines()[-1] == f"full report: {run_dir / 'report.md'} and report.html (tables, figures: {run_dir})"


def test_quiet_prints_the_folder_and_json_one_document(run_dir, capsys):
    commands.finish(run_dir, quiet=True, as_json=False)
    assert capsys.readouterr().out == f"{run_dir}\n"
    commands.finish(run_dir, quiet=False, as_json=True)
    assert json.loads(capsys.readouterr().out)["run_dir"] == str(run_dir)


def test_the_first_screen_of_a_report_without_a_further_section_is_all_of_it():
    assert commands.first_screen("# T\n\n## Verdict\n\n- a\n") == "# T\n\n## Verdict\n\n- a"
    assert commands.first_screen("# T\n\n## Verdict\n\n- a\n\n## Runs\n\n- r\n") == "# T\n\n## Verdict\n\n- a"


def test_harness_report_ends_as_a_run_does(run_dir):
    """`harness report` prints the first screen and names the whole report, as `harness run` ends."""
    from typer.testing import CliRunner

    from harness.cli import app

    result = CliRunner().invoke(app, ["report", str(run_dir)])
    assert result.exit_code == 0, result.output
    md = (run_dir / "report.md").read_text()
    assert result.stdout.rstrip("\n") == commands.first_screen(md)
    assert result.stderr.strip().splitlines()[-1] == (f"full report: {run_dir / 'report.md'} and report.html "
                                                      f"(tables, figures: {run_dir})")
