"""`harness check` (trainers/check.py): one line per check, exit 1 on a failure, 2 on an unknown name."""
from __future__ import annotations

from trainers import check


def run(names, monkeypatch=None, result=None):
    lines = []
    if monkeypatch is not None:
        monkeypatch.setattr(check, "check", lambda name, budget=None: result)
    return check.main(names, echo=lines.append), lines


def test_a_failing_check_is_printed_with_its_reason_and_exits_1(monkeypatch):
    code, lines = run(["spar"], monkeypatch, {"bytes": "update 0: payload of 9 bytes, 8 stated (exact)", "replay": None})
    assert code == 1
    assert lines == ["compressor spar", "  FAIL bytes: update 0: payload of 9 bytes, 8 stated (exact)",
                     "  PASS replay", "1 check(s) failed"]


def test_an_unknown_name_exits_2_with_close_matches():
    code, lines = run(["digts"])
    assert code == 2 and lines[0].startswith("error: unknown implementation 'digts'; valid names: ")
    assert lines[0].endswith("(did you mean digits?)")


def test_a_task_keeps_the_cheap_half_of_its_contract():
    code, lines = run(["digits"])
    assert code == 0 and lines == ["task digits", "  PASS builds", "  PASS deterministic", "  PASS gold",
                                   "  PASS malformed", "every check passed"]
