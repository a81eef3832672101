"""`harness project --from RUN`: the measured run a projection starts from.

One run folder (config.json beside cells/), read once into an inputs.MeasuredRun. A sweep or a folder of
runs is refused in one line (whose compute, whose link?), as is a folder with no update to fit on. Every run parameter the command line
did not give is the run's own: model, LoRA rank, workers, methods, budgets, baseline, pipelining depth, the
link as it ran (config.json's `profile_doc`: the profile after --bw/--delay/--loss and --comm-ratio's
scaling) and the TCP congestion control it ran under (this host's), so that `harness project --from RUN`
alone projects what the run measured, and `header` says what was taken. A flag given wins over the run's.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.projection import costmodel as cm
from harness.projection.inputs import MeasuredRun, host_cc
from harness.results import files
from harness.results.tables import planned_cells, read
from trainers import spec

# The run parameters a projection takes from the run (or, without --from, the `_as_run` ones from
# `harness run`'s defaults: params.py), in the order the header names them.
RUN_PARAMS = ("model", "lora_rank", "workers", "method", "budget", "baseline", "pipeline")
AS_RUN = ("lora_rank", "method", "budget", "baseline")   # no projection default of their own (params._as_run)
LINK_FLAGS = ("profile", "bw", "delay", "loss")          # any of them given: the link is the user's, not the run's


def open_run(path: str) -> MeasuredRun:
    """The run folder `path` (ValueError: one line naming --from and what the folder is instead)."""
    p = Path(path)
    if not p.is_dir():
        raise ValueError(f"--from: {path!r} is not a folder (give one run folder, e.g. results/<run-id>)")
    if not files.is_run(p):
        try:
            inside = files.find_runs([p])
        except FileNotFoundError:
            inside = []
        runs = f"{len(inside)} run{'s' if len(inside) > 1 else ''}"
        what = f"it holds {runs}; give one of them, e.g. --from {inside[0]}" if inside else "no run folder under it"
        raise ValueError(f"--from: {path} is not a run folder (config.json beside cells/): {what}")
    run = MeasuredRun(p, read(p))
    if run.tables.updates.empty:
        raise ValueError(f"--from: {path} recorded no update to fit on")
    u = run.updates
    if u.empty:
        methods = ", ".join(dict.fromkeys(run.tables.updates["method"]))
        raise ValueError(f"--from: {path} ran data-parallel methods only ({methods}): the cost model's seconds are "
                         "HiLo's round (its prediction.json has their bytes per step)")
    if (u["update_index"] > 1).sum() == 0:
        raise ValueError(f"--from: {path} recorded no update past the first (warm-up) to fit on")
    return run


def incomplete(run: MeasuredRun) -> str | None:
    """One warning line for a run that did not finish (interrupted, failed or still running), else None:
    its fit covers only the updates it recorded, and a cell it never ran is the model's alone."""
    meta, cfg, cells = run.meta, run.config, run.tables.cells
    done = int(cells["complete"].sum()) if "complete" in cells else 0
    planned = len(planned_cells(cfg, meta)) or len(cells)
    if meta.get("complete") is True and done >= planned:
        return None
    seen = set(run.tables.updates["variant"])
    labels = [v.get("label") or spec.variant_label(v.get("method"), v.get("budget")) for v in cfg.get("variants") or []]
    missing = [label for label in labels if label not in seen]
    updates = int((run.updates["update_index"] > 1).sum())
    status = str(meta.get("status") or "incomplete")
    gap = f"; no {', '.join(missing)} cell" if missing else ""
    return (f"warning: --from {run.path} is {status} ({done} of {planned} cells complete{gap}): its fit covers only "
            f"the {updates} updates it recorded")


