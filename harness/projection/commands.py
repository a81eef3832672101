"""`harness project`: what a method would do at a scale this box cannot run (the cost model, harness/projection/costmodel.py).

    harness project --model qwen2.5-1.5b --workers 8 --bw 62.5mbit --compute-s 14 \\
        --method spar --budget 1.6% --baseline full-bf16 --encode-s 1 --replay-s 0.5 --send background

Inputs: the adapter's factor shapes (the named model instantiated on the meta device: the only
torch this command touches), the network (worker links from --bw/--delay/--loss or a profile; a
shaped learner link is shared by every worker; an optional relay tree), and the compute per
update (given, or fitted from a measured run with --from). Output: a table per method and
pipelining depth (seconds per update by phase, bytes, speedup vs the baseline), or --json;
--figures DIR adds speedup vs bandwidth and seconds per update vs workers.

The body of the command, by concern: inputs.py (flags -> Inputs), source.py (the run --from names: its
parameters as the defaults, the words saying what was taken), costmodel.py (the pure model), figures.py,
validate.py (fit on one run, predict others); here the table, --json and the two entry points.
"""
from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from harness.projection import costmodel as cm
from harness.projection.figures import figures, validation_figure
from harness.projection.inputs import Inputs, build
from harness.projection import params, source
from harness.projection.validate import (compute_words, data_parallel_only, nothing_to_validate, other_models,
                                         validate, validation_table)
from harness import readers, units


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
        # codec_measured false: the run given to --from did not measure it, its encode/decode/replay taken as 0
        "methods": [{**r.to_json(), **({"codec_measured": False} if r.variant in inputs.unmeasured else {})}
                    for r in rows],
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
        bound = r.variant in inputs.unmeasured   # codec not measured: 0 s taken, "-" shown, the speedup at most
        t.add_row(r.variant, str(r.pipeline), f"{'>=' if bound else ''}{r.seconds_per_update:.2f}",
                  f"{r.rollout_s:.2f}", f"{r.train_s:.2f}", "-" if bound else f"{r.encode_s:.2f}",
                  f"{r.transfer_down_s:.2f}", f"{r.transfer_up_s:.2f}", "-" if bound else f"{r.replay_s:.2f}",
                  f"{r.other_s:.2f}", r.bound, f"{r.bytes_down_per_worker / 1e6:.2f}",
                  f"{'<=' if bound else ''}{r.speedup:.2f}x")
    return t


def unmeasured_warning(inputs: Inputs, run_path: Path) -> str | None:
    """One warning line when the run --from names did not measure a compressed variant projected: its
    codec seconds are taken as 0, so its speedup is an upper bound (the table marks it <=)."""
    if not inputs.unmeasured:
        return None
    names = ", ".join(inputs.unmeasured)
    return (f"warning: {run_path} did not measure {names}: {'its' if len(inputs.unmeasured) == 1 else 'their'} "
            "encode/decode/replay cost taken as 0, the speedup an upper bound (give --encode-s and --replay-s, "
            "or --from a run that ran it)")


def main(as_json: bool, figures_dir: str | None, values: dict, from_run: str | None = None,
         opt: list[str] | tuple[str, ...] = ()) -> int:
    """`values`: the raw value of each parameter of params.PARAMS by name (None: not given), as the command
    line gives them. With `from_run`, each run parameter not given is that run's (source.defaults)."""
    if figures_dir:   # a folder that cannot be written is one line before anything is computed or printed
        readers.check_output_dir(figures_dir, "--figures")
    params.parse(values)   # a bad flag is one line before --from's run is read
    run = source.open_run(from_run) if from_run else None
    filled, taken, run_notes = source.defaults(values, run)
    inputs = build(**params.parse(filled), run=run, opt=list(opt))
    if figures_dir:
        _make_folder(figures_dir)
    for warning in (source.incomplete(run), unmeasured_warning(inputs, run.path)) if run is not None else ():
        if warning:
            print(warning, file=sys.stderr)
    given = any(values.get(k) is not None for k in ("compute_s", "rollout_s", "train_s"))
    head = (source.header(run, taken, inputs.net, inputs.variants, inputs.baseline, inputs.updates_fitted, given)
            if run is not None else None)
    rows = project(inputs)
    if as_json:
        doc = to_json(inputs, rows)
        if run is not None:
            doc["inputs"]["from"] = {"run": str(run.path), "taken": sorted(taken), "words": head,
                                     "notes": run_notes}
        print(json.dumps(doc, indent=1))
    else:
        from rich.console import Console

        console = Console(width=None if sys.stdout.isatty() else 160)
        for line in ([head] if head else []) + [f"note: {n}" for n in run_notes]:
            print(line)
        sys.stdout.flush()
        console.print(table_text(inputs, rows))
        for note in inputs.notes:
            console.print(f"note: {note}")
    if figures_dir:
        paths = _written(lambda: figures(inputs, figures_dir), figures_dir)
        if not as_json:
            print("\n".join(str(p) for p in paths))
    return 0


def validate_cmd(fit_run: str, runs: list[str], figures_dir: str | None, as_json: bool) -> int:
    from harness.results import files

    if figures_dir:
        readers.check_output_dir(figures_dir, "--figures")
    fit_on = source.open_run(fit_run)   # one run folder: a sweep's pooled updates are nobody's compute
    targets = [r for r in files.find_runs(runs) if Path(r).resolve() != Path(fit_run).resolve()]
    fitted, checks = validate(fit_on, targets)
    if not checks:   # an empty table and exit 0 would read as a validation that passed
        raise ValueError(nothing_to_validate(targets, fit_run))
    left_out = data_parallel_only(targets)
    if figures_dir:   # after every run is read (a bad one is one line and leaves no folder), before printing
        _make_folder(figures_dir)
    dp_words = "; ".join(f"{r} ({', '.join(m)})" for r, m in left_out.items())
    for line in (source.incomplete(fit_on), other_models(fitted, checks),
                 f"warning: --validate: left out, data-parallel only: {dp_words}" if left_out else None):
        if line:
            print(line, file=sys.stderr)
    if as_json:
        print(json.dumps({"fitted_on": str(fit_run), "model": fitted.model, "lora_rank": fitted.lora_rank,
                          "compute": asdict(fitted.compute),
                          "checks": [{**asdict(c), "error": c.error} for c in checks]}, indent=1, default=str))
    else:
        workers = f"{fitted.workers} worker{'' if fitted.workers == 1 else 's'}"
        print(f"compute fitted on {fit_run} ({fitted.model} rank {fitted.lora_rank}, {workers}, "
              f"{fitted.updates_used} update{'' if fitted.updates_used == 1 else 's'} after each cell's first), per update:\n{compute_words(fitted)}\n")
        print(validation_table(checks))
    if figures_dir and checks:
        paths = _written(lambda: validation_figure(checks, figures_dir), figures_dir)
        if not as_json:
            print("\n".join(str(p) for p in paths))
    return 0


def _make_folder(folder: str) -> None:
    """The figures' folder made (and a file written in it and removed) before anything is printed: a folder
    the permission bits allow but the kernel refuses (/proc, a read-only mount, root's access()) is one line
    (FileError), not a table and then an error."""
    import tempfile

    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise readers.FileError(f"--figures: cannot write into {folder!r} "
                                f"({err.strerror or type(err).__name__})") from None


def _written(write, folder: str) -> list[Path]:
    """The figures `write` wrote; FileError (one line) when the folder refuses them after the check."""
    try:
        return write()
    except OSError as err:
        raise readers.FileError(f"--figures: cannot write into {folder!r} "
                                f"({err.strerror or type(err).__name__})") from None
