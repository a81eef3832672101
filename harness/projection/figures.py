"""`harness project --figures DIR`: speedup vs bandwidth and seconds per update vs workers; and the
validation's predicted-vs-measured figure (`--validate`)."""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from harness.projection import costmodel as cm
from harness.projection.inputs import Inputs, adapter_for, parameter_count
from harness.projection.validate import Check
from harness import units
from trainers import spec

PAPER_MODELS = ("qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b")   # the bandwidth figure's default lines


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

