"""prediction.json: what the cost model predicts for each variant of a finished run, at the run's own
link and its measured compute, next to what the run measured, and each variant's bottleneck in words.

    python -m harness.projection.prediction results/<run-id>     # launch.finalize runs it before the report

The compute terms are fitted on the run itself (costmodel.fit, without solving for the residual, so
the error is the model's: its transfer times and overlap rules against the measured seconds per
update). When the machine was contended (compare.contended), compute is fitted at CPU time too and each
variant's bottleneck is read there, its wall-time reading beside it. A traced link (harness/net/traces.py) is modelled at its trace's mean rate. The results room
reads the file (harness/results/ledger.py) and never imports this one: reports rebuild from the run
folder alone.

Sizing the adapter builds the model on the meta device (torch), which `harness run` itself never
imports: the shapes are kept in the models cache (`adapters/`, `cached_shapes`), so `harness run` predicts
in its own process (`write(run_dir, cache)`) once they are there. A run whose shapes are not cached has
its fork server size them while the cells run (`trainers.model.shapes`, forked by launch.AdapterShapes:
`pending_shapes`, `adopt_shapes`); this module runs as a process (which imports torch and fills the
cache) only without a fork server (--spawn exec), when that child failed, or for a data-parallel run.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from pathlib import Path

from harness.net import profiles
from harness.projection import commratio, costmodel as cm
from harness.projection import dpbytes
from harness.projection.inputs import adapter_for, delta_options, dp_rank, dp_tensors, host_cc, plugin_bytes
from harness.results import compare, dataparallel_report, trace_clock, windows
from harness.results.tables import RunTables, read
from trainers import spec

FILE = "prediction.json"
SHAPES_DIR = "adapters"   # under the models cache: <key>.json, the shapes of (model, rank); rank None: every parameter


def _shapes_file(cache: Path, model: str, rank: int | None) -> Path:
    """Where (model, rank)'s shapes are kept (rank None: the whole model's parameters): keyed by the model's
    name or, for a config folder, by its config.json's bytes as well (an edited config sizes another adapter)."""
    ident = f"{model}\0{'full' if rank is None else rank}"
    config = Path(model) / "config.json"
    if config.is_file():
        ident += "\0" + config.read_text()
    return cache / SHAPES_DIR / f"{hashlib.sha256(ident.encode()).hexdigest()[:24]}.json"


def cached_shapes(cache: Path | None, model: str, rank: int | None) -> list[tuple[str, tuple[int, ...]]] | None:
    """(name, shape) of the adapter's factors as a torch process stored them, or None (no cache, no entry,
    or an entry that does not parse: then the process recomputes it)."""
    return None if cache is None else _read_shapes(_shapes_file(cache, model, rank), model, rank)


def _read_shapes(path: Path, model: str, rank: int | None) -> list[tuple[str, tuple[int, ...]]] | None:
    """The shapes of (model, rank) in a file of store_shapes' format, or None."""
    try:
        doc = json.loads(path.read_text())
        if doc["model"] != model or doc["rank"] != rank:
            return None
        shapes = [(str(n), tuple(int(d) for d in shape)) for n, shape in doc["shapes"]]
        return shapes or None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def pending_shapes(cache: Path, model: str, rank: int | None) -> Path | None:
    """Where a `trainers.model.shapes` child (forked while the cells run: harness/run/launch.py) is to
    write (model, rank)'s shapes for `adopt_shapes`; None when they are cached already."""
    if cached_shapes(cache, model, rank) is not None:
        return None
    final = _shapes_file(cache, model, rank)
    final.parent.mkdir(parents=True, exist_ok=True)
    return final.with_name(f"{final.stem}.pending-{os.getpid()}.json")


def adopt_shapes(cache: Path, model: str, rank: int | None, pending: Path) -> bool:
    """Keep the shapes a `trainers.model.shapes` child wrote at `pending` (the same format, read back and
    checked as `cached_shapes` reads them) in the cache; the pending file goes either way."""
    shapes = _read_shapes(pending, model, rank)
    with contextlib.suppress(OSError):
        pending.unlink()
    if shapes is None:
        return False
    store_shapes(cache, model, rank, shapes)
    return True


def store_shapes(cache: Path, model: str, rank: int | None, shapes) -> None:
    """Keep the adapter's shapes for the next run's in-process prediction (written whole, then renamed)."""
    path = _shapes_file(cache, model, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"model": model, "rank": rank, "shapes": [[n, list(s)] for n, s in shapes]}))
    os.replace(tmp, path)


