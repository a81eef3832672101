"""The run spec: every parameter of a run, once (AlgoPerf's `spec.py` is the model).

Each :class:`Param` has its name, type, unit, default, allowed range and help text. Every
surface is derived from this table, so a new parameter is one line here:

- `harness run` / `harness sweep` flags (`harness/cli.py` builds them from `PARAMS`);
- `RunConfig` and `config.json` (`harness/run/config.py`);
- the learner's argv and the worker's optional checks (`add_run_args`; a cell spells its flags with each
  `Param.service_flag` and `Param.spell`, harness/run/config.py `Cell.argv`);
- :class:`RunParams`, which the learner sends to every worker in WELCOME;
- the columns of the results tables (`harness/results/tables.py` reads them from config.json);
- the keys of a sweep grid.

A second table, `SERVICE_PARAMS`, holds the services' own plumbing flags (listen address, timeouts, limits),
built with the same `Param` (trainers/service_args.py parses them; `service_argv` builds them);
`harness project`'s flags are a table of these entries and the cost model's own (harness/projection/params.py).

`where` says who owns a parameter: "service" parameters are what every replica must agree on
(they reach the learner's argv and WELCOME); "link" parameters shape the emulated network;
"harness" parameters only steer the controller. `many` parameters take a comma list on the
harness command line, and every value becomes its own cell (method x budget x seed).

Compressor options are parameters too, named `<compressor>_<option>` (`--spar-sketch 16`,
`--powersgd-rank 2`), read from each compressor's card (trainers/cards); the options every compressor
or every budgeted compressor takes have no prefix (`--error-feedback`, `--budget`).

This module imports no torch: `harness profiles`, `harness run --dry-run`, `report`, `plot`
and `clean` validate a run without paying for it.
"""
from __future__ import annotations

import json
import math
import random
import re
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from trainers import cards, plugins
from trainers.cards.sizes import FLOAT_DTYPES   # payload value dtypes (trainers/protocol/dtypes.py)

# ---- vocabularies that the controller must know without importing torch -------------------
# The methods, tasks and objectives are named by their cards (trainers/cards: each card parses its own
# names, e.g. rank-R and the lordo-* readings); installed plugins add theirs by card or entry-point name
# (trainers/plugins.py), read here without importing them: `compressor_names`, `objective_names`,
# `is_data_parallel`, `check_method`.

MODEL_NAMES = ("micro", "tiny", "small") + tuple(sorted(  # trainers/model/models.py TINY_CONFIGS + real shapes:
    f.name[:-5] for f in (Path(__file__).parent / "model" / "model_configs").glob("*.json")))  # one JSON file each
BACKENDS = ("netem", "fallback")
NO_BASELINE = "none"
DP_BASELINE = "ddp"   # the data-parallel family's full sync: the default baseline of a run of data-parallel methods
QUALITY_METRICS = ("auto", "pass_at_k", "pass_at_1", "gold_prob", "objective")  # auto: harness/results/quality.py

# Options of each compressor (name -> default). The compressor classes take their defaults
# from here; the run spec turns each into a flag.
COMMON_OPTIONS: dict[str, Any] = {"error_feedback": True, "max_decoded_elements": 1 << 28}  # ~1 GiB of fp32
BUDGET_OPTIONS: dict[str, Any] = {"budget": "1.6%", "budget_bytes": None, "reference_dtype": "bf16"}
# `harness run`'s default budget: the paper's directions per factor at the run's default rank.
# The paper's 1.6 % of a rank-64 bf16 adapter buys ~1 direction per factor; a direction of a p x r factor
# costs ~1/r of it, so at rank 8 the same directions cost 64/8 x 1.6 % = 12.8 % (1.6 % at rank 8 buys
# ~0.09 per factor, 10x harsher than the paper). The compressors' own default stays 1.6 % (of any adapter).
RUN_BUDGET = "12.8%"
# Each compressor's options, budget, byte rule and plot style are on its card (trainers/cards); these
# two views are read from the cards, for the compressor classes and the flags below. A run gives every
# budgeted method each --budget (equal bytes): `--method spar,powersgd --budget 1.6%` runs spar@1.6% and
# powersgd@1.6%; only a set --powersgd-rank opts powersgd out (every factor at that rank).
COMPRESSOR_OPTIONS: dict[str, dict[str, Any]] = {c.name: c.defaults for c in cards.of("compressor")}
BUDGETED = tuple(c.name for c in cards.of("compressor") if c.budgeted)


# The CPU models whose student base (`base_steps`) and distillation teacher (`teacher_steps`) are
# trained here on gold answers and cached (trainers/model/pretrained.py); "micro", a real shape or a
# folder is built as given. Torch-free, so the harness can tell which runs need models built.
PRETRAINED_MODELS = ("tiny", "small")


class SpecError(ValueError):
    """A usage error; the message is one line that names the flag and the value."""


def is_in_tree_name(name: str) -> bool:
    """A name of this package's vocabulary (any in-tree card's, patterns included: rank-R, lordo-*): a
    plugin that takes one is ignored (trainers/plugins.py)."""
    return name == NO_BASELINE or cards.is_in_tree(name)


plugins.reserve(is_in_tree_name)


def compressor_names() -> list[str]:
    """Every compressor: carded (in-tree and installed) and installed class plugins (not imported)."""
    return sorted({*COMPRESSOR_OPTIONS, *plugins.names("compressor")})


def budgeted_names() -> list[str]:
    """Every budgeted compressor: carded ones that say so and class plugins declared budgeted."""
    return sorted({*BUDGETED, *plugins.names("budgeted_compressor")})


def objective_names() -> tuple[str, ...]:
    return tuple(sorted({*(c.name for c in cards.of("objective")), *plugins.names("objective")}))


def method_card(name: str) -> tuple[cards.Card, dict[str, Any]] | None:
    """(the card of method `name`: a HiLo method's, a compressor's or a data-parallel one's, the settings
    the name implies), or None (a class plugin, or no method)."""
    return cards.match(("method", "compressor", "dataparallel"), name)


