"""harness/signals.py: interrupts always reach the teardown, whatever the parent did to SIGINT."""
import signal
import subprocess
import sys

import pytest

CHILD = """
import sys, time
from harness.signals import signals_raise
try:
    with signals_raise():
        print("ready", flush=True)
        time.sleep(60)
except KeyboardInterrupt:
    sys.exit(130)
except SystemExit as e:
    sys.exit(e.code)
sys.exit(0)
"""


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupt_unwinds_even_when_sigint_was_inherited_ignored(signum, code):
    """A background job of a non-interactive shell starts with SIGINT ignored (CI runners, `cmd &`
    in a script); the harness must still tear down on it, not run on."""
    def ignore_sigint():
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True,
                            preexec_fn=ignore_sigint)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signum)
    assert proc.wait(timeout=30) == code
    proc.stdout.close()


def test_a_sigterm_where_python_would_drop_the_exception_is_delivered_again():
    """The handler called in a __del__ frame (Python prints and drops what a __del__ or a weakref
    callback raises: the run would go on) does not raise there; the signal comes again a moment later
    and raises in ordinary code."""
    import time

    from harness.signals import Signalled, signals_raise

    frames = []

    class Dying:
        def __del__(self):
            frames.append(sys._getframe())

    Dying()
    with signals_raise():
        signal.getsignal(signal.SIGTERM)(signal.SIGTERM, frames[0])   # returns: nothing raised in __del__
        with pytest.raises(Signalled) as caught:
            time.sleep(10)
    assert caught.value.signum == signal.SIGTERM
