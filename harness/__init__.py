"""Orchestration side of the WAN training harness: CLI, link emulation, launch, results, reports."""
import time as _time

# CLOCK_MONOTONIC seconds when this package was first imported: where a run's fixed cost starts counting
# (harness/run/fixed_cost.py: the process's own start would count whatever a shell's `&&` ran before it)
IMPORTED_T = _time.monotonic()
