"""The link-emulation subcommands' bodies (`harness profiles`, `harness calibrate`), kept out of
cli.py so that file stays a thin list of commands. Raises ValueError (ProfileError,
ShaperError, UnitError) for usage errors; cli.py turns them into one line and exit code 2."""
from __future__ import annotations

import sys
from pathlib import Path

from harness.net import backend as backends, plan as plans, profiles, shaper, topology

from harness import units
from harness.net import calibrate
from harness.net import doctor


def load_with_overrides(name: str, **flags: str | None) -> profiles.Profile:
    """A profile with CLI flags (rate, delay, jitter, loss) overriding its worker defaults."""
    prof = profiles.load(name)
    overrides = {k: v for k, v in flags.items() if v is not None}
    return profiles.with_link(prof, overrides) if overrides else prof


def profiles_text(name, plan, workers, backend, live, yaml) -> str:
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
        chosen = backends.decide(backend, create=False).name   # printing a plan creates nothing
        return plans.build_plan(prof, topology.Topology.plan("0000", workers), chosen).to_json()
    return yaml.safe_dump(prof.to_doc(), sort_keys=False)


def _fmt_rate(v):
    return "-" if v is None else units.format_rate(v)


def calibrate_cmd(prof: profiles.Profile, workers: int, secs: float, backend: str | None,
                  out: str, dry_run: bool) -> int:
    """Run the calibration and print a table; exit code 0 if every check passed, else 1; 2 (one
    line per missing piece, nothing built) when `harness doctor`'s checks fail."""
    from rich.console import Console
    from rich.table import Table


    if dry_run:
        chosen = backends.decide(backend, create=False).name   # a dry run creates nothing to probe
        print(plans.build_plan(prof, topology.Topology.plan("0000", workers), chosen).to_json())
        return 0

    missing = doctor.problems(backend, profile=prof, workers=workers, out_dir=out)  # before anything is built
    if missing:
        print("\n".join(missing), file=sys.stderr)
        return 2
    rows = calibrate.calibrate(prof, workers, secs=secs, backend=backend, out_dir=Path(out))
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
                      "yes" if ok else f"NO ({'goodput ' if not r.ok_goodput else ''}{'rtt ' if not r.ok_rtt else ''}{'loss' if not r.ok_loss else ''})")
    Console(width=160).print(table)
    return 0 if ok_all else 1