def _as_flag(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def defaults(values: dict, run: MeasuredRun | None) -> tuple[dict, dict[str, Any], list[str]]:
    """`values` (raw, by parameter name; None: not given) with each of RUN_PARAMS not given set to the run's,
    as the command line would spell it, and `cc` to the congestion control the run ran under; without a run,
    the AS_RUN ones to `harness run`'s defaults. Returns (values, what was taken from the run by name, notes)."""
    out, taken, notes = dict(values), {}, []
    cfg = run.config if run else {}
    for name in RUN_PARAMS:
        if out.get(name) is not None:
            continue
        value = cfg.get(name)
        if name in ("method", "baseline") and run is not None:
            value = _hilo(value, name, run, notes)
        if value in (None, [], ""):
            if name in AS_RUN:
                out[name] = _as_flag(spec.get(name).default)
            continue
        taken[name] = value
        out[name] = _as_flag(value)
    if run is not None and out.get("cc") is None:
        out["cc"] = taken["cc"] = host_cc()
    if run is not None and not any(out.get(k) is not None for k in LINK_FLAGS):
        taken["link"] = run.profile()
    return out, taken, notes


def _hilo(value: Any, name: str, run: MeasuredRun, notes: list[str]) -> Any:
    """The run's methods or baseline as the cost model can project them: a data-parallel method left out,
    a run without a baseline (--baseline none) projected against `harness run`'s default, said so."""
    default = spec.get("baseline").default
    if name == "method":
        kept = [m for m in value or [] if not spec.is_data_parallel(m)]
        if len(kept) < len(value or []):
            notes.append(f"the run's data-parallel methods left out (the cost model projects HiLo's round): "
                         f"{', '.join(m for m in value if spec.is_data_parallel(m))}")
        return kept
    if value == spec.NO_BASELINE:
        notes.append(f"{run.path} ran no baseline (--baseline none): speedups are against {default}, harness run's "
                     "default, which the run did not measure")
        return None
    if value is not None and spec.is_data_parallel(value):
        notes.append(f"the run's baseline {value} is data-parallel: speedups are against {default}")
        return None
    return value


def link_words(net: cm.Network) -> str:
    """A network's worker links (and a shaped learner link) in a few words: '9.94 Mbit/s per worker link'."""
    def one(node: cm.Node) -> str:
        down, up = (_access(a) for a in (node.down, node.up))
        return down if down == up else f"{down} down / {up} up"

    w = net.workers
    if all(x == w[0] for x in w):
        words = f"{one(w[0])} per worker link"
    else:
        words = "per worker: " + "; ".join(f"w{i + 1} {one(x)}" for i, x in enumerate(w[:4])) + \
            ("; ..." if len(w) > 4 else "")
    if net.shared_uplink:
        words += f", learner link {_mbit(net.learner.up.rate_bit_s)} shared"
    return words


def _mbit(rate: float | None) -> str:
    return "unshaped" if not rate else f"{rate / 1e6:.3g} Mbit/s"


def _access(a: cm.Access) -> str:
    return _mbit(a.rate_bit_s) + (f", {a.delay_s * 1e3:g} ms" if a.delay_s else "") + \
        (f", {a.loss_frac * 100:g} % loss" if a.loss_frac else "")


def header(run: MeasuredRun, taken: dict[str, Any], net: cm.Network, variants, baseline: str, updates: int,
           compute_given: bool = False) -> str:
    """'from RUN: model tiny rank 8, 2 workers, ...': what the projection took from the run, in words."""
    cfg, parts = run.config, []
    if "model" in taken:
        parts.append(f"model {cfg['model']}" + (f" rank {cfg['lora_rank']}" if "lora_rank" in taken else ""))
    elif "lora_rank" in taken:
        parts.append(f"LoRA rank {cfg['lora_rank']}")
    if "workers" in taken:
        parts.append(f"{cfg['workers']} workers")
    labels = [spec.variant_label(m, b) for m, b in variants if m != baseline]
    if ("method" in taken or "budget" in taken) and labels:
        parts.append("methods " + ", ".join(labels))
    if "baseline" in taken:
        parts.append(f"baseline {baseline}")
    if "pipeline" in taken:
        parts.append(f"depth {cfg['pipeline']}")
    if "link" in taken:
        parts.append(_run_link(run, net))
    if "cc" in taken:
        parts.append(f"TCP {taken['cc']} (this host's, what the run ran under)")
    fitted = f"{updates} update{'s' if updates != 1 else ''}"
    parts.append(f"codec terms fitted on its {fitted} (rollout and train as given)" if compute_given else
                 f"compute fitted on its {fitted}")
    return f"from {run.path}: " + ", ".join(parts) + "; a flag given overrides each"


def _run_link(run: MeasuredRun, net: cm.Network) -> str:
    cfg = run.config
    if not cfg.get("emulation", True):
        return "unshaped (the run's: no emulation, localhost)"
    regime = cfg.get("regime") or {}
    how = f"the run's, profile {cfg.get('profile_name')}"
    factor, literal = regime.get("factor"), regime.get("literal_rate_bit_s")
    if factor and factor != 1 and regime.get("target") is not None:
        how += f", after --comm-ratio {regime['target']}" + (f": {_mbit(literal)} x{factor:.3g}" if literal else "")
    return f"{link_words(net)} ({how})"
