"""The link-emulation subcommands' bodies (`harness profiles`, `harness calibrate`), kept out of
cli.py so that file stays a thin list of commands. Raises ValueError (ProfileError,
ShaperError, UnitError) for usage errors; cli.py turns them into one line and exit code 2."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from harness.net import profiles, shaper, topology, traces
from harness.net.backend import decide
from harness.net.plan import build_plan, tc_commands

from harness import units
from harness.net import calibrate
from harness.net import doctor


def load_with_overrides(name: str, **flags: str | dict | None) -> profiles.Profile:
    """A profile with CLI flags (rate, delay, jitter, loss) overriding its worker defaults."""
    prof = profiles.load(name)
    overrides = {k: v for k, v in flags.items() if v is not None}
    try:
        profiles.check_flags(overrides)
    except profiles.OverrideError as err:
        raise ValueError(f"--{'bw' if err.key == 'rate' else err.key}: {err}") from None
    return profiles.with_link(prof, overrides) if overrides else prof


def profiles_text(name, plan, workers, backend, live, yaml, tc: bool = False) -> str:
    if live:
        try:
            return yaml.safe_dump(shaper.show(live), sort_keys=False)
        except shaper.ShaperError as err:
            raise ValueError(str(err)) from None
    if name is None:
        lines = []
        for pname in profiles.list_profiles():
            lines.append(f"{pname:24s} {profiles.load(pname).description}")
        return "\n".join(lines)
    prof = profiles.load(name)
    if plan:
        chosen = decide(backend, create=False).name   # printing a plan creates nothing
        built = build_plan(prof, topology.Topology.plan("0000", workers), chosen)
        return tc_commands(built).rstrip("\n") if tc else built.to_json()
    if tc:
        raise ValueError("--tc: prints a plan's commands, give --plan too")
    return yaml.safe_dump(prof.to_doc(), sort_keys=False)


def _fmt_rate(v):
    return "-" if v is None else units.format_rate(v)


def calibrate_cmd(prof: profiles.Profile, workers: int, secs: float, backend: str | None,
                  out: str, dry_run: bool) -> int:
    """Run the calibration and print a table; exit code 0 if every check passed, else 1; 2 (one
    line per missing piece, nothing built) when `harness doctor`'s checks fail."""
    from rich.console import Console
    from rich.table import Table

    if not (isinstance(secs, (int, float)) and math.isfinite(secs) and 0.5 <= secs <= 3600):
        print(f"error: --secs: {secs!r} must be within 0.5 and 3600 seconds per measurement", file=sys.stderr)
        return 2  # -1 measured nothing and reported "ok"
    if not 1 <= workers <= topology.MAX_WORKERS:
        print(f"error: --workers: {workers!r} must be within 1 and {topology.MAX_WORKERS}", file=sys.stderr)
        return 2
    if dry_run:
        chosen = decide(backend, create=False).name   # a dry run creates nothing to probe
        print(build_plan(prof, topology.Topology.plan("0000", workers), chosen).to_json())
        return 0

    missing = doctor.problems(backend, impaired=prof.impaired(workers), workers=workers,
                              out_dir=out)  # before anything is built
    if missing:
        print("\n".join(missing), file=sys.stderr)
        return 2
    try:
        rows = calibrate.calibrate(prof, workers, secs=secs, backend=backend, out_dir=Path(out))
    except (RuntimeError, OSError) as err:  # the server or a probe failed outright; emulate() has torn down
        print(f"error: calibration of {prof.name} failed: {err} (links torn down)", file=sys.stderr)
        return 1
    table = Table(title=f"calibration: {prof.name} ({workers} worker(s)) -> {out}/calibration.json")
    for col in ("link", "rate", "goodput", "ratio", "RTT want", "RTT got", "loss want", "lost/sent (99% int)", "ok"):
        table.add_column(col)
    ok_all = True
    for r in rows:
        ok = r.ok_goodput and r.ok_rtt and r.ok_loss
        ok_all &= ok
        goodput = "-" if r.goodput_bit_s is None else f"{r.goodput_bit_s / 1e6:.2f} Mbit/s"
        table.add_row(f"{r.node} {r.direction}", _fmt_rate(r.rate_bit_s), goodput,
                      "-" if r.goodput_ratio is None else f"{r.goodput_ratio:.3f}",
                      f"{r.rtt_want_s * 1e3:.2f} ms", "-" if r.rtt_median_s is None else f"{r.rtt_median_s * 1e3:.2f} ms",
                      units.format_percent(r.loss_want), f"{r.loss_lost}/{r.loss_sent} ({r.loss_interval[0]}-{r.loss_interval[1]})",
                      "yes" if ok else "NO (probe incomplete)" if r.incomplete else
                      f"NO ({'goodput ' if not r.ok_goodput else ''}{'rtt ' if not r.ok_rtt else ''}{'loss' if not r.ok_loss else ''})")
    Console(width=160).print(table)
    for line in trace_lines(rows, Path(out) / "calibration.json"):
        print(line)
    for node, why in dict.fromkeys((r.node, r.incomplete) for r in rows if r.incomplete):
        print(f"{node}: the probe could not complete ({why}): the link is too slow, lossy or long to "
              "measure this way; its row is not a measurement", file=sys.stderr)
    return 0 if ok_all else 1


