"""Shared test configuration.

Torch runs single-threaded in tests: the machine has 2 cores shared with the services the
tests start, and bit-exactness checks must not depend on thread scheduling.
"""
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

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
