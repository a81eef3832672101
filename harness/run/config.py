"""RunConfig: `harness run` / `harness sweep` values + a WAN profile -> one frozen, validated value.

Every parameter is declared once in `trainers/spec.py` (name, type, unit, default, range, help);
this module parses the values it is given against that table, resolves the profile with the
link flags over it, and expands methods x budgets into variants (and variants x seeds into cells).
Any bad value raises :class:`ConfigError` whose one line names the flag and the value, before anything touches the
kernel or starts a process. Torch is never imported here (the spec is torch-free), so
`harness run --dry-run` and `harness profiles` start in a fraction of a second; the one exception is
--budget-bytes, checked by encoding one update of the adapter (`_check_budget_bytes`).
"""
from __future__ import annotations

import difflib
import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.net import profiles
from trainers import card_options, spec, tasks
from trainers.spec import SpecError as ConfigError
from harness.run import presets

_LINK_FLAGS = {"rate": "--bw", "delay": "--delay", "jitter": "--jitter", "loss": "--loss", "trace": "--trace"}
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,80}$")


@dataclass(frozen=True)
class Variant:
    """One method as it runs: the name (results column, legend) and its budget, if any."""
    method: str
    budget: str | None = None

    @property
    def label(self) -> str:
        return spec.variant_label(self.method, self.budget)

    @property
    def slug(self) -> str:
        return spec.variant_slug(self.label)


@dataclass(frozen=True)
class Cell:
    """One variant at one seed, as it runs: its service parameters (what the learner's argv and
    WELCOME carry: every `where="service"` value of the run, the variant's method and budget, the seed)."""
    variant: Variant
    seed: int
    values: dict[str, Any] = field(compare=False, repr=False)

    @property
    def name(self) -> str:
        return f"{self.variant.slug}-s{self.seed}"

    @property
    def argv(self) -> list[str]:
        """The learner's flags for this cell: every service parameter, explicitly (so the spec's default
        never silently stands in for the harness's value)."""
        return [arg for p in spec.params("service") if (v := self.values[p.name]) is not None
                for arg in (p.service_flag, p.spell(v))]


@dataclass(frozen=True)
class RunConfig:
    """A validated run. `values` holds every spec parameter, parsed (lists as tuples); they read
    as attributes too (`cfg.workers`, `cfg.pipeline`, `cfg.lora_rank`)."""
    values: dict[str, Any]
    variants: tuple[Variant, ...]             # the method(s) under test, the baseline appended last
    profile_doc: dict[str, Any] = field(default_factory=dict)   # the resolved profile, link flags applied
    profile_name: str = spec.get("profile").default
    overrides: dict[str, str] = field(default_factory=dict)  # link flags given, as typed
    rate_bit_s: float | None = None           # the worker link rate (down), for the physical floor
    # --comm-ratio resolved: full sync's link/compute ratio the links will be scaled to (None: literal rates);
    # `regime` records how (harness/run/regime.py fills it before the cells: pilot, factor, chosen rate)
    comm_ratio_target: float | None = None
    regime: dict[str, Any] = field(default_factory=dict)
    # where the services find the cached pre-trained models (launch.models_cache: $WAN_CACHE_DIR, else
    # beside the run folders); the regime's pilot cache sits there too
    models_dir: str | None = None
    # worker name -> CPUs (Profile.cpu_shares: --worker-cpu over the profile's cpu keys), resolved once
    cpu_shares: dict[str, float] = field(default_factory=dict)
    run_id: str | None = None
    out_dir: str = "results"
    # the profile parsed from profile_doc (links resolved): built with the config, not written to config.json
    profile: profiles.Profile | None = field(default=None, compare=False, repr=False)

    def __getattr__(self, name: str) -> Any:
        values = object.__getattribute__(self, "values")
        if name in values:
            return values[name]
        raise AttributeError(name)

    @property
    def seeds(self) -> tuple[int, ...]:
        return self.values["seed"]

    @functools.cached_property
    def cells(self) -> tuple[Cell, ...]:
        """The run's cells in the order they run (`--schedule`), each with its service values, built
        once per config (a config made by `dataclasses.replace`, e.g. the regime's pilot or a claimed
        run id, builds its own from its values).
        interleaved: seed by seed, every variant, in reverse order on every other seed (A1 B1 B2 A2 A3
        B3): the cells that a speedup pairs run next to each other, and a load that rises or falls
        through the run lands on each variant as often first as second.
        sequential: each variant's seeds back to back (A1 A2 A3 B1 B2 B3)."""
        if self.values["schedule"] == "sequential":
            order = [(v, s) for v in self.variants for s in self.seeds]
        else:
            order = [(v, s) for i, s in enumerate(self.seeds)
                     for v in (self.variants[::-1] if i % 2 else self.variants)]
        shared = {p.name: self.values[p.name] for p in spec.params("service")}
        no_budget = spec.get("budget").service_default
        return tuple(Cell(v, s, {**shared, "method": v.method, "seed": s, "budget": v.budget or no_budget})
                     for v, s in order)

    def to_json(self) -> dict[str, Any]:
        """config.json: every spec parameter under its flag's name, plus what was resolved."""
        doc = {(p.flag_name or p.name): list(v) if isinstance(v := self.values[p.name], tuple) else v
               for p in spec.PARAMS}
        doc.update(variants=[{"method": v.method, "budget": v.budget, "label": v.label} for v in self.variants],
                   profile_doc=self.profile_doc, profile_name=self.profile_name, overrides=dict(self.overrides),
                   rate_bit_s=self.rate_bit_s, run_id=self.run_id, out_dir=self.out_dir,
                   comm_ratio_target=self.comm_ratio_target, regime=dict(self.regime))
        return doc

    def load_profile(self) -> profiles.Profile:
        """The parsed profile: the one `build` resolved, else profile_doc parsed once per config
        (launch, the shaper, doctor and the plan all ask)."""
        if self.profile is None:
            object.__setattr__(self, "profile", profiles.from_doc(self.profile_doc, self.profile_name))
        return self.profile

    @property
    def run_dir(self) -> Path:
        return Path(self.out_dir) / str(self.run_id)


