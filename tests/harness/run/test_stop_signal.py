"""The signal that stopped the harness is the one its learner hears (harness/run/launch.py
Processes.stop, harness/signals.py received): a run stopped with SIGINT (Ctrl-C, `timeout -s INT`)
read "interrupted: SIGTERM" in its Cells table, the signal the harness then sent its learner."""
import signal
import sys
import time

from harness.run.launch import Processes
from harness.signals import Signalled, received

# a stand-in learner that says which signal ended it, as trainers/hilo/learner.py does in its summary
NAMES_ITS_SIGNAL = """
import pathlib, signal, sys, time
def said(signum, _frame):
    pathlib.Path(sys.argv[1]).write_text(signal.Signals(signum).name)
    sys.exit(1)
signal.signal(signal.SIGTERM, said)
signal.signal(signal.SIGINT, said)
pathlib.Path(sys.argv[1] + ".ready").touch()
time.sleep(60)
"""


def _stopped_with(tmp_path, signum):
    tmp_path = tmp_path / str(int(signum))
    tmp_path.mkdir()
    procs = Processes()
    said = tmp_path / f"said-{int(signum)}"
    procs.start("learner", "learner", [sys.executable, "-c", NAMES_ITS_SIGNAL, str(said)], tmp_path, {})
    procs.start("w1", "w1", [sys.executable, "-c", NAMES_ITS_SIGNAL, str(tmp_path / "w1-said")], tmp_path, {})
    end = time.monotonic() + 30
    while not (said.with_name(said.name + ".ready").exists() and (tmp_path / "w1-said.ready").exists()):
        assert time.monotonic() < end, "the stand-ins did not start"
        time.sleep(0.02)
    procs.stop(signum=signum)
    assert procs.alive() == []
    return said.read_text(), (tmp_path / "w1-said").read_text()


def test_the_learner_hears_the_signal_the_harness_received(tmp_path):
    assert _stopped_with(tmp_path, received(KeyboardInterrupt())) == ("SIGINT", "SIGTERM")
    assert _stopped_with(tmp_path, received(Signalled(signal.SIGTERM))) == ("SIGTERM", "SIGTERM")


def test_no_signal_behind_an_ordinary_exit():
    assert received(None) is None and received(RuntimeError("x")) is None
    assert received(Signalled(signal.SIGTERM)) == signal.SIGTERM
