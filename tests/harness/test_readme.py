"""The README's two commands are what CI runs: `.ci/run` carries the README's first
command, apt line included, as written (cut before its 4-minute main job), installs nothing before
it, then runs the README's test command as written before it installs anything else (so CI fails where
the README would), and last installs the extras (chromium, Docker) and runs only the tests that need them."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAIN_JOB = " && .venv/bin/harness run"


def readme_commands() -> list[str]:
    block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def ci_lines() -> list[str]:
    return (ROOT / ".ci" / "run").read_text().splitlines()


def test_the_readme_has_a_setup_and_run_command_and_a_test_command():
    main, tests = readme_commands()
    assert main.startswith("apt-get update && apt-get install -y ") and main.endswith(MAIN_JOB)
    apt = main.split(" && ")[1]
    assert {"python3-venv", "iptables"} <= set(apt.split())     # venv for python3 -m venv; iptables-restore/-save
    assert "pytest" in tests


def test_ci_runs_the_readme_first_command_before_installing_anything():
    main, tests = readme_commands()
    setup = main[: -len(MAIN_JOB)]
    lines = ci_lines()
    assert setup in lines, f".ci/run must carry the README's first command as written: {setup}"
    before = lines[: lines.index(setup)]
    assert not [line for line in before if not line.startswith("#") and re.search(r"\b(apt-get|apt|pip)\b", line)], before
    after = lines[lines.index(setup) + 1:]
    assert ".venv/bin/harness doctor" in after
    assert any(line.startswith(".venv/bin/harness run ") and "--model micro" in line for line in after)


def test_ci_runs_the_readme_test_command_before_the_extras_then_only_the_tests_that_need_them():
    main, tests = readme_commands()
    lines = [line for line in ci_lines() if line.strip() and not line.lstrip().startswith("#")]
    assert tests in lines, f".ci/run must carry the README's test command as written: {tests}"
    between = lines[lines.index(main[: -len(MAIN_JOB)]) + 1: lines.index(tests)]
    assert not [line for line in between if re.search(r"\b(apt-get|apt|pip|install)\b", line)], between
    extras = lines[lines.index(tests) + 1:]
    second = [line for line in extras if "pytest" in line]
    assert len(second) == 1 and second[0] == extras[-1], extras
    targets = second[0].split("pytest", 1)[1].split()
    assert targets and all(t.startswith("tests/docker") or "report_html" in t for t in targets), targets