# The two families of methods (`method_family`): HiLo's learner + workers (spar, full-bf16, the compressors) and the
# data-parallel aggregator + dp workers (ddp, diloco, lordo-*, lowrank-ddp). A Param's `family` names the one that
# alone reads it, so a label or a check about one family's method can leave the other's parameters out.
HILO, DP = "hilo", "dp"
FAMILIES = ("", HILO, DP)   # "": every method reads it


@dataclass(frozen=True)
class Param:
    name: str                       # python / config.json / results name; the flag is --name-with-dashes
    type: type                      # int | float | str | bool
    default: Any                    # for `many` parameters: a tuple, one cell per element
    help: str
    unit: str = ""                  # shown in the help; values are parsed in this unit
    lo: float | None = None         # inclusive bounds for numbers
    hi: float | None = None
    choices: tuple[str, ...] | None = None
    where: str = "service"          # service | link | harness (see the module docstring)
    many: bool = False
    flag_name: str | None = None    # the CLI flag where it differs from the name (seed -> --seeds)
    optional: bool = False          # None is a valid value ("not set": profile, budget_bytes)
    group: str = ""                 # the help panel: "" (by `where`) or "compressor"
    family: str = ""                # the family of methods that alone reads it: "" both, HILO or DP (FAMILIES)

    @property
    def flag(self) -> str:
        return "--" + (self.flag_name or self.name).replace("_", "-")

    @property
    def service_flag(self) -> str:
        """The flag a service takes it as (a cell is one value: --seed, where the harness's is --seeds)."""
        return "--" + self.name.replace("_", "-")

    def spell(self, value: Any) -> str:
        """One parsed value as a service's argv carries it (`parse` reads it back)."""
        return str(value).lower() if isinstance(value, bool) else str(value)

    @property
    def service_default(self) -> Any:
        return self.default[0] if self.many else self.default

    def parse(self, raw: Any) -> Any:
        """One value (from a flag, argv, YAML or JSON) -> the typed, range-checked value."""
        if raw is None or (self.optional and isinstance(raw, str) and raw.strip().lower() in ("", "none")):
            if self.optional:
                return None
            raise SpecError(f"{self.flag}: a value is required")
        value = self._typed(raw)
        if self.choices is not None and value not in self.choices:
            raise SpecError(f"{self.flag}: {quote(raw)} is not one of {', '.join(self.choices)}")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if self.lo is not None and value < self.lo or self.hi is not None and value > self.hi:
                raise SpecError(f"{self.flag}: {quote(raw)} is {self._bounds()}{self._unit()}")
        return value

    def _bounds(self) -> str:
        """Where a number out of range lies, in words: outside [lo, hi], or below lo / above hi for a
        range open at one end."""
        if self.hi is None:
            return f"below {_num(self.lo)}"
        if self.lo is None:
            return f"above {_num(self.hi)}"
        return f"outside [{_num(self.lo)}, {_num(self.hi)}]"

    def parse_many(self, raw: Any) -> tuple:
        """A comma list (or a YAML list) -> distinct parsed values, order kept."""
        items = list(raw) if isinstance(raw, (list, tuple)) else [x for x in str(raw).split(",") if x.strip()]
        if not items:
            raise SpecError(f"{self.flag}: no value given")
        values = tuple(self.parse(x.strip() if isinstance(x, str) else x) for x in items)
        if len(set(values)) != len(values):
            raise SpecError(f"{self.flag}: {quote(raw)} repeats a value")
        return values

    def _typed(self, raw: Any) -> Any:
        kind = self.type.__name__
        if self.type is bool:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise SpecError(f"{self.flag}: {quote(raw)} is not true or false")
        if self.type is int:
            if isinstance(raw, bool) or isinstance(raw, float) and not raw.is_integer():
                raise SpecError(f"{self.flag}: {quote(raw)} is not an integer")
            try:
                return int(raw) if not isinstance(raw, str) else int(raw.strip(), 10)
            except (TypeError, ValueError):
                raise SpecError(f"{self.flag}: {quote(raw)} is not an integer") from None
        if self.type is float:
            try:
                value = float(raw)
            except (TypeError, ValueError):
                raise SpecError(f"{self.flag}: {quote(raw)} is not a number") from None
            if not math.isfinite(value):
                raise SpecError(f"{self.flag}: {quote(raw)} is not a finite number")
            return value
        if not isinstance(raw, (str, int, float)) or isinstance(raw, bool):
            raise SpecError(f"{self.flag}: {quote(raw)} is not a {kind}")
        return str(raw).strip()

    def _unit(self) -> str:
        return f" {self.unit}" if self.unit else ""

    def help_text(self) -> str:
        bits = [self.help]
        if self.unit:
            bits.append(f"[unit: {self.unit}]")
        if self.lo is not None or self.hi is not None:
            bits.append(f"[range: {_num(self.lo)}..{_num(self.hi)}]")
        return " ".join(bits)


def quote(raw: Any) -> str:
    """A value as an error message quotes it: repr, cut to 40 characters (messages stay one line)."""
    text = repr(raw)
    return text if len(text) <= 40 else text[:37] + "..."


def _num(v: float | None) -> str:
    """A bound as help prints it, exactly: 2147483647 (not :g's 2.14748e+09), 0.5, 1e-05."""
    if v is None:
        return "-"
    return str(int(v)) if float(v).is_integer() else repr(float(v))


# ---- budgets: one parser, one syntax ---------------------------------------------------------

MIN_BUDGET = 1e-5       # 0.001 %: below this a budget cannot hold one value of any real adapter


def parse_budget(text: Any) -> float:
    """'1.6%' -> 0.016. The only accepted syntax is a percentage with its sign, in (0.001 %, 100 %]."""
    s = str(text).strip()
    if not isinstance(text, str) or not s.endswith("%"):
        raise SpecError(f"--budget: {quote(text)} is not a percentage like 1.6%")
    try:
        frac = float(s[:-1]) / 100
    except ValueError:
        raise SpecError(f"--budget: {quote(text)} is not a percentage like 1.6%") from None
    if not math.isfinite(frac) or not MIN_BUDGET <= frac <= 1:
        raise SpecError(f"--budget: {quote(text)} is outside [0.001%, 100%]")
    return frac


