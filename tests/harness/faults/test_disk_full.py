"""A disk that fills during a run (root: a real tmpfs of its own). The run used to end with a 0-byte
`meta.json.tmp` (later: no temp file, but meta.json and the run's summary still read "running"). Now
the harness stops, marks the run failed with the error in meta.json, leaves no temp file and no
process behind, and exits non-zero without a traceback."""
import errno
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.harness.faults.test_faults import harness, pids_of, wait_for_update

pytestmark = [pytest.mark.root]
SMALL = ["--workers", "1", "--baseline", "none", "--model", "micro",
         "--seeds", "1", "--objective", "grpo", "--max-new-tokens", "4", "--no-emulation"]
FAMILIES = {"hilo": (["--method", "spar", "--budget", "1.6%"], "spar-1.6pct-s1"),
            "data-parallel": (["--method", "ddp", "--workers", "2"], "ddp-s1")}


def fill(folder: Path) -> int:
    """Write a file into `folder` until its filesystem has no byte left; returns the bytes written."""
    written = 0
    with open(folder / "filler", "wb", buffering=0) as fh:
        for chunk in (1 << 20, 4096, 1):
            try:
                while True:
                    written += fh.write(bytes(chunk))
            except OSError as err:
                assert err.errno == errno.ENOSPC, err
    return written


@pytest.fixture
def small_disk(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "wan-disk-full-test", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_run_that_fills_its_disk_is_marked_failed_and_leaves_no_temp_file(small_disk, family):
    flags, cell_name = FAMILIES[family]
    run_dir = small_disk / "full"
    cell = run_dir / "cells" / cell_name
    proc = harness("run", *SMALL, *flags, "--updates", "100000", "--run-id", "full", "--out", str(small_disk),
                   "--quiet")
    try:
        wait_for_update(cell, 1, proc)
        assert fill(small_disk) > 0
        _, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    assert proc.returncode != 0, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "failed" and meta["complete"] is False, meta
    assert any("No space left on device" in e for e in meta["errors"]), meta["errors"]
    if (run_dir / "summary.json").exists():  # the run's summary, written from the final meta.json
        assert json.loads((run_dir / "summary.json").read_text())["status"] == "failed"
    assert sorted(small_disk.rglob("*.tmp")) == [] and not (run_dir / ".space-reserve").exists()
    assert pids_of(str(run_dir)) == []
