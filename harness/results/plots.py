"""Paper figures from results folders alone (tables.RunTables, compare.comparison): PDF
(Type-42 TrueType fonts embedded) + PNG.

    harness plot results/<run-id> [more runs or sweeps]    -> <first path>/figures/*.pdf|png

Each figure is drawn by a `draw_<name>` function that returns a `Plot` (the matplotlib Figure and
its caption, which says what every line, band and error bar is), so the report prints the same
caption under the figure and tests read back what a figure shows (axes, lines, legend) without
decoding an image. Figures: held-out quality vs training seconds (one curve per method, mean over
seeds, shaded 95 % CI where there are >= 3 seeds; the time-to-quality figure); quality vs bytes
communicated (log x) with the Pareto front; quality at equal bytes, per update and cumulative, for
both families (harness/results/equal_bytes.py); stacked phase breakdown per method; a Gantt timeline of
one seed's learner and worker phases over a few updates (both with a bar or panel per sweep point where the runs
plotted differ in a coordinate: series_labels) (pipelining shows as rollouts overlapping
training); per-link throughput over time for one seed with the link capacity; seconds per update
vs bandwidth (only where the runs plotted vary the bandwidth); for data-parallel runs
(harness/results/dataparallel_plots.py) held-out perplexity vs bytes per optimizer step and the
subspace overlap per sync. Every method keeps one colour (Okabe-Ito, colour-blind safe) and one
marker across all figures; every link its own colour x marker x line style at any worker count.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from harness.results import compare, dataparallel_plots, quality, quality_report  # noqa: E402
from harness.results.tables import LEARNER_PHASES, RunTables, read  # noqa: E402
from harness.results import equal_bytes, regime_plots, trace_plots  # noqa: E402
from harness.results.compare import CI_MIN_SEEDS  # noqa: E402
from harness.results.style import PHASE_COLOURS, STYLE, bytes_axis, link_style, save_all, style  # noqa: E402
from trainers import spec  # noqa: E402  (torch-free vocabularies)

GANTT_UPDATES = 4


@dataclass
class Plot:
    """One figure and its caption (what the report prints under it)."""
    name: str          # file stem under figures/
    fig: Figure
    caption: str


def _rate(bit_s: float) -> str:
    return f"{bit_s / 1e6:g} Mbit/s"


# ---- seconds per update vs bandwidth ------------------------------------------------------------

def varies_bandwidth(comp: pd.DataFrame) -> bool:
    """Did the runs plotted use more than one worker-link rate? (One rate is one x value on a log axis.)"""
    return "rate_bit_s" in comp and comp["rate_bit_s"].dropna().nunique() > 1


def draw_seconds_vs_bandwidth(comp: pd.DataFrame) -> Plot:
    """Seconds per update against the worker links' rate, one line per variant. Where any run plotted
    was contended (compare's `run_contended`), the lines are the seconds with compute charged at CPU
    time (compare.cpu_charged: what the load of other processes did not add) and the wall-clock
    medians a faint dashed line beside each."""
    fig, ax = plt.subplots(figsize=(4.2, 3))
    df = comp[comp["rate_bit_s"].notna()] if "rate_bit_s" in comp else comp.iloc[0:0]
    cpu = bool(len(df)) and "run_contended" in df and bool((df["run_contended"] == True).any())  # noqa: E712
    col = "s_per_update_cpu" if cpu else "s_per_update"
    for variant, g in df.groupby("variant", sort=False):
        g = g.sort_values("rate_bit_s")
        colour, marker = style(g["method"].iloc[0])
        err = [g[f"{col}_median"] - g[f"{col}_q1"], g[f"{col}_q3"] - g[f"{col}_median"]]
        ax.errorbar(g["rate_bit_s"] / 1e6, g[f"{col}_median"], yerr=err, color=colour, marker=marker,
                    capsize=2, label=variant)
        if cpu:
            ax.plot(g["rate_bit_s"] / 1e6, g["s_per_update_median"], color=colour, linestyle="--", alpha=0.35,
                    linewidth=1, label=f"{variant}, wall clock")
    ax.set_xscale("log")
    ax.set_xlabel("worker link bandwidth (Mbit/s)")
    dp = len(df) > 0 and df["method"].map(spec.is_data_parallel).all()  # an update is an optimizer step there
    step = "optimizer step" if dp else "update"
    ax.set_ylabel(f"seconds per {step}" + (", compute at CPU time" if cpu else "") + " (median, IQR)")
    if len(df):
        ax.legend(fontsize=7 if cpu else None)
    clock = (f"Seconds per {step} with compute charged at CPU time, against the worker links' bandwidth: the "
             "machine was contended, so the learner's compute phases and the workers' rollouts are charged at the "
             "CPU seconds they used where they were on the critical path, never below what the link itself needed "
             f"(compare.cpu_charged); faint dashed lines: the wall-clock medians. "
             if cpu else f"Seconds per {step} against the worker links' bandwidth (wall clock). ")
    return Plot("seconds_vs_bandwidth", fig,
                clock + f"Marker: median over every {step} of every seed; error bars: interquartile range "
                "(25th-75th percentile) of the same values.")


# ---- phases ----------------------------------------------------------------------------------

def draw_phase_breakdown(updates: pd.DataFrame) -> Plot:
    """The learner's median time per phase per update, stacked; the stack is its share of s/update."""
    phases = [p for p in LEARNER_PHASES if f"{p}_s" in updates]
    updates = updates.assign(bar=series_labels(updates))
    med = updates.groupby("bar", sort=False)[[f"{p}_s" for p in phases]].median()
    fig, ax = plt.subplots(figsize=(4.2, 3))
    bottom = pd.Series(0.0, index=med.index)
    for p in phases:
        ax.bar(med.index, med[f"{p}_s"], bottom=bottom, color=PHASE_COLOURS[p], label=p.replace("_", " "),
               edgecolor="white", linewidth=0.4)
        bottom += med[f"{p}_s"]
    spu = updates.groupby("bar", sort=False)["seconds_per_update"].median()
    ax.scatter(spu.index, spu.values, marker="_", s=400, color="black", zorder=3, label="s/update (median)")
    ax.set_ylabel("learner seconds per update (median)")
    ax.tick_params(axis="x", rotation=20)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return Plot("phase_breakdown", fig,
                "The learner's seconds per update by phase: each segment is the phase's median over every update "
                "of every seed (stacked; medians need not add up to the total); black tick: the median seconds "
                "per update. No error bars.")


# a link coordinate that differs between the runs plotted, as a series' label says it
_LINK_LABELS = {"profile": str, "links": str, "rate_bit_s": lambda v: f"{v / 1e6:g} Mbit/s",
                "delay_s": lambda v: f"{v * 1e3:g} ms", "loss_frac": lambda v: f"{v * 100:g}% loss",
                "run_id": lambda v: f"run {v}"}


def series_labels(df: pd.DataFrame, sep: str = "\n") -> pd.Series:
    """Each row's series (a bar, a panel): its variant, plus the coordinates that differ between the runs
    plotted (compare.coords: the link, the workers, a run parameter a sweep varies, the run where runs
    repeat), so two points of a sweep are never drawn as one: the link's formatted here, the rest as the
    report's tables name them (quality_report.apart). `sep` goes between the variant and them: a newline
    under a bar ("spar@1.6%\nlr 0.004"), " (" in a title ("spar@1.6% (lr 0.004)")."""
    keys = [k for k in compare.coords(df) if k in df]
    points = df[["variant", "method", *keys]].drop_duplicates().reset_index(drop=True)

    def words(r) -> str:
        link = [fmt(r[k]) if not pd.isna(r[k]) else "-" for k, fmt in _LINK_LABELS.items()
                if k in keys and points[k].nunique(dropna=False) > 1]
        extra = link + quality_report.apart(points, r)
        close = ")" if sep.endswith("(") else ""
        return str(r["variant"]) + (sep + ", ".join(extra) + close if extra else "")

    points["series"] = [words(r) for _, r in points.iterrows()]
    on = ["variant", "method", *keys]          # a left merge keeps df's order, and matches NaN to NaN
    return pd.Series(df[on].merge(points, on=on, how="left")["series"].to_numpy(), index=df.index, dtype=object)


# ---- quality vs bytes -------------------------------------------------------------------------

def pareto(points: pd.DataFrame, higher_is_better: bool) -> pd.DataFrame:
    """Points not dominated in (fewer bytes, better quality), sorted by bytes."""
    pts = points.sort_values(["bytes", "quality"], ascending=[True, not higher_is_better])
    front, best = [], None
    for _, r in pts.iterrows():
        if best is None or (r["quality"] > best if higher_is_better else r["quality"] < best):
            front.append(r)
            best = r["quality"]
    return pd.DataFrame(front)


def draw_quality_vs_bytes(comp: pd.DataFrame) -> Plot:
    """Quality (held out where the runs evaluated it, mean ± 95 % CI over >= 3 seeds; else the
    training-batch metric, ± sd) vs bytes per update, with the Pareto front. Data-parallel methods
    have their own figure (dataparallel_plots: perplexity vs bytes per optimizer step)."""
    fig, ax = plt.subplots(figsize=(4.2, 3))
    comp = comp[[not spec.is_data_parallel(str(m)) for m in comp["method"]]] if len(comp) else comp
    heldout = "heldout_mean" in comp and comp["heldout_mean"].notna().any()
    value, err = ("heldout_mean", "heldout_ci95") if heldout else ("train_metric_mean", "train_metric_sd")
    pts = comp.assign(bytes=comp["wire_bytes_down"], quality=comp[value]).dropna(subset=["bytes", "quality"])
    pts = pts[pts["bytes"] > 0]
    for _, r in pts.iterrows():
        colour, marker = style(r["method"])
        n = int(r["heldout_seeds"] if heldout else r["seeds"])
        bar = 0 if pd.isna(r[err]) or (heldout and n < CI_MIN_SEEDS) else r[err]
        ax.errorbar(r["bytes"], r["quality"], yerr=bar, color=colour, marker=marker, capsize=2,
                    label=f"{r['variant']} (n={n})")
    if heldout and len(pts):
        metric, higher = f"held-out {pts['heldout_name'].iloc[0]}", not bool(pts["heldout_lower_is_better"].iloc[0])
    else:
        metric = f"training-batch {pts['train_metric_name'].iloc[0]}" if len(pts) else "quality"
        higher = "loss" not in metric
    if len(pts):
        front = pareto(pts, higher_is_better=higher)
        ax.step(front["bytes"], front["quality"], where="post", color="grey", linestyle="--", linewidth=0.8,
                label="Pareto front")
    bytes_axis(ax)
    ax.set_xlabel("bytes communicated per update, learner → workers")
    ax.set_ylabel(metric.replace("_", " "))
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    ax.legend(uniq.values(), uniq.keys(), fontsize=7)
    bars = (f"the final held-out figure's mean over seeds (problems never trained on); error bars: its 95 % CI "
            f"over seeds (Student's t), drawn only with >= {CI_MIN_SEEDS} seeds (n in the legend)" if heldout else
            f"the training batch's metric over each seed's last {compare.QUALITY_LAST} updates, mean over seeds "
            "(not held-out quality: these runs evaluated none); error bars: ± 1 sd over seeds")
    return Plot("quality_vs_bytes", fig,
                f"Quality against the framed bytes the learner sent per update (all workers, median). Marker: {bars}. "
                "Dashed: the Pareto front (fewer bytes, better quality).")


# ---- timeline ---------------------------------------------------------------------------------

def draw_timeline(phases: pd.DataFrame, max_updates: int = GANTT_UPDATES, updates: pd.DataFrame | None = None) -> Plot:
    """Gantt chart of the first seed's updates 2..max_updates+1, one panel per method, one row per process;
    `updates`: the runs' update rows, whose coordinates split a method into one panel per sweep point
    (series_labels; the phase rows carry only the run's id)."""
    if updates is not None and len(phases) and "run_id" in phases and "run_id" in updates:
        points = updates[["run_id", "variant"]].assign(series=series_labels(updates, " (")).drop_duplicates(
            ["run_id", "variant"])
        phases = phases.merge(points, on=["run_id", "variant"], how="left")
        phases["series"] = phases["series"].fillna(phases["variant"])
    elif len(phases):
        phases = phases.assign(series=phases["variant"])
    variants = list(dict.fromkeys(phases["series"])) if len(phases) else []
    fig, axes = plt.subplots(max(1, len(variants)), 1, figsize=(6.5, 1.1 + 0.9 * max(1, len(variants))),
                             squeeze=False)
    # Updates 2..max_updates+1: the first one also holds the workers' start-up (model building).
    # The span named is the one drawn: a 3-update run shows updates 2-3, not "2-5".
    top = int(phases["update_index"].max()) if len(phases) else max_updates + 1
    first, last = min(2, top), min(max_updates + 1, top)
    seed = int(phases["seed"].min()) if len(phases) else None
    for ax, variant in zip(axes[:, 0], variants):
        g = phases[(phases["series"] == variant) & (phases["seed"] == seed)]
        g = g[(g["update_index"] <= last) & (g["update_index"] >= first)]
        procs = sorted(g["process"].unique(), key=lambda p: (p != "learner", len(p), p))
        for i, proc in enumerate(procs):
            for _, r in g[g["process"] == proc].iterrows():
                ax.barh(i, r["end_s"] - r["start_s"], left=r["start_s"], height=0.7,
                        color=PHASE_COLOURS.get(r["phase"], "grey"), linewidth=0)
        ax.set_yticks(range(len(procs)), procs)
        ax.invert_yaxis()
        ax.set_title(f"{variant}: seed {seed}, updates {first}-{last}", fontsize=8, loc="left",
                     color=style(g["method"].iloc[0] if len(g) else variant)[0])
    axes[-1, 0].set_xlabel("seconds since the learner started")
    fig.subplots_adjust(hspace=0.9)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in PHASE_COLOURS.values()]
    fig.legend(handles, [p.replace("_", " ") for p in PHASE_COLOURS], ncol=5, fontsize=7, loc="lower center",
               bbox_to_anchor=(0.5, 1.0))
    return Plot("timeline", fig,
                f"What each process did over updates {first}-{last} of seed {seed} (update 1 also holds the "
                "workers' start-up), one panel per method (and per point where the runs differ in a coordinate: "
                "its title names it), one bar per phase span. No error bars: one seed's spans.")