def _budget(raw: Any) -> str:
    """A budget's text in one spelling (`1.60%`, `+1.6%` and `1.6 %` are `1.6%`): one budget, one cell name."""
    parse_budget(raw)
    text = repr(float(str(raw).strip()[:-1]))          # within [0.001, 100]: repr never uses an exponent
    return (text[:-2] if text.endswith(".0") else text) + "%"


# ---- the parameters --------------------------------------------------------------------------

def _compressor_params() -> list[Param]:
    out = [Param("error_feedback", bool, COMMON_OPTIONS["error_feedback"],
                 "compressors: carry what a payload could not send into the next update (error feedback)"),
           Param("max_decoded_elements", int, COMMON_OPTIONS["max_decoded_elements"],
                 "compressors: largest tensor a payload may decode to (refuses decompression bombs)",
                 unit="elements", lo=1, hi=1 << 34),
           Param("budget_bytes", int, None, "budgeted compressors: absolute payload cap; wins over --budget",
                 unit="bytes", lo=64, hi=1 << 40, optional=True),
           Param("reference_dtype", str, BUDGET_OPTIONS["reference_dtype"],
                 "budgeted compressors: the dtype of the full adapter that a budget is a fraction of",
                 choices=FLOAT_DTYPES)]
    out += _card_params("compressor")
    return [dataclasses.replace(p, group="compressor", family=HILO) for p in out]


def _card_params(kind: str) -> list[Param]:
    """The options of every card of one kind (a HiLo method's or a compressor's), each a run parameter
    `<card>_<option>` (`--delta-codec`)."""
    return [Param(f"{card.name}_{opt}", o.type, o.default, f"{card.name}: {o.help}", unit=o.unit, lo=o.lo, hi=o.hi,
                  choices=o.choices, optional=o.optional, group="compressor", family=HILO)
            for card in cards.of(kind) for opt, o in card.options.items()]


def _shipped_presets() -> str:
    """The presets/ folder's names for --preset's help ("cellular, hilo-kk, ...; "), "" where the folder is
    absent (a service's container image)."""
    names = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "presets").glob("*.yaml"))
    return "; ".join([", ".join(names), ""]) if names else ""


