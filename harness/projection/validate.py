"""`harness project --from RUN --validate RUNS`: fit the compute terms on one measured run and predict
the others (each with its own links, workers, depth and adapter); measured vs predicted."""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from harness.projection import costmodel as cm
from harness.projection.inputs import MeasuredRun, adapter_for, host_cc
from harness import units
from trainers import spec

# A receive measured below this prints as 0.000 s in the table: a relative error of it is noise ("-").
RECEIVE_FLOOR_S = 0.0005


@dataclass(frozen=True)
class Check:
    run: str
    variant: str
    workers: int
    rate_bit_s: float | None
    delay_s: float
    loss_frac: float
    pipeline: int
    measured_s: float
    predicted_s: float
    receive_measured_s: float      # a worker's receive of the update (header to last byte), median
    receive_predicted_s: float     # the model's transfer less the first byte's one-way delay
    compute_measured_s: float      # train + a worker's rollout, medians: what load on the box moves
    compute_predicted_s: float
    baseline: str = "full-bf16"    # the run's own --baseline: what its speedups are against
    model: str = ""                # the run's model and LoRA rank: the fit's compute holds for its own only
    lora_rank: int = 0

    @property
    def receive_error(self) -> float:
        if not self.receive_measured_s >= RECEIVE_FLOOR_S:   # none recorded, or (near) zero: no error to state
            return float("nan")
        return (self.receive_predicted_s - self.receive_measured_s) / self.receive_measured_s

    @property
    def error(self) -> float:
        return (self.predicted_s - self.measured_s) / self.measured_s


def validate(fit_run: str | Path | MeasuredRun, runs: list[str | Path], cc: str | None = None,
             shared_cores: int | None = None) -> tuple[cm.Fitted, list[Check]]:
    """Fit the compute terms on `fit_run` and predict every HiLo variant of every run in `runs` (each
    with its own links, workers, depth and adapter): measured vs predicted median seconds per update.
    A data-parallel variant is left out (the cost model's seconds are HiLo's round)."""
    from harness.projection.source import open_run
    from harness.results.tables import read

    def load(run):
        r = run if isinstance(run, MeasuredRun) else MeasuredRun(Path(run), read(run))
        cfg, prof = r.config, r.profile()
        net = (cm.Network.from_profile(prof, cfg["workers"], cc=cc or host_cc()) if prof is not None else
               cm.Network.uniform(cfg["workers"], None, cc=cc or host_cc()))
        return r.updates, cfg, r.meta, net, adapter_for(cfg["model"], cfg["lora_rank"])

    fit_on = fit_run if isinstance(fit_run, MeasuredRun) else open_run(str(fit_run))
    updates, cfg, meta, net, own = load(fit_on)
    cores = shared_cores if shared_cores is not None else (meta.get("cpus") if cfg.get("emulation", True) else None)
    fitted = cm.fit(updates, net, own, shared_cores=cores, source=str(fit_on.path))
    checks = []
    for run in runs:
        u, cfg, _, net, a = load(run)
        if u.empty:
            continue
        measured = cm.measured(u)
        for variant, method, frac in u[["variant", "method", "budget_frac"]].drop_duplicates().itertuples(index=False):
            budget = cm.budget_text(frac)   # the tables hold the fraction; predict takes the label
            if variant not in measured:          # a cell with no update past the warm-up (unfinished run)
                continue
            p = cm.predict(method, a, net, fitted.compute, int(cfg["pipeline"]), budget)
            link = net.workers[0].down
            rows = u[(u["variant"] == variant) & (u["update_index"] > 1)]
            one_way = cm.path(net.learner, net.workers[0]).delay_s
            checks.append(Check(Path(run).name, variant, net.n, link.rate_bit_s, link.delay_s, link.loss_frac,
                                int(cfg["pipeline"]), measured[variant], p.seconds_per_update,
                                cm.med(rows["worker_receive_s"]), max(0.0, p.transfer_down_s - one_way),
                                cm.med(rows["train_s"]) + cm.med(rows["worker_rollout_s"]),
                                p.train_s + p.rollout_s, str(cfg.get("baseline") or "full-bf16"),
                                str(cfg["model"]), int(cfg["lora_rank"])))
    return fitted, checks


def data_parallel_only(runs: list[str | Path]) -> dict[str, list[str]]:
    """Run name -> its methods, for each of `runs` that ran data-parallel methods only (its config.json): the
    cost model predicts HiLo's round, so such a run has nothing to validate."""
    from harness.results import files

    out = {}
    for run in runs:
        methods = (files.read_json(Path(run) / "config.json", {}) or {}).get("method") or []
        if methods and all(spec.is_data_parallel(m) for m in methods):
            out[Path(run).name] = list(methods)
    return out


def nothing_to_validate(runs: list[str | Path], fit_run: str | Path) -> str:
    """The one line --validate says when no run given has a HiLo update to predict (exit 2)."""
    dp = data_parallel_only(runs)
    if runs and len(dp) == len(runs):
        names = "; ".join(f"{r} ({', '.join(m)})" for r, m in dp.items())
        return (f"--validate: nothing to validate for data-parallel runs: {names} ran data-parallel methods only "
                "(the cost model predicts HiLo's round; a data-parallel run's bytes per step are in its report)")
    if not runs:
        return f"--validate: nothing to validate: give runs other than {fit_run}, the one the compute is fitted on"
    return "--validate: nothing to validate: no run given recorded a HiLo update past its first (warm-up)"


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _workers_possessive(count: int) -> str:
    return f"{count} worker's" if count == 1 else f"{count} workers'"


