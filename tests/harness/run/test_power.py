"""`harness power`: sizing a run from a pilot; bad input is one line and exit 2."""
import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.run import power

FIXTURE = "tests/fixtures/runs/run-spar-20mbit"  # a run without held-out evaluations


def test_gaps_parse_and_refuse_nonsense():
    assert power.parse_gaps("0.016,0.03") == [0.016, 0.03]
    for bad in ("", "x", "0", "-0.1"):
        with pytest.raises(ValueError, match="--gap"):
            power.parse_gaps(bad)


@pytest.mark.parametrize("args,message", [
    (["/nonexistent-pilot"], "no such results folder"),
    ([FIXTURE], "no held-out evaluations to size from"),
    ([FIXTURE, "--gap", "abc"], "--gap: 'abc' is not a comma list of numbers"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    res = CliRunner().invoke(app, ["power", *args])
    assert res.exit_code == 2 and message in res.output and len(res.output.strip().splitlines()) == 1