PARAMS: list[Param] = [
    # what is compared
    Param("method", str, ("spar",), "method(s) under test, comma list: "
          + ", ".join(n for c in cards.in_tree("method") for n in (c.spelled or (c.name,))) + ", a compressor "
          "(" + ", ".join(sorted(COMPRESSOR_OPTIONS)) + "), a data-parallel method, or an installed plugin's "
          "(docs/PLUGINS.md)", many=True),
    Param("budget", str, (RUN_BUDGET,), "budget(s) of budgeted compressors (" + ", ".join(BUDGETED)
          + "), comma list, % of the full adapter in --reference-dtype", unit="%", many=True, family=HILO),
    Param("seed", int, (1, 2, 3), "the seeds to run, a comma list of values (1,2,3: three seeds; 2 alone: one "
          "seed, seed 2); every method runs every seed", lo=0, hi=2**31 - 1, many=True, flag_name="seeds"),
    Param("preset", str, None, f"a named preset from presets/ ({_shipped_presets()}or a YAML path) whose values "
          "stand in for every flag not given (harness/run/presets.py)", where="harness", optional=True),
    Param("baseline", str, "full-bf16", "the method every other one is compared against, run under the same link; "
          "default full-bf16: the whole adapter in bf16, as the HiLo paper and RL frameworks ship it; "
          f"{DP_BASELINE} where every method is data-parallel (`{NO_BASELINE}`: do not run one)", where="harness"),
    Param("on_drop", str, "continue", "a worker lost mid-cell: continue (the cell is marked degraded), fail (stop "
          "the run, exit 1), restart (start it again; it rejoins and catches up)", choices=("fail", "continue", "restart"),
          where="harness"),
    Param("spawn", str, "fork", "how the services start: fork (from one process per run that imported torch "
          "once: the imports' memory shared copy-on-write, a start in ~0.1 s; harness/run/forkserver.py) or exec "
          "(a fresh Python each)", choices=("fork", "exec"), where="harness"),
    Param("quality_metric", str, "auto", "the held-out figure that decides quality and time to quality (the report "
          "shows every figure's difference beside it): auto (the finest that means quality: gold_prob where the "
          "task's gold is its only right answer, digits and knights_knaves, and the run recorded it; else pass_at_1), "
          "pass_at_k, pass_at_1, gold_prob (the exact probability that one sample is the gold answer: no sampling "
          "noise, a lower bound of pass@1; trainers/hilo/evaluate.py), or objective (reverse KL to the teacher for "
          "distill, lower is better; mean reward for grpo)",
          choices=QUALITY_METRICS, where="harness", family=HILO),
    Param("quality_target", float, 0.9, "time-to-quality target: this fraction of the baseline's final held-out "
          "improvement (mean over seeds)", lo=0.01, hi=1.0, where="harness", family=HILO),
    Param("schedule", str, "interleaved", "order of the cells: interleaved (seed by seed, the variants' order "
          "reversed every other seed, so a drift in the machine's load hits every method alike) or sequential "
          "(each variant's seeds back to back)", choices=("interleaved", "sequential"), where="harness"),
    Param("worker_timeout", float, 120.0, "seconds of silence after which the learner drops a worker (the learner's "
          "--worker-timeout)", unit="s", lo=0.5, hi=86400.0, where="harness"),
    Param("liveness", float, 10.0, "seconds without a byte from a joined worker after which it is dropped at once "
          "(the data-parallel aggregator: the run stops); workers send a heartbeat every quarter of it while they "
          "compute. Keep it above the time one 1448-byte TCP segment takes on the slowest link (12 s at 1 kbit/s) "
          "(the learner's --liveness)", unit="s", lo=0.5, hi=86400.0, where="harness"),
    # the training run every replica agrees on
    Param("workers", int, 2, "worker processes (one namespace each)", lo=1, hi=1024),
    Param("updates", int, 40, "updates per method and seed", lo=1, hi=1_000_000),
    Param("pipeline", int, 0, "pipelining depth: 0 synchronous, 1 one-step overlap", lo=0, hi=1, family=HILO),
    Param("model", str, "tiny", "micro | tiny | small (tiny, built on the CPU), a real model's shape built from its "
          "config with random weights (" + ", ".join(MODEL_NAMES[3:]) + ": sizes and times real, quality "
          "meaningless), or a local folder holding config.json (with weights: loaded; without: random init)"),
    Param("lora_rank", int, 8, "LoRA rank of the adapter (rank-R methods override it)", lo=1, hi=4096),
    Param("lr", float, 2e-3, "AdamW learning rate", lo=1e-9, hi=10.0),
    # Replayed by every replica (trainers/model/replica.py, bit-identical at any thread count); off by default.
    Param("weight_decay", float, 0.0, "AdamW decoupled weight decay of the adapter (0: off)", lo=0.0, hi=1.0,
          family=HILO),
    Param("max_grad_norm", float, 0.0, "clip the decoded gradient's global L2 norm to this before AdamW, on every "
          "replica (0: off)", lo=0.0, hi=1e6, family=HILO),
    Param("task", str, "digits", "task name (" + ", ".join(c.name for c in cards.in_tree("task"))
          + ", or an installed plugin's)", family=HILO),
    Param("task_options", str, "", "the task's constructor options, key=value comma list (e.g. max_people=3 "
          "for knights_knaves, count=3,max_number=9 for countdown; empty: the task's defaults)", family=HILO),
    Param("base_steps", int, 100, "supervised steps on gold answers of the student's base (trained here once, "
          "cached; the LoRA student starts from it); 0: a random base (plumbing tests)", lo=0, hi=1_000_000,
          family=HILO),
    Param("objective", str, "distill", "distill (to a small teacher trained here, cached) | grpo | an installed "
          "plugin's objective", choices=objective_names(), family=HILO),
    Param("objective_options", str, "", "the objective's options, key=value comma list (e.g. kl_coef=0.05 for "
          "grpo, estimator=sampled for distill; empty: the objective's defaults)", family=HILO),
    Param("teacher_steps", int, 300, "distill: supervised steps of the teacher trained here (the base's recipe "
          "run longer; cached on disk, one teacher for every seed)",
          lo=1, hi=1_000_000, family=HILO),
    Param("problems_per_worker", int, 16, "problems per worker per update", lo=1, hi=4096, family=HILO),
    Param("group_size", int, None, "samples per problem (the GRPO group); unset: 1 for distill (the teacher "
          "scores every sample, and distinct problems teach more than repeats), 2 for grpo", lo=1, hi=1024,
          optional=True, family=HILO),
    Param("max_new_tokens", int, 8, "tokens sampled per rollout", unit="tokens", lo=1, hi=4096, family=HILO),
    Param("temperature", float, 1.0, "sampling temperature", lo=1e-3, hi=100.0, family=HILO),
    Param("hash_every", int, 1, "compare replica hashes every K versions (and always at the end)",
          unit="versions", lo=1, hi=1_000_000, family=HILO),
    Param("snapshot_every", int, 10, "the learner snapshots adapter + optimizer every S versions (catch-up)",
          unit="versions", lo=1, hi=1_000_000, family=HILO),
    # held-out quality (trainers/tasks/heldout.py; evaluated by the learner after its loop, never timed as an update)
    Param("eval_every", int, 10, "evaluate the policy on the held-out problems every E versions (and always at "
          "versions 0 and the last; 0: only those two)", unit="versions", lo=0, hi=1_000_000, family=HILO),
    Param("eval_problems", int, 64, "held-out problems per evaluation (disjoint from every training problem); 0: "
          "no held-out evaluation (e.g. a real model's shape with random weights: its quality means nothing)",
          lo=0, hi=100_000, family=HILO),
    Param("eval_samples", int, 8, "samples per held-out problem (n of pass@k; at least 2 x --pass-k)",
          lo=1, hi=1024, family=HILO),
    Param("pass_k", int, 4, "k of the held-out pass@k", lo=1, hi=512, family=HILO),
    Param("straggler", str, None, "extra delay per update of named workers, from a stated distribution seeded by "
          "(seed, worker, batch): wN:exp:MEAN (exponential) or wN:fixed:SECONDS, comma list, e.g. w2:exp:2s; "
          "the worker sleeps it after computing each batch (events: the straggle phase)", optional=True),
    *_compressor_params(),
    *_card_params("method"),   # delta's --delta-codec, --delta-dtype (trainers/cards/methods.py)
    # the data-parallel family (trainers/dataparallel, trainers/optim/lordo.py); --updates counts optimizer steps
    Param("lordo_k", int, 8, "data-parallel: local steps between syncs (diloco, lordo)", unit="steps", lo=1,
          hi=1_000_000, family=DP),
    Param("lordo_k_states", int, None, "lordo: steps between optimizer-state syncs, a multiple of --lordo-k "
          "(unset: --lordo-k)", unit="steps", lo=1, hi=1_000_000, optional=True, family=DP),
    Param("lowrank_ddp_refresh", int, 200, "lowrank-ddp: steps between projection refreshes (GaLore's update gap; "
          "a refresh step exchanges the full gradient)", unit="steps", lo=1, hi=1_000_000, family=DP),
    Param("lordo_rank", int, 8, "lordo, lowrank-ddp: rank r of the projection of attention + MLP matrices",
          lo=1, hi=4096, family=DP),
    Param("lordo_qhm", str, "full-rank", "lordo: quasi-hyperbolic momentum term (a lordo-*-none|lowrank|fullrank "
          "name overrides it)", choices=("none", "low-rank", "full-rank"), family=DP),
    Param("lordo_qhm_residual", str, "reduced", "lordo full-rank QHM: what its term applies: reduced (G + E, E "
          "reduced by what the term applied: each residual once), gradient (this step's) or reapplied (G + E with E "
          "kept: an earlier version of the code); a lordo-*-fullrank-<reading> name overrides it",
          choices=("reduced", "gradient", "reapplied"), family=DP),
    Param("lordo_omega", float, 0.97, "lordo: weight omega of the low-rank momentum term", lo=0.0, hi=1.0, family=DP),
    Param("lordo_error_feedback", bool, True, "lordo: carry the projection residual into the next step", family=DP),
    Param("lordo_rotation", bool, True, "lordo: rotate the moments into the new basis when Q is refreshed", family=DP),
    Param("lordo_initial_q", str, "pseudo-gradient", "lordo-global: the first Q: pseudo-gradient (top-r of the first "
          "averaged pseudo-gradient, after a first window at Q = I whose sync ships dense tensors) or random (a "
          "seeded random basis, no bytes)", choices=("pseudo-gradient", "random"), family=DP),
    Param("diloco_outer_lr", float, 0.7, "diloco: outer Nesterov SGD learning rate", lo=0.0, hi=10.0, family=DP),
    Param("diloco_outer_momentum", float, 0.9, "diloco: outer Nesterov momentum", lo=0.0, hi=0.999, family=DP),
    Param("dp_train", str, "full", "data-parallel: what each replica trains: every parameter (full) or a "
          "PEFT LoRA adapter of --lora-rank on the attention + MLP projections (lora; the base stays frozen "
          "and only the adapter's factors are synchronised)", choices=("full", "lora"), family=DP),
    Param("dp_batch", int, 8, "data-parallel: sequences per worker per step", lo=1, hi=4096, family=DP),
    Param("dp_seq_len", int, 64, "data-parallel: tokens (bytes) per sequence of the generated corpus",
          unit="tokens", lo=8, hi=4096, family=DP),
    Param("dp_heldout", int, 64, "data-parallel: held-out sequences for the final perplexity", lo=1, hi=100_000,
          family=DP),
    # partial participation (docs/FAULTS.md, "Quorum and catch-up")
    Param("quorum", int, 0, "the learner (aggregator) proceeds with the first K contributions of an update (a "
          "sync); late ones are dropped, their staleness logged; 0: every member's", lo=0, hi=4096),
    Param("catch_up", str, "replay", "how a joining worker reaches the current version: replay (the newest "
          "snapshot and every logged update after it, in order) or resync (the learner's whole replica at "
          "once); full-sync methods always ship the newest adapter", choices=("replay", "resync"), family=HILO),
    # the emulated network
    Param("profile", str, "paper-62.5mbit", "WAN profile: a name in netem_profiles/ or a YAML path; the link "
          "flags below override its worker defaults", where="link"),
    Param("bw", str, None, "worker link rate (62.5mbit = 62.5Mbps, megabits/s; MBps: megabytes/s); "
          "overrides the profile", unit="bit/s",
          where="link", optional=True),
    Param("delay", str, None, "one-way delay per direction of each worker link, e.g. 20ms", unit="s",
          where="link", optional=True),
    Param("jitter", str, None, "jitter, e.g. 2ms", unit="s", where="link", optional=True),
    Param("loss", str, None, "random loss per direction, e.g. 0.1%", unit="%", where="link", optional=True),
    Param("trace", str, None, "play a link trace on every worker link, both directions (a file: Mahimahi "
          "or time_s,rate_mbit_s CSV; or a shipped one: harness traces list)", where="link", optional=True),
    Param("comm_ratio", str, None, "place the run in a regime, not at a literal rate: full sync's link seconds per "
          "compute second per update (paper = the HiLo paper's 18.9 s / 14.1 s = 1.34; a number; off: the profile's "
          "own rates). A pilot measures full sync's compute per update here (CPU time, cached) and every link rate is "
          "scaled to match. Unset: paper when no rate is given (profile paper-62.5mbit, no --bw or --trace), else off",
          where="link", optional=True, family=HILO),
    Param("worker_cpu", str, None, "CPU share of each worker's service process, comma list w1 first (one value: "
          "every worker), in CPUs: 1,1,0.5,0.25 gives w4 a quarter of one core (a cgroup CFS quota each, "
          "harness/net/cgroups.py; root); overrides the profile's per-worker cpu key", unit="CPUs", where="link",
          optional=True),
    Param("emulation", bool, True, "shape links in network namespaces (root); --no-emulation: localhost, "
          "unshaped", where="link"),
    Param("backend", str, None, "force the shaping backend: netem | fallback (default: the kernel's)",
          choices=BACKENDS, where="link", optional=True),
]


