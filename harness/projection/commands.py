"""`harness project`: what a method would do at a scale this box cannot run (the cost model, harness/projection/costmodel.py).

    harness project --model qwen2.5-1.5b --workers 8 --bw 62.5mbit --compute-s 14 \\
        --method spar --budget 1.6% --baseline full-bf16 --encode-s 1 --replay-s 0.5 --send background

Inputs: the adapter's factor shapes (the named model instantiated on the meta device: the only
torch this command touches), the network (worker links from --bw/--delay/--loss or a profile; a
shaped learner link is shared by every worker; an optional relay tree), and the compute per
update (given, or fitted from a measured run with --from). Output: a table per method and
pipelining depth (seconds per update by phase, bytes, speedup vs the baseline), or --json;
--figures DIR adds speedup vs bandwidth and seconds per update vs workers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.projection import costmodel as cm
from harness import units
from trainers import spec

PAPER_MODELS = ("qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b")   # the bandwidth figure's default lines


@dataclass(frozen=True)
class Inputs:
    adapter: cm.Adapter
    net: cm.Network
    compute: cm.Compute
    variants: tuple[tuple[str, str | None], ...]
    baseline: str
    pipelines: tuple[int, ...]
    send: str
    options: dict
    notes: tuple[str, ...]
    model: str
    rate_bit_s: float | None


def adapter_for(model: str, rank: int) -> cm.Adapter:
    """The adapter's factor shapes, read from the model built on the meta device."""
    import warnings

    from trainers.model.models import lora_shapes

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cm.Adapter.from_shapes(lora_shapes(model, rank), rank, model)


def parameter_count(model: str) -> int:
    from trainers.model.models import count_parameters

    return count_parameters(model).total


def _rate(text: str | None, flag: str) -> float | None:
    try:
        return None if text in (None, "", "none") else units.parse_rate(text)
    except ValueError as err:
        raise ValueError(f"{flag}: {err}") from None


def _time(text: str | None, flag: str) -> float:
    try:
        return 0.0 if text in (None, "") else units.parse_time(text)
    except ValueError as err:
        raise ValueError(f"{flag}: {err}") from None


def _loss(text: str | None) -> float:
    try:
        return 0.0 if text in (None, "") else units.parse_percent(text)
    except ValueError as err:
        raise ValueError(f"--loss: {err}") from None


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """--opt powersgd_rank=4 --opt spar_dtype=bf16: compressor options as run-spec parameters."""
    out = {}
    names = {p.name for p in spec.PARAMS if p.group == "compressor"} | set(cm.MODEL_OPTIONS)
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in names:
            raise ValueError(f"--opt: {pair!r} is not NAME=VALUE with NAME a compressor option "
                             f"({', '.join(sorted(names))})")
        out[key] = model_option(key, value) if key in cm.MODEL_OPTIONS else spec.parse_value(key, value)
    return out


def model_option(key: str, value: str) -> float:
    """A cost-model-only option (cm.MODEL_OPTIONS: delta's measured density and codec ratio), a fraction in (0, 1]."""
    try:
        x = float(value)
    except ValueError:
        x = float("nan")
    if not 0 < x <= 1:
        raise ValueError(f"--opt: {key}={value!r} must be a fraction in (0, 1]")
    return x


def network(workers: int, bw: str | None, delay: str | None, loss: str | None, profile: str | None,
            learner_bw: str | None, relay_fanout: int | None, cc: str, mtu: int) -> tuple[cm.Network, float | None]:
    kw = dict(relay_fanout=relay_fanout, cc=cc, mtu=mtu)
    if profile:
        from harness.net import profiles

        prof = profiles.load(profile)
        given = {k: v for k, v in dict(rate=bw, delay=delay, loss=loss).items() if v is not None}
        if given:
            prof = profiles.with_link(prof, given)
        net = cm.Network.from_profile(prof, workers, **kw)
        if learner_bw:
            rate = _rate(learner_bw, "--learner-bw")
            net = replace(net, learner=cm.Node(replace(net.learner.up, rate_bit_s=rate),
                                               replace(net.learner.down, rate_bit_s=rate)))
        return net, net.workers[0].down.rate_bit_s
    rate = _rate(bw, "--bw")
    net = cm.Network.uniform(workers, rate, _time(delay, "--delay"), _loss(loss),
                             _rate(learner_bw, "--learner-bw"), **kw)
    return net, rate


