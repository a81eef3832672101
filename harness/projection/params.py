"""`harness project`'s parameters: one table of the run spec's `Param` (trainers/spec.py), from which
harness/cli.py builds the command's options and `parse` reads every value, so its help, ranges and one-line
errors come from where `harness run`'s do.

The run parameters it shares with `harness run` are the spec's own entries (same name, meaning, unit and range);
where the projection's default differs, the entry says so and why. The cost model's own inputs (compute per
update, the learner's link, TCP) are declared here, with units and ranges. Torch-free and light: the command
list imports it."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from harness.projection.network import CONGESTION_CONTROLS, MTU_BYTES, SEND_MODES
from trainers import spec
from trainers.spec import Param

MAX_WORKERS = 1 << 20   # the model projects scales a run cannot start (its cap: spec's --workers, 1024 processes)
MAX_SECONDS = 1e6       # per update; about 11.6 days


def _as_run(name: str) -> Param:
    """A run parameter whose value, not given, is `harness run`'s default, or with --from the measured run's
    (source.defaults): a projection's speedup then uses the convention of the run it stands beside."""
    p = spec.get(name)
    shown = ",".join(map(str, p.default)) if p.many else p.default
    return replace(p, default=None, help=f"{p.help} [default: harness run's, {shown}; with --from: that run's]")


def _from_run(p: Param, **changes) -> Param:
    """A run parameter with a default of the projection's own, which --from replaces by the run's value
    (source.defaults)."""
    return replace(p, **{**changes, "help": f"{changes.get('help', p.help)}; with --from: that run's"})


def _compute(name: str, default: float | None, help: str, lo: float = 0.0) -> Param:
    return Param(name, float, default, help, unit="s", lo=lo, hi=MAX_SECONDS, optional=default is None,
                 where="harness", group="compute")


PARAMS: list[Param] = [
    _from_run(spec.get("model"), default="qwen2.5-1.5b"),   # a projection is for a scale this box cannot run
    _as_run("lora_rank"),
    _from_run(spec.get("workers"), hi=MAX_WORKERS),          # the default stays `harness run`'s: the run it measures
    spec.get("bw"),
    spec.get("delay"),
    spec.get("loss"),
    replace(spec.get("profile"), default=None, optional=True,   # none: every worker link as --bw/--delay/--loss
            help="a WAN profile (a name in netem_profiles/ or a YAML path): its worker and learner links; --bw, "
                 "--delay and --loss override its worker defaults (default: none, without --bw unshaped; with "
                 "--from: the run's links as it shaped them, --comm-ratio's scaling included)"),
    Param("learner_bw", str, None, "the learner's own link rate: every worker's copy shares it (default: unshaped, "
          "each worker link is the bottleneck)", unit="bit/s", where="link", optional=True),
    Param("relay_fanout", int, None, "a relay tree of this fan-out instead of a star (default: a star)",
          lo=1, hi=MAX_WORKERS, where="link", optional=True),
    Param("cc", str, "cubic", f"TCP congestion control: {' | '.join(CONGESTION_CONTROLS)} (sets the loss ceiling of "
          "a link's goodput and the slow start after idle; with --from: this host's, what the run ran under)",
          choices=CONGESTION_CONTROLS, where="link"),
    Param("mtu", int, MTU_BYTES, "link MTU", unit="bytes", lo=576, hi=65535, where="link"),
    _as_run("method"),
    _as_run("budget"),
    _as_run("baseline"),
    _from_run(spec.get("pipeline"), default=(0, 1), many=True,
              help=spec.get("pipeline").help + "; comma list, a row per depth"),
    _compute("compute_s", None, "compute per update (rollout + train); or --rollout-s and --train-s, or --from RUN",
             lo=1e-6),   # > 0: a speedup divides by it
    _compute("rollout_s", None, "a worker's rollout per update (overrides --compute-s's split)"),
    _compute("train_s", None, "the learner's training per update (overrides --compute-s's split)"),
    Param("rollout_share", float, 8 / 14, "share of --compute-s that is rollout (the HiLo paper's 8 s of 14 s)",
          lo=0.0, hi=1.0, where="harness", group="compute"),
    _compute("encode_s", 0.0, "compressed methods: the learner's encode per update"),
    _compute("replay_s", 0.0, "compressed methods: decode + optimizer step on each replica per update"),
    Param("send", str, "blocking", "blocking (this harness: the learner waits for its sends) | background (the "
          "learner trains while updates drain)", choices=SEND_MODES, where="harness", group="compute"),
    Param("rollout_bytes", int, None, "one worker's rollout message (default: measured with --from, else 0)",
          unit="bytes", lo=0, hi=1 << 40, optional=True, where="harness", group="compute"),
    Param("shared_cores", int, None, "learner and workers share this many cores (an emulated run on one box; "
          "default: none, or with --from the run's own)", unit="cores", lo=1, hi=4096, optional=True,
          where="harness", group="compute"),
]
BY_NAME = {p.name: p for p in PARAMS}


def parse(values: Mapping[str, Any]) -> dict[str, Any]:
    """Raw values by parameter name (None: not given) -> typed values, the table's default for each not given;
    SpecError (one line naming the flag). `method`, `budget` and `pipeline` are tuples; the names
    `_as_run` marks, not given, stay None for source.defaults."""
    out = {}
    for p in PARAMS:
        raw = values.get(p.name)
        if raw is None:
            out[p.name] = p.default
        elif p.name == "budget":
            out[p.name] = spec.parse_value("budget", raw)   # budgets keep their text, in one spelling
        else:
            out[p.name] = p.parse_many(raw) if p.many else p.parse(raw)
    if out["rollout_s"] == 0 and out["train_s"] == 0 and out["compute_s"] is None:
        raise spec.SpecError("--rollout-s/--train-s: both 0 leave no compute per update")
    return out
