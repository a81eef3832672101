"""The machine's limits for a run of N workers (harness/net/limits.py), read from this machine."""
import resource
import subprocess
import sys

from harness.net import limits

RAISE = """
import resource, sys
from harness.net import limits
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
print(limits.raise_open_files(int(sys.argv[1])), resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


def test_the_soft_open_files_limit_is_raised_for_the_workers_within_the_hard_one():
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for workers in (1, 256):
        out = subprocess.run([sys.executable, "-c", RAISE, str(workers)], capture_output=True, text=True, check=True)
        now, seen = map(int, out.stdout.split())
        want = limits.open_files_needed(workers)
        assert now == seen == (want if hard == resource.RLIM_INFINITY else min(hard, want))


def test_a_run_within_the_limits_has_no_problem_and_one_past_them_names_each():
    assert limits.problems(1) == []
    lines = limits.problems(10**7)
    assert any(line.startswith("neighbour table: net.ipv4.neigh.default.gc_thresh3") for line in lines), lines
    assert any(line.startswith("tasks: kernel.pid_max") for line in lines), lines
    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] != resource.RLIM_INFINITY:
        assert any(line.startswith("open files: the hard limit") for line in lines), lines
