"""The examples under examples/wrap/ run unchanged through `harness wrap` (root; torch + gloo in every
node, tens of seconds each on a busy box: marked slow) and `harness report A B` compares them by label.

- ddp.py with torch's PowerSGD hook: step marks give s/step, the phase split, bytes per step per link
  and the ring all-reduce prediction;
- diloco.py: inner steps and an outer all-reduce every K steps;
- the comparison names both labels, the baseline first, with their link and CPU shares, s/step and bytes
  per step.
"""
import json
import sys
from pathlib import Path

import pytest

from tests.harness.wrap.test_wrap import FAST, harness, left_behind, run_folder

pytestmark = [pytest.mark.root, pytest.mark.slow]
EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "wrap"


def wrap(tmp_path: Path, label: str, *job: str) -> tuple[Path, dict]:
    done = harness("wrap", *FAST, "--nodes", "2", "--label", label, "--out", str(tmp_path), "--", sys.executable, *job)
    assert done.returncode == 0, done.stderr[-3000:]
    run = run_folder(done)
    assert left_behind(run, str(EXAMPLES)) == []
    return run, json.loads((run / "summary.json").read_text())


def test_ddp_powersgd_and_diloco_examples_and_their_comparison(tmp_path):
    ddp, s = wrap(tmp_path, "ddp-powersgd", str(EXAMPLES / "ddp.py"), "--hook", "powersgd", "--steps", "4",
                  "--width", "128")
    st = s["steps"]
    assert st["marked"] == 4 and st["counted"] == 3 and st["s_per_step"] > 0
    assert set(st["phases_s"]) == {"forward", "backward+sync", "optimizer"}
    assert s["wire_up_bytes"] > 0 and s["socket_sent_bytes"] > 0
    assert s["model"]["seconds"] > 0 and s["model"]["bottleneck"] in ("w1 -> w2", "w2 -> w1")
    assert "ddp hook=powersgd world=2" in (ddp / "nodes" / "w1" / "stdout.log").read_text()
    assert "s/step** over 3 steps" in (ddp / "report.md").read_text()

    diloco, d = wrap(tmp_path, "diloco", str(EXAMPLES / "diloco.py"), "--inner", "2", "--rounds", "2", "--width", "64")
    assert d["steps"]["marked"] == 4 and "outer_sync" in d["steps"]["phases_s"]
    assert "diloco world=2 rounds=2" in (diloco / "nodes" / "w1" / "stdout.log").read_text()

    done = harness("report", str(ddp), str(diloco), "--out", str(tmp_path / "compared"))
    assert done.returncode == 0, done.stderr
    table = (tmp_path / "compared" / "report.md").read_text()
    assert "Baseline: 'ddp-powersgd'" in table
    rows = {line.split(" | ")[0][2:]: line for line in table.splitlines() if line.startswith("| ")}
    assert "| none | 1 |" in rows["ddp-powersgd"] and "| none | 1 |" in rows["diloco"] and "1.00x" in table
    assert "50mbit, 2 ms one-way" in rows["diloco"]      # each group's link and CPU shares are named

    done = harness("report", str(ddp), str(diloco), "--label", "a,b", "--out", str(tmp_path / "relabelled"))
    assert done.returncode == 0, done.stderr
    assert "Baseline: 'a'" in (tmp_path / "relabelled" / "report.md").read_text()
    done = harness("report", str(ddp), str(diloco), "--label", "a", "--out", str(tmp_path / "bad"))
    assert done.returncode == 2 and "--label: 'a' names 1 folders" in done.stderr
    assert not (tmp_path / "bad").exists()
