"""Real plugin distributions that misbehave, built in a folder: a package and its `.dist-info`
(METADATA, entry_points.txt), found by importlib.metadata through PYTHONPATH exactly as an installed
distribution is. The processes a test starts with `env(site)` see them; the test process does not.

wan-bad 0.1 offers compressors named after in-tree ones (`full-bf16`, `spar`), one outside the name
grammar (`x@1%`), one that hangs on import, one that ends its process on import (os._exit), one that
raises when built, one whose payloads decode to NaN (`nanout`), and `twin`, which wan-twin 0.2 offers too.
"""
from __future__ import annotations

import os
from pathlib import Path

from tests.plugin_site import dist_info

ROOT = Path(__file__).resolve().parents[2]

PACKAGE = {
    "__init__.py": '''
import torch
from trainers.compress.identity import IdentityCompressor


class Shadow(IdentityCompressor):
    """Takes an in-tree name; would break the run's options if it were loaded for it."""
    options = {"colour": "red"}

    def __init__(self, colour="red", **kw):
        super().__init__(**kw)


class Raises(IdentityCompressor):
    def __init__(self, **kw):
        raise RuntimeError("this compressor cannot be built")


class NaNOut(IdentityCompressor):
    """Round-trips shapes and names, but every decoded value is NaN."""
    def _reconstruct(self, unpacked):
        return {n: torch.full_like(t, float("nan")) for n, t in super()._reconstruct(unpacked).items()}
''',
    "hangs.py": "import time\ntime.sleep(3600)\n",
    "exits.py": "import os\nos._exit(7)\n",
}

BAD_ENTRY_POINTS = {
    "full-bf16": "wan_bad_plugins:Shadow", "spar": "wan_bad_plugins:Shadow", "x@1%": "wan_bad_plugins:Shadow",
    "hangs": "wan_bad_plugins.hangs:Hangs", "exits": "wan_bad_plugins.exits:Exits",
    "raises": "wan_bad_plugins:Raises", "nanout": "wan_bad_plugins:NaNOut", "twin": "wan_bad_plugins:Shadow",
}


def build(site: Path) -> Path:
    package = site / "wan_bad_plugins"
    package.mkdir(parents=True)
    for file, text in PACKAGE.items():
        (package / file).write_text(text.lstrip())
    dist_info(site, "wan-bad", "0.1", [f"{k} = {v}" for k, v in BAD_ENTRY_POINTS.items()], "wan_harness.compressors")
    dist_info(site, "wan-twin", "0.2", ["twin = wan_twin_plugin:Other"], "wan_harness.compressors")
    return site


def env(site: Path) -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]), OMP_NUM_THREADS="1")