def _adapter(cfg: dict, cache: Path | None) -> cm.Adapter:
    """The run's adapter: from the cached shapes, else sized on the meta device (torch) and then cached."""
    model, rank = cfg["model"], int(cfg["lora_rank"])
    shapes = cached_shapes(cache, model, rank)
    if shapes is not None:
        return cm.Adapter.from_shapes(shapes, rank, model, stated=plugin_bytes())
    adapter = adapter_for(model, rank)
    if cache is not None:
        store_shapes(cache, model, rank, adapter.tensors)
    return adapter


def needed_ranks(methods: list[str], lora_rank: int, dp_train: str | None) -> list[int | None]:
    """The shape tables `write` reads for a run of `methods`, by rank: the adapter's (--lora-rank) for its
    HiLo methods, what a data-parallel replica synchronises (--dp-train) for its data-parallel ones (None:
    every parameter of the model)."""
    ranks = [lora_rank] if not all(map(spec.is_data_parallel, methods)) else []
    if any(map(spec.is_data_parallel, methods)):
        ranks.append(dp_rank(dp_train, lora_rank))
    return list(dict.fromkeys(ranks))


def in_process(run_dir: str | Path, cache: Path) -> bool:
    """True when `write(run_dir, cache)` needs no torch: every shape table the run reads is cached."""
    cfg = json.loads((Path(run_dir) / "config.json").read_text())
    ranks = needed_ranks([str(v["method"]) for v in cfg.get("variants") or []], int(cfg["lora_rank"]),
                         cfg.get("dp_train"))
    return all(cached_shapes(cache, cfg["model"], rank) is not None for rank in ranks)


def network(cfg: dict, workers: int) -> tuple[cm.Network, str]:
    """The run's network at time 0, a traced worker link at its trace's mean rate; and the words for it."""
    prof = profiles.from_doc(cfg["profile_doc"], cfg["profile_name"])
    net = cm.Network.from_profile(prof, workers, cc=host_cc())
    words = commratio.link_words(prof, workers)   # a trace or unequal workers, named; None for one flat rate
    return net, f"profile {prof.name}" + (f", {words} (a trace modelled at its mean)" if words and "trace" in words
                                          else f", {words}" if words else "")


def _bottleneck(p: cm.Prediction, workers: int, cores: int | None, load: float | None,
                wall: cm.Prediction | None = None) -> tuple[str, str]:
    """(bottleneck, evidence in words) of one variant from its predicted terms. `wall`: given when
    `p`'s compute was fitted at CPU time because the machine was contended (costmodel.fit clock
    "cpu"): the same prediction with compute at wall time, whose bottleneck and link share the words
    give beside."""
    where, words = _bound(p, workers, cores, load)
    if wall is None:
        return where, words
    at = f", load {load:.1f} per core" if load is not None else ""
    return where, (f"compute at CPU time: the machine was contended{at}; {words} (at wall time: "
                   f"{_bound(wall, workers, cores, load)[0]}, the link {link_share(wall):.0%} of the update)")


def link_share(p: cm.Prediction) -> float:
    """The links' share of a predicted update (down + up over seconds per update)."""
    return (p.transfer_down_s + p.transfer_up_s) / max(p.seconds_per_update, 1e-9)


def _bound(p: cm.Prediction, workers: int, cores: int | None, load: float | None) -> tuple[str, str]:
    """(bottleneck, evidence in words) on the clock `p`'s compute was fitted at."""
    compute = p.rollout_s + p.train_s + p.encode_s + p.replay_s + p.other_s
    network = p.transfer_down_s + p.transfer_up_s
    share = link_share(p)
    parts = [("rollouts", p.rollout_s), ("training", p.train_s), ("encode", p.encode_s),
             ("decode + replay", p.replay_s), ("the harness's own work", p.other_s)]
    spent = ", ".join(f"{name} {s:.3g} s" for name, s in parts if s > 0 or name in ("rollouts", "training"))
    words = (f"the model spends {network:.3g} s per update on the links (update down {p.transfer_down_s:.3g} s, "
             f"rollouts up {p.transfer_up_s:.3g} s) and {compute:.3g} s on compute ({spent})")
    if cores and workers > cores and network < compute:
        seen = f"; measured load {load:.1f} per core" if load is not None else ""
        return ("CPU oversubscription",
                f"{workers} workers and the learner share {cores} cores, so each worker's rollouts run "
                f"{workers / cores:.1f}x slower than on a core of its own{seen}; {words}. A faster link or fewer bytes "
                "cannot speed this cell up: the methods differ only in the little link time left")
    if network >= compute:
        where = "learner uplink" if p.bottleneck.startswith("learner uplink") else "worker link"
        return where, f"{words}: {share:.0%} of the update is link time, set by the {p.bottleneck}"
    return "compute", f"{words}: the link is {share:.0%} of the update"


