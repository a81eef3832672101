"""The held-out run the figure, report and tracking tests read: tests/fixtures/runs/run-heldout, a real
`harness run --run-id b1-small --model micro --updates 12 --eval-every 3 --eval-problems 32 --base-steps 60
--teacher-steps 120` (spar@12.8% vs full-bf16, 62.5mbit, 2 workers, seeds 1-3; learner and harness
events kept, worker events and link counters left out). Its pass@k stays 0 (a micro model this
short), so `heldout_run` reads it with --quality-metric objective: held-out reverse KL, which fell
1.726 -> 1.649 at 6.2 seed sds for the baseline."""
import json
import shutil
from pathlib import Path

import pytest

HELDOUT = Path(__file__).resolve().parents[2] / "fixtures" / "runs" / "run-heldout"


def objective_copy(dst: Path) -> Path:
    """A copy of run-heldout whose config says --quality-metric objective (a report-time parameter)."""
    shutil.copytree(HELDOUT, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["quality_metric"] = "objective"
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


@pytest.fixture(scope="module")
def heldout_run(tmp_path_factory) -> Path:
    return objective_copy(tmp_path_factory.mktemp("heldout") / "run-heldout")


@pytest.fixture()
def heldout_copy():
    """objective_copy, for tests that need a fresh copy (several, or one to change)."""
    return objective_copy


@pytest.fixture(autouse=True)
def _close_figures():
    """Each test's figures closed after it: pyplot keeps every figure it made until closed (and warns past 20)."""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")
