"""A service started by exec (`python -m`, as containers and `--spawn exec` start them) imports with the
collector off and freezes what it imported before it runs (trainers.process.imports_done), as the
fork server does for the services it forks."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Run as `python -m <module> --help` would run it (runpy, __main__), then read the collector's state
# (argparse's --help ends main() with SystemExit, before the service's os._exit).
PROBE = """
import gc, json, runpy, sys
sys.argv = [sys.argv[1], "--help"]
try:
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
except SystemExit:
    pass
print(json.dumps({"enabled": gc.isenabled(), "frozen": gc.get_freeze_count(),
                  "full": gc.get_stats()[2]["collections"]}))
"""


# full collections while imported: none for HiLo's services; the dataparallel package's __init__ imports torch
# (its registry's base class) before the module's first line runs, with the collector still on (2 of the 6)
FULL_COLLECTIONS = {"trainers.hilo.learner": 0, "trainers.hilo.worker": 0, "trainers.dataparallel.aggregator": 2,
                    "trainers.dataparallel.worker": 2}


@pytest.mark.parametrize("module", FULL_COLLECTIONS)
def test_an_execd_service_imports_without_the_collector_and_freezes_its_imports(module):
    done = subprocess.run([sys.executable, "-c", PROBE, module], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["enabled"] is True          # on again for what the service makes itself
    assert seen["frozen"] > 100_000         # torch's and transformers' objects, out of every later scan
    assert seen["full"] <= FULL_COLLECTIONS[module]   # with the collector on from the start: 6
