"""Placing a run in a regime (`--comm-ratio`): measure full sync's compute here, scale the links to match.

    cfg = regime.place(cfg, say)   # before the cells; a RunConfig whose profile's rates are scaled

1. The pilot: full sync (the run's baseline) for PILOT_UPDATES updates of the run's first seed, on
   localhost, unshaped, no held-out evaluation: a real run (harness/run/launch.py) whose updates
   table gives the compute per update in CPU seconds and the bytes per worker per update
   (harness/projection/commratio.py `measure`). Cached per machine, model, task, objective, workers
   and everything else that sets compute or bytes (`pilot_key`), in `<cache>/regime/<key>.json`:
   a later run (a sweep's other points, every seed) pays for it once.
2. The factor: every rate of the profile times f, f such that the cost model's link time of full
   sync's update and rollouts is the target ratio x the compute (commratio.scale_for). Delay, loss
   and shape stay; a trace is scaled by the same factor (profiles.scaled).
3. The chosen rate is said before the cells and kept in config.json's `regime`; the report states
   the ratio the run achieved against the target (prediction.json `regime`).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

from harness.net import profiles
from harness.projection import commratio
from harness.run import launch
from harness.run.config import RunConfig, Variant
from trainers.events import atomic_write_json

PILOT_UPDATES = 6        # the first 2 are warm-up (joins, first-touch allocation); the median of 4 remains
PILOT_SKIP = 2
# What sets full sync's compute per update and its bytes (a pilot is reused only when all of these match).
KEY_PARAMS = ("model", "task", "task_options", "objective", "objective_options", "base_steps", "teacher_steps",
              "workers", "lora_rank", "problems_per_worker", "group_size", "max_new_tokens", "temperature",
              "hash_every")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def pilot_key(cfg: RunConfig) -> dict[str, Any]:
    """The machine and the run values a pilot's figures depend on (its cache key, spelled out)."""
    return {"host": platform.node(), "cpu": _cpu_model(), "cores": os.cpu_count(),
            **{k: cfg.values[k] for k in KEY_PARAMS}}


def cache_file(cfg: RunConfig) -> Path:
    key = json.dumps(pilot_key(cfg), sort_keys=True, default=str)
    return Path(cfg.models_dir) / "regime" / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def pilot_config(cfg: RunConfig, folder: Path) -> RunConfig:
    """The pilot: full sync (commratio.FULL_SYNC, what the ratio is of, whatever the run's baseline) alone,
    first seed, PILOT_UPDATES updates, localhost, no held-out evaluation."""
    full = commratio.FULL_SYNC
    values = {**cfg.values, "method": (full,), "baseline": full, "seed": cfg.seeds[:1], "updates": PILOT_UPDATES,
              "emulation": False, "eval_problems": 0, "comm_ratio": commratio.OFF, "backend": None}
    return dataclasses.replace(cfg, values=values, variants=(Variant(full, None),), run_id=folder.name,
                               out_dir=str(folder.parent), comm_ratio_target=None, regime={},
                               models_dir=cfg.models_dir)   # the run's own cached models


def measured(cfg: RunConfig, say: Callable[[str], None]) -> tuple[commratio.Measured, dict]:
    """(full sync's compute and bytes here, where they came from): the cache, else a pilot run."""
    path = cache_file(cfg)
    if path.is_file():
        try:
            doc = json.loads(path.read_text())
            return commratio.Measured(**doc["measured"]), {"pilot": str(path), "cached": True}
        except (OSError, ValueError, KeyError, TypeError):
            pass   # an unreadable cache entry is measured again (and rewritten)
    folder = path.with_suffix("")
    say(f"regime: measuring full sync's compute per update here ({commratio.FULL_SYNC}, {PILOT_UPDATES} updates, "
        f"localhost; cached in {path})")
    shutil.rmtree(folder, ignore_errors=True)   # an interrupted earlier pilot's cells
    launch.execute(pilot_config(cfg, folder), artefacts=False)
    from harness.results import tables   # pandas: only a pilot's reading pays for it, not every run's start-up

    m = commratio.measure(tables.read(folder).updates, skip_first=PILOT_SKIP)
    if m is None:
        raise RuntimeError(f"the regime pilot in {folder} recorded no usable update (see its cells' logs)")
    atomic_write_json(path, {"key": pilot_key(cfg), "measured": dataclasses.asdict(m), "pilot_run": str(folder)})
    return m, {"pilot": str(path), "cached": False}


def place(cfg: RunConfig, say: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> RunConfig:
    """`cfg` with its profile's rates scaled to `cfg.comm_ratio_target` (itself when it has none).
    `launch.execute(cfg, place=...)` calls it after the run's own preflight: a pilot for a run that
    cannot start is waste."""
    target = cfg.comm_ratio_target
    if target is None:
        return cfg
    m, source = measured(cfg, say)
    prof = cfg.load_profile()
    try:
        factor = commratio.scale_for(target, m, commratio.network_at(prof, cfg.workers),
                                     *commratio.factor_bounds(prof, cfg.workers))
    except ValueError as err:
        raise launch.PreflightFailed(f"--comm-ratio: {err} (--comm-ratio off runs the profile's literal rates "
                                     "instead)") from None
    scaled = profiles.scaled(prof, factor)
    rate = scaled.link("w1").down.rate_bit_s
    regime = {"target_ratio": target, "target": cfg.comm_ratio or "paper", "factor": factor,
              "rate_bit_s": rate, "literal_rate_bit_s": prof.link("w1").down.rate_bit_s,
              "compute_s": m.compute_s, "down_bytes": m.down_bytes, "up_bytes": m.up_bytes,
              "link_s": commratio.link_s(commratio.network_at(scaled, cfg.workers)(1.0), m), **source}
    links = commratio.link_words(scaled, cfg.workers) or f"worker links at {_rate(rate)}"   # unequal links: each
    say(f"regime: full sync computes {m.compute_s:.3f} s per update here (CPU time) and sends "
        f"{m.down_bytes / 1e3:,.1f} kB to each worker; {links} (profile {prof.name}'s rates "
        f"x{factor:.4g}) aim full sync at a link/compute ratio of {target:.2f} (the verdict's Regime line gives the "
        "one achieved)"
        + (f" ({commratio.PAPER_WORDS})" if regime["target"] == "paper" else ""))
    return dataclasses.replace(cfg, profile_doc=scaled.to_doc(), profile=scaled, rate_bit_s=rate, regime=regime)


def _rate(bit_s: float | None) -> str:
    return "unshaped" if bit_s is None else f"{bit_s / 1e6:.3g} Mbit/s"
