"""The architecture's rules (docs/DESIGN.md "Rooms and their rules") hold, and the check has teeth.

The contracts live in pyproject.toml ([tool.importlinter]); import-linter reads every import,
function-level ones included, so a circle cannot hide behind a lazy import."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"]


def _lint(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(LINT, cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"})


def test_every_import_contract_is_kept():
    res = _lint(ROOT)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "0 broken" in res.stdout


def _cycles(graph, modules: set[str]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root) & modules)))]
        index[root] = low[root] = counter[0]; counter[0] += 1; stack.append(root); on.add(root)
        while work:
            node, it = work[-1]
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]; counter[0] += 1; stack.append(nxt); on.add(nxt)
                    work.append((nxt, iter(sorted(graph.find_modules_directly_imported_by(nxt) & modules))))
                    break
                if nxt in on:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        m = stack.pop(); on.discard(m); comp.append(m)
                        if m == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_no_module_import_circle_anywhere():
    """Module-level circles (a package's __init__ re-exporting its own modules aside: importing a
    submodule runs its package first, which grimp records as no edge)."""
    graph = grimp.build_graph("harness", "trainers")
    assert _cycles(graph, set(graph.modules)) == []


@pytest.mark.parametrize("source, line", [
    ("trainers/spec.py", "from harness import units  # noqa"),                   # services know no harness
    ("harness/results/report.py", "from harness.net import shaper  # noqa"),     # results and net are independent
    ("harness/units.py", "def _f():\n    from harness.run import config  # noqa\n"),  # the floor imports no room, lazily either
    ("trainers/hilo/learner.py", "from trainers.dataparallel import corpus  # noqa"),  # the two families never meet
])
def test_a_deliberately_broken_import_fails_the_check(tmp_path, source, line):
    for folder in ("harness", "trainers"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / source
    target.write_text(target.read_text() + "\n" + line + "\n")
    res = _lint(tmp_path)
    assert res.returncode != 0 and "BROKEN" in res.stdout.upper(), res.stdout[-2000:]


def test_the_circle_finder_finds_a_circle():
    class Graph:
        edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}

        def find_modules_directly_imported_by(self, m):
            return self.edges.get(m, set())
    assert _cycles(Graph(), {"a", "b", "c", "d"}) == [["a", "b", "c"]]