# ---- link throughput --------------------------------------------------------------------------

def _node_order(nodes) -> list[str]:
    """learner first, then w1, w2, ..., w10 in number order."""
    return sorted(set(nodes), key=lambda n: (n != "learner", int(n[1:]) if n[1:].isdigit() else 0, n))


NO_LINK_SAMPLES = "no link samples"


def _link_label(node: str, direction: str) -> str:
    """A worker's down is what it receives; the learner's up is what it sends to every worker (each
    direction is named from the node's side of its link), so its legend says so in words."""
    if node != "learner":
        return f"{node} {direction}"
    return f"learner (unshaped) {direction}: {'sends to' if direction == 'up' else 'receives from'} the workers"


def draw_link_throughput(links: pd.DataFrame, followed: dict | None = None) -> Plot:
    """Throughput of every link over time (one seed), one panel per method on one time axis, with the
    worker links' capacity; ``followed`` (trace_plots.followed: the links followed a trace or a
    schedule) words a capacity that changed, which no one line draws, instead of "not shaped"."""
    variants = list(dict.fromkeys(links["variant"])) if len(links) else []
    seed = int(links["seed"].min()) if len(links) else None
    fig, axes = plt.subplots(max(1, len(variants)), 1, figsize=(6.5, 1.2 + 1.5 * max(1, len(variants))),
                             squeeze=False, sharex=True)  # own y scale per panel: compressed methods move few bits
    nodes = _node_order(links["node"]) if len(links) else []
    rates = links["rate_bit_s"].dropna().unique() if "rate_bit_s" in links else []
    for ax, variant in zip(axes[:, 0], variants):
        g = links[(links["variant"] == variant) & (links["seed"] == seed) & (links["t_s"] >= 0)]
        for (node, direction), h in g.groupby(["node", "direction"]):
            label = _link_label(node, direction)
            ax.plot(h["t_s"], h["throughput_bit_s"] / 1e6, label=label, markersize=3,
                    markevery=max(1, len(h) // 8), **link_style(nodes.index(node), direction))
        for rate in rates:
            ax.axhline(rate / 1e6, color="black", linestyle=(0, (1, 1)), linewidth=0.8,
                       label=f"worker link capacity {_rate(rate)}")
        ax.set_title(f"{variant} (seed {seed})", fontsize=8, loc="left")
        ax.set_ylabel("Mbit/s")
    if variants:
        handles, labels = axes[0, 0].get_legend_handles_labels()
        axes[0, 0].legend(handles, labels, fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        axes[0, 0].text(0.5, 0.5, NO_LINK_SAMPLES, transform=axes[0, 0].transAxes, ha="center")
    axes[-1, 0].set_xlabel("seconds since the learner started")
    fig.subplots_adjust(hspace=0.5)
    if not variants:    # no seed to name: the caption says why the figure is empty instead
        return Plot("link_throughput", fig,
                    f"Bits per second each link carried: {NO_LINK_SAMPLES} in these runs (no cell's links.csv has "
                    "a row: a run without emulation samples no link counters), so nothing is drawn. No error bars.")
    static = (f"dotted black: the worker links' capacity ({', '.join(_rate(r) for r in rates)}; the learner's own "
              "link is unshaped)" if len(rates) else None)
    cap = (trace_plots.capacity_caption(followed, static) if followed else
           static or "no capacity line: the links were not shaped")
    return Plot("link_throughput", fig,
                f"Bits per second each link carried (IP packets, headers and retransmissions included) between "
                f"consecutive counter samples, seed {seed}, one panel per method on a shared time axis; {cap}. "
                "Solid: down (a worker's: learner → worker), dashed: up (a worker's: worker → learner); each direction "
                "is the node's own, so the learner's up is what it sends to all workers. No error bars: one seed's "
                "samples.")


# ---- quality vs training seconds -------------------------------------------------------------

def draw_quality_vs_time(evals: pd.DataFrame, comp: pd.DataFrame) -> Plot:
    """Held-out quality vs training seconds, one curve per method (mean over seeds, shaded 95 % CI
    with >= CI_MIN_SEEDS seeds), the baseline-derived target dashed: the time-to-quality figure. One
    panel per link coordinate group (a sweep point); a method faster per update but slower to
    quality shows here."""
    keys = [k for k in compare.coords(evals) if k in evals] if len(evals) else []
    c = quality.curves(evals, keys)
    groups = [] if c.empty else list(c.groupby(keys, dropna=False, sort=False)) if keys else [((), c)]
    fig, axes = plt.subplots(1, max(1, len(groups)), figsize=(3.6 * max(1, len(groups)), 2.9), squeeze=False,
                             sharey=True)
    drawn = False   # a target line on some panel (none where the baseline did not learn measurably)
    for ax, (key, g) in zip(axes[0], groups):
        for variant, h in g.groupby("variant", sort=False):
            h = h.sort_values("version")
            colour, marker = style(str(h["method"].iloc[0]) if "method" in h else variant.split("@")[0])
            n = int(h["seeds"].min())
            ax.plot(h["wall_s"], h["quality"], color=colour, marker=marker, markersize=3, label=f"{variant} (n={n})")
            if n >= CI_MIN_SEEDS:
                ax.fill_between(h["wall_s"], h["quality"] - h["ci95"], h["quality"] + h["ci95"], color=colour,
                                alpha=0.15, linewidth=0)
        target = _target(comp, keys, key)
        if target is not None:
            ax.axhline(target, color="grey", linestyle="--", linewidth=0.8, label="target")
            drawn = True
        if len(groups) > 1:
            ax.set_title(", ".join(f"{k}={v}" for k, v in zip(keys, key if isinstance(key, tuple) else (key,))
                                   if g[k].nunique(dropna=False) <= 1 and c[k].nunique(dropna=False) > 1),
                         fontsize=7, loc="left")
        ax.set_xlabel("training seconds (evaluation excluded)")
        ax.legend(fontsize=6)
    name = c["heldout_name"].iloc[0] if len(c) else "quality"
    axes[0, 0].set_ylabel(f"held-out {name}")
    if c.empty:
        axes[0, 0].text(0.5, 0.5, "no held-out evaluations in these runs", transform=axes[0, 0].transAxes,
                        ha="center")
    return Plot("quality_vs_time", fig,
                f"Held-out {name} (problems never trained on) against training seconds (the sum of seconds per "
                "update up to each evaluated version, mean over seeds; evaluation time excluded). Line: mean over "
                f"seeds (n in the legend); shaded: 95 % CI over seeds (Student's t), drawn only with >= "
                f"{CI_MIN_SEEDS} seeds; "
                + ("dashed grey: the time-to-quality target." if drawn else
                   "no time-to-quality target (no baseline, or one whose held-out gain is not resolved above 0)."))


def _target(comp: pd.DataFrame, keys: list[str], key) -> float | None:
    if "heldout_target" not in comp:
        return None
    rows = compare._same(comp, keys, key if isinstance(key, tuple) else (key,))
    if any(quality.baseline_unlearned(r) for _, r in rows.iterrows()):   # the tables say "no target" there too
        return None
    vals = rows["heldout_target"].dropna()
    return float(vals.iloc[0]) if len(vals) else None


# ---- all of them -------------------------------------------------------------------------------

def render(t: RunTables, comp: pd.DataFrame | None = None) -> list[Plot]:
    """Every figure that applies to these tables (quality_vs_time only with held-out evaluations,
    seconds_vs_bandwidth only over several rates). `comp`: their compare.comparison, where the
    caller has it already (the report builds its tables from the same one)."""
    if t.updates.empty:
        raise ValueError(f"{t.runs[0].dir if t.runs else 'results'}: no completed update to plot yet")
    comp = compare.comparison(t.updates, t.cells, t.evals) if comp is None else comp
    with plt.rc_context(STYLE):
        plots = [draw_quality_vs_time(t.evals, comp)] if not t.evals.empty else []  # no evaluation: no curve
        if len(comp) and not comp["method"].astype(str).map(spec.is_data_parallel).all():
            plots.append(draw_quality_vs_bytes(comp))   # the data-parallel methods': equal_bytes' dp_equal_bytes
        plots += [draw_phase_breakdown(t.updates), draw_timeline(t.phases, updates=t.updates)]
        if not t.links.empty or any(r.meta.get("emulation") is not False for r in t.runs):   # unshaped: no link
            plots.append(draw_link_throughput(t.links, trace_plots.followed(t.runs)))
        if varies_bandwidth(comp):
            plots.append(draw_seconds_vs_bandwidth(comp))
        plots += [Plot(*p) for p in equal_bytes.figures(t.updates, t.evals, comp)]   # quality at equal bytes
        plots += [Plot(*p) for p in trace_plots.figures(t)]   # links that followed a trace or schedule
        plots += [Plot(*p) for p in regime_plots.figures(t)]  # speedup against the comm ratio (a sweep over it)
        plots += [Plot(*p) for p in dataparallel_plots.figures(t.updates)]   # LoRDO's subspace overlap per sync
    return plots


def save_plots(plots: list[Plot], out: Path) -> list[Path]:
    with plt.rc_context(STYLE):
        return save_all([(plot.fig, plot.name) for plot in plots], out)


def write(path: str | Path, extra: Iterable[str | Path] = (), tables: RunTables | None = None,
          out: str | Path | None = None) -> list[Path]:
    """Every figure for the runs at or under `path` (and `extra`), into `out` (default `path`/figures/);
    the runs are parsed here unless `tables` (already read by the caller) is given."""
    return write_plots(path, extra, tables, out)[1]


def write_plots(path: str | Path, extra: Iterable[str | Path] = (), tables: RunTables | None = None,
                out: str | Path | None = None, comp: pd.DataFrame | None = None) -> tuple[list[Plot], list[Path]]:
    """(the Plots with their captions, the files written): what the report embeds."""
    t = tables if tables is not None else read([Path(path), *extra])
    out = Path(out) if out is not None else Path(path) / "figures"
    plots = render(t, comp)
    with plt.rc_context(STYLE):
        return plots, save_plots(plots, out)
