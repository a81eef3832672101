"""`harness profiles NAME --plan --tc`: the plan as the ip/tc/iptables commands a tc user would type,
compared with golden files (tests/golden/tc-*.sh) and stated as rules below, so a regenerated
golden cannot hide a regression. Regenerate with ``UPDATE_GOLDEN=1`` and review the diff."""
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness import cli
from harness.net import profiles
from harness.net.plan import build_plan, tc_commands
from harness.net.topology import Topology

GOLDEN = Path(__file__).resolve().parents[2] / "golden"
HERE = Path(__file__).resolve().parent
CASES = [("paper-62.5mbit", 2, "fallback"), ("paper-62.5mbit", 2, "netem"), ("transatlantic", 1, "fallback"),
         ("transatlantic", 1, "netem"), (str(HERE / "ge-burst.yaml"), 1, "netem"), ("cellular-trace", 1, "fallback")]


def _commands(name, workers, backend):
    return tc_commands(build_plan(profiles.load(name), Topology.plan("0000", workers), backend))


@pytest.mark.parametrize("name,workers,backend", CASES)
def test_tc_commands_match_golden(name, workers, backend):
    text = _commands(name, workers, backend)
    path = GOLDEN / f"tc-{Path(name).name.removesuffix('.yaml')}-w{workers}-{backend}.sh"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


def test_every_operation_is_one_command_with_tc_units():
    plan = build_plan(profiles.load("transatlantic"), Topology.plan("0000", 1), "netem")
    lines = [line for line in tc_commands(plan).splitlines() if not line.startswith("#")]
    assert len(lines) == len(plan.ops)
    # the worker's 100 Mbit/s, 2 ms burst (25,000 bytes), 35 ms +- 1 ms and 0.01 % loss, both directions
    assert "tc -n wh0000-w1 class replace dev eth0 parent 1: classid 1:1 htb rate 100000000bit burst 25000b " \
           "cburst 25000b quantum 60000" in lines
    netem = [line for line in lines if " netem " in line and "wh0000-w1" in line or " p1 " in line and " netem " in line]
    assert netem and all(line.endswith("delay 35000us 1000us loss 0.01%") for line in netem), netem


def test_fallback_commands_keep_the_rule_order_and_name_the_delay_lines():
    text = _commands("transatlantic", 1, "fallback")
    rules = [line for line in text.splitlines() if " iptables " in line]
    assert rules[0] == ("ip netns exec wh0000-rt iptables -t mangle -A PREROUTING -i p1 -m statistic --mode random "
                        "--probability 0.0001000000 -j DROP")
    assert max(i for i, r in enumerate(rules) if "statistic" in r) < min(i for i, r in enumerate(rules) if "NFQUEUE" in r)
    assert "netem" not in text
    assert re.search(r"^# w1 down: delay line on NFQUEUE 3 in wh0000-w1: delay 35000us jitter 1000us", text, re.M)


def test_gemodel_loss_is_tc_syntax():
    text = _commands(str(HERE / "ge-burst.yaml"), 1, "netem")
    assert re.search(r" loss gemodel [0-9.]+% [0-9.]+% [0-9.]+% [0-9.]+%$", text, re.M), text


def test_the_cli_prints_them_and_refuses_tc_without_plan():
    res = CliRunner().invoke(cli.app, ["profiles", "transatlantic", "--plan", "--tc", "--backend", "netem",
                                       "--workers", "1"])
    assert res.exit_code == 0, res.output
    assert res.stdout == _commands("transatlantic", 1, "netem")
    bad = CliRunner().invoke(cli.app, ["profiles", "transatlantic", "--tc"])
    assert bad.exit_code == 2 and bad.stderr.strip() == "error: --tc: prints a plan's commands, give --plan too"
