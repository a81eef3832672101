"""RunConfig: `harness run` flags + a WAN profile -> one frozen, validated value object.

Units are parsed once, here, tc-style (`62.5mbit`, `20ms`, `0.1%`, budgets `1.6%`); every
field carries its unit in its name. Any bad value raises :class:`ConfigError` whose one line
names the flag and the value, before anything touches the kernel or starts a process.

Method and task names are checked against the trainers' registries (the one place the
controller imports `trainers/`, lazily: the registries are the source of truth for names).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import profiles, units

DEFAULT_PROFILE = "paper-62.5mbit"
BASELINE = "full"
MODELS = ("micro", "tiny", "small")
OBJECTIVES = ("grpo", "distill")
_LINK_FLAGS = {"rate": "--bw", "delay": "--delay", "jitter": "--jitter", "loss": "--loss"}
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,80}$")


class ConfigError(ValueError):
    """A usage error; the message is one line that names the flag and the value."""


@dataclass(frozen=True)
class Variant:
    """One method as it runs: the name (results column, legend) and its budget, if any."""
    method: str
    budget: str | None = None

    @property
    def label(self) -> str:
        return self.method if self.budget is None else f"{self.method}@{self.budget}"

    @property
    def slug(self) -> str:
        return self.label.replace("@", "-").replace("%", "pct")


@dataclass(frozen=True)
class RunConfig:
    variants: tuple[Variant, ...]            # the method(s) under test, the baseline appended last
    seeds: tuple[int, ...] = (1,)
    workers: int = 2
    updates: int = 20
    depth: int = 0                            # pipelining depth (--pipeline)
    model: str = "tiny"
    task: str = "digits"
    objective: str = "distill"
    problems_per_worker: int = 2
    group_size: int = 2
    max_new_tokens: int = 8
    profile: dict[str, Any] = field(default_factory=dict)   # the resolved profile document
    profile_name: str = DEFAULT_PROFILE
    overrides: dict[str, str] = field(default_factory=dict)  # link flags given, as typed
    rate_bit_s: float | None = None           # the worker link rate (down), for the physical floor
    emulation: bool = True
    backend: str | None = None                # None: probe the kernel
    run_id: str | None = None
    out_dir: str = "results"

    def to_json(self) -> dict[str, Any]:
        doc = dataclasses.asdict(self)
        doc["variants"] = [dataclasses.asdict(v) | {"label": v.label} for v in self.variants]
        doc["seeds"], doc["overrides"] = list(self.seeds), dict(self.overrides)
        return doc

    def load_profile(self) -> profiles.Profile:
        return profiles.from_doc(self.profile, self.profile_name)

    @property
    def run_dir(self) -> Path:
        return Path(self.out_dir) / str(self.run_id)


# ---- parsing --------------------------------------------------------------------------------

def parse_seeds(text: str) -> tuple[int, ...]:
    try:
        seeds = tuple(int(s) for s in str(text).split(",") if s.strip())
    except ValueError:
        raise ConfigError(f"--seeds: {text!r} is not a comma list of integers like 1,2,3") from None
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds: {text!r} must be distinct non-negative integers")
    return seeds


def parse_budget(text: str) -> str:
    """'1.6%' -> '1.6%' (validated: within (0, 100 %]); kept as typed, the compressors parse it."""
    try:
        frac = units.parse_percent(text)
    except units.UnitError as err:
        raise ConfigError(f"--budget: {err}") from None
    if not 0 < frac <= 1:
        raise ConfigError(f"--budget: {text!r} is outside (0, 100%]")
    return str(text).strip()


def _positive(name: str, value: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name}: {value!r} must be a positive integer")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name}: {value!r} must be at most {maximum}")
    return value


def _check_names(methods: list[str], budgets: list[str | None], task: str) -> None:
    from trainers import methods as registry, tasks  # lazy: see the module docstring

    for m in methods:
        try:
            registry.get_method(m)
        except ValueError as err:
            raise ConfigError(f"--method: {err}") from None
    for m, b in zip(methods, budgets):
        if b is not None:
            try:
                registry.get_method(m, budget=b)
            except (ValueError, TypeError) as err:
                raise ConfigError(f"--budget: {b!r} does not apply to {m!r} ({err})") from None
    if task not in tasks.available():
        raise ConfigError(f"--task: unknown task {task!r}; valid tasks: {', '.join(tasks.available())}")


def _takes_budget(method: str) -> bool:
    from trainers import compress

    return method in compress.available() and issubclass(type(compress.get_compressor(method)),
                                                         compress.base.BudgetedCompressor)


def _resolve_profile(name: str | None, flags: dict[str, str | None]) -> tuple[profiles.Profile, dict[str, str]]:
    given = {k: v for k, v in flags.items() if v is not None}
    try:
        prof = profiles.load(name or DEFAULT_PROFILE)
    except profiles.ProfileError as err:
        raise ConfigError(f"--profile: {err}") from None
    if name is not None:
        _check_unambiguous(prof, given)
    try:
        return (profiles.with_link(prof, given) if given else prof), given
    except (profiles.ProfileError, units.UnitError) as err:
        key = next((k for k in given if k in str(err)), "rate")
        raise ConfigError(f"{_LINK_FLAGS[key]}: {err}") from None


def _check_unambiguous(prof: profiles.Profile, given: dict[str, str]) -> None:
    """A flag that the profile would silently override for some link is ambiguous: refuse it."""
    for key in given:
        where = [f"workers.{w}" for w, raw in prof.workers.items() if _mentions(raw, key)]
        where += [f"schedule at {c.at_s:g}s" for c in prof.schedule if _mentions(c.raw, key)]
        where += ["defaults.up/down"] if any(_mentions(prof.default.get(d, {}), key) for d in ("up", "down")) else []
        if where:
            raise ConfigError(f"{_LINK_FLAGS[key]}: contradicts profile {prof.name!r}, which sets {key} per link "
                              f"({', '.join(where)}); edit a copy of the profile instead")


def _mentions(raw: Any, key: str) -> bool:
    if not isinstance(raw, dict):
        return False
    return key in raw or any(_mentions(raw.get(d), key) for d in ("up", "down"))


def build(*, method: str = "spar", budget: str | None = "1.6%", workers: int = 2, updates: int = 20,
          seeds: str = "1,2", pipeline: int = 0, model: str = "tiny", task: str = "digits",
          objective: str = "distill", profile: str | None = None, bw: str | None = None,
          delay: str | None = None, jitter: str | None = None, loss: str | None = None,
          baseline: bool = True, emulation: bool = True, backend: str | None = None,
          run_id: str | None = None, out_dir: str = "results", problems_per_worker: int = 2,
          group_size: int = 2, max_new_tokens: int = 8) -> RunConfig:
    """Validate every flag; return the frozen config or raise ConfigError (one line)."""
    _positive("--workers", workers, maximum=250)
    _positive("--updates", updates)
    for name, value in (("--problems", problems_per_worker), ("--group-size", group_size),
                        ("--max-new-tokens", max_new_tokens)):
        _positive(name, value)
    if pipeline not in (0, 1):
        raise ConfigError(f"--pipeline: {pipeline!r} must be 0 or 1")
    if model not in MODELS and not Path(model).exists():
        raise ConfigError(f"--model: {model!r} is neither a built-in model ({', '.join(MODELS)}) nor an existing path")
    if objective not in OBJECTIVES:
        raise ConfigError(f"--objective: {objective!r} is unknown (valid: {', '.join(OBJECTIVES)})")
    if backend is not None and backend not in ("netem", "fallback"):
        raise ConfigError(f"--backend: {backend!r} is unknown (valid: netem, fallback)")
    if run_id is not None and not _RUN_ID.match(run_id):
        raise ConfigError(f"--run-id: {run_id!r} must be letters, digits, '.', '_' or '-'")
    methods = [m.strip() for m in method.split(",") if m.strip()]
    if not methods:
        raise ConfigError("--method: no method given")
    budget_list = [parse_budget(b) for b in str(budget).split(",") if b.strip()] if budget is not None else []
    pairs = [(m, b) for m in methods for b in (budget_list or [None])] if budget_list else [(m, None) for m in methods]
    pairs = list(dict.fromkeys((m, b if _takes_budget_safe(m) else None) for m, b in pairs))
    _check_names([m for m, _ in pairs], [b for _, b in pairs], task)
    variants = [Variant(m, b) for m, b in pairs]
    if baseline and BASELINE not in methods:
        variants.append(Variant(BASELINE))
    prof, given = _resolve_profile(profile, {"rate": bw, "delay": delay, "jitter": jitter, "loss": loss})
    rate = prof.link("w1").down.rate_bit_s
    return RunConfig(variants=tuple(variants), seeds=parse_seeds(seeds), workers=workers, updates=updates,
                     depth=pipeline, model=model, task=task, objective=objective,
                     problems_per_worker=problems_per_worker, group_size=group_size,
                     max_new_tokens=max_new_tokens, profile=prof.to_doc(), profile_name=prof.name,
                     overrides=given, rate_bit_s=rate, emulation=emulation, backend=backend,
                     run_id=run_id, out_dir=out_dir)


def _takes_budget_safe(method: str) -> bool:
    try:
        return _takes_budget(method)
    except (ValueError, TypeError):
        return False  # an unknown method: _check_names names it
