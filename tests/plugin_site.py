"""A plugin distribution built in a folder for a test: its `.dist-info` (METADATA, entry_points.txt), found
by importlib.metadata through PYTHONPATH exactly as an installed distribution is (the processes a test
starts with that folder on their path see it; the test process does not)."""
from __future__ import annotations

from pathlib import Path


def dist_info(site: Path, name: str, version: str, entry_points: list[str],
              group: str = "wan_harness.cards") -> Path:
    """Distribution `name` `version` in `site`, offering `entry_points` ("name = module:attr" lines) in
    `group`; returns its entry_points.txt."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n" + "".join(f"{line}\n" for line in entry_points))
    return info / "entry_points.txt"