def params(where: str | None = None) -> list[Param]:
    return [p for p in PARAMS if where is None or p.where == where]


def get(name: str) -> Param:
    for p in PARAMS:
        if p.name == name:
            return p
    raise KeyError(name)


def defaults(where: str | None = None) -> dict[str, Any]:
    return {p.name: p.default for p in params(where)}


def parse_value(name: str, raw: Any) -> Any:
    """Parse one parameter; `budget` values keep their text ('1.6%') after validation."""
    p = get(name)
    if p.name == "budget":
        budgets = tuple(_budget(b) for b in p.parse_many(raw))
        if len(set(budgets)) != len(budgets):   # 1.6%,1.60%: one budget twice, refused as every repeat is
            raise SpecError(f"{p.flag}: {quote(raw)} repeats a value ({', '.join(budgets)})")
        return budgets
    return p.parse_many(raw) if p.many else p.parse(raw)


# ---- methods (names only; trainers/hilo/methods.py builds them) -----------------------------------

def method_names() -> list[str]:
    """Every method as help and `harness methods` list them (a family by its spelling: rank-R)."""
    return [n for c in cards.of("method") for n in (c.spelled or (c.name,))] + compressor_names() + dp_method_names()


def check_combinations(values: Mapping[str, Any]) -> None:
    """Rules between parameters (SpecError, one line): the harness checks them before anything
    runs, and every service again on the parameters it is given."""
    resolve_group_size(values["objective"], values["group_size"])   # grpo needs a group
    if values["eval_samples"] < 2 * values["pass_k"]:  # the unbiased pass@k estimator needs n >= k; 2k keeps it stable
        raise SpecError(f"--eval-samples: {values['eval_samples']} must be at least 2 x --pass-k ({values['pass_k']})")
    if "worker_cpu" in values:          # a harness value: present in a run's values, not in one cell's
        parse_worker_cpu(values["worker_cpu"], values["workers"])
    bare = [x.strip() for x in str(values.get("straggler") or "").split(",") if re.search(r":[0-9.]+$", x.strip())]
    if bare:   # as --delay 20: a bare number reads as seconds to one user and as tc's microseconds to another
        raise SpecError(f"--straggler: {quote(bare[0])} needs a unit: {bare[0]}s, {bare[0]}ms")
    late = [w for w in parse_straggler(values.get("straggler")) if w > values["workers"]]
    if late:
        raise SpecError(f"--straggler: names w{late[0]}, but the run has {values['workers']} workers")
    k, k_states = values.get("lordo_k"), values.get("lordo_k_states")
    if k_states is not None and k and k_states % k:  # was refused only when the aggregator started
        raise SpecError(f"--lordo-k-states: {k_states} must be a multiple of --lordo-k ({k})")
    quorum, workers = values.get("quorum"), values.get("workers")
    if quorum and isinstance(workers, int) and quorum > workers:  # a quorum no run can reach
        raise SpecError(f"--quorum: {quorum} is more than the run's {workers} workers")


