"""`harness reproduce NAME`: a paper figure re-measured here, as one sweep (presets/reproduce/NAME.yaml).

A reproduction file holds `description` (one line), `scaling` (what differs from the paper and why,
as a preset's does) and `grid`: run-spec values, lists as axes, exactly as `harness sweep --grid`
takes them. Flags given on the command line win over the grid (`--seeds 1` for a quick look). The
sweep's report draws the figure (e.g. harness/results/regime_plots.py for hilo-speed).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.run.config import ConfigError
from harness.run.presets import PRESET_DIR, read_yaml

REPRODUCE_DIR = PRESET_DIR / "reproduce"
KEYS = {"description", "scaling", "grid"}


def names(directory: Path = REPRODUCE_DIR) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.yaml"))


def load(name: str, directory: Path = REPRODUCE_DIR) -> dict[str, Any]:
    """The reproduction `name`, validated (its grid's keys are checked by the sweep, like --grid's)."""
    path = directory / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"harness reproduce: unknown figure {name!r}; valid: {', '.join(names(directory))}")
    doc = read_yaml(path, f"harness reproduce {name}", ConfigError)
    if not isinstance(doc, dict) or not isinstance(doc.get("grid"), dict) or set(doc) - KEYS:
        raise ConfigError(f"harness reproduce {name}: {path} needs exactly the keys {', '.join(sorted(KEYS))} "
                          "(grid: a mapping)")
    return doc