# ---- parsing --------------------------------------------------------------------------------

def parse_values(given: dict[str, Any]) -> dict[str, Any]:
    """Raw values (flags as typed, YAML values) keyed by spec name -> every parameter, parsed."""
    names = {p.name for p in spec.PARAMS}
    unknown = sorted(set(given) - names)
    if unknown:
        near = difflib.get_close_matches(str(unknown[0]), sorted(names), n=3)
        hint = f"did you mean {', '.join(near)}? " if near else ""
        raise ConfigError(f"unknown parameter {spec.quote(unknown[0])} ({hint}`harness run --help` lists all "
                          f"{len(names)})")
    out = {}
    for p in spec.PARAMS:
        raw = given.get(p.name)
        if raw is None:
            out[p.name] = p.default
        elif p.name == "method":  # names are checked below, against the method list
            items = raw if isinstance(raw, (list, tuple)) else str(raw).split(",")
            out[p.name] = tuple(p.parse(m) for m in items if not (isinstance(m, str) and not m.strip()))
            if not out[p.name]:
                raise ConfigError("--method: no method given")
            if len(set(out[p.name])) != len(out[p.name]):   # as every other list flag (--seeds 1,1)
                raise ConfigError(f"--method: {spec.quote(raw)} repeats a value")
        else:
            out[p.name] = spec.parse_value(p.name, raw)
    return out


def _check_task(task: str) -> None:
    if task not in tasks.available():
        raise ConfigError(f"--task: unknown task {spec.quote(task)}; valid tasks: {', '.join(tasks.available())}")


def _resolve_profile(name: str, flags: dict[str, str | None]) -> tuple[profiles.Profile, dict[str, str]]:
    given = {k: v for k, v in flags.items() if v is not None}
    try:
        return profiles.resolve(name, given), given   # loaded, the flags over it, its links resolved: once
    except profiles.OverrideError as err:
        raise ConfigError(f"{_LINK_FLAGS[err.key]}: {err}") from None
    except profiles.ProfileError as err:
        raise ConfigError(f"--profile: {err}") from None


def _trace_path(value: str | None) -> str | None:
    """--trace as an absolute path (config.json must find it from any folder); a shipped name stays a name."""
    if value is None or not Path(value).is_file():
        return value          # a shipped trace's name, or a bad one that the profile check names
    return str(Path(value).resolve())


def check_run_id(run_id: str | None) -> None:
    """A run id names a folder under --out: ConfigError unless it is one plain file name."""
    if run_id is not None and not _RUN_ID.match(run_id):
        raise ConfigError(f"--run-id: {spec.quote(run_id)} must start with a "
                          "letter or digit, then up to 80 more letters, digits, '.', '_' or '-'")


def check_results_folder(out: Path) -> None:
    """ConfigError unless `out` can hold run folders: a file there fails mid-run (errno 20), and a run
    written into a sweep's or another run's folder is read as one of its points (`harness report`)."""
    nearest = next((p for p in (out, *out.parents) if p.exists()), None)   # the folder it would be made in
    if nearest is not None and not nearest.is_dir():
        raise ConfigError(f"--out: {nearest} exists and is not a folder; name a folder for the results")
    for folder in (out, *out.parents):   # the folder itself, or one it sits in (a sweep's runs/, a run's cells/)
        inside = "" if folder == out else f" (inside {folder})"
        if (folder / "sweep.json").is_file():
            raise ConfigError(f"--out: {out} is in a sweep's folder{inside}: a run there would be read as one of its "
                              f"points; name another folder (`harness sweep --out {folder}` resumes the sweep)")
        if (folder / "config.json").is_file() and (folder / "cells").is_dir():
            raise ConfigError(f"--out: {out} is in a run's folder{inside}: a run inside it would be reported with "
                              "it (or break its tables); name another folder")


