"""Named presets: YAML files in ``presets/`` that set run-spec values (data, not code).

    harness run --preset hilo-kk                 # the HiLo paper's K&K setting, scaled to a CPU
    harness run --preset hilo-kk --seeds 1       # any flag given on the command line wins
    harness sweep --preset hilo-kk --pipeline 0,1

A preset file holds `description` (one line), `scaling` (how and why the paper's setting was
scaled to what this machine runs: every number that differs from the paper, with the paper's
value), and `values`: run-spec parameter names (trainers/spec.py) and values, exactly as on the
command line or in a sweep grid. Precedence: the spec's default < the preset < a flag given.
An unknown key or a bad value fails with one line naming the preset and the key.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from harness import readers
from trainers import spec

PRESET_DIR = Path(__file__).resolve().parents[2] / "presets"
KEYS = {"description", "scaling", "values"}


class PresetError(ValueError):
    """A preset that does not exist or does not validate; the message is one line."""


def names(directory: Path = PRESET_DIR) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.yaml"))


def read_yaml(path: Path, where: str, error: type[ValueError]) -> Any:
    """`path` parsed as YAML, or `error` with one line naming `where` and the file (presets, reproductions,
    sweep grids): read by the bounded reader (harness/readers.py: a regular file within its size and
    depth, no key given twice)."""
    try:
        return readers.load_yaml(path, where)
    except readers.FileError as err:
        raise error(str(err)) from None


def load(name: str, directory: Path = PRESET_DIR) -> dict[str, Any]:
    """The preset document `name` (a name in presets/ or a YAML path), validated."""
    path = Path(name) if name.endswith((".yaml", ".yml")) else directory / f"{name}.yaml"
    if not path.is_file():
        raise PresetError(f"--preset: unknown preset {spec.quote(name)}; valid presets: {', '.join(names(directory))}")
    doc = read_yaml(path, "--preset", PresetError)
    if not isinstance(doc, dict) or not isinstance(doc.get("values"), dict):
        raise PresetError(f"--preset {name}: {path} needs a mapping with a `values` mapping")
    unknown = sorted(set(doc) - KEYS)
    if unknown:
        raise PresetError(f"--preset {name}: unknown key {unknown[0]!r} (valid: {', '.join(sorted(KEYS))})")
    known = {p.name for p in spec.PARAMS} - {"preset"}
    bad = sorted(set(doc["values"]) - known)
    if bad:
        raise PresetError(f"--preset {name}: {bad[0]!r} is not a run parameter (see harness run --help)")
    return doc


def values(name: str) -> dict[str, Any]:
    """The run values of preset `name` (a name in presets/ or a YAML path), by spec name, raw as a
    flag would give them (harness/run/config.py merges them under the flags given)."""
    return {k: _raw(one_value(k, v)) for k, v in load(name)["values"].items()}


def _raw(value: Any) -> Any:
    """A YAML list for a comma-list parameter stays a list (the spec parses lists); the rest as is."""
    return list(value) if isinstance(value, (list, tuple)) else value


def one_value(name: str, value: Any) -> Any:
    """A one-element YAML list (`lr: [0.002]`, a grid axis of one point) as its element, for a parameter
    that takes one value (a comma-list parameter keeps its list)."""
    many = {p.name for p in spec.PARAMS if p.many}
    if isinstance(value, (list, tuple)) and len(value) == 1 and name not in many:
        return value[0]
    return value
