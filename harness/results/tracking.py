"""Optional experiment tracking: `harness run --log tensorboard|wandb|mlflow` (off by default).

After each cell, that cell's rows of the results tables (tables.py, read from the folder like the
report) are logged to a local tracker inside the run folder, one tracker run per cell (grouped by
the run id), under the names the field uses (NeMo-RL, TRL):

    seconds_per_update   wall seconds of the update (the learner's clock)
    weight_sync_time     seconds from the learner encoding the update to the median worker having
                         applied it: encode + send_update + worker receive + worker decode_replay (s)
    bytes_sent           framed bytes the learner wrote for the update, all workers (wire_bytes_down)
    bytes_received       framed rollout bytes the workers sent for it, all workers (wire_bytes_up)
    train/<metric>       the training batch's own figure (train_metric_name: distill_loss, reward_mean)
    heldout/pass_at_1, heldout/pass_at_<k>, heldout/gold_prob, heldout/<objective_metric>   at each evaluated version
                         (pass_at, not pass@: TensorBoard rewrites '@' in a tag to '_', MLflow refuses it)

Step = the update index (the policy version; held-out rows at their version). Every backend runs
offline, writing only under the run folder: TensorBoard event files in `tensorboard/<cell>/`
(tensorboardX, no TensorFlow or torch), an MLflow file store in `mlruns/` (experiment = run id),
W&B offline runs in `wandb/` (`wandb sync` uploads them later, if ever). The libraries are optional
extras (`pip install -e '.[tracking]'`); a missing one is one clear line before the run starts.
"""
from __future__ import annotations

import importlib.util
import math
import os
from pathlib import Path

import pandas as pd

from harness.results import tables

BACKENDS = {"tensorboard": "tensorboardX", "wandb": "wandb", "mlflow": "mlflow"}   # name -> module it needs
SYNC_PHASES = ("encode_s", "send_update_s", "worker_receive_s", "worker_decode_replay_s")


def check(kind: str | None) -> None:
    """ValueError with one line when `kind` is unknown or its library is not installed."""
    if kind is None:
        return
    if kind not in BACKENDS:
        raise ValueError(f"--log: unknown tracker {kind!r} (valid: {', '.join(BACKENDS)})")
    if importlib.util.find_spec(BACKENDS[kind]) is None:
        raise ValueError(f"--log {kind}: the {BACKENDS[kind]} package is not installed "
                         "(pip install -e '.[tracking]')")


def _num(v) -> float | None:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def update_metrics(row: pd.Series) -> dict[str, float]:
    """One updates-table row -> {metric name: value} (absent or NaN values left out)."""
    sync = [_num(row.get(c)) for c in SYNC_PHASES]
    out = {"seconds_per_update": _num(row.get("seconds_per_update")),
           "weight_sync_time": sum(s for s in sync if s is not None) if any(s is not None for s in sync) else None,
           "bytes_sent": _num(row.get("wire_bytes_down")), "bytes_received": _num(row.get("wire_bytes_up")),
           f"train/{row.get('train_metric_name') or 'metric'}": _num(row.get("train_metric"))}
    return {k: v for k, v in out.items() if v is not None}


def eval_metrics(row: pd.Series) -> dict[str, float]:
    """One evals-table row -> {heldout/pass_at_1, heldout/pass_at_<k>, heldout/gold_prob, heldout/<objective metric>}."""
    k = _num(row.get("k"))
    out = {"heldout/pass_at_1": _num(row.get("pass_at_1")), "heldout/gold_prob": _num(row.get("gold_prob")),
           f"heldout/pass_at_{int(k) if k else 'k'}": _num(row.get("pass_at_k")),
           f"heldout/{row.get('objective_metric') or 'objective'}": _num(row.get("objective_value"))}
    return {k: v for k, v in out.items() if v is not None}


