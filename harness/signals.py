"""SIGTERM/SIGHUP -> SystemExit, so `finally` blocks and context managers run their teardown."""
from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass, field


@dataclass
class signals_raise:
    """Context manager: SIGTERM (and SIGHUP) raise SystemExit so `finally` blocks and context
    managers run their teardown; SIGINT already raises KeyboardInterrupt."""
    signums: tuple = (signal.SIGTERM, signal.SIGHUP)
    _old: dict = field(default_factory=dict)

    def __enter__(self):
        owner = os.getpid()

        def handler(signum, frame):
            if os.getpid() != owner:
                # a forked child (pyroute2 opens netns sockets from short-lived forks) must not
                # unwind the parent's stack and run its teardown: just die as the default would
                os._exit(128 + signum)
            raise SystemExit(128 + signum)
        if threading.current_thread() is threading.main_thread():
            for s in self.signums:
                self._old[s] = signal.signal(s, handler)
        return self

    def __exit__(self, *exc):
        for s, old in self._old.items():
            signal.signal(s, old)