def build(*, run_id: str | None = None, out_dir: str = "results", **given: Any) -> RunConfig:
    """Validate every value (spec names; raw strings or typed values); return the frozen config
    or raise ConfigError (one line)."""

    preset = presets.values(str(given["preset"])) if given.get("preset") else {}
    # the spec's default < the preset < a flag given
    values = parse_values({**given, **{k: v for k, v in preset.items() if given.get(k) is None}})
    if given.get("baseline") is None and "baseline" not in preset and all(map(spec.is_data_parallel, values["method"])):
        values["baseline"] = spec.DP_BASELINE   # the family's own full sync: the task its methods train
    shaping = [k for k in ("bw", "delay", "jitter", "loss", "trace") if given.get(k) not in (None, "", ())]
    if shaping and values["emulation"] is False:  # they used to be ignored in silence
        flags = ", ".join(f"--{k}" for k in shaping)
        raise ConfigError(f"{flags}: shape the emulated link; with --no-emulation nothing is shaped "
                          "(drop them, or run with emulation)")
    spec.check_model(values["model"])
    _check_task(values["task"])
    try:
        tasks.check_task_options(values["task"], values["task_options"])
        card_options.check_carded("objective", values["objective"], values["objective_options"])
    except ValueError as e:
        raise ConfigError(str(e)) from None
    check_run_id(run_id)
    variants = [Variant(m, b) for m, b in spec.check_run(values)]  # the rules between values, methods, baseline
    _check_budget_bytes(values, variants)
    link = {"rate": values["bw"], "delay": values["delay"], "jitter": values["jitter"], "loss": values["loss"],
            "trace": _trace_path(values["trace"])}
    prof, overrides = _resolve_profile(values["profile"], link)
    return RunConfig(values=values, variants=tuple(variants), profile_doc=prof.to_doc(), profile_name=prof.name,
                     overrides=overrides, rate_bit_s=prof.link("w1").down.rate_bit_s, run_id=run_id,
                     out_dir=out_dir, profile=prof, comm_ratio_target=comm_ratio_target(values, shaping),
                     models_dir=str(models_cache(Path(out_dir))),
                     cpu_shares=prof.cpu_shares(values["workers"], spec.parse_worker_cpu(values["worker_cpu"],
                                                                                         values["workers"])))


def models_cache(out_dir: Path) -> Path:
    """Where a run's services find (and the harness builds) the cached pre-trained models:
    $WAN_CACHE_DIR when the user set it (one cache for runs in several output folders: a first
    run's model build is most of its time), else `<out>/.cache` beside the run folders."""
    root = os.environ.get("WAN_CACHE_DIR")
    return Path(root).resolve() if root else out_dir.resolve() / ".cache"


def _check_budget_bytes(values: dict[str, Any], variants: list[Variant]) -> None:
    """--budget-bytes against what the run's budgeted methods can ship: each encodes one update of the
    model's adapter at that cap here (harness/projection/inputs.py), so a cap below a payload's fixed
    overhead is refused before anything starts, a dry run too, as the learner would refuse it at its first
    update. Only with --budget-bytes: the check builds the adapter's layout (torch, on the meta device)."""
    if values["budget_bytes"] is None:
        return
    from harness.projection import inputs

    budgeted = {v.method: v.budget for v in variants if spec.takes_budget(v.method, values)}
    for method, budget in budgeted.items():   # the cap wins over every budget: one of them is enough
        why = inputs.budget_refusal(values["model"], values["lora_rank"], method,
                                    {**spec.compressor_options(method, values), "budget": budget})
        if why:
            raise ConfigError(f"--budget-bytes: {values['budget_bytes']} for {values['model']} at rank "
                              f"{values['lora_rank']}: {why}")


def comm_ratio_target(values: dict[str, Any], shaping: list[str]) -> float | None:
    """--comm-ratio resolved (harness/projection/commratio.py): the ratio the links will be scaled to, or
    None for the profile's literal rates. Unset, it is `paper` exactly when no rate was chosen: the
    default profile (whose 62.5 Mbit/s is the paper's rate for a 147.7 MB adapter, not this model's),
    no --bw, no --trace; a literal rate and a ratio together are refused."""
    from harness.projection import commratio

    given = values["comm_ratio"]
    rate_given = [f"--{k}" for k in shaping if k in ("bw", "trace")]
    data_parallel = [m for m in values["method"] + (values["baseline"],) if spec.is_data_parallel(m)]
    if given is None:
        literal = rate_given or not values["emulation"] or values["profile"] != spec.get("profile").default
        return None if literal or data_parallel else commratio.PAPER_RATIO
    try:
        target = commratio.parse(given)
    except commratio.RatioError as err:
        raise ConfigError(str(err)) from None
    if target is not None and rate_given:
        raise ConfigError(f"--comm-ratio {given} and {' '.join(rate_given)} both set the link rate; give one "
                          "(--comm-ratio off keeps the literal rate)")
    if target is not None and data_parallel:
        raise ConfigError(f"--comm-ratio {given}: the ratio is HiLo's full sync's link/compute per update; "
                          f"{data_parallel[0]} is a data-parallel method (give --bw)")
    if target is not None and not values["emulation"]:
        raise ConfigError(f"--comm-ratio {given}: with --no-emulation no link is shaped (drop it, or run with emulation)")
    return target
