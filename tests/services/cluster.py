"""Start a real learner and real workers as processes on localhost, and always stop them.

`CountingProxy` forwards a worker's TCP connection to the learner and counts the bytes it
carries in each direction: an independent count of what the sockets wrote.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from trainers.events import read_events

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "test-run-token"


def service_env(cache_dir: Path) -> dict:
    env = dict(os.environ, RUN_TOKEN=TOKEN, OMP_NUM_THREADS="1", WAN_CACHE_DIR=str(cache_dir),
               PYTHONWARNINGS="ignore")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


class Cluster:
    """One learner and N workers; a context manager that kills whatever is left on exit."""

    def __init__(self, run_dir: Path, workers: int, proxies: bool = False, learner_flags=(),
                 autostart: bool = True, **params):
        self.run_dir, self.n, self.use_proxies, self.autostart = Path(run_dir), workers, proxies, autostart
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.env = service_env(self.run_dir.parent / "cache")
        self.params = {"model": "micro", "updates": 5, "objective": "distill", "teacher_steps": 5,
                       "max_new_tokens": 6, "problems_per_worker": 1, "group_size": 2, **params}
        self.learner_flags = list(learner_flags)
        self.procs: dict[str, subprocess.Popen] = {}
        self.proxies: dict[int, CountingProxy] = {}
        self.returncodes: dict[str, int] = {}

    def flags(self) -> list[str]:
        out = ["--workers", str(self.n)]
        for k, v in self.params.items():
            out += ["--" + k.replace("_", "-"), str(v)]
        return out

    def __enter__(self):
        cmd = [sys.executable, "-m", "trainers.learner", "--run-dir", str(self.run_dir),
               "--listen", "127.0.0.1:0", *self.flags(), *self.learner_flags]
        self.procs["learner"] = self._spawn("learner", cmd)
        self.address = self._wait_address()
        for w in range(1, self.n + 1 if self.autostart else 1):
            self.start_worker(w)
        return self

    def _spawn(self, name: str, cmd: list[str]) -> subprocess.Popen:
        log = open(self.run_dir / f"{name}.log", "ab")
        return subprocess.Popen(cmd, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)

    def _wait_address(self, timeout: float = 120) -> tuple[str, int]:
        path = self.run_dir / "learner.addr"
        end = time.monotonic() + timeout
        while not path.exists():
            if self.procs["learner"].poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"learner did not start:\n{self.log('learner')}")
            time.sleep(0.05)
        host, port = path.read_text().strip().rsplit(":", 1)
        return host, int(port)

    def start_worker(self, w: int, extra=()) -> subprocess.Popen:
        target = self.address
        if self.use_proxies:
            self.proxies.setdefault(w, CountingProxy(self.address))
            target = self.proxies[w].address
        cmd = [sys.executable, "-m", "trainers.worker", "--learner", f"{target[0]}:{target[1]}",
               "--worker-id", str(w), "--run-dir", str(self.run_dir), *extra]
        self.procs[f"w{w}"] = self._spawn(f"w{w}", cmd)
        return self.procs[f"w{w}"]

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

    def learner_version(self) -> int:
        path = self.run_dir / "events-learner.jsonl"
        rows = read_events(path) if path.exists() else []
        return max((r["version"] for r in rows if r["kind"] == "update"), default=0)

    def wait_for_version(self, version: int, timeout: float = 300) -> None:
        end = time.monotonic() + timeout
        while self.learner_version() < version:
            if time.monotonic() > end or self.procs["learner"].poll() is not None:
                raise AssertionError(f"learner never reached version {version}:\n{self.log('learner')}")
            time.sleep(0.01)

    def log(self, name: str) -> str:
        path = self.run_dir / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def __exit__(self, *exc):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)  # a SIGSTOPped worker must be able to die
                proc.kill()
            proc.wait()
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
