"""The paper's speed figure, reproduced: speedup per update against full sync's comm ratio.

    harness reproduce hilo-speed      # a sweep over --comm-ratio x --pipeline; this figure in its report

One point per run (a sweep's grid point) and method: x = the comm ratio the run achieved (prediction.json
`regime`: full sync's link time over its CPU compute per update, both measured in the run), y = the
headline speedup over the baseline with its 95 % interval over paired seeds (compare.py: CPU time when
the machine was contended, else wall). Lines: the cost model's speedup at the run's compute with its
links scaled to each ratio (prediction.json `regime.curve`, from the run nearest the paper's ratio at
that pipelining depth). Stars: the HiLo paper's two points (33 s vs 16 s synchronous, 18 s vs 8 s
pipelined) placed at the paper's ratio (18.9 s link / 14.1 s compute = 1.34).
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from harness.results import compare, tables  # noqa: E402
from harness.results.regime_report import regime_of  # noqa: E402
from harness.results.style import style  # noqa: E402

NAME = "speedup_vs_comm_ratio"
DEPTH_LINE = {0: "-", 1: "--"}


def _headline(row) -> tuple[float, float | None, float | None, str]:
    """(speedup, CI low, CI high, basis) of a comparison row: the headline columns where compare.py has
    them (CPU time on a contended machine), else the paired wall-clock figure."""
    for prefix, basis in (("speedup_headline", None), ("speedup_seed_mean", "wall")):
        v = row.get(prefix)
        if v is not None and not pd.isna(v):
            lo, hi = (row.get(f"{prefix}_lo"), row.get(f"{prefix}_hi")) if basis is None else \
                (row.get("speedup_ci_lo"), row.get("speedup_ci_hi"))
            return float(v), lo, hi, basis or str(row.get("speedup_headline_basis") or "wall")
    return float("nan"), None, None, "-"


def points(t: tables.RunTables) -> pd.DataFrame:
    """One row per (run, method other than the baseline): achieved ratio, depth, speedup and its CI."""
    rows = []
    for run in t.runs:
        reg = regime_of(run)
        if reg.get("ratio") is None:
            continue
        name = run.dir.name
        u = t.updates[t.updates["run_id"] == name]
        cells = t.cells[t.cells["run_id"] == name] if "run_id" in t.cells else t.cells
        if u.empty:
            continue
        comp = compare.comparison(u, cells)
        for _, r in comp[comp["method"] != comp["baseline"]].iterrows():
            s, lo, hi, basis = _headline(r)
            rows.append({"run": name, "variant": r["variant"], "method": r["method"], "ratio": reg["ratio"],
                         "pipeline": int(r.get("pipeline", 0) or 0), "speedup": s, "lo": lo, "hi": hi, "basis": basis,
                         "seeds": r.get("speedup_seeds"), "paper_ratio": reg["paper_ratio"]})
    return pd.DataFrame(rows)


def _curves(t: tables.RunTables, pts: pd.DataFrame) -> dict[int, list[dict]]:
    """depth -> the model curve of the run whose achieved ratio is nearest the paper's at that depth."""
    out = {}
    for depth, g in pts.groupby("pipeline"):
        run = g.iloc[(g["ratio"] - g["paper_ratio"]).abs().argsort().iloc[0]]["run"]
        reg = regime_of(next(r for r in t.runs if r.dir.name == run))
        out[int(depth)] = reg.get("curve") or []
    return out


def figures(t: tables.RunTables) -> list[tuple[str, plt.Figure, str]]:
    """[(NAME, figure, caption)] when the runs span at least two comm ratios; [] otherwise."""
    pts = points(t)
    if pts.empty or pts["ratio"].round(2).nunique() < 2:
        return []
    paper = float(pts["paper_ratio"].iloc[0])
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for (variant, depth), g in pts.sort_values("ratio").groupby(["variant", "pipeline"], sort=False):
        colour, marker = style(str(g["method"].iloc[0]))
        lo = (g["speedup"] - g["lo"].astype(float)).clip(lower=0).fillna(0)
        hi = (g["hi"].astype(float) - g["speedup"]).clip(lower=0).fillna(0)
        ax.errorbar(g["ratio"], g["speedup"], yerr=[lo, hi], fmt=marker, color=colour, capsize=3,
                    mfc=colour if depth == 0 else "white", label=f"{variant}, depth {depth} (measured)")
    for depth, curve in _curves(t, pts).items():
        for variant in sorted({v for c in curve for v in c["speedup"]}):
            xs = [c["ratio"] for c in curve if variant in c["speedup"]]
            colour, _ = style(str(pts[pts["variant"] == variant]["method"].iloc[0])) \
                if (pts["variant"] == variant).any() else ("#777777", "o")
            ax.plot(xs, [c["speedup"][variant] for c in curve if variant in c["speedup"]], DEPTH_LINE.get(depth, ":"),
                    color=colour, alpha=0.6, label=f"{variant}, depth {depth} (cost model)")
    for p in regime_paper_points(t):
        ax.plot([paper], [p["full_s"] / p["method_s"]], "*", ms=12, color="#CC79A7" if p["pipeline"] else "#D55E00",
                label=f"HiLo paper, depth {p['pipeline']}: {p['full_s']:g} s vs {p['method_s']:g} s")
    ax.axhline(1.0, color="#999999", lw=0.8)
    ax.axvline(paper, color="#999999", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("full sync's link time / compute time per update (comm ratio)")
    ax.set_ylabel("speedup per update over full sync")
    ax.legend(fontsize=6.5, loc="upper left")
    basis = ", ".join(sorted(set(pts["basis"])))
    caption = (f"Speedup per update of each method over the baseline against full sync's comm ratio (log x). Markers: "
               f"measured, one per run and pipelining depth (filled: depth 0, open: depth 1), at the ratio the run "
               f"achieved (its own link time over CPU compute); error bars: 95 % interval over paired seeds "
               f"(speedup on {basis} time: CPU time where the machine was contended). Lines: the cost model at the "
               f"run's measured compute with the links scaled to each ratio (solid: depth 0, dashed: depth 1). Stars: "
               f"the HiLo paper's 33 s vs 16 s (depth 0) and 18 s vs 8 s (depth 1), at its ratio {paper:.2f} "
               "(dotted line).")
    return [(NAME, fig, caption)]


def regime_paper_points(t: tables.RunTables) -> list[dict]:
    return next((regime_of(r).get("paper_points") or [] for r in t.runs if regime_of(r)), [])
