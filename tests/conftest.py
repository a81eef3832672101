"""Shared test configuration.

Torch runs single-threaded in tests: the machine has 2 cores shared with the services the
tests start, and bit-exactness checks must not depend on thread scheduling.
"""
import os
import shutil
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


# Binaries that tests call to read the kernel's state back independently of the harness (or to render,
# or to run containers), and the Debian package that brings each: a test marked `needs("ethtool")` is
# skipped, naming the binary and its package, where one is missing (the README's test line installs
# the first four; .ci/run the last two, for its second pass).
PACKAGES = {"ethtool": "ethtool", "nft": "nftables", "tc": "iproute2", "ip": "iproute2",
            "chromium": "chromium", "docker": "docker.io"}


def pytest_configure(config):
    config.addinivalue_line("markers", "needs(*binaries): calls these binaries; skipped, naming them, where one "
                                       "is missing")


def missing_binaries(names) -> list[str]:
    return [n for n in names if shutil.which(n) is None]


def pytest_collection_modifyitems(config, items):
    root = _is_root()
    for item in items:
        if "root" in item.keywords and not root:
            item.add_marker(pytest.mark.skip(reason="needs root for network namespaces"))
            continue
        wanted = [n for mark in item.iter_markers("needs") for n in mark.args]
        if missing := missing_binaries(wanted):
            packages = " ".join(sorted({PACKAGES.get(n, n) for n in missing}))
            item.add_marker(pytest.mark.skip(reason=f"needs {', '.join(missing)}: not installed "
                                                    f"(apt-get install -y {packages})"))