def _at_cpu(q: cm.Prediction | None, p: cm.Prediction, workers: int, cores: int | None, measured: float | None) -> dict:
    """prediction.json's clock fields of one variant: the clock its bottleneck was read on and the
    link's share there; on a contended run (`q`: compute fitted at CPU time) also the CPU-time
    prediction, the measured median with compute charged at CPU time (compare.cpu_charged) and the
    wall figures beside them."""
    if q is None:
        return {"clock": "wall", "link_share": link_share(p)}
    return {"clock": "cpu", "link_share": link_share(q), "predicted_cpu_s": q.seconds_per_update,
            "measured_cpu_s": measured, "bottleneck_wall": _bound(p, workers, cores, None)[0],
            "link_share_wall": link_share(p)}


def _measured_cpu(u, skip_first: int = 1) -> dict[str, float]:
    """Median seconds per update with compute charged at CPU time, per variant, after the warm-up."""
    df = u[u["update_index"] > skip_first]
    return {label: float(compare.cpu_charged(g).median()) for label, g in df.groupby("variant", sort=False)}


def build(run_dir: str | Path, cache: Path | None = None, tables: RunTables | None = None) -> dict:
    """prediction.json's document for a finished run; `cache`: the models cache holding (or to hold) the
    adapter's shapes; `tables`: the run's tables when the caller already parsed its folder."""
    t = tables if tables is not None else read(run_dir)
    run, u = t.runs[0], t.updates
    cfg, meta = run.config, run.meta
    if u.empty or (u["update_index"] > 1).sum() == 0:
        return {}
    workers, cores = int(cfg["workers"]), meta.get("cpus")
    net, link_words = network(cfg, workers) if cfg.get("emulation", True) else (
        cm.Network.uniform(workers, None, cc=host_cc()), "localhost, unshaped")
    out = {"model": "harness/projection/costmodel.py, compute fitted on this run (medians after update 1)",
           "link": link_words, "workers": workers, "cores": cores, "cc": net.cc, "variants": {}}
    dp = u["method"].map(spec.is_data_parallel)
    if dp.any():
        out["dataparallel"] = dataparallel(u[dp], cfg, _dp_tensors(cfg, cache))
        out["dataparallel_note"] = DP_NOTE
    u = u[~dp]
    if u.empty:
        return out
    emulated = cfg.get("emulation", True)
    baseline = str(cfg.get("baseline") or commratio.FULL_SYNC)
    full = u[(u["method"] == commratio.full_sync(u, baseline)) & (u["update_index"] > commratio.WARM_UP)]
    window = trace_clock.covered(run.dir, full) if emulated else None   # a traced link: its rate where they ran
    out["regime"] = commratio.achieved(u, baseline,
                                       profiles.from_doc(cfg["profile_doc"], cfg["profile_name"]) if emulated else None,
                                       workers, net.cc, cfg.get("regime"), window)
    adapter = _adapter(cfg, cache)
    # one box: the learner and every worker share its cores (emulated or not)
    fitted = cm.fit(u, adapter=adapter, shared_cores=cores, source=str(run_dir))
    # A contended run's compute is fitted at CPU time too, and its bottlenecks are read there: wall
    # time would charge the load of other processes to compute (_bottleneck keeps the wall figure beside).
    at_cpu = cm.fit(u, adapter=adapter, shared_cores=cores, source=str(run_dir), clock="cpu") \
        if compare.contended(u) is True else None
    measured, measured_cpu = cm.measured(u), _measured_cpu(u) if at_cpu else {}
    options = delta_options(u)   # delta's bytes as this run measured them (the model's default is the worst case)
    load = u["load1"].median() / u["cores"].median() if {"load1", "cores"} <= set(u) and u["load1"].notna().any() else None
    for variant, method, frac in u[["variant", "method", "budget_frac"]].drop_duplicates().itertuples(index=False):
        if variant not in measured:
            continue
        p = cm.predict(method, adapter, net, fitted.compute, int(cfg["pipeline"]), cm.budget_text(frac), options)
        q = cm.predict(method, adapter, net, at_cpu.compute, int(cfg["pipeline"]), cm.budget_text(frac),
                       options) if at_cpu else None
        bottleneck, evidence = _bottleneck(q or p, workers, cores, None if load != load else load, wall=p if q else None)
        out["variants"][variant] = {
            "predicted_s": p.seconds_per_update, "measured_s": measured[variant],
            "error": (p.seconds_per_update - measured[variant]) / measured[variant],
            "transfer_down_s": p.transfer_down_s, "transfer_up_s": p.transfer_up_s, "rollout_s": p.rollout_s,
            "train_s": p.train_s, "bound": p.bound, "link_bottleneck": p.bottleneck,
            "bottleneck": bottleneck, "evidence": evidence,
            **_at_cpu(q, p, workers, cores, measured_cpu.get(variant))}
    if emulated and out["regime"].get("ratio") is not None:
        out["regime"]["curve"] = regime_curve(u, cfg, out["regime"], workers, net.cc, adapter, fitted.compute, options,
                                              window)
    return out