def build(*, model: str, lora_rank: int, workers: int, bw: str | None, delay: str | None, loss: str | None,
          profile: str | None, learner_bw: str | None, relay_fanout: int | None, method: str, budget: str,
          baseline: str, pipeline: str, compute_s: float | None, rollout_s: float | None, train_s: float | None,
          rollout_share: float, encode_s: float, replay_s: float, send: str, cc: str, mtu: int,
          rollout_bytes: int | None, from_run: str | None, shared_cores: str | None, opt: list[str]) -> Inputs:
    """Every flag of `harness project`, validated (ValueError: one line naming the flag)."""
    spec.check_model(model)
    if not 1 <= workers <= 1 << 20:
        raise ValueError(f"--workers: {workers} is outside [1, 1048576]")
    if not 1 <= lora_rank <= 4096:
        raise ValueError(f"--lora-rank: {lora_rank} is outside [1, 4096]")
    methods = [spec.check_method(m.strip()) for m in method.split(",") if m.strip()]
    budgets = spec.parse_value("budget", budget)
    spec.check_method(baseline)
    opts = parse_options(opt)   # a set powersgd_rank opts powersgd out of the budget (spec.takes_budget)
    variants = tuple(dict.fromkeys((m, b if spec.takes_budget(m, opts) else None) for m in methods for b in budgets))
    try:
        pipelines = tuple(sorted({int(x) for x in pipeline.split(",") if x.strip()}))
    except ValueError:
        raise ValueError(f"--pipeline: {pipeline!r} is not 0, 1 or 0,1") from None
    if not pipelines or set(pipelines) - {0, 1}:
        raise ValueError(f"--pipeline: {pipeline!r} is not 0, 1 or 0,1")
    if send not in cm.SEND_MODES:
        raise ValueError(f"--send: {send!r} is not one of {', '.join(cm.SEND_MODES)}")
    if cc not in cm.CONGESTION_CONTROLS:
        raise ValueError(f"--cc: {cc!r} is not one of {', '.join(cm.CONGESTION_CONTROLS)}")
    if not 576 <= mtu <= 65535:
        raise ValueError(f"--mtu: {mtu} is outside [576, 65535]")
    if relay_fanout is not None and relay_fanout < 1:
        raise ValueError(f"--relay-fanout: {relay_fanout} must be >= 1")
    cores = None if shared_cores in (None, "none", "") else int(shared_cores)
    options = parse_options(opt)
    try:
        net, rate = network(workers, bw, delay, loss, profile, learner_bw, relay_fanout, cc, mtu)
    except ValueError as err:
        raise ValueError(str(err) if str(err).startswith("--") else f"--profile: {err}") from None
    adapter = adapter_for(model, lora_rank)
    notes: list[str] = []
    if from_run:
        compute, more = fitted_compute(from_run, adapter, shared_cores=cores)
        notes += more
    elif compute_s is None and (rollout_s is None or train_s is None):
        raise ValueError("--compute-s: give the compute per update (or --rollout-s and --train-s, or --from RUN)")
    else:
        compute = cm.Compute(0.0, 0.0, shared_cores=cores)
    if compute_s is not None or rollout_s is not None or train_s is not None:
        base = cm.split_compute(compute_s or 0.0, rollout_share)
        given_train = compute_s is not None or train_s is not None
        compute = replace(compute, rollout_s=rollout_s if rollout_s is not None else base.rollout_s,
                          train_s=train_s if train_s is not None else base.train_s,
                          train_workers=None if given_train else compute.train_workers)  # as given: for --workers
    if not from_run or encode_s or replay_s:
        codec = cm.Codec(encode_s, replay_s, replay_s)
        codecs = dict(compute.codecs)
        for m, b in variants:
            if m not in spec.FULL_METHODS and not spec.RANK_METHOD.match(m):
                codecs[spec.variant_label(m, b)] = codec
        compute = replace(compute, codecs=codecs)
        if not encode_s and not replay_s and any(m in spec.COMPRESSOR_OPTIONS for m, _ in variants):
            notes.append("encode and replay cost of compressed methods taken as 0 (give --encode-s/--replay-s)")
    if rollout_bytes is not None:
        compute = replace(compute, rollout_bytes=rollout_bytes)
    if cores is not None and compute.shared_cores != cores:
        compute = replace(compute, shared_cores=cores)
    return Inputs(adapter, net, compute, variants, baseline, pipelines, send, options, tuple(notes), model, rate)


