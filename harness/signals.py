"""SIGTERM/SIGHUP -> SystemExit, so `finally` blocks and context managers run their teardown.

The exception carries the signal (`Signalled.signum`) and its exit code is the shell's
128 + signal number: `harness run` exits 143 on SIGTERM and 129 on SIGHUP (130 on SIGINT,
which Python raises as KeyboardInterrupt)."""
from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass, field


class Signalled(SystemExit):
    """A terminating signal as an exception; `code` is 128 + `signum`."""

    def __init__(self, signum: int):
        super().__init__(128 + signum)
        self.signum = signum


def exit_code(exc: BaseException) -> int:
    """The exit code an interrupted command returns: 128 + the signal (130 for Ctrl-C)."""
    if isinstance(exc, Signalled):
        return 128 + exc.signum
    if isinstance(exc, SystemExit) and isinstance(exc.code, int) and exc.code > 128:
        return exc.code
    return 128 + signal.SIGINT


def received(exc: BaseException | None) -> int | None:
    """The signal behind an exception on its way out: Signalled's, SIGINT for KeyboardInterrupt
    (Ctrl-C, `timeout -s INT`); None for anything else (no signal stopped us)."""
    if isinstance(exc, Signalled):
        return exc.signum
    if isinstance(exc, KeyboardInterrupt):
        return signal.SIGINT
    return None


def swallows_exceptions(frame) -> bool:
    """Whether `frame` runs where Python ignores a raised exception: a weakref callback, a __del__."""
    code = frame.f_code
    return code.co_name == "__del__" or code.co_filename.endswith(("/weakref.py", "/_weakrefset.py"))


@dataclass
class signals_raise:
    """Context manager: SIGTERM (and SIGHUP) raise Signalled (a SystemExit) so `finally` blocks
    and context managers run their teardown; SIGINT already raises KeyboardInterrupt."""
    signums: tuple = (signal.SIGTERM, signal.SIGHUP)
    _old: dict = field(default_factory=dict)

    def __enter__(self):
        owner = os.getpid()

        def handler(signum, frame):
            if os.getpid() != owner:
                # a forked child (pyroute2 opens netns sockets from short-lived forks) must not
                # unwind the parent's stack and run its teardown: just die as the default would
                os._exit(128 + signum)
            if frame is not None and swallows_exceptions(frame):
                # Python prints and drops an exception raised in a weakref callback or __del__ (the
                # garbage collector ran one when the signal came): the run would go on. Deliver it again
                # a moment later, when the main thread is back in ordinary code.
                threading.Timer(0.01, os.kill, (owner, signum)).start()
                return
            raise Signalled(signum)
        if threading.current_thread() is threading.main_thread():
            for s in self.signums:
                self._old[s] = signal.signal(s, handler)
            # A background job of a non-interactive shell (`cmd &` in a script, CI runners) starts
            # with SIGINT ignored, and Python then never raises KeyboardInterrupt: an interrupt would
            # leave namespaces and qdiscs behind. While kernel state is held, SIGINT always tears down.
            if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
                self._old[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
        return self

    def __exit__(self, *exc):
        for s, old in self._old.items():
            signal.signal(s, old)
