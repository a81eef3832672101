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

import yaml

from trainers import spec

PRESET_DIR = Path(__file__).resolve().parents[2] / "presets"
KEYS = {"description", "scaling", "values"}


class PresetError(ValueError):
    """A preset that does not exist or does not validate; the message is one line."""


def names(directory: Path = PRESET_DIR) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.yaml"))


def read_yaml(path: Path, where: str, error: type[ValueError]) -> Any:
    """`path` parsed as YAML, or `error` with one line naming `where` and the file (presets, reproductions)."""
    try:
        return yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise error(f"{where}: {path} is not readable YAML ({' '.join(str(err).split())})") from None


def load(name: str, directory: Path = PRESET_DIR) -> dict[str, Any]:
    """The preset document `name` (a name in presets/ or a YAML path), validated."""
    path = Path(name) if name.endswith((".yaml", ".yml")) else directory / f"{name}.yaml"
    if not path.is_file():
        raise PresetError(f"--preset: unknown preset {spec.quote(name)}; valid presets: {', '.join(names(directory))}")
    doc = read_yaml(path, f"--preset {name}", PresetError)
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


def apply(given: dict[str, Any]) -> dict[str, Any]:
    """`given` (raw values by spec name; None = not given) with the named preset's values filled in
    where nothing was given."""
    name = given.get("preset")
    if not name:
        return given
    values = load(str(name))["values"]
    return {**given, **{k: _raw(v) for k, v in values.items() if given.get(k) is None}}


def _raw(value: Any) -> Any:
    """A YAML list for a comma-list parameter stays a list (the spec parses lists); the rest as is."""
    return list(value) if isinstance(value, (list, tuple)) else value
