"""Start a real learner and real workers as processes on localhost, and always stop them.

The processes are started, logged and stopped by `harness.run.launch.Processes` with the
environment of `harness.run.launch.service_env`: the same launcher as `harness run`, without the
namespaces. `CountingProxy` forwards a worker's TCP connection to the learner and counts the
bytes it carries in each direction: an independent count of what the sockets wrote.
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from harness.run.launch import Processes, service_env, wait_address
from trainers.events import read_events, tail_events

TOKEN = "test-run-token"


class Cluster:
    """One learner and N workers; a context manager that stops whatever is left on exit."""

    def __init__(self, run_dir: Path, workers: int, proxies: bool = False, learner_flags=(),
                 autostart: bool = True, **params):
        self.run_dir, self.n, self.use_proxies, self.autostart = Path(run_dir), workers, proxies, autostart
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.env = service_env(TOKEN, self.run_dir.parent / "cache")
        self.params = {"model": "micro", "updates": 5, "objective": "distill", "teacher_steps": 5,
                       "max_new_tokens": 6, "problems_per_worker": 1, "group_size": 2, **params}
        self.learner_flags = list(learner_flags)
        self.processes = Processes()
        self.procs: dict[str, subprocess.Popen] = self.processes.procs  # by name: learner, w1, ...
        self.proxies: dict[int, CountingProxy] = {}
        self.returncodes: dict[str, int] = {}

    def flags(self) -> list[str]:
        out = ["--workers", str(self.n)]
        for k, v in self.params.items():
            out += ["--" + k.replace("_", "-"), str(v)]
        return out

    def __enter__(self):
        cmd = [sys.executable, "-m", "trainers.hilo.learner", "--run-dir", str(self.run_dir),
               "--listen", "127.0.0.1:0", *self.flags(), *self.learner_flags]
        self.processes.start("learner", "learner", cmd, self.run_dir, self.env)
        try:
            host, port = wait_address(self.run_dir / "learner.addr", self.procs["learner"], timeout_s=300).rsplit(":", 1)
        except RuntimeError:
            self.__exit__()
            raise RuntimeError(f"learner did not start:\n{self.log('learner')}") from None
        self.address = host, int(port)
        for w in range(1, self.n + 1 if self.autostart else 1):
            self.start_worker(w)
        return self

    def start_worker(self, w: int, extra=()) -> subprocess.Popen:
        target = self.address
        if self.use_proxies:
            self.proxies.setdefault(w, CountingProxy(self.address))
            target = self.proxies[w].address
        cmd = [sys.executable, "-m", "trainers.hilo.worker", "--learner", f"{target[0]}:{target[1]}",
               "--worker-id", str(w), "--run-dir", str(self.run_dir), *extra]
        return self.processes.start(f"w{w}", f"w{w}", cmd, self.run_dir, self.env)

    def wait(self, timeout: float = 240) -> dict:
        """Wait for the learner and every worker to exit; returns summary.json."""
        end = time.monotonic() + timeout
        for name, proc in self.procs.items():
            try:
                self.returncodes[name] = proc.wait(timeout=max(1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise AssertionError(f"{name} did not exit in time:\n{self.log(name)}") from None
        return self.summary()

    def summary(self) -> dict:
        return json.loads((self.run_dir / "summary.json").read_text())

    def events(self, process: str) -> list[dict]:
        return read_events(self.run_dir / f"events-{process}.jsonl")

    def wait_for(self, what: str, done: Callable[[list[dict]], bool], timeout: float = 600) -> list[dict]:
        """Poll the learner's event rows until `done(rows)`; returns them. Fails if the learner exits
        first, or after `timeout` seconds (a guard against a hang, not a speed requirement)."""
        path, rows, offset = self.run_dir / "events-learner.jsonl", [], 0
        end = time.monotonic() + timeout
        while True:
            exited = self.procs["learner"].poll() is not None  # before reading: its last rows are then in
            new, offset = tail_events(path, offset)
            rows += new
            if done(rows):
                return rows
            if exited or time.monotonic() > end:
                raise AssertionError(f"learner never got to {what}:\n{self.log('learner')}")
            time.sleep(0.01)

    def wait_for_version(self, version: int, timeout: float = 600) -> None:
        self.wait_for(f"version {version}", lambda rows: any(r["kind"] == "update" and r["version"] >= version
                                                             for r in rows), timeout)

    def log(self, name: str) -> str:
        path = self.run_dir / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def __exit__(self, *exc):
        self.processes.stop()
        for proxy in self.proxies.values():
            proxy.close()
        return False


class CountingProxy:
    """A TCP forwarder that counts bytes per direction (learner->worker: 'down', worker->learner: 'up')."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = self.server.getsockname()[:2]
        self.bytes = {"up": 0, "down": 0}
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self._socks += [client, upstream]
            for args in ((client, upstream, "up"), (upstream, client, "down")):
                t = threading.Thread(target=self._pump, args=args, daemon=True)
                t.start()
                self._threads.append(t)

    def _pump(self, src: socket.socket, dst: socket.socket, direction: str):
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                with self._lock:
                    self.bytes[direction] += len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def drain(self, timeout: float = 10) -> dict:
        """Counts once every forwarded connection has reached EOF in both directions."""
        for t in list(self._threads):
            t.join(timeout)
        return dict(self.bytes)

    def cut(self):
        """Break every forwarded connection now (both directions), as a network fault would."""
        for s in self._socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.server.close()
        for s in self._socks:
            s.close()
