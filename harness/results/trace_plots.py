"""The trace figure of a run whose links followed a schedule or a trace (harness/net/traces.py):
for each method, the rate the shaper applied to w1's links (each cell's schedule.csv), the rate
w1's links achieved (the link counters, links.csv) and the seconds per update at the time each
update finished, on the trace's clock (every cell replays the trace from the start of its first update:
harness/run/launch.py ScheduleClock; a run recorded before that started it with the cell, and is drawn
on the same clock all the same, each cell shifted by when its schedule started). The axis starts at the
trace's time 0: the hold before it (the links at the trace's first step while the services start) is not drawn.

Returns (name, figure, caption) tuples; plots.py wraps them (this module imports no other results
module but tables, style and trace_clock, so plots.py may import it). ``followed`` and ``capacity_caption`` word the
link_throughput figure's capacity for such a run: its links had no one capacity to draw, and were shaped.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from harness.results.files import ResultsError
from harness.results import trace_clock
from harness.results.tables import Run, RunTables
from harness.results.style import style
from trainers import spec

NODE = "w1"


def schedule(run: Run) -> pd.DataFrame:
    """Every cell's applied steps of w1's links: cell, direction, at_s (the step's time in the trace),
    t_s (cell clock: its learner's first event), rate_bit_s, and offset_s = when the cell's schedule
    started on that clock (at its first update; <= 0 in runs that started it with the cell)."""
    frames = []
    for path in sorted((Path(run.dir) / "cells").glob("*/schedule.csv")):
        t0 = trace_clock.cell_t0(path.parent)
        try:
            df = pd.read_csv(path)
        except (OSError, ValueError, pd.errors.EmptyDataError) as err:
            raise ResultsError(f"{path}: not a schedule file ({err})") from None
        if t0 is None or df.empty:
            continue
        start = df["due_t_s"].iloc[0] - df["at_s"].iloc[0] - t0
        df = df[(df["node"] == NODE) & (df["skipped"].astype(str) != "True")]
        frames.append(pd.DataFrame({"cell": path.parent.name, "direction": df["direction"], "at_s": df["at_s"],
                                    "t_s": df["applied_t_s"] - t0, "rate_bit_s": df["rate_bit_s"],
                                    "offset_s": start}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def figures(t: RunTables) -> list[tuple[str, plt.Figure, str]]:
    """[("trace", figure, caption)] for a single run with schedule files; [] otherwise."""
    if len(t.runs) != 1 or t.updates.empty:
        return []
    sched = schedule(t.runs[0])
    if sched.empty:
        return []
    seed = t.updates["seed"].min()
    u = t.updates[t.updates["seed"] == seed]
    links = t.links
    if not links.empty:
        links = links[(links["node"] == NODE) & (links["direction"] == "down") & (links["seed"] == seed)]
    fig, (ax_rate, ax_spu) = plt.subplots(2, 1, figsize=(7.0, 4.6), sharex=True, height_ratios=[3, 2])
    end = 0.0     # the last moment any cell ran, in seconds of the trace
    for variant, g in u.groupby("variant", sort=False):
        colour, marker = style(str(g["method"].iloc[0]))
        cell = f"{spec.variant_slug(str(variant))}-s{seed}"      # the cell folder (harness/run/launch.py Cell.name)
        # x = seconds of the cell's trace (each cell replays it from 0): shift by when its schedule started
        mine = sched[sched["cell"] == cell] if cell in set(sched["cell"]) else sched[sched["cell"] == sched["cell"].iloc[0]]
        shift = -float(mine["offset_s"].iloc[0])
        ax_spu.plot(g["t_end_s"] + shift, g["seconds_per_update"], color=colour, marker=marker, ms=3, lw=1,
                    label=variant)
        end = max(end, float((g["t_end_s"] + shift).max()))
        if not links.empty:
            # before time 0 the links were held at the trace's first step while the services started: that
            # hold is not the trace, so its samples are left out (a 0.5 s sample ending after 0 is kept)
            lg = links[(links["variant"] == variant) & (links["t_s"] + shift >= 0)]
            ax_rate.plot(lg["t_s"] + shift, lg["throughput_bit_s"] / 1e6, color=colour, lw=0.8, alpha=0.8,
                         label=f"{variant}: achieved ({NODE} down, 0.5 s)")
            if not lg.empty:
                end = max(end, float((lg["t_s"] + shift).max()))
    steps = applied_steps(sched, "down")
    x, rate = list(steps["t_s"]), list(steps["rate_bit_s"] / 1e6)
    if x and end > x[-1]:                # the last step held until the last cell stopped
        x, rate = x + [end], rate + [rate[-1]]
    ax_rate.step(x, rate, where="post", color="black", lw=1.2, label=f"trace as applied ({NODE} down)")
    ax_rate.set_xlim(left=0.0)           # the trace's time 0: the start of each cell's first update
    ax_rate.set_ylabel("Mbit/s")
    ax_rate.legend(fontsize=6, loc="lower left", bbox_to_anchor=(0, 1.0), ncol=3)
    ax_spu.set_ylabel("seconds per update")
    ax_spu.set_xlabel("seconds into the trace (each cell's own replay of it, from 0)")
    ax_spu.legend(fontsize=7)
    caption = (f"The trace on {NODE}'s downlink as the shaper applied it, the rate the link carried (0.5 s link "
               "counters), and each method's seconds per update at the time the update finished (first seed). Time 0 "
               "is the start of each cell's first update, where its replay of the trace began; before it the links "
               "were held at the trace's first step while the services started, which is not drawn.")
    return [("trace", fig, caption)]


def applied_steps(sched: pd.DataFrame, direction: str) -> pd.DataFrame:
    """The steps the shaper applied to w1's `direction` in any cell, on the trace's clock (t_s: when the
    step took hold, its lag included), one row per step of the looped trace: a step every cell applied is
    drawn once (the first cell's, by name), one only a longer cell reached is drawn too."""
    mine = sched[sched["direction"] == direction]
    if mine.empty:
        return pd.DataFrame({"at_s": [], "t_s": [], "rate_bit_s": []})
    rows = pd.DataFrame({"at_s": mine["at_s"], "t_s": mine["t_s"] - mine["offset_s"], "rate_bit_s": mine["rate_bit_s"],
                         "cell": mine["cell"]})
    rows = rows.sort_values(["at_s", "cell"]).drop_duplicates("at_s")
    return rows[["at_s", "t_s", "rate_bit_s"]].reset_index(drop=True)


# ---- the link_throughput figure's capacity, for links that followed a trace or schedule ---------------

def traced_links(profile_doc: dict | None) -> str | None:
    """Which worker links a run's profile (config.json's profile_doc) played a trace on, in words:
    "the worker links" (a trace in ``defaults``, or in a schedule change for every worker), "w2's
    links" (per-worker overrides or changes); None without a trace on a worker link."""
    doc = profile_doc if isinstance(profile_doc, dict) else {}

    def has_trace(link) -> bool:
        return isinstance(link, dict) and any(
            link.get("trace") or (isinstance(link.get(d), dict) and link[d].get("trace")) for d in ("up", "down"))

    if has_trace(doc.get("defaults")):
        return "the worker links"
    schedule_doc, workers = doc.get("schedule"), doc.get("workers")
    changes = [c for c in (schedule_doc if isinstance(schedule_doc, list) else []) if has_trace(c)]
    if any(c.get("target") in (None, "workers", "all") for c in changes):
        return "the worker links"
    named = {str(n) for n, link in (workers if isinstance(workers, dict) else {}).items() if has_trace(link)}
    named |= {str(c.get("target")) for c in changes}
    names = sorted(named, key=lambda n: (len(n), n))
    return " and ".join(f"{n}'s" for n in names) + " links" if names else None


def followed(runs: list[Run]) -> dict | None:
    """How these runs' worker links changed during a cell, for the link_throughput caption: None when
    they held one rate (or none); else {"kind": "trace" | "schedule", "who": which links, "figure":
    whether this report draws the ``trace`` figure (one run with w1's steps logged), "runs": how many}.
    A trace in a run's profile_doc, or any cell's schedule.csv (the shaper logs one only for links
    that change: a trace or a profile's schedule), counts."""
    who, kinds = [], []
    for run in runs:
        traced = traced_links((run.config or {}).get("profile_doc"))
        logged = any((Path(run.dir) / "cells").glob("*/schedule.csv"))
        if traced:
            who.append(traced)
            kinds.append("trace")
        elif logged:
            kinds.append("schedule")
    if not kinds:
        return None
    figure = len(runs) == 1 and not schedule(runs[0]).empty
    return {"kind": "trace" if "trace" in kinds else "schedule",
            "who": who[0] if len(set(who)) == 1 else "the worker links", "figure": figure, "runs": len(runs)}


def capacity_caption(how: dict, static: str | None) -> str:
    """The capacity clause of the link_throughput caption for links that followed a trace or a
    schedule (``followed``); ``static`` words the dotted lines at the profile's rate, if any."""
    if how["kind"] == "trace":
        body = f"{how['who']} followed a trace, their capacity changing step by step"
    else:
        body = "the links' capacity changed on the profile's schedule during each cell"
    where = (f"the `trace` figure draws {NODE}'s capacity as the shaper applied it" if how["figure"] else
             "each run's own report draws it in its `trace` figure" if how["runs"] > 1 else
             f"no cell logged {NODE}'s steps (schedule.csv), so no figure draws them")
    if static:
        return f"{static}, which held only where no trace or schedule changed it: {body}; {where}"
    return f"no capacity line: {body}, so no one rate stands for it; {where}"