def trace_lines(rows, path: Path) -> list[str]:
    """Traced links: achieved vs the trace over the same window (mean, p10/p50/p90 of 0.5 s bins),
    the playback error per window (carried vs the recorded trace's bytes), and the schedule's
    applied-vs-due lag."""
    lines = []
    for r in rows:
        for e in r.playback or []:
            if e.get("windows"):
                lines.append(f"{r.node} {r.direction} playback error per {e['window_s'] * 1e3:.0f} ms window "
                             f"({e['windows']} windows): mean {e['mean_abs']:.1%}, p90 {e['p90_abs']:.1%}, max "
                             f"{e['max_abs']:.1%} of the trace's mean bytes per window; carried/trace over all "
                             f"{e['total'] + 1:.3f}")
        if r.trace:
            t, a = r.trace["trace"], r.trace["achieved"]
            lines.append(f"{r.node} {r.direction} over {r.trace['window_s'][0]:.1f}-{r.trace['window_s'][1]:.1f} s of the "
                         f"trace: achieved mean {a['mean_bit_s'] / 1e6:.2f} Mbit/s vs trace {t['mean_bit_s'] / 1e6:.2f} "
                         f"({a['mean_bit_s'] / t['mean_bit_s']:.3f}); p10/p50/p90 achieved "
                         + "/".join(f"{a[k] / 1e6:.1f}" for k in ("p10_bit_s", "p50_bit_s", "p90_bit_s"))
                         + " vs trace " + "/".join(f"{t[k] / 1e6:.1f}" for k in ("p10_bit_s", "p50_bit_s", "p90_bit_s")))
    lags = json.loads(path.read_text()).get("schedule", {}) if path.exists() else {}
    for name, lag in lags.items():
        if lag.get("steps"):
            lines.append(f"{name} schedule: {lag['steps']} steps, applied-vs-due lag median {lag['lag_median_s'] * 1e3:.2f} ms, "
                         f"p95 {lag['lag_p95_s'] * 1e3:.2f} ms, max {lag['lag_max_s'] * 1e3:.2f} ms, {lag['skipped']} skipped")
    return lines


# ---- traces (harness/net/traces.py) ---------------------------------------------------------------

def _trace_line(name: str, t) -> str:
    st = t.stats()
    return (f"{name:24s} {t.period_s:7.1f} s loop  mean over the whole loop {st['mean_bit_s'] / 1e6:6.2f} Mbit/s"
            f"  p10 {st['p10_bit_s'] / 1e6:6.2f}  p50 {st['p50_bit_s'] / 1e6:6.2f}  p90 {st['p90_bit_s'] / 1e6:6.2f} (1 s means)"
            + ("  +delay" if t.delay_s else "") + ("  +loss" if t.loss_frac else ""))


def traces_list() -> str:
    files = sorted(p for p in traces.TRACE_DIR.glob("*") if p.suffix in (".csv", *traces.MAHIMAHI_SUFFIXES))
    return "\n".join(_trace_line(p.name, traces.load(p)) for p in files)


def traces_show(file: str, interval: str, steps: bool) -> str:
    t = traces.load(file)
    lines = [_trace_line(t.name, t)]
    if steps:
        for s in t.steps(units.parse_time(interval), t.period_s):
            lines.append(f"{s['at_s']:9.3f} s  {units.format_rate(s['rate_bit_s'])}"
                         + (f"  {units.format_time(s['delay_s'])}" if "delay_s" in s else "")
                         + (f"  {units.format_percent(s['loss_frac'])}" if "loss_frac" in s else ""))
    return "\n".join(lines)


def traces_generate(kind: str, out: str, *, mean: str, seconds: float, step: str, seed: int, sd: float, low: float,
                    period: str, outage_every: str, outage: str) -> str:
    t = traces.generate(kind, seconds=seconds, mean_bit_s=units.parse_rate(mean), step_s=units.parse_time(step),
                        seed=seed, sd_frac=sd, low_frac=low, period_s=units.parse_time(period),
                        outage_every_s=units.parse_time(outage_every), outage_s=units.parse_time(outage),
                        name=Path(out).name)
    traces.save(t, out)
    return _trace_line(out, traces.load(out))


def traces_convert(src: str, dst: str) -> str:
    if Path(dst).exists():
        raise ValueError(f"convert: {dst!r} exists (nothing written)")
    traces.save(traces.load(src), dst)
    return _trace_line(dst, traces.load(dst))
