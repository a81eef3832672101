"""The report's per-worker times (harness/results/workers_report.py): compute, CPU, injected delay, idle and
wait per update from the workers' event rows, and the straggler named. Rows as the services write them."""
import json
from dataclasses import dataclass
from pathlib import Path

from harness.results import workers_report


def _rows(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _worker(path: Path, rollout: float, cpu: float, straggle: float, idle: float, n: int = 4) -> None:
    rows = []
    for t in range(n):
        rows.append({"kind": "rollouts", "batch": t, "durations_s": {"rollout": rollout, "send_rollouts": 0.01,
                                                                   **({"straggle": straggle} if straggle else {})},
                     "cpu_s": {"rollout": cpu, "send_rollouts": 0.001}, "straggle_s": straggle})
        rows.append({"kind": "update", "version": t + 1, "durations_s": {"receive": 0.02, "idle": idle,
                                                                         "decode_replay": 0.05, "hash": 0.01},
                     "cpu_s": {"decode_replay": 0.05, "hash": 0.01}})
    _rows(path, rows)


@dataclass
class _Run:
    dir: Path
    config: dict


def test_per_worker_times_and_the_straggler(tmp_path):
    cell = tmp_path / "r1" / "cells" / "spar-12.8pct-s1"
    cell.mkdir(parents=True)
    (cell / "launch.json").write_text(json.dumps({"cpu_shares": {"w2": 0.25},
                                                 "cpu_throttled": {"w2": {"throttled_s": 2.0}}}))
    _worker(cell / "events-w1.jsonl", rollout=0.2, cpu=0.2, straggle=0.5, idle=0.1)
    _worker(cell / "events-w2.jsonl", rollout=0.6, cpu=0.15, straggle=0.0, idle=0.3)     # 25 % of a core
    _worker(cell / "events-w3.jsonl", rollout=0.2, cpu=0.2, straggle=0.0, idle=0.8)
    times = {w["worker"]: w for w in workers_report.worker_times(cell)}
    assert times["w2"]["cpu_share"] == 0.25 and times["w1"]["cpu_share"] is None
    assert times["w2"]["throttled_s"] == 0.5 and times["w1"]["throttled_s"] is None    # 2 s over 4 updates
    assert abs(times["w2"]["compute_s"] - 0.66) < 1e-9 and abs(times["w2"]["compute_cpu_s"] - 0.21) < 1e-9
    assert times["w1"]["straggle_s"] == 0.5 and times["w3"]["idle_s"] == 0.8
    assert abs(times["w1"]["wait_s"] - 0.03) < 1e-9
    assert [w for w, t in times.items() if t["straggler"]] == ["w1"]     # 0.76 s of compute + delay vs 0.66
    run = _Run(tmp_path / "r1", {"straggler": "w1:exp:500ms", "worker_cpu": None, "profile_doc": {}})
    md = "\n".join(workers_report.section([run]))
    assert md.startswith("## Workers: uneven compute and stragglers")
    assert "| r1 | spar-12.8pct-s1 | w1 | - | exp 0.5 s | 0.260 (0.260) | 0.500 | 0.100 | 0.030 | straggler |" in md
    assert "| w2 | 0.25 (0.500) | - | 0.660 (0.210) |" in md
    assert "the straggler was w1 (0.760 s/update" in md


def test_no_section_for_an_even_run(tmp_path):
    (tmp_path / "r2" / "cells" / "c").mkdir(parents=True)
    assert workers_report.section([_Run(tmp_path / "r2", {"profile_doc": {"defaults": {"rate": "1mbit"}}})]) == []
