"""Mark a job's steps for `harness wrap` (docs/WRAP.md): one JSON line per step appended to $WAN_EVENTS.

Dependency-free; copy it next to your job, or write the line yourself::

    {"step": 3, "t0": 1733220000.12, "t1": 1733220000.57, "phases": {"compute": 0.21, "comm": 0.24}}

t0/t1: time.time() at the step's start and end; phases: seconds, optional. Without $WAN_EVENTS
(the job run outside the harness) nothing is written.

    steps = Steps()
    for i in range(n):
        with steps.step(i):
            with steps.phase("compute"):
                loss = ...
            with steps.phase("comm"):
                ...
"""
import contextlib
import json
import os
import time


class Steps:
    def __init__(self, path=None):
        path = path or os.environ.get("WAN_EVENTS")
        self._fh = open(path, "a", buffering=1) if path else None
        self._phases = {}

    @contextlib.contextmanager
    def step(self, number, **extra):
        self._phases, t0 = {}, time.time()
        yield self
        if self._fh is not None:
            self._fh.write(json.dumps({"step": number, "t0": t0, "t1": time.time(), "phases": self._phases, **extra}) + "\n")

    @contextlib.contextmanager
    def phase(self, name):
        t0 = time.perf_counter()
        yield
        self._phases[name] = self._phases.get(name, 0.0) + time.perf_counter() - t0
