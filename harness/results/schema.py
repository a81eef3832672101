"""The schema of a result folder: every field the tables and the report read, with its type and range.

One declarative table per event-row kind (`ROWS`: field -> `Range`) and per document (`DOCS`:
key -> types), the mappings event rows carry (`MAPPINGS`: field -> the range of each value), and the
few rules that span fields (pass@1 <= pass@k, a phase ends after it starts, a worker id within the
run's workers). `check_row` and `check_doc` raise `ResultsError` in one line naming the file, the row
(its line number) and the field; files.py calls them on every row as it streams a file, so a value
out of range never reaches a table. No torch, no pandas.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

# the run spec: config.json's parameters, their types, ranges and choices; the cards: objectives' held-out figures
from trainers import cards, spec

MAX_VERSION = 10**9          # policy versions and update counts: far beyond any run (10^9 updates)
MAX_SECONDS = 10**8          # durations: about three years
MAX_BYTES = 2**60            # byte counters
MAX_WORKERS = 10**4
MAX_JSON_DEPTH = 32          # event rows and documents nest 4 deep; a deeper one is not the harness's


class ResultsError(ValueError):
    """A results file that cannot be used; the message is one line naming the file (and row and field)."""


@dataclass(frozen=True)
class Range:
    """A number in [lo, hi] (`lo_open`: lo excluded), finite; `integer`: a whole number."""
    lo: float = -math.inf
    hi: float = math.inf
    integer: bool = False
    lo_open: bool = False

    def problem(self, v) -> str | None:
        """Why `v` is not in range (None: it is); null is always allowed (a figure not measured)."""
        if v is None:
            return None
        if not is_number(v) or (self.integer and type(v) is not int):
            return "not an integer" if self.integer else "not a number"
        try:
            ok = math.isfinite(v) and (v > self.lo if self.lo_open else v >= self.lo) and v <= self.hi
        except OverflowError:  # an integer beyond any float
            ok = False
        if not ok:
            lo, hi = f"{self.lo:g}", f"{self.hi:g}"
            return f"outside {'(' if self.lo_open else '['}{lo}, {hi}]"
        return None


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


FINITE = Range()
FRACTION = Range(0, 1)
SECONDS = Range(0, MAX_SECONDS)
BYTES = Range(0, MAX_BYTES)
COUNT = Range(0, MAX_BYTES, integer=True)
VERSION = Range(0, MAX_VERSION, integer=True)
WORKER = Range(1, MAX_WORKERS, integer=True)

# Per row kind: field -> range. A field absent or null is allowed (older runs lack newer fields).
ROWS: dict[str, dict[str, Range]] = {
    "update": {"version": VERSION, "batch": VERSION, "seconds_per_update": Range(0, MAX_SECONDS, lo_open=True),
               "update_payload_bytes": BYTES, "loss": FINITE, "lag": VERSION, "harness_s": SECONDS,
               "reward_mean": FINITE, "rows": COUNT, "payload_bytes_up": BYTES, "wire_bytes_up": BYTES,
               "claimed_bytes_up": BYTES, "claimed_bytes_down": BYTES, "heldout_ppl": Range(0, math.inf),
               "payload_bytes": BYTES, "payload_bytes_down": BYTES, "process_cpu_s": SECONDS,
               "delta_changed": COUNT, "delta_density": FRACTION, "overlap": Range(0, 1 + 1e-6)},
    "rollouts": {"batch": VERSION, "version": VERSION, "payload_bytes": BYTES},
    "eval": {"version": VERSION, "pass_at_1": FRACTION, "pass_at_k": FRACTION, "k": Range(1, 10**6, integer=True),
             "n": Range(1, 10**6, integer=True), "problems": Range(0, 10**9, integer=True), "mean_reward": FINITE,
             "reverse_kl": Range(0, math.inf), "objective": FINITE, "eval_s": SECONDS, "gold_prob": FRACTION},
    "heldout": {"version": VERSION, "heldout_ppl": Range(0, math.inf)},
    "joined": {"version": VERSION, "worker": WORKER},
    "dropped": {"version": VERSION, "worker": WORKER},
    "disconnected": {"version": VERSION, "worker": WORKER},
    "resumed": {"version": VERSION},
    "restart": {"version": VERSION},
}
# The durations and byte counts among them: a negative or non-finite one would read as a negative
# speed-up or a median that means nothing.
NONNEGATIVE_FIELDS = frozenset(k for fields in ROWS.values() for k, r in fields.items()
                               if r in (SECONDS, BYTES, COUNT) or k == "seconds_per_update")
# Mappings a row may carry: field -> the range of each of its values (phases: [start, end] pairs).
MAPPINGS: dict[str, Range | None] = {
    "durations_s": SECONDS, "cpu_s": SECONDS, "update_frame_bytes": BYTES, "rollout_arrival": FINITE,
    "tcp": COUNT, "phases": None, "bytes": None, "machine": None}
MACHINE = {"busy_frac": FRACTION, "steal_frac": FRACTION, "load1": Range(0, 10**6), "cores": Range(1, 10**6, integer=True)}

# Per document: key -> the types its value may have (None always allowed), then ranges of numbers.
DOCS = {
    "summary.json": {"updates": int, "updates_planned": int, "workers": int, "complete": bool, "consistent": bool,
                     "status": str, "dropped": list, "state_hashes": dict, "eval": dict, "hash_checks": int},
    "meta.json": {"run_id": str, "status": str, "backend": str, "profile": str, "complete": bool, "emulation": bool,
                  "cells": list, "cells_complete": list, "errors": list, "owner": dict, "netns_run_id": str},
    "config.json": {"overrides": dict, "profile_doc": dict, "variants": list, "profile_name": str, "run_id": str},
}
DOC_RANGES = {"summary.json": {"updates": VERSION, "updates_planned": VERSION, "workers": WORKER,
                               "hash_checks": VERSION}}


def _say(v) -> str:
    return json.dumps(v, default=str)[:40]


def check_row(path: Path, n: int, r, workers: int | None = None) -> dict:
    """Row `n` (its line) of an event file as the tables use it: an object with a string `kind`
    and a numeric time `t`; every field of ROWS in range; update rows with an integer version
    (learner: and seconds per update); MAPPINGS' values in range; pass@1 <= pass@k; a worker id
    at most `workers` (the run's, when known)."""
    where = f"{path}: row {n}"
    if not isinstance(r, dict):
        raise ResultsError(f"{where} is not a JSON object")
    kind = r.get("kind")
    if not isinstance(kind, str):
        raise ResultsError(f"{where}: 'kind' is {_say(kind)}, not a string")
    where += f" ({kind[:20]})"
    if not is_number(r.get("t")) or not math.isfinite(r["t"]):
        raise ResultsError(f"{where} has no numeric time 't'")
    if kind == "update":
        if type(r.get("version")) is not int:
            raise ResultsError(f"{where} has no integer 'version'")
        if r.get("process") == "learner" and not is_number(r.get("seconds_per_update")):
            raise ResultsError(f"{where} has no numeric 'seconds_per_update'")
    for key, rng in ROWS.get(kind, {}).items():
        why = rng.problem(r.get(key))
        if why:
            raise ResultsError(f"{where}: {key!r} is {_say(r.get(key))}, {why}")
    for key, rng in MAPPINGS.items():
        if r.get(key) is not None:
            _check_mapping(where, key, r[key], rng)
    if kind == "eval":
        _check_eval(where, r)
    if workers and kind in ("joined", "dropped", "disconnected") and type(r.get("worker")) is int \
            and r["worker"] > workers:
        raise ResultsError(f"{where}: 'worker' is {r['worker']}, but the run has {workers} workers")
    return r


def _check_mapping(where: str, key: str, m, rng: Range | None) -> None:
    if not isinstance(m, dict):
        raise ResultsError(f"{where}: {key!r} is not a JSON object")
    if key == "phases":
        for name, span in m.items():
            if not (isinstance(span, list) and len(span) == 2 and all(is_number(x) and math.isfinite(x) for x in span)
                    and span[1] >= span[0]):
                raise ResultsError(f"{where}: 'phases.{str(name)[:20]}' is {_say(span)}, not a [start, end] "
                                   "pair with end >= start")
        return
    checks = MACHINE if key == "machine" else {k: rng for k in m} if rng else {}
    for name, r in checks.items():
        why = r.problem(m.get(name))
        if why:
            raise ResultsError(f"{where}: '{key}.{str(name)[:30]}' is {_say(m.get(name))}, {why}")


def _check_eval(where: str, r: dict) -> None:
    p1, pk = r.get("pass_at_1"), r.get("pass_at_k")
    if p1 is not None and pk is not None and p1 > pk + 1e-9:
        raise ResultsError(f"{where}: 'pass_at_1' is {p1}, above 'pass_at_k' {pk} (pass@1 <= pass@k)")
    metric = r.get("objective_metric")
    known = cards.heldout_metrics()   # the objectives' cards', in-tree and installed: a plugin's figure too
    if metric is not None and metric not in known:
        raise ResultsError(f"{where}: 'objective_metric' is {_say(metric)}, not one of {', '.join(sorted(known))} "
                           "(the held-out figures of the installed objectives' cards)")


PARAM_NAMES = frozenset(p.name for p in spec.PARAMS)


def check_doc(path: Path, doc: dict) -> dict:
    """A run or cell document's fields have the types and ranges the tables use (DOCS, DOC_RANGES;
    config.json: every run-spec parameter as the spec parses it: its type, range and choices, a list
    of them where it is a comma-list parameter); ResultsError naming the file and field."""
    types, ranges = DOCS.get(path.name, {}), DOC_RANGES.get(path.name, {})
    for key, v in doc.items():
        if v is None:
            continue
        if key in types:
            ok, want = _is_a(v, (types[key],)), _type_names((types[key],))
            why = ranges[key].problem(v) if ok and key in ranges else None
            if why:
                raise ResultsError(f"{path}: {key!r} is {_say(v)}, {why}")
        elif path.name == "config.json" and key in PARAM_NAMES:
            ok, want = _param_ok(spec.get(key), v)
        else:
            continue
        if not ok:
            raise ResultsError(f"{path}: {key!r} is {_say(v)}, not {want}")
    return doc


def _param_ok(p: spec.Param, v) -> tuple[bool, str]:
    one = {int: (int,), float: (int, float), bool: (bool,), str: (str,)}.get(p.type, (str, int, float, bool))
    values = v if isinstance(v, list) else [v]
    if isinstance(v, list) and not p.many:
        return False, _type_names(one)
    if not all(_is_a(x, one) for x in values):
        return False, (f"a list of {_type_names(one)}" if isinstance(v, list) else _type_names(one))
    for x in values:
        if p.choices is not None and x not in p.choices:
            return False, f"one of {', '.join(map(str, p.choices))}"
        if is_number(x) and ((p.lo is not None and x < p.lo) or (p.hi is not None and x > p.hi)
                             or not math.isfinite(x)):
            return False, f"a number in [{p.lo}, {p.hi}]"
    return True, ""


def _is_a(v, want: tuple) -> bool:
    if isinstance(v, bool):
        return bool in want
    if isinstance(v, int) and float in want:
        return True
    return type(v) in want


def _type_names(want: tuple) -> str:
    names = {"dict": "a mapping", "list": "a list", "str": "a string", "int": "an integer", "float": "a number",
             "bool": "a boolean"}
    return " or ".join(names.get(t.__name__, t.__name__) for t in want if not (t is int and float in want))


def json_depth_ok(line: bytes, max_depth: int = MAX_JSON_DEPTH) -> bool:
    """Does this JSON text nest at most `max_depth` deep? A cheap bound first (it cannot nest deeper
    than it opens), then a scan that skips strings; linear, no recursion."""
    if line.count(b"[") + line.count(b"{") <= max_depth:
        return True
    depth, top, in_string, escaped = 0, 0, False, False
    for c in line:
        if in_string:
            if escaped:
                escaped = False
            elif c == 0x5C:      # backslash
                escaped = True
            elif c == 0x22:      # quote
                in_string = False
        elif c == 0x22:
            in_string = True
        elif c in (0x5B, 0x7B):  # [ {
            depth += 1
            top = max(top, depth)
            if top > max_depth:
                return False
        elif c in (0x5D, 0x7D):
            depth -= 1
    return True
