"""A wrapped run's results (`harness wrap`): what the job did, read from its folder alone.

    <run>/meta.json      kind "wrap", the command, nodes, label, profile, each node's exit, status
    <run>/links.csv      link counters over time (harness/net/linkstats.py)
    <run>/sockets.csv    every TCP connection's kernel counters over time (harness/net/sockets.py)
    <run>/calibration.json   the links as measured before the job started
    <run>/nodes/<wK>/{stdout.log, stderr.log, events.jsonl}
    <run>/summary.json, report.md   written here

Steps: a job may append one JSON line per step to $WAN_EVENTS (its node's events.jsonl)::

    {"step": 3, "t0": <time.time() at its start>, "t1": <at its end>, "phases": {"compute": 0.12, "comm": 0.4}}

(`phases`, seconds, optional; any other key is kept and ignored.) With steps, rank 0's (w1's) give
seconds per step (the first step left out: connection set-up and warm-up) and the window
[first counted t0, last t1] in which every link's bytes are counted and divided by the steps in
it; counters are interpolated linearly between samples (0.5 s apart), so bytes per step are means
over the window, not per-step figures. Without steps: totals over the job's wall time.

Comparison (`harness report A B ...`): runs grouped by label (`harness wrap --label`, default the
command line) and setting (the links: profile as resolved, emulation, backend; the CPU shares), in
order of first appearance, so one command run at two rates is two groups, never repeats of one; the
table names each group's link and shares. The first group is the baseline. Each run's mean
s/step is one sample; speedup = exp(mean log s/step of the baseline - mean log of the group) with a
95 % t interval from the two groups' half-widths added in quadrature (independent repeats; none
with fewer than two repeats in either group).
"""
from __future__ import annotations

import contextlib
import csv
import datetime as dt
import json
import math
import sys
from pathlib import Path
from typing import Iterable

from harness.results.quality import ci95
from harness.results.wording import fmt, markdown_table, pm, rate
from trainers.events import atomic_write_json

KIND = "wrap"
SKIP_STEPS = 1          # the first step pays for connection set-up and allocation: left out of s/step


class WrappedError(ValueError):
    """A wrapped run's file that cannot be used; one line naming it."""