def other_models(fitted: cm.Fitted, checks: list[Check]) -> str | None:
    """One warning line when a validated run's model or rank is not the fit's (its rollout and training are
    predicted at the fit's model's compute, so its error says nothing of the model), else None."""
    own = (fitted.model, fitted.lora_rank)
    other = {c.run: (c.model, c.lora_rank) for c in checks if (c.model, c.lora_rank) != own}
    if not other:
        return None
    runs = ", ".join(f"{r} ({m} rank {k})" for r, (m, k) in list(other.items())[:4]) + \
        (f" and {len(other) - 4} more" if len(other) > 4 else "")
    return (f"warning: compute fitted on {fitted.model} rank {fitted.lora_rank}, but {runs} ran another model: their "
            "rollout and training are predicted at the fit's compute, so their errors measure the models' difference")


def compute_words(fitted: cm.Fitted) -> str:
    """The fitted compute terms in words with units (per update), one line per part."""
    c = fitted.compute
    ms = lambda s: f"{s * 1e3:.3g} ms"   # noqa: E731
    cores = f"; {c.shared_cores} shared cores (N workers' rollouts take max(1, N / cores) x one's)" \
        if c.shared_cores else ""
    lines = [f"a worker's rollout {ms(c.rollout_s)}, the learner's training {ms(c.train_s)} (on "
             f"{_workers_possessive(c.train_workers or fitted.workers)} rollouts), the harness's own work {ms(c.learner_other_s)} "
             f"on the learner and {ms(c.worker_other_s)} on a worker, per update{cores}; a rollout message "
             f"{c.rollout_bytes:,} B"]
    lines += [f"{label}: encode {ms(k.encode_s)}, decode + replay {ms(k.learner_replay_s)} on the learner and "
              f"{ms(k.worker_replay_s)} on a worker" for label, k in c.codecs.items()]
    return "\n".join("  " + line for line in lines)


def validation_table(checks: list[Check]) -> str:
    """Markdown: one row per run and variant, then the median and worst absolute error."""
    lines = ["| run | variant | workers | bw | delay | loss | depth | measured s | predicted s | error "
             "| receive measured s | receive predicted s | error | compute measured / model |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in checks:
        lines.append(f"| {c.run} | {c.variant} | {c.workers} | "
                     f"{units.format_rate(c.rate_bit_s) if c.rate_bit_s else '-'} | {c.delay_s * 1e3:g} ms | "
                     f"{c.loss_frac * 100:g} % | {c.pipeline} | {c.measured_s:.3f} | {c.predicted_s:.3f} | "
                     f"{c.error * 100:+.1f} % | {c.receive_measured_s:.3f} | {c.receive_predicted_s:.3f} | "
                     f"{_signed(c.receive_error)} | {_ratio(c.compute_measured_s, c.compute_predicted_s)} |")
    errors = sorted(abs(c.error) for c in checks)
    if errors:
        lines.append(f"\nseconds per update: median |error| {statistics.median(errors) * 100:.1f} %, worst "
                     f"{errors[-1] * 100:.1f} % ({_n(len(errors), 'prediction')})")
    speed = speedups(checks)
    if speed:
        lines += ["", "| run | variant | speedup measured | speedup predicted | error |", "|---|---|---:|---:|---:|"]
        lines += [f"| {r} | {v} | {m:.2f}x | {q:.2f}x | {(q - m) / m * 100:+.1f} % |" for r, v, m, q in speed]
        errs = sorted(abs(q - m) / m for _, _, m, q in speed)
        bases = ", ".join(dict.fromkeys(c.baseline for c in checks))
        lines.append(f"\nspeedup vs the runs' baseline ({bases}): median |error| {statistics.median(errs) * 100:.1f} %, worst "
                     f"{errs[-1] * 100:.1f} % ({_n(len(errs), 'prediction')})")
    big = sorted(abs(c.receive_error) for c in checks if c.receive_measured_s >= 0.05)
    if big:
        lines.append(f"update transfer (receives of 50 ms or more): median |error| {statistics.median(big) * 100:.1f} %, "
                     f"worst {big[-1] * 100:.1f} % ({_n(len(big), 'prediction')})")
    return "\n".join(lines)


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b > 0 else "-"


def _signed(error: float) -> str:
    """A relative error as the table prints it ('-' where the measured figure was 0: a run that recorded none)."""
    return f"{error * 100:+.1f} %" if error == error and abs(error) != float("inf") else "-"


def speedups(checks: list[Check]) -> list[tuple[str, str, float, float]]:
    """(run, variant, measured, predicted) speedup over the run's own baseline (its --baseline,
    e.g. full-bf16) in the same run: the ratio the harness reports, in which load drift common to
    a run's cells cancels."""
    out = []
    for run in dict.fromkeys(c.run for c in checks):
        cells = {c.variant: c for c in checks if c.run == run}
        name = next(iter(cells.values())).baseline
        base = cells.get(name)
        if base is None:
            continue
        out += [(run, v, base.measured_s / c.measured_s, base.predicted_s / c.predicted_s)
                for v, c in cells.items() if v != name]
    return out

