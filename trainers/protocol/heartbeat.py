"""Worker heartbeats: a member that is alive but has nothing to say still says so.

The learner and the aggregator drop a member (the aggregator: stop the run) when no byte of it has
arrived for their liveness deadline (`Connection.recv(idle_s=...)`), so a member that joined and then
went silent costs one deadline, not `--worker-timeout` per update. A worker computing for longer
than that (sampling rollouts, K local steps, building its model after WELCOME) keeps its seat with
this thread: every `interval_s` (the WELCOME's `heartbeat_s`, a quarter of the deadline) it sends an
empty HEARTBEAT frame, unless another frame went out within the interval (then the link carries
no extra byte). Sends share the connection's lock, so a heartbeat never splits another frame.
"""
from __future__ import annotations

import threading
import time

from trainers.protocol import wire
from trainers.protocol.wire import Connection, MessageType

MIN_INTERVAL_S = 0.05  # a deadline below this is a mistake, not a reason to spin


class Heartbeat:
    """A daemon thread that keeps `conn` from looking silent; `stop()` or a failed send ends it."""

    def __init__(self, conn: Connection, interval_s: float):
        self.conn, self.interval_s = conn, max(float(interval_s), MIN_INTERVAL_S)
        self.sent = 0  # heartbeats sent (a test reads it)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)

    def start(self) -> "Heartbeat":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _beat(self) -> None:
        body = wire.pack_json({})
        while not self._stop.is_set() and not self.conn.closed:
            quiet = time.monotonic() - self.conn.sent_t  # seconds since any frame went out
            if quiet < self.interval_s:
                self._stop.wait(self.interval_s - quiet)
                continue
            try:
                self.conn.send(MessageType.HEARTBEAT, body)
            except OSError:  # the connection is gone: the main thread finds out on its own
                return
            self.sent += 1
