"""Shared test configuration.

Torch runs single-threaded in tests: the machine has 2 cores shared with the services the
tests start, and bit-exactness checks must not depend on thread scheduling.
"""
import os
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
# One model cache for every `harness run` the tests start (each in its own tmp folder): the cached
# base/teacher is keyed by its whole recipe, so sharing it changes no result, and without it each
# run test rebuilt the same micro base first (most of the suite's time). Tests of the cache itself
# name their own folder; the docker test of the README order removes it to use `results/.cache`.
os.environ.setdefault("WAN_CACHE_DIR", str(Path(tempfile.gettempdir()) / "wan-harness-test-models"))

import pytest  # noqa: E402


def _is_root() -> bool:
    return os.geteuid() == 0


def pytest_collection_modifyitems(config, items):
    if _is_root():
        return
    skip = pytest.mark.skip(reason="needs root for network namespaces")
    for item in items:
        if "root" in item.keywords:
            item.add_marker(skip)