CPU_SHARE_MIN, CPU_SHARE_MAX = 0.01, 256.0   # CPUs: 1 ms per 100 ms CFS period (the kernel's floor), 256 cores


def parse_cpu_share(raw, where: str) -> float:
    """One share (a number of CPUs, e.g. 0.25) -> float in [CPU_SHARE_MIN, CPU_SHARE_MAX]; SpecError naming ``where``."""
    try:
        share = float(raw) if not isinstance(raw, bool) else float("nan")
    except (TypeError, ValueError):
        raise SpecError(f"{where}: {raw!r} is not a number of CPUs (e.g. 0.25)") from None
    if not CPU_SHARE_MIN <= share <= CPU_SHARE_MAX:   # NaN fails both comparisons
        raise SpecError(f"{where}: {raw!r} is outside [{CPU_SHARE_MIN}, {CPU_SHARE_MAX:g}] CPUs")
    return share


def parse_worker_cpu(text: str | None, workers: int, noun: str = "workers") -> tuple[float, ...]:
    """``--worker-cpu 1,1,0.5,0.25`` -> one share per worker (w1 first); one value applies to every worker."""
    if text is None:
        return ()
    items = [x.strip() for x in str(text).split(",")]
    shares = tuple(parse_cpu_share(x, "--worker-cpu") for x in items)
    if len(shares) == 1:
        return shares * workers
    if len(shares) != workers:
        raise SpecError(f"--worker-cpu: {quote(text)} gives {len(shares)} shares for {workers} {noun} "
                        "(one per worker, w1 first, or one for all)")
    return shares


STRAGGLER = re.compile(r"^w([1-9][0-9]*):(exp|fixed):([0-9]*\.?[0-9]+)(ms|s)?$")
STRAGGLER_MAX_S = 3600.0    # one update's injected delay (mean or fixed), at most


@dataclass(frozen=True)
class Straggle:
    """One worker's injected delay per update: ``kind`` exp (exponential of mean ``seconds``) or fixed."""
    kind: str
    seconds: float

    def delay(self, seed: int, worker: int, batch: int) -> float:
        """The delay of one batch (s): a pure function of (seed, worker, batch), so a restarted worker
        or a rerun draws the same delays."""
        if self.kind == "fixed":
            return self.seconds
        return random.Random(f"straggler/{seed}/{worker}/{batch}").expovariate(1.0 / self.seconds)


def parse_straggler(text: str | None) -> dict[int, Straggle]:
    """``w2:exp:2s,w3:fixed:500ms`` -> {2: Straggle('exp', 2.0), 3: Straggle('fixed', 0.5)}; SpecError naming it."""
    if text is None:
        return {}
    out: dict[int, Straggle] = {}
    for item in (x.strip() for x in str(text).split(",")):
        m = STRAGGLER.match(item)
        if not m:
            raise SpecError(f"--straggler: {quote(item)} is not wN:exp:MEAN or wN:fixed:SECONDS (e.g. w2:exp:2s)")
        worker, seconds = int(m.group(1)), float(m.group(3)) / (1000 if m.group(4) == "ms" else 1)
        if worker in out:
            raise SpecError(f"--straggler: {quote(text)} names w{worker} twice")
        if not 0 < seconds <= STRAGGLER_MAX_S:
            raise SpecError(f"--straggler: {quote(item)}: the delay must be within (0, {STRAGGLER_MAX_S:g}] s")
        out[worker] = Straggle(m.group(2), seconds)
    return out