def fitted_compute(run: str, target: cm.Adapter, shared_cores: int | None = None) -> tuple[cm.Compute, list[str]]:
    """Compute terms fitted on a measured run (its own network and adapter), codec terms scaled to
    the target adapter's size when it differs (linear in adapter parameters, same hardware)."""
    from harness.net import profiles
    from harness.results import tables as results

    tables = results.read(run)
    if tables.updates.empty:
        raise ValueError(f"--from: {run} has no update rows")
    cfg, meta = tables.runs[0].config, tables.runs[0].meta
    prof = profiles.from_doc(cfg["profile_doc"], cfg["profile_name"])
    cores = shared_cores if shared_cores is not None else (meta.get("cpus") if cfg.get("emulation", True) else None)
    own = adapter_for(cfg["model"], cfg["lora_rank"])
    net = cm.Network.from_profile(prof, cfg["workers"], cc=host_cc())
    fitted = cm.fit(tables.updates, net, own, shared_cores=cores, source=str(run))
    notes = [f"compute fitted on {run} ({fitted.updates_used} updates, {cfg['model']} rank {cfg['lora_rank']}, "
             f"{cfg['workers']} workers{f', {cores} shared cores' if cores else ''})"]
    compute = fitted.compute
    if own.n_params != target.n_params:
        factor = target.n_params / own.n_params
        compute = replace(compute, codecs={k: c.scaled(factor) for k, c in compute.codecs.items()})
        notes.append(f"codec terms scaled x{factor:.3g} to the target adapter; rollout and train kept as measured "
                     "(give --compute-s for the target model)")
    return compute, notes


def host_cc() -> str:
    """This host's TCP congestion control (what an emulated run here used), else cubic."""
    try:
        cc = Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
    except OSError:
        return "cubic"
    return cc if cc in cm.CONGESTION_CONTROLS else "cubic"


def project(inputs: Inputs) -> list[cm.Prediction]:
    out = []
    for depth in inputs.pipelines:
        out += cm.compare(inputs.variants, inputs.baseline, inputs.adapter, inputs.net, inputs.compute, depth,
                          inputs.options, inputs.send)
    return out


def to_json(inputs: Inputs, rows: list[cm.Prediction]) -> dict:
    net = inputs.net
    return {
        "inputs": {"model": inputs.model, "lora_rank": inputs.adapter.rank, "adapter_params": inputs.adapter.n_params,
                   "workers": net.n, "worker_rate_bit_s": inputs.rate_bit_s,
                   "learner_rate_bit_s": net.learner.up.rate_bit_s, "relay_fanout": net.relay_fanout,
                   "cc": net.cc, "mtu": net.mtu, "goodput_ratio": cm.goodput_ratio(net.mtu), "send": inputs.send,
                   "baseline": inputs.baseline, "rollout_s": inputs.compute.rollout_s,
                   "train_s": inputs.compute.train_s, "shared_cores": inputs.compute.shared_cores,
                   "rollout_bytes": inputs.compute.rollout_bytes, "notes": list(inputs.notes)},
        "methods": [r.to_json() for r in rows],
    }


def table_text(inputs: Inputs, rows: list[cm.Prediction]):
    from rich.table import Table

    a, net = inputs.adapter, inputs.net
    link = (f"{units.format_rate(inputs.rate_bit_s)} per worker link" if inputs.rate_bit_s else "unshaped worker links")
    if net.shared_uplink:
        link += f", learner link {units.format_rate(net.learner.up.rate_bit_s)} shared"
    if net.relay_fanout:
        link += f", relay tree k={net.relay_fanout}"
    title = (f"{inputs.model} rank {a.rank} ({a.n_params / 1e6:.1f} M adapter params), {net.n} workers, {link}; "
             f"send {inputs.send}, {net.cc}; speedup vs {inputs.baseline}")
    t = Table(title=title)
    for col in ("variant", "depth", "s/update", "rollout", "train", "encode", "down", "up", "replay", "other",
                "bound", "MB/worker", "speedup"):
        t.add_column(col, justify="left" if col in ("variant", "bound") else "right")
    for r in rows:
        t.add_row(r.variant, str(r.pipeline), f"{r.seconds_per_update:.2f}", f"{r.rollout_s:.2f}", f"{r.train_s:.2f}",
                  f"{r.encode_s:.2f}", f"{r.transfer_down_s:.2f}", f"{r.transfer_up_s:.2f}", f"{r.replay_s:.2f}",
                  f"{r.other_s:.2f}", r.bound, f"{r.bytes_down_per_worker / 1e6:.2f}", f"{r.speedup:.2f}x")
    return t


