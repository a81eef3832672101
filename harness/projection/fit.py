"""The cost model's compute terms fitted from a measured run's updates table (medians per variant)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from harness.projection.bytes import Adapter
from harness.projection.network import Network
from harness.projection.predict import Codec, Compute, predict
from harness.results import compare
from trainers import events


LEARNER_PHASES = ("idle", "train", "encode", "decode_replay", "hash", "send_update")   # harness/results/tables.py


@dataclass(frozen=True)
class Fitted:
    """Compute terms measured in one run (medians over updates after the first), per variant."""
    compute: Compute
    workers: int
    model: str
    lora_rank: int
    updates_used: int
    source: str


def med(values) -> float:
    """The project's median (trainers/events.py), 0.0 where a column holds nothing (no such phase)."""
    m = events.median(values)
    return 0.0 if m is None else float(m)


CLOCKS = ("wall", "cpu")


def fit(updates, net: Network | None = None, adapter: Adapter | None = None, shared_cores: int | None = None,
        skip_first: int = 1, source: str = "", clock: str = "wall") -> Fitted:
    """Compute terms from a run's `updates` table (harness/results/tables.py: one row per cell x update).

    Per variant: encode, the learner's decode/replay and a worker's decode/replay are the phases'
    medians. Shared by all variants (medians over every variant's rows): rollout (a worker's
    sampling; with `shared_cores`, divided by the run's contention), train (per the run's worker
    count: it scales with the rollouts trained on), and the learner's own overhead (hash + what no phase covers: the loop's
    bookkeeping, event files). The first `skip_first` updates of each cell are warm-up (joins,
    first-touch allocation) and are left out.

    `clock`: "wall" (seconds as the phases took them) or "cpu": train, encode, the learner's
    decode/replay and a worker's rollout at the CPU seconds their thread used (train_cpu_s, encode_cpu_s,
    decode_replay_cpu_s, worker_rollout_cpu_s; the wall figure where a row has none), what they cost on a
    machine nobody else was using. The rest (hashes, a worker's replay, the loop's own work) has no CPU
    column and stays at wall time.

    With `net` and `adapter` (the run's own network and adapter), what the model still misses on
    a synchronous run (the workers' hashes and event files, framing and checksums, scheduling) is
    solved for as `worker_other_s`, so that the model reproduces the fitted run's median exactly
    (at clock "cpu", the median of its seconds with compute charged at CPU time, compare.cpu_charged);
    the other runs are then predictions."""
    if clock not in CLOCKS:
        raise ValueError(f"clock {clock!r} is not one of {', '.join(CLOCKS)}")
    df = updates[updates["update_index"] > skip_first] if "update_index" in updates else updates
    if df.empty:
        raise ValueError("no update rows to fit (every row is warm-up)")
    workers = int(df["workers"].iloc[0])
    pipeline = int(df["pipeline"].iloc[0])
    slow = max(1.0, workers / shared_cores) if shared_cores else 1.0
    spent = sum(df[f"{p}_s"].fillna(0) for p in LEARNER_PHASES)
    learner_other = med(df["hash_s"]) + med(df["seconds_per_update"] - spent)
    at = lambda g, phase: _clocked(g, phase, clock)   # noqa: E731
    codecs = {}
    for label, g in df.groupby("variant", sort=False):
        codecs[label] = Codec(med(at(g, "encode")), med(at(g, "decode_replay")),
                              med(g["worker_decode_replay_s"]) / slow)
    per_worker_up = df["payload_bytes_up"] / df["workers"]
    compute = Compute(rollout_s=med(at(df, "worker_rollout")) / slow, train_s=med(at(df, "train")),
                      learner_other_s=learner_other, codecs=codecs, shared_cores=shared_cores,
                      rollout_bytes=int(med(per_worker_up)), train_workers=workers)
    model = str(df["model"].iloc[0]) if "model" in df else ""
    rank = int(df["lora_rank"].iloc[0]) if "lora_rank" in df else 0
    if net is not None and adapter is not None and pipeline == 0:
        residuals = []
        for label, g in df.groupby("variant", sort=False):
            method = g["method"].iloc[0]
            budget = budget_text(g["budget_frac"].iloc[0]) if "budget_frac" in g else None
            p = predict(method, adapter, net, compute, 0, budget)
            seconds = compare.cpu_charged(g) if clock == "cpu" else g["seconds_per_update"]
            residuals.append(med(seconds) - p.seconds_per_update)
        compute = replace(compute, worker_other_s=max(0.0, med(residuals)) / slow)
    return Fitted(compute, workers, model, rank, len(df), source)


def _clocked(df, phase: str, clock: str):
    """A phase's seconds per row (`<phase>_s`), at its CPU seconds (`<phase>_cpu_s`) under clock "cpu"
    wherever the row has them."""
    wall = df[f"{phase}_s"]
    cpu = f"{phase}_cpu_s"
    if clock != "cpu" or cpu not in df:
        return wall
    return df[cpu].astype(float).fillna(wall.astype(float))


def budget_text(frac) -> str | None:
    """A results table's budget_frac (0.016) as the label predict() takes ('1.6%'); None/NaN -> None."""
    return None if frac is None or frac != frac else f"{float(frac) * 100:g}%"


def measured(updates, skip_first: int = 1) -> dict[str, float]:
    """Median seconds per update per variant (after the warm-up updates)."""
    df = updates[updates["update_index"] > skip_first]
    return {label: med(g["seconds_per_update"]) for label, g in df.groupby("variant", sort=False)}