def check_run(values: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """A run's parsed values checked in one pass (`check_combinations`, its methods, its baseline);
    returns its (method, budget) pairs: budget None for a method that takes none, repeats
    collapsed, the baseline last unless it is one of the methods."""
    check_combinations(values)
    methods = [check_method(m) for m in values["method"]]
    baseline = values["baseline"]
    if baseline != NO_BASELINE:
        try:
            check_method(baseline)
        except SpecError as err:
            raise SpecError(str(err).replace("--method", "--baseline")) from None
    if baseline != NO_BASELINE:
        _check_one_family(methods, baseline)
        if set(methods) == {baseline}:   # the report would have no row to compare: no verdict at all
            raise SpecError(f"--method {baseline}: the only method is the baseline itself, so nothing is compared; "
                            f"give another method beside it, or --baseline {NO_BASELINE} to measure {baseline} alone")
    pairs = list(dict.fromkeys((m, b if takes_budget(m, values) else None) for m in methods for b in values["budget"]))
    if baseline != NO_BASELINE and baseline not in methods:
        pairs.append((baseline, None))
    return pairs


def _check_one_family(methods: list[str], baseline: str) -> None:
    """A speedup or kept quality compares two runs of one loop on one task: the data-parallel methods
    pre-train the generated corpus (trainers/dataparallel/), the HiLo methods train --task with
    --objective, so one family's method is never compared against the other's baseline."""
    apart = [m for m in methods if is_data_parallel(m) != is_data_parallel(baseline)]
    if not apart:
        return
    if is_data_parallel(apart[0]):
        raise SpecError(f"--method {apart[0]}: a data-parallel method pre-trains the generated corpus, not the "
                        f"task that {baseline} (HiLo's) trains, so no speedup or quality compares them; compare "
                        f"it against --baseline {DP_BASELINE} (the default when every method is data-parallel), "
                        "and run HiLo methods in a run of their own")
    raise SpecError(f"--method {apart[0]}: a HiLo method trains --task, not the generated corpus that {baseline} "
                    "(data-parallel) pre-trains, so no speedup or quality compares them; compare it against "
                    "--baseline full-bf16 in a run of its own")


PLUGIN_GROUP_SIZE = 2   # an objective without a card samples a group, as grpo does (docs/PLUGINS.md)


def resolve_group_size(objective: str, group_size: int | None) -> int:
    """Samples per problem: as given, else the objective's card's (1 for distill: the teacher scores every
    sample; 2 for grpo, whose advantages are normalised within a group: a group of one has none)."""
    found = cards.match("objective", objective)
    facts = found[1] if found is not None else {}
    if group_size is None:
        return int(facts.get("group_size", PLUGIN_GROUP_SIZE))
    least = int(facts.get("min_group_size", 1))
    if group_size < least:
        raise SpecError(f"--group-size: {group_size} gives {objective} no group to normalise its advantages against "
                        f"(every advantage 0); use {least} or more")
    return group_size


def dp_method_names() -> list[str]:
    """The data-parallel methods: each card's name, then its families' spellings, then class plugins."""
    carded = cards.of("dataparallel")
    return ([c.name for c in carded] + [s for c in carded for s in c.spelled]
            + sorted(set(plugins.names("dataparallel")) - {c.name for c in carded}))


def is_data_parallel(name: str) -> bool:
    """A data-parallel method (aggregator + dp workers instead of learner + workers)."""
    return cards.match("dataparallel", name) is not None or name in plugins.names("dataparallel")


def method_family(method: str) -> str:
    """DP for a data-parallel method, else HILO: the family whose parameters it reads (`Param.family`)."""
    return DP if is_data_parallel(method) else HILO


def params_unread_by(method: str) -> frozenset[str]:
    """The run parameters `method` never reads: those the other family of methods alone reads."""
    return frozenset(p.name for p in PARAMS if p.family not in ("", method_family(method)))


def check_method(name: str) -> str:
    found = method_card(name)
    rank = found[1].get("lora_rank") if found else None
    if rank is not None:   # rank-R trains at LoRA rank R: the cap of --lora-rank holds for it
        hi = int(get("lora_rank").hi)
        if rank > hi:
            raise SpecError(f"--method: {quote(name)}: the rank must be within 1 and {hi} (as --lora-rank)")
    if found is not None or name in compressor_names() or is_data_parallel(name):
        try:   # one name offered by two plugin distributions
            plugins.check_unique("dataparallel" if is_data_parallel(name) else "compressor", name)
        except plugins.PluginError as err:
            raise SpecError(f"--method: {err}") from None
        return name
    valid = [*(c.name for c in cards.of("method")), *compressor_names(), *(c.name for c in cards.of("dataparallel")),
             *plugins.names("dataparallel")]
    raise SpecError(f"--method: {plugins.unknown_name('method', 'methods', name, valid)}")


def takes_budget(method: str, values: dict[str, Any] | None = None) -> bool:
    """Whether `method` runs at each --budget; `values` (run parameters): a set --powersgd-rank opts out."""
    if method == "powersgd" and values is not None and values.get("powersgd_rank") is not None:
        return False
    return method in budgeted_names()


def compressor_options(method: str, values: dict[str, Any]) -> dict[str, Any]:
    """The options of `method`'s compressor from run parameter values (empty for full methods;
    delta's codec and ship dtype)."""
    card = cards.match("method", method)
    if card is not None:   # a HiLo method's own options (delta's codec and ship dtype)
        return {opt: values[f"{card[0].name}_{opt}"] for opt in card[0].options}
    if method not in compressor_names():
        return {}
    out = {k: values[k] for k in COMMON_OPTIONS}
    if method in budgeted_names():
        out.update({k: values[k] for k in BUDGET_OPTIONS})
    # A carded plugin's options are flags too; a class plugin's own options keep their defaults.
    out.update({opt: values[f"{method}_{opt}"] for opt in COMPRESSOR_OPTIONS.get(method, {})})
    return out


MODEL_CONFIG_MAX_BYTES = 1 << 20     # a Hugging Face config.json is a few KB
# The shape fields a model is built from, each bounded well above the largest published model's
# (Llama 3.1 405B: hidden 16384, intermediate 53248, 126 layers, 128 heads; Gemma's 256,000-token vocabulary).
MODEL_CONFIG_BOUNDS = {"hidden_size": 65536, "intermediate_size": 1 << 20, "num_hidden_layers": 1024,
                       "num_attention_heads": 4096, "num_key_value_heads": 4096, "head_dim": 16384,
                       "vocab_size": 1 << 22}


def check_model(model: str) -> None:
    """A built-in model name, or a folder holding a Hugging Face config.json; else SpecError naming --model."""
    if model in MODEL_NAMES:
        return
    config = Path(model) / "config.json"
    if not config.is_file():
        raise SpecError(f"--model: {model!r} is neither a built-in model ({', '.join(MODEL_NAMES)}) "
                        "nor a folder holding config.json")
    try:
        if config.stat().st_size > MODEL_CONFIG_MAX_BYTES:
            raise SpecError(f"--model: {config} is larger than {MODEL_CONFIG_MAX_BYTES} bytes (not a model's config)")
        doc = json.loads(config.read_text())
    except (OSError, ValueError, RecursionError) as err:
        if isinstance(err, SpecError):
            raise
        raise SpecError(f"--model: {config} is not readable JSON ({' '.join(str(err).split())[:200]})") from None
    if not isinstance(doc, dict) or not doc.get("model_type"):
        raise SpecError(f"--model: {config} has no model_type (not a Hugging Face config)")
    for key, hi in MODEL_CONFIG_BOUNDS.items():
        # the meta-device model is built from these: hidden_size 1e9 hung `project` and every run
        value = doc.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= hi):
            raise SpecError(f"--model: {config}: {key} {quote(value)} must be a whole number within 1 and {hi}")


def variant_label(method: str, budget: str | None = None) -> str:
    """A variant's name in tables, legends and projections: `spar@1.6%`, or the bare method when it
    has no budget (or takes none)."""
    return f"{method}@{budget}" if budget and takes_budget(method) else method