# ---- figures -----------------------------------------------------------------------------------

def _scaled_compute(inputs: Inputs, model: str, rank: int) -> tuple[cm.Adapter, cm.Compute]:
    """Another model's adapter and compute: rollout and train scaled by total parameters, codec
    terms by adapter parameters (a first-order assumption, stated in the figure's caption)."""
    adapter = inputs.adapter if model == inputs.model else adapter_for(model, rank)
    if model == inputs.model:
        return adapter, inputs.compute
    f_model = parameter_count(model) / parameter_count(inputs.model)
    f_adapter = adapter.n_params / inputs.adapter.n_params
    c = inputs.compute
    return adapter, replace(c, rollout_s=c.rollout_s * f_model, train_s=c.train_s * f_model,
                            codecs={k: v.scaled(f_adapter) for k, v in c.codecs.items()},
                            default_codec=c.default_codec.scaled(f_adapter))


def figures(inputs: Inputs, out: str | Path, models: tuple[str, ...] = PAPER_MODELS) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from harness.results import style

    out = Path(out)
    method, budget = inputs.variants[0]
    label = spec.variant_label(method, budget)
    depth = inputs.pipelines[0]
    paths = []
    rates = [10 ** (5 + i / 8) for i in range(8 * 6 + 1)]            # 100 kbit/s .. 100 Gbit/s
    with plt.rc_context(style.STYLE):
        fig, ax = plt.subplots(figsize=(4.6, 3.2))
        for i, model in enumerate(dict.fromkeys((inputs.model, *models))):
            adapter, compute = _scaled_compute(inputs, model, inputs.adapter.rank)
            colour = style.OKABE_ITO[i % len(style.OKABE_ITO)]
            for d, ls in ((depth, "-"),) + (((1 - depth, "--"),) if len(inputs.pipelines) > 1 else ()):
                speed = []
                for r in rates:
                    net = replace(inputs.net, workers=tuple(replace(w, up=replace(w.up, rate_bit_s=r),
                                                                     down=replace(w.down, rate_bit_s=r))
                                                            for w in inputs.net.workers))
                    a = cm.predict(method, adapter, net, compute, d, budget, inputs.options, inputs.send)
                    b = cm.predict(inputs.baseline, adapter, net, compute, d, None, inputs.options, inputs.send)
                    speed.append(b.seconds_per_update / a.seconds_per_update)
                crossings = [_cross(rates[j - 1], rates[j], speed[j - 1], speed[j]) for j in range(1, len(rates))
                             if (speed[j - 1] - 1) * (speed[j] - 1) < 0]   # where compression stops paying
                for x in crossings:
                    ax.plot([x / 1e6], [1.0], "o" if ls == "-" else "s", color=colour, ms=4, mfc="white")
                name = f"{model} (depth {d})" if len(inputs.pipelines) > 1 else model
                cross = f", = 1 at {crossings[0] / 1e6:,.0f} Mbit/s" if crossings else ", pays throughout"
                ax.plot([r / 1e6 for r in rates], speed, ls, color=colour, label=name + cross)
        if inputs.rate_bit_s:
            ax.axvline(inputs.rate_bit_s / 1e6, color="#999999", lw=0.6, ls=":")
        ax.axhline(1.0, color="#000000", lw=0.6)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("worker link bandwidth (Mbit/s)")
        ax.set_ylabel(f"speedup of {label} over {inputs.baseline}")
        ax.set_title(f"{inputs.net.n} workers; compute scaled with model size", fontsize=8)
        ax.legend(fontsize=6)
        paths += style.save(fig, out, "projected_speedup_vs_bandwidth")

        fig, ax = plt.subplots(figsize=(4.6, 3.2))
        counts = [2 ** i for i in range(11)]                           # 1 .. 1024 workers
        fanout = inputs.net.relay_fanout or 4
        learner = inputs.net.learner.up.rate_bit_s or inputs.rate_bit_s
        for m, b in ((method, budget), (inputs.baseline, None)):
            colour, marker = style.style(m)
            for tree, ls in ((None, "-"), (fanout, "--")):
                ys = []
                for n in counts:
                    w = inputs.net.workers[0]
                    net = cm.Network(cm.Node(cm.Access(learner), cm.Access(learner)), (w,) * n, relay_fanout=tree,
                                     mtu=inputs.net.mtu, cc=inputs.net.cc)
                    ys.append(cm.predict(m, inputs.adapter, net, inputs.compute, depth, b, inputs.options,
                                         inputs.send).seconds_per_update)
                ax.plot(counts, ys, ls, color=colour, marker=marker, ms=3,
                        label=f"{spec.variant_label(m, b)}, {'star' if tree is None else f'relay tree k={tree}'}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("workers")
        ax.set_ylabel("seconds per update")
        ax.set_title(f"learner link {units.format_rate(learner) if learner else 'unshaped'}, "
                     f"compute per update fixed, depth {depth}", fontsize=8)
        ax.legend(fontsize=6)
        paths += style.save(fig, out, "projected_seconds_vs_workers")
    return paths


def _cross(r0: float, r1: float, s0: float, s1: float) -> float:
    """Where speedup crosses 1 between two samples (linear in log rate)."""
    f = (1 - s0) / (s1 - s0)
    return math.exp(math.log(r0) + f * (math.log(r1) - math.log(r0)))


def run_defaults(flags: dict) -> dict:
    """--baseline and --lora-rank not given: `harness run`'s defaults (the spec's: full-bf16, rank 8), or with
    --from the measured run's own, so that a projection's speedup uses the convention of the run it
    stands beside (the fp32 `full` at rank 64 made 3.74x of what the run's convention gives as 2.36x)."""
    own = {}
    if flags.get("from_run"):
        from harness.results import tables as results

        runs = results.read(flags["from_run"]).runs
        own = runs[0].config if runs else {}
    for name in ("baseline", "lora_rank"):
        if flags.get(name) is None:
            flags[name] = own.get(name) or spec.get(name).default
    return flags


def main(as_json: bool, figures_dir: str | None, **flags) -> int:
    import json
    import sys

    inputs = build(**run_defaults(flags))
    rows = project(inputs)
    if as_json:
        print(json.dumps(to_json(inputs, rows), indent=1))
    else:
        from rich.console import Console

        console = Console(width=None if sys.stdout.isatty() else 160)
        console.print(table_text(inputs, rows))
        for note in inputs.notes:
            console.print(f"note: {note}")
    if figures_dir:
        paths = figures(inputs, figures_dir)
        if not as_json:
            print("\n".join(str(p) for p in paths))
    return 0


# ---- validation: fit on one measured run, predict others ------------------------------------------

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

    @property
    def receive_error(self) -> float:
        return (self.receive_predicted_s - self.receive_measured_s) / self.receive_measured_s

    @property
    def error(self) -> float:
        return (self.predicted_s - self.measured_s) / self.measured_s


def validate(fit_run: str | Path, runs: list[str | Path], cc: str | None = None,
             shared_cores: int | None = None) -> tuple[cm.Fitted, list[Check]]:
    """Fit the compute terms on `fit_run` and predict every variant of every run in `runs` (each
    with its own links, workers, depth and adapter): measured vs predicted median seconds per update."""
    from harness.net import profiles
    from harness.results import tables as results

    def load(run):
        t = results.read(run)
        cfg, meta = t.runs[0].config, t.runs[0].meta
        prof = profiles.from_doc(cfg["profile_doc"], cfg["profile_name"])
        net = cm.Network.from_profile(prof, cfg["workers"], cc=cc or host_cc())
        return t.updates, cfg, meta, net, adapter_for(cfg["model"], cfg["lora_rank"])

    updates, cfg, meta, net, own = load(fit_run)
    cores = shared_cores if shared_cores is not None else (meta.get("cpus") if cfg.get("emulation", True) else None)
    fitted = cm.fit(updates, net, own, shared_cores=cores, source=str(fit_run))
    checks = []
    for run in runs:
        u, cfg, _, net, a = load(run)
        measured = cm.measured(u)
        for variant, method, frac in u[["variant", "method", "budget_frac"]].drop_duplicates().itertuples(index=False):
            budget = cm._budget_text(frac)   # the tables hold the fraction; predict takes the label
            if variant not in measured:          # a cell with no update past the warm-up (unfinished run)
                continue
            p = cm.predict(method, a, net, fitted.compute, int(cfg["pipeline"]), budget)
            link = net.workers[0].down
            rows = u[(u["variant"] == variant) & (u["update_index"] > 1)]
            one_way = cm.path(net.learner, net.workers[0]).delay_s
            checks.append(Check(Path(run).name, variant, net.n, link.rate_bit_s, link.delay_s, link.loss_frac,
                                int(cfg["pipeline"]), measured[variant], p.seconds_per_update,
                                cm._med(rows["worker_receive_s"]), max(0.0, p.transfer_down_s - one_way),
                                cm._med(rows["train_s"]) + cm._med(rows["worker_rollout_s"]),
                                p.train_s + p.rollout_s, str(cfg.get("baseline") or "full-bf16")))
    return fitted, checks


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
                     f"{c.receive_error * 100:+.1f} % | {c.compute_measured_s / c.compute_predicted_s:.2f} |")
    import statistics

    errors = sorted(abs(c.error) for c in checks)
    if errors:
        lines.append(f"\nseconds per update: median |error| {statistics.median(errors) * 100:.1f} %, worst "
                     f"{errors[-1] * 100:.1f} % ({len(errors)} predictions)")
    speed = speedups(checks)
    if speed:
        lines += ["", "| run | variant | speedup measured | speedup predicted | error |", "|---|---|---:|---:|---:|"]
        lines += [f"| {r} | {v} | {m:.2f}x | {q:.2f}x | {(q - m) / m * 100:+.1f} % |" for r, v, m, q in speed]
        errs = sorted(abs(q - m) / m for _, _, m, q in speed)
        bases = ", ".join(dict.fromkeys(c.baseline for c in checks))
        lines.append(f"\nspeedup vs the runs' baseline ({bases}): median |error| {statistics.median(errs) * 100:.1f} %, worst "
                     f"{errs[-1] * 100:.1f} % ({len(errs)} predictions)")
    big = sorted(abs(c.receive_error) for c in checks if c.receive_measured_s >= 0.05)
    if big:
        lines.append(f"update transfer (receives of 50 ms or more): median |error| {statistics.median(big) * 100:.1f} %, "
                     f"worst {big[-1] * 100:.1f} % ({len(big)} predictions)")
    return "\n".join(lines)


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