def _json(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        raise WrappedError(f"{path}: not readable as JSON ({str(err).splitlines()[0] if str(err) else err})") from None
    if not isinstance(doc, dict):
        raise WrappedError(f"{path}: not a JSON object")
    return doc


def is_wrapped(folder: Path) -> bool:
    meta = Path(folder) / "meta.json"
    if not meta.is_file():
        return False
    try:
        return json.loads(meta.read_text()).get("kind") == KIND
    except (OSError, ValueError, AttributeError):
        return False


def find(paths: Iterable[str | Path]) -> list[Path]:
    """Every wrapped run at or under `paths`; [] if any path holds none (then it is not a wrap report)."""
    runs: list[Path] = []
    for p in map(Path, paths):
        if not p.is_dir():
            return []
        found = [p] if is_wrapped(p) else sorted(m.parent for m in p.rglob("meta.json") if is_wrapped(m.parent))
        others = [] if is_wrapped(p) else [c.parent for c in p.rglob("config.json") if (c.parent / "cells").is_dir()]
        if not found or others:   # none here, or built-in runs beside them: `harness run`'s report
            return []
        runs += [r for r in found if r not in runs]
    return runs


# ---- reading --------------------------------------------------------------------------------

def read_csv(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def steps(events: Path) -> tuple[list[dict], int]:
    """(the step marks of one node, in order; lines that are not step marks). A mark needs `step`,
    `t0` <= `t1` (numbers); the job's own other lines are skipped and counted."""
    out, ignored = [], 0
    if not events.is_file():
        return out, 0
    for line in events.read_text(errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            t0, t1 = float(row["t0"]), float(row["t1"])
            ok = isinstance(row, dict) and "step" in row and math.isfinite(t0) and math.isfinite(t1) and t0 <= t1
        except (ValueError, TypeError, KeyError):
            ok = False
        if not ok:
            ignored += 1
            continue
        phases = row.get("phases") if isinstance(row.get("phases"), dict) else {}
        out.append({"step": row["step"], "t0": t0, "t1": t1,
                    "phases": {str(k): float(v) for k, v in phases.items() if isinstance(v, (int, float))}})
    return out, ignored


def counter_at(series: list[tuple[float, float]], t: float) -> float | None:
    """A cumulative counter's value at wall time `t`, linear between samples (clamped at the ends)."""
    if not series:
        return None
    if t <= series[0][0]:
        return series[0][1]
    for (ta, va), (tb, vb) in zip(series, series[1:]):
        if ta <= t <= tb:
            return va if tb == ta else va + (vb - va) * (t - ta) / (tb - ta)
    return series[-1][1]


def link_series(rows: list[dict]) -> dict[tuple[str, str], list[tuple[float, float]]]:
    out: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in rows:
        try:
            out.setdefault((r["node"], r["direction"]), []).append((float(r["wall_s"]), float(r["bytes"])))
        except (KeyError, ValueError, TypeError):
            continue
    return {k: sorted(v) for k, v in out.items()}


def off_host(row: dict) -> bool:
    """A connection whose peer is another node (loopback connections never reach a link)."""
    remote = str(row.get("remote", ""))
    return not remote.startswith(("127.", "::1", "::ffff:127.", "[::1]"))


def socket_series(rows: list[dict], field: str, start: float | None = None) -> dict[str, list[tuple[float, float]]]:
    """Per node: the sum over its connections of a cumulative counter at each sample time; a
    connection that has closed keeps its last value (its totals). `start`: when the job started
    (every connection of the node's fresh namespace counts from 0 there)."""
    at: dict[float, list[dict]] = {}
    for r in rows:
        with contextlib.suppress(KeyError, ValueError, TypeError):
            at.setdefault(float(r["wall_s"]), []).append(r)
    last: dict[str, dict[tuple[str, str], float]] = {}
    by_node: dict[str, list[tuple[float, float]]] = {}
    for t in sorted(at):
        for r in at[t]:
            with contextlib.suppress(KeyError, ValueError, TypeError):
                last.setdefault(r["node"], {})[(r["local"], r["remote"])] = float(r[field] or 0)
        for node, conns in last.items():
            by_node.setdefault(node, [] if start is None or start >= t else [(start, 0.0)]).append(
                (t, sum(conns.values())))
    return by_node


def _delta(series: list[tuple[float, float]], t0: float, t1: float) -> float | None:
    a, b = counter_at(series, t0), counter_at(series, t1)
    return None if a is None or b is None else b - a


# ---- the summary ----------------------------------------------------------------------------

def summarize(run: Path) -> dict:
    """summary.json's content from the folder alone (see the module docstring)."""
    run = Path(run)
    meta = _json(run / "meta.json")
    nodes = list(meta.get("nodes") or [])
    marks = {n: steps(run / "nodes" / n / "events.jsonl") for n in nodes}
    links = link_series(read_csv(run / "links.csv"))
    wall = (meta.get("job_started_wall"), meta.get("job_ended_wall"))
    sock_rows = [r for r in read_csv(run / "sockets.csv") if off_host(r)]
    sent = socket_series(sock_rows, "bytes_sent", wall[0])
    retrans = socket_series(sock_rows, "bytes_retrans", wall[0])
    out: dict = {"kind": KIND, "run_id": meta.get("run_id"), "label": meta.get("label"), "nodes": len(nodes),
                 "status": meta.get("status"), "complete": meta.get("status") == "complete",
                 "exits": meta.get("exits", {}), "failed_node": meta.get("failed_node"),
                 "wall_s": (wall[1] - wall[0]) if None not in wall else None,
                 "ignored_event_lines": {n: m[1] for n, m in marks.items() if m[1]}}
    timed = next((n for n in nodes if marks[n][0]), None)     # rank 0 (w1) unless it marked nothing
    rows = marks[timed][0] if timed else []
    counted = rows[SKIP_STEPS:] if len(rows) > SKIP_STEPS else rows
    if counted:
        window = (counted[0]["t0"], counted[-1]["t1"])
        durations = [r["t1"] - r["t0"] for r in counted]
        mean, half = ci95(durations)
        phases = sorted({k for r in counted for k in r["phases"]})
        out["steps"] = {"node": timed, "marked": len(rows), "counted": len(counted), "window_s": window[1] - window[0],
                        "s_per_step": mean, "s_per_step_ci": half,
                        "s_per_step_median": sorted(durations)[len(durations) // 2],
                        "phases_s": {p: sum(r["phases"].get(p, 0.0) for r in counted) / len(counted) for p in phases}}
        per, divisor = window, len(counted)
    else:
        out["steps"] = None
        per, divisor = (wall if None not in wall else None), 1
    out["per"] = "step" if counted else "run"
    out["links"] = {}
    for (node, direction), series in sorted(links.items()):
        if per is None or node not in nodes:     # the idle learner node carries no rank
            continue
        moved = _delta(series, *per)
        out["links"].setdefault(node, {})[direction] = None if moved is None else moved / divisor
    out["sockets"] = {}
    for node in sorted(sent):
        if per is None:
            continue
        out["sockets"][node] = {"sent": _delta(sent[node], *per) / divisor,
                                "retrans": (_delta(retrans.get(node, []), *per) or 0.0) / divisor}
    job_nodes = [n for n in nodes if n in out["links"]]
    ups = [out["links"][n].get("up") for n in job_nodes if out["links"][n].get("up") is not None]
    out["wire_up_bytes"] = sum(ups) / len(ups) if ups else None          # per node, per step (or run)
    socks = [out["sockets"][n]["sent"] for n in job_nodes if n in out["sockets"]]
    out["socket_sent_bytes"] = sum(socks) / len(socks) if socks else None
    out["calibration"] = _json(run / "calibration.json").get("rows", [])
    out["link_words"], out["cpu_shares"] = _link_words(meta), meta.get("cpu_shares") or {}
    out["cpu_throttled"] = meta.get("cpu_throttled") or {}
    out["setting"] = setting(meta)
    return out


def setting(meta: dict) -> str:
    """What a comparison must not pool across, as one canonical text: the links (the profile as resolved,
    flags over it), emulation and backend, and the CPU shares."""
    return json.dumps({"profile": meta.get("profile_doc"), "emulation": meta.get("emulation", True),
                       "backend": meta.get("backend"), "cpu_shares": meta.get("cpu_shares") or {}}, sort_keys=True)


def write(run: Path, model: dict | None = None) -> dict:
    """summary.json and report.md of one wrapped run; `model` (the ring prediction, harness/run/wrap.py)
    is kept from an earlier summary when not given (the results room does not compute it)."""
    run = Path(run)
    summary = summarize(run)
    if model is None:
        model = _json(run / "summary.json").get("model")
    summary["model"] = model
    atomic_write_json(run / "summary.json", summary)
    (run / "report.md").write_text(report_md(run, summary))
    return summary


# ---- wording --------------------------------------------------------------------------------

def _mb(v) -> str:
    return "-" if v is None else f"{v / 1e6:,.3f} MB"


def _link_words(meta: dict) -> str:
    if not meta.get("emulation", True):
        return "localhost, unshaped"
    link = meta.get("link") or {}
    parts = [f"profile {meta.get('profile')}"]
    if link.get("rate_bit_s"):
        parts.append(rate(link["rate_bit_s"]))
    if link.get("trace"):
        parts.append(f"trace {link['trace']}")
    if link.get("delay_s"):
        parts.append(f"{link['delay_s'] * 1e3:g} ms one-way")
    if link.get("jitter_s"):
        parts.append(f"jitter {link['jitter_s'] * 1e3:g} ms")
    if link.get("loss_frac"):
        parts.append(f"loss {fmt(link['loss_frac'], '%')}")
    return ", ".join(parts) + f" [{meta.get('backend')}]"


def cpu_words(shares: dict) -> str:
    """--worker-cpu as read: 'none', '0.5 CPU each', 'w1 1, w2 0.5 CPU'."""
    if not shares:
        return "none"
    values = set(shares.values())
    if len(values) == 1:
        return f"{values.pop():g} CPU each"
    return ", ".join(f"{n} {v:g}" for n, v in shares.items()) + " CPU"


def _throttled_words(throttled: dict) -> str:
    return ", ".join(f"{n} {fmt(t.get('throttled_s'), 's')} s ({t.get('throttled_periods')} of {t.get('periods')} "
                     "periods)" for n, t in throttled.items() if isinstance(t, dict))


def failure_words(meta: dict) -> str:
    """Who ended the run and how: 'node w2 exit code 3'; 'the job timed out after 3 s' (--timeout is the
    job's: every node was still running); 'node w2 timed out after 3 s' (the others had exited)."""
    failure = meta.get("failure") or "failed"
    if meta.get("failed_node"):
        return f"node {meta['failed_node']} {failure}"
    late = list(meta.get("timed_out_nodes") or [])
    if late and set(late) != set(meta.get("nodes") or []):
        return f"node{'s' if len(late) > 1 else ''} {', '.join(late)} {failure}"
    return f"the job {failure}"


def headline(s: dict) -> str:
    st = s.get("steps")
    wire = s.get("wire_up_bytes")
    if st:
        return (f"**{pm(st['s_per_step'], st['s_per_step_ci'])} s/step** over {st['counted']} steps "
                f"({st['node']}'s marks" + (f"; {st['marked']} marked, the first {st['marked'] - st['counted']} "
                                            "left out as warm-up" if st.get("marked", 0) > st["counted"] else "")
                + ")" + ("" if wire is None else f", {_mb(wire)} per node per step on the wire up"))
    return (f"**{fmt(s.get('wall_s'), 's')} s wall**, no step marks: totals over the run"
            + ("" if wire is None else f"; {_mb(wire)} per node on the wire up"))


def report_md(run: Path, s: dict) -> str:
    meta = _json(Path(run) / "meta.json")
    status = s.get("status")
    md = [f"# wrapped run {s.get('run_id')}", ""]
    if status != "complete":
        why = f": {failure_words(meta)}" if s.get("failed_node") or meta.get("failure") else ""
        md += [f"**{str(status).upper()}**{why}", ""]
    shares = meta.get("cpu_shares") or {}
    throttled = _throttled_words(meta.get("cpu_throttled") or {})
    md += [headline(s), "",
           f"- command: `{' '.join(meta.get('command') or [])}` on {s.get('nodes')} node{'s' if s.get('nodes') != 1 else ''}; label {s.get('label')!r}",
           f"- link: {_link_words(meta)}",
           f"- CPU shares: {cpu_words(shares)}" + (" (each node's job may use every core)" if not shares else "")
           + (f"; throttled: {throttled}" if throttled else ""),
           f"- wall time {fmt(s.get('wall_s'), 's')} s; exits: "
           + ", ".join(f"{n} {e}" for n, e in (s.get("exits") or {}).items()), ""]
    st = s.get("steps")
    if st and st.get("phases_s"):
        md += ["## Phases (mean s per step, as the job marked them)", "",
               markdown_table(["phase", "s/step"], [[p, fmt(v, "s")] for p, v in st["phases_s"].items()]), ""]
    per = "per step" if st else "over the run"
    md += [f"## Bytes {per}", "", "Wire: the access link's interface counters (headers, ACKs, retransmissions "
           "included); socket: TCP data bytes the node's connections sent (inet_diag).", ""]
    rows = [[n, _mb(d.get("up")), _mb(d.get("down")), _mb((s["sockets"].get(n) or {}).get("sent")),
             _mb((s["sockets"].get(n) or {}).get("retrans"))] for n, d in (s.get("links") or {}).items()]
    md += [markdown_table(["node", "wire up", "wire down", "socket sent", "retransmitted"], rows), ""]
    model = s.get("model")
    if model:
        md += ["## A ring all-reduce of these bytes", "",
               f"T = 2(N-1)/N * B / goodput + 2(N-1) * one-way delay = {fmt(model['seconds'], 's')} s "
               f"(bandwidth {fmt(model['bandwidth_s'], 's')} s + latency {fmt(model['latency_s'], 's')} s; "
               f"B = {_mb(model['payload_bytes'])} from {model['bytes_from']}; slowest hop {model['bottleneck']})", ""]
    if s.get("calibration"):
        md += ["## Links as calibrated before the job", "",
               markdown_table(["node", "dir", "rate", "goodput", "RTT ms", "ok"],
                              [[r["node"], r["direction"], fmt(r.get("rate_bit_s"), "rate"),
                                fmt(r.get("goodput_bit_s"), "rate"),
                                "-" if r.get("rtt_median_s") is None else f"{r['rtt_median_s'] * 1e3:.2f}",
                                "yes" if r.get("ok_rtt") and r.get("ok_goodput") and r.get("ok_loss") else "no"]
                               for r in s["calibration"]]), ""]
    if s.get("ignored_event_lines"):
        md += [f"Lines in $WAN_EVENTS that are not step marks (skipped): {s['ignored_event_lines']}", ""]
    return "\n".join(md)


# ---- comparison -----------------------------------------------------------------------------

def groups(summaries: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """(label, setting) -> its runs, in order of first appearance: repeats are runs of one label AND one
    setting (a run with no setting recorded pools by label alone)."""
    out: dict[tuple[str, str], list[dict]] = {}
    for s in summaries:
        out.setdefault((str(s.get("label")), str(s.get("setting") or "")), []).append(s)
    return out


def speedup(base: list[float], other: list[float]) -> tuple[float | None, float | None, float | None]:
    """(speedup of `other` over `base` in s/step, 95 % CI low, high) from independent repeats."""
    if not base or not other:
        return None, None, None
    mb, hb = ci95([math.log(x) for x in base])
    mo, ho = ci95([math.log(x) for x in other])
    point = math.exp(mb - mo)
    if hb is None or ho is None:
        return point, None, None
    half = math.hypot(hb, ho)
    return point, math.exp(mb - mo - half), math.exp(mb - mo + half)


def compare_md(summaries: list[dict]) -> str:
    by = groups(summaries)
    base = next(iter(by))
    base_s = [s["steps"]["s_per_step"] for s in by[base] if s.get("steps")]
    rows = []
    for (label, _), members in by.items():
        per = [s["steps"]["s_per_step"] for s in members if s.get("steps")]
        mean, half = ci95(per)
        sp, lo, hi = speedup(base_s, per)
        wire = [s["wire_up_bytes"] for s in members if s.get("wire_up_bytes") is not None]
        rows.append([label, members[0].get("link_words") or "-", cpu_words(members[0].get("cpu_shares") or {}),
                     str(len(members)), pm(mean, half, n=len(per)) if per else "-",
                     "-" if sp is None else fmt(sp, "x") + ("" if lo is None else f" [{lo:.2f}, {hi:.2f}]"),
                     _mb(sum(wire) / len(wire)) if wire else "-",
                     ", ".join(s.get("status") or "?" for s in members)])
    first = by[base][0]
    where = f"{first.get('link_words') or '-'}; CPU shares {cpu_words(first.get('cpu_shares') or {})}"
    md = ["# wrapped runs compared", "",
          f"Baseline: {base[0]!r} ({where}). "
          "A group is one label at one setting (link, CPU shares): runs that differ in either are never repeats. "
          "s/step: mean over repeats (± 95 % CI); speedup: baseline s/step / this group's, "
          "95 % CI over independent repeats; wire: bytes per node per step up (per run without step marks).", "",
          markdown_table(["label", "link", "CPU shares", "runs", "s/step", "speedup", "wire up/step", "status"], rows),
          ""]
    return "\n".join(md)


def labels(given: str | None, paths: list[str], runs: list[Path]) -> dict[Path, str]:
    """`harness report --label a,b`: one label per folder given (every run under a folder takes its
    folder's); ValueError (one line) when the counts differ. None: each run's own label."""
    if given is None:
        return {}
    names = [x.strip() for x in given.split(",")]
    if len(names) != len(paths) or not all(names):
        raise ValueError(f"--label: {given!r} names {len(names)} folders; give one label per folder ({len(paths)})")
    out = {}
    for name, p in zip(names, paths):
        for run in find([p]):
            out[run] = name
    return {r: out[r] for r in runs if r in out}


def report_cmd(runs: list[Path], quiet: bool, out: str | None, relabel: dict[Path, str] | None = None) -> int:
    """`harness report` over wrapped runs: each run's report rebuilt; several: a comparison in `out`
    (default a new report-<time> folder beside the first), `relabel` naming runs in it."""
    try:   # one folder: rebuilt in place; several: read only (a comparison never writes into an input)
        summaries = [write(runs[0])] if len(runs) == 1 and out is None else [summarize(r) for r in runs]
    except WrappedError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for run, s in zip(runs, summaries):
        s["label"] = (relabel or {}).get(run, s.get("label"))
    if len(runs) == 1 and out is None:
        if not quiet:
            print((runs[0] / "report.md").read_text())
        return 0
    folder = Path(out) if out else runs[0].resolve().parent / f"report-{dt.datetime.now():%Y%m%d-%H%M%S}"
    folder.mkdir(parents=True, exist_ok=True)
    text = compare_md(summaries)
    (folder / "report.md").write_text(text)
    if not quiet:
        print(text)
        print(f"comparison of {len(runs)} wrapped run(s): {folder / 'report.md'}", file=sys.stderr)
    return 0