def cell_steps(t: tables.RunTables, cell: str) -> list[tuple[int, dict[str, float]]]:
    """(step, metrics) of one cell in increasing step order (W&B drops a step logged after a later one):
    an update's metrics and the held-out evaluation at the same version share their step."""
    steps: dict[int, dict[str, float]] = {}
    if not t.updates.empty:
        for _, r in t.updates[t.updates["cell"] == cell].iterrows():
            steps.setdefault(int(r["update_index"]), {}).update(update_metrics(r))
    if not t.evals.empty:
        for _, r in t.evals[t.evals["cell"] == cell].iterrows():
            steps.setdefault(int(r["version"]), {}).update(eval_metrics(r))
    return [(s, steps[s]) for s in sorted(steps) if steps[s]]


def cell_params(t: tables.RunTables, cell: str) -> dict:
    """The cell's coordinates (method, budget, seed, link, spec values) as tracker parameters."""
    rows = t.cells[t.cells["cell"] == cell] if not t.cells.empty else t.cells
    if rows.empty:
        return {"cell": cell}
    r = rows.iloc[0]
    keep = [c for c in rows.columns if c not in ("drops", "restarts", "note", "status")]
    return {c: (None if isinstance(r[c], float) and math.isnan(r[c]) else r[c]) for c in keep}


class Tracker:
    """Logs cells as they finish; `log_cell(name)` reads the run folder again (the report's path)."""

    def __init__(self, kind: str, run_dir: str | Path):
        check(kind)
        self.kind, self.run_dir, self.logged = kind, Path(run_dir), set()

    def log_cell(self, cell: str) -> int:
        """Log one finished cell; returns the number of steps logged (0 when already logged)."""
        if cell in self.logged or not (self.run_dir / "cells" / cell).is_dir():
            return 0
        t = tables.read_run(self.run_dir)
        steps = cell_steps(t, cell)
        getattr(self, f"_{self.kind}")(cell, cell_params(t, cell), steps)
        self.logged.add(cell)
        return len(steps)

    def log_rest(self) -> None:
        """Every cell folder not logged yet (the last cell, or all after an interrupted run); then the
        tracker's files are whole on disk."""
        for d in sorted((self.run_dir / "cells").glob("*")) if (self.run_dir / "cells").is_dir() else []:
            self.log_cell(d.name)
        if self.kind == "wandb" and self.logged:
            # run.finish() hands the records to W&B's service process, which writes the offline
            # .wandb file on its own time: a reader right after could see a cell missing. teardown()
            # waits for the service to write everything.
            import wandb

            wandb.teardown()

    def _tensorboard(self, cell: str, params: dict, steps: list) -> None:
        from tensorboardX import SummaryWriter

        with SummaryWriter(logdir=str(self.run_dir / "tensorboard" / cell)) as w:
            w.add_text("params", "\n".join(f"{k}: {v}" for k, v in params.items()))
            for step, metrics in steps:
                for name, value in metrics.items():
                    w.add_scalar(name, value, step)

    def _mlflow(self, cell: str, params: dict, steps: list) -> None:
        # The file store: plain files in the run folder, no database. MLflow 3 keeps it behind an
        # opt-in (it prefers sqlite, which needs SQLAlchemy and Alembic).
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        import mlflow

        client = mlflow.MlflowClient(tracking_uri=(self.run_dir / "mlruns").resolve().as_uri())
        exp = client.get_experiment_by_name(self.run_dir.name)
        exp_id = exp.experiment_id if exp else client.create_experiment(self.run_dir.name)
        run = client.create_run(exp_id, run_name=cell)
        for k, v in params.items():
            client.log_param(run.info.run_id, k, str(v)[:500])   # MLflow caps a parameter's value
        for step, metrics in steps:
            for name, value in metrics.items():
                client.log_metric(run.info.run_id, name, value, step=step)
        client.set_terminated(run.info.run_id)

    def _wandb(self, cell: str, params: dict, steps: list) -> None:
        os.environ.setdefault("WANDB_SILENT", "true")   # its banner would cut through the progress display
        import wandb

        run = wandb.init(mode="offline", dir=str(self.run_dir), project="wan-harness", group=self.run_dir.name,
                         name=cell, config={k: (v if isinstance(v, (int, float, str, bool)) or v is None else str(v))
                                            for k, v in params.items()}, reinit="create_new")
        for step, metrics in steps:
            run.log(metrics, step=step)
        run.finish()