def validation_figure(checks: list[Check], out: str | Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from harness.results import style

    with plt.rc_context(style.STYLE):
        fig, ax = plt.subplots(figsize=(3.4, 3.2))
        for c in checks:
            colour, marker = style.style(c.variant.split("@")[0])
            ax.plot([c.measured_s], [c.predicted_s], marker, color=colour, ms=4)
        hi = max([c.measured_s for c in checks] + [c.predicted_s for c in checks]) * 1.1
        ax.plot([0, hi], [0, hi], color="#999999", lw=0.6)
        ax.fill_between([0, hi], [0, hi * 0.9], [0, hi * 1.1], color="#DDDDDD", alpha=0.5, lw=0)
        ax.set_xlim(0, hi)
        ax.set_ylim(0, hi)
        ax.set_xlabel("measured seconds per update (median)")
        ax.set_ylabel("predicted seconds per update")
        for variant in dict.fromkeys(c.variant for c in checks):
            colour, marker = style.style(variant.split("@")[0])
            ax.plot([], [], marker, color=colour, label=variant)
        ax.legend(fontsize=6)
        return style.save(fig, Path(out), "costmodel_predicted_vs_measured")


def validate_cmd(fit_run: str, runs: list[str], figures_dir: str | None, as_json: bool) -> int:
    import json
    from dataclasses import asdict

    from harness.results import tables as results

    targets = [r for r in results.find_runs(runs) if Path(r).resolve() != Path(fit_run).resolve()]
    fitted, checks = validate(fit_run, targets)
    if as_json:
        print(json.dumps({"fitted_on": str(fit_run), "compute": asdict(fitted.compute),
                          "checks": [{**asdict(c), "error": c.error} for c in checks]}, indent=1, default=str))
    else:
        print(f"compute fitted on {fit_run}: {fitted.compute}\n")
        print(validation_table(checks))
    if figures_dir and checks:
        paths = validation_figure(checks, figures_dir)
        if not as_json:
            print("\n".join(str(p) for p in paths))
    return 0