def regime_curve(u, cfg: dict, regime: dict, workers: int, cc: str, adapter: cm.Adapter, compute: cm.Compute,
                 options: dict, window: tuple[float, float] | None = None) -> list[dict]:
    """The cost model's speedup of each of the run's variants over its baseline against full sync's comm
    ratio, at the run's pipelining depth and compute, its links scaled as `--comm-ratio` would scale them
    (what the reproduction figure draws through its measured points: harness/results/regime_plots.py).
    `regime`: commratio.achieved's block (full sync's compute and frames as this run measured them); `window`:
    the seconds of a trace its updates ran over, as there (the factors are of that part's rate)."""
    m = commratio.Measured(regime["compute_s"], regime["down_bytes"], regime["up_bytes"])
    baseline = str(cfg.get("baseline") or commratio.FULL_SYNC)
    if baseline == spec.NO_BASELINE:
        return []
    prof = profiles.from_doc(cfg["profile_doc"], cfg["profile_name"])
    variants = u[["variant", "method", "budget_frac"]].drop_duplicates().itertuples(index=False)
    pairs = [(v, mth, cm.budget_text(frac)) for v, mth, frac in variants if mth != baseline]

    def speedups(net: cm.Network) -> dict[str, float]:
        base = cm.predict(baseline, adapter, net, compute, int(cfg["pipeline"]), None, options).seconds_per_update
        return {v: base / cm.predict(mth, adapter, net, compute, int(cfg["pipeline"]), b, options).seconds_per_update
                for v, mth, b in pairs}
    return commratio.curve(m, commratio.network_at(prof, workers, cc, window), commratio.factor_bounds(prof, workers),
                           speedups)


# Why prediction.json has bytes but no seconds for the data-parallel family (the report prints it).
DP_NOTE = ("bytes per optimizer step only (harness/projection/dpbytes.py): the cost model's seconds are those of "
           "HiLo's round (the update fanned out, rollouts fanned in), not of K local steps and an all-reduce")


def _dp_tensors(cfg: dict, cache: Path | None) -> cm.Tensors:
    """What the run's data-parallel replicas synchronise: from the cached shapes, else read on the meta
    device (torch) and then cached."""
    model, rank = cfg["model"], dp_rank(cfg.get("dp_train"), int(cfg["lora_rank"]))
    shapes = cached_shapes(cache, model, rank)
    if shapes is not None:
        return tuple(shapes)
    tensors = dp_tensors(model, cfg.get("dp_train"), int(cfg["lora_rank"]))
    if cache is not None:
        store_shapes(cache, model, rank, tensors)
    return tensors


def dataparallel(u, cfg: dict, tensors: cm.Tensors) -> dict:
    """Per data-parallel variant, over the steps the run recorded (a K-step method's last partial window
    left out, as the report counts it): the byte rules' mean bytes per optimizer step per worker (tensor
    data) beside the run's own, the method's claimed bytes and the measured SYNC payload (the tensor
    table, its header included)."""
    sync = dpbytes.Sync.from_config(cfg)
    df = u[u["claimed_bytes_up"].notna()] if "claimed_bytes_up" in u else u.iloc[:0]
    df = df[~windows.tail_steps(df, [k for k in dataparallel_report.KEYS if k in df] + ["method", "seed"])]
    out = {}
    for method, g in df.groupby("method", sort=False):
        model = [dpbytes.step_bytes(method, tensors, int(step), sync) for step in g["update_index"]]
        out[method] = {"bytes_up_per_step": sum(m[0] for m in model) / len(g),
                       "bytes_down_per_step": sum(m[1] for m in model) / len(g),
                       "claimed_up_per_step": float(g["claimed_bytes_up"].mean()),
                       "claimed_down_per_step": float(g["claimed_bytes_down"].mean()),
                       "payload_up_per_step": float((g["payload_bytes_up"] / g["workers"]).mean()),
                       "payload_down_per_step": float(g["payload_bytes_down"].mean()), "steps": len(g)}
    return out


def write(run_dir: str | Path, cache: Path | None = None, tables: RunTables | None = None) -> Path | None:
    doc = build(run_dir, cache, tables)
    if not doc:
        return None
    path = Path(run_dir) / FILE
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m harness.projection.prediction RUN_DIR", file=sys.stderr)
        return 2
    cache = os.environ.get("WAN_CACHE_DIR")
    write(argv[1], Path(cache) if cache else None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