def variant_slug(label: str) -> str:
    """A variant label as a folder name: `spar@1.6%` -> `spar-1.6pct` (cells/<slug>-s<seed>/)."""
    return label.replace("@", "-").replace("%", "pct")


# ---- RunParams: what every replica agrees on (learner argv, WELCOME, summary.json) ----------

class RunParams:
    """The service parameters of one cell (one method, one budget, one seed): an immutable
    mapping with attribute access, validated against the spec as it is when built. Its method's
    options (`compressor_options`) are read from the values then, once: the object never changes."""

    __slots__ = ("_values", "_options")

    def __init__(self, **values: Any):
        known = {p.name: p for p in params("service")}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise SpecError(f"unknown run parameters {unknown}")
        out = {}
        for name, p in known.items():
            raw = values.get(name, p.service_default)
            out[name] = _budget(raw) if name == "budget" else p.parse(raw)  # one cell: one value each
        check_method(out["method"])
        check_combinations(out)
        object.__setattr__(self, "_values", out)
        object.__setattr__(self, "_options", compressor_options(out["method"], out))

    @property
    def samples_per_problem(self) -> int:
        """--group-size as given, else the objective's own (resolve_group_size)."""
        return resolve_group_size(self.objective, self.group_size)

    def __getattr__(self, name: str) -> Any:
        try:
            return object.__getattribute__(self, "_values")[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        raise AttributeError("RunParams is immutable")

    def __eq__(self, other) -> bool:
        return isinstance(other, RunParams) and self._values == other._values

    def __repr__(self) -> str:
        return f"RunParams({self._values!r})"

    def to_json(self) -> dict[str, Any]:
        return dict(self._values)

    @classmethod
    def from_json(cls, obj: dict) -> "RunParams":
        if not isinstance(obj, dict):
            raise SpecError("run parameters must be a JSON object")
        return cls(**obj)

    def replace(self, **changes: Any) -> "RunParams":
        return RunParams(**{**self._values, **changes})

    def compressor_options(self) -> dict[str, Any]:
        return dict(self._options)


def add_run_args(parser, required: bool) -> None:
    """argparse flags for the service parameters (learner: defaults from the spec; worker: all
    optional, each a check against the learner's value)."""
    for p in params("service"):
        parser.add_argument(p.service_flag, dest=p.name, type=str,
                            default=p.service_default if required else None,
                            help=p.help_text().replace("%", "%%"))   # argparse %-formats help: '% of' was a crash


def run_params_from_args(args) -> RunParams:
    return RunParams(**{p.name: getattr(args, p.name) for p in params("service")})


def parse_expected(args) -> dict[str, Any]:
    """The worker's optional flags, parsed: name -> value (None: not given)."""
    out = {}
    for p in params("service"):
        raw = getattr(args, p.name)
        out[p.name] = None if raw is None else _budget(raw) if p.name == "budget" else p.parse(raw)
    return out



# ---- the services' own flags: the plumbing of one process, not the run ----------------------------
# `python -m trainers.hilo.learner | trainers.hilo.worker | trainers.dataparallel.aggregator | .worker` take these
# beside the run's service parameters: where a process listens, how long it waits, what it admits.
# trainers/service_args.py parses them (each service names the ones it takes); harness/run/launch.py
# builds them with `service_argv`. `worker_timeout` and `liveness` are the run's harness parameters above,
# handed to the learner as they are.

SERVICE_PARAMS: list[Param] = [dataclasses.replace(p, where="process") for p in [
    Param("run_dir", str, None, "the cell's folder: event files, summary.json, learner.addr"),
    Param("listen", str, "127.0.0.1:0", "HOST:PORT the learner (aggregator) listens on (port 0: any free port)"),
    Param("learner", str, None, "HOST:PORT of the learner (aggregator) a worker joins"),
    Param("worker_id", int, None, "this worker's number, unique in the run (w1..wN)", lo=1, hi=get("workers").hi),
    Param("join_timeout", float, 300.0, "seconds the learner (aggregator) waits for every worker to join", unit="s",
          lo=0.5, hi=86400.0),
    get("worker_timeout"),
    get("liveness"),
    Param("handshake_timeout", float, 10.0, "seconds a new connection has to send its whole HELLO (a total "
          "deadline)", unit="s", lo=0.01, hi=86400.0),
    Param("token_timeout", float, 3.0, "seconds a new connection has to send the frame header that carries the run "
          "token", unit="s", lo=0.01, hi=86400.0),
    Param("max_pending_connections", int, 64, "connections allowed in their handshake at once; one more is closed "
          "at once", unit="connections", lo=1, hi=65536),
    Param("max_pending_per_source", int, 48, "of those, from one address (a newcomer from a smaller holder evicts "
          "the largest's oldest)", unit="connections", lo=1, hi=65536),
    Param("max_frame_bytes", int, 64 << 20, "largest frame body accepted from a worker", unit="bytes", lo=1 << 10,
          hi=1 << 40),
    Param("threads", int, 1, "torch threads (one keeps replay bit-exact at any core count and a small box usable)",
          lo=1, hi=1024),
    Param("resume", str, None, "continue a stopped learner from its snapshot file (the same run parameters; "
          "workers rejoin and are caught up)", optional=True),
    Param("connect_timeout", float, 60.0, "seconds a worker keeps trying to connect (and join)", unit="s", lo=0.1,
          hi=86400.0),
    Param("update_timeout", float, 600.0, "seconds a worker waits for a message from the learner before it gives "
          "up", unit="s", lo=0.1, hi=86400.0),
    Param("reconnects", int, 3, "times a worker rejoins after a lost connection (the learner catches it up)",
          lo=0, hi=1000),
]]


def service_param(name: str) -> Param:
    for p in SERVICE_PARAMS:
        if p.name == name:
            return p
    raise KeyError(name)


def service_argv(**values: Any) -> list[str]:
    """Plumbing values -> a service's flags, in the order given, each checked as the service will parse it
    (a bad value fails here, in the harness, not in a process started in a namespace)."""
    argv = []
    for name, raw in values.items():
        p = service_param(name)
        if (value := p.parse(raw)) is not None:
            argv += [p.flag, str(value)]
    return argv
