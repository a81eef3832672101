"""The command line without traps: every run flag readable at 80 columns with its default shown,
--x/--no-x switches, --version, and `harness project` on `harness run`'s conventions."""
import json
import re

import pytest
from typer.testing import CliRunner

from harness import cli
from trainers import spec


METAVARS = "LIST|TEXT|INT|FLOAT|<bool>"   # what follows a flag where its entry starts


def _help(command: str, columns: int) -> str:
    res = CliRunner().invoke(cli.app, [command, "--help"], env={"COLUMNS": str(columns), "TERMINAL_WIDTH": str(columns)})
    assert res.exit_code == 0, res.output
    return res.stdout


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_every_flag_is_whole_at_80_columns(command):
    text = _help(command, 80)
    assert max(len(line) for line in text.splitlines()) <= 80
    tokens = set(re.findall(r"--[a-z0-9-]+", text))
    missing = [p.flag for p in spec.PARAMS if p.flag not in tokens]
    assert not missing, missing
    assert "--no-" not in "".join(line[:30] for line in text.splitlines())   # no negation column


def test_run_help_shows_every_default():
    text = re.sub(r"[│\s]+", " ", _help("run", 300))   # one line of words: a wrapped default joins again
    for p in spec.PARAMS:
        if p.default is None:
            continue
        shown = ",".join(map(str, p.default)) if p.many else str(p.default).lower() if p.type is bool else str(p.default)
        entry_start = re.compile(rf" {p.flag} (?:{METAVARS})")
        after = text[entry_start.search(text).start() + 1:]
        nxt = re.search(rf" --[a-z0-9-]+ (?:{METAVARS})", after)
        entry = after[: nxt.start() if nxt else len(after)]
        assert f"[default: {shown}]" in entry, (p.name, entry[:300])
    assert "[unit: bit/s]" in text                    # square brackets are not eaten as rich markup


def test_a_switch_and_its_negation(tmp_path):
    runner = CliRunner()
    off = runner.invoke(cli.app, ["run", "--no-emulation", "--dry-run", "--out", str(tmp_path)])
    assert off.exit_code == 0, off.output
    assert '"emulation": false' in off.stdout
    both = runner.invoke(cli.app, ["run", "--emulation", "--no-emulation", "--dry-run", "--out", str(tmp_path)])
    assert both.exit_code == 2 and "--emulation and --no-emulation: give one of them" in both.stderr


def test_the_dry_run_names_what_each_cell_starts(tmp_path):
    """A data-parallel cell starts an aggregator, not a learner; its baseline is the family's own (ddp)."""
    res = CliRunner().invoke(cli.app, ["run", "--method", "lordo-global", "--seeds", "1", "--dry-run", "--out",
                                       str(tmp_path)])
    assert res.exit_code == 0, res.output
    cells = [line.split(": --")[0] for line in res.stdout.splitlines() if line.startswith("cell ")]
    assert cells == ["cell lordo-global-s1: aggregator + 2 workers", "cell ddp-s1: aggregator + 2 workers"]
    spar = CliRunner().invoke(cli.app, ["run", "--seeds", "1", "--dry-run", "--out", str(tmp_path)])
    assert [line.split(": --")[0] for line in spar.stdout.splitlines() if line.startswith("cell ")] == \
        ["cell spar-12.8pct-s1: learner + 2 workers", "cell full-bf16-s1: learner + 2 workers"]


def test_version():
    res = CliRunner().invoke(cli.app, ["--version"])
    assert res.exit_code == 0
    assert re.fullmatch(r"harness \(wan-harness\) \d+\.\d+\.\d+(, commit [0-9a-f]{12})?\n", res.stdout), res.stdout


def test_project_defaults_are_the_runs():
    res = CliRunner().invoke(cli.app, ["project", "--compute-s", "14", "--bw", "62.5mbit", "--json"])
    assert res.exit_code == 0, res.output
    inputs = json.loads(res.stdout)["inputs"]
    assert inputs["baseline"] == spec.get("baseline").default == "full-bf16"
    assert inputs["lora_rank"] == spec.get("lora_rank").default
    variants = {r["variant"] for r in json.loads(res.stdout)["methods"]}
    assert variants == {f"{spec.get('method').default[0]}@{spec.get('budget').default[0]}", "full-bf16"}, variants
    table = CliRunner().invoke(cli.app, ["project", "--compute-s", "14", "--bw", "62.5mbit"], env={"COLUMNS": "300"})
    title = " ".join(table.stdout.split())   # the title wraps at the table's width
    assert "rank 8 " in title and "speedup vs full-bf16" in title, table.stdout


def _commands(group, path=()):
    """(argv to the command, click command) for every command and subcommand of the app."""
    import click

    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, (*path, name))
        else:
            yield (*path, name), cmd


def test_no_help_text_in_square_brackets_is_eaten_as_rich_markup():
    # `harness run --help` said "needs the  extra": rich read "[tracking]" as a style tag
    import typer

    checked = 0
    for argv, cmd in _commands(typer.main.get_command(cli.app)):
        pieces = [piece for p in cmd.params if getattr(p, "help", None) and not getattr(p, "hidden", False)
                  for piece in re.findall(r"\[[^\]]*\]", p.help.replace("\\[", "["))]
        if not pieces:
            continue
        res = CliRunner().invoke(cli.app, [*argv, "--help"], env={"COLUMNS": "300", "TERMINAL_WIDTH": "300"})
        assert res.exit_code == 0, res.output
        text = re.sub(r"[│\s]+", " ", res.stdout)
        missing = [piece for piece in pieces if re.sub(r"\s+", " ", piece) not in text]
        assert not missing, (argv, missing)
        checked += len(pieces)
    assert checked > 50          # the spec's [unit: ...] / [range: ...] and the commands' own
    assert "needs the [tracking] extra" in re.sub(r"[│\s]+", " ", _help("run", 300))
