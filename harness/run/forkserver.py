"""The harness's end of the fork server (`--spawn fork`, the default): services forked from one process
that imported torch once, instead of one fresh Python each.

    with ForkServer.started(["trainers.hilo.learner", "trainers.hilo.worker"], env, log) as server:
        proc = server.spawn(argv, cwd=ROOT, env=env, stdout=log_file, netns="wanXXXX-w1")
        procs = server.spawn_many([Service(argv, env, ROOT, log_path, "wanXXXX-w1"), ...])  # one round trip

The server (trainers/forkserver.py, started here with `python -m`, so the harness stays torch-free)
forks each service through an intermediate that exits at once; we are a child subreaper
(PR_SET_CHILD_SUBREAPER), so the service becomes our child: `ForkedProcess` waits for, signals and
reaps it like a `subprocess.Popen`, and its parent-death signal follows us (a SIGKILLed harness
takes it along). Requests and replies are JSON over a SOCK_SEQPACKET socket pair; the log file and
the network namespace travel as file descriptors (SCM_RIGHTS). A request is a batch (`spawn_many`: a
cell's workers, one round trip; `spawn` is a batch of one): the server forks all of it, then lets its
services run together, or none of them.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Iterator, NamedTuple


ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 600.0   # importing torch, transformers and peft: ~5 s idle, minutes on a busy 2-core box
REPLY_TIMEOUT_S = 60.0    # one fork (two, with the intermediate): milliseconds, unless the box is swapping
REPLY_TIMEOUT_PER_SERVICE_S = 1.0   # added per service of a batch: 256 forks of a busy box's ~350 MB server
MAX_REPLY = 1 << 20       # bytes of a reply: the pids of a batch
PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
_libc = ctypes.CDLL(None, use_errno=True)


class ForkServerError(RuntimeError):
    """The fork server did not start, or refused or failed a request."""


class Unreachable(ForkServerError):
    """The request did not reach a server that could answer it (it died, stopped, or hung)."""


def set_subreaper(on: bool) -> None:
    """Adopt our orphaned descendants (the services the fork server's intermediates leave behind)."""
    if _libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
        raise ForkServerError(f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(ctypes.get_errno())}")


class ForkedProcess:
    """A service the fork server forked and handed to us: read and signalled like a `subprocess.Popen`
    (what `harness.run.launch.Processes` needs: pid, poll, wait, send_signal, terminate, kill)."""

    def __init__(self, pid: int, args: list[str]):
        self.pid, self.args, self.returncode = pid, args, None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # not ours after all (spawn checks it is): nothing to wait for
                self.returncode = 255
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.01)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # until we reap it, the pid is this process's (alive or a zombie)
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Service(NamedTuple):
    """One service of a batch: `python -m module ...` with `env` in `cwd`, its output appended to
    `log` (a path, opened while the request is sent, or an open file), inside network namespace
    `netns` (a name in /run/netns) when given."""
    argv: list[str]
    env: dict
    cwd: Path | str
    log: Path | IO
    netns: str | None = None


class ForkServer:
    """One fork server process and the socket to it; `close()` stops it (its services are ours to stop)."""

    def __init__(self, proc: subprocess.Popen, control: socket.socket, modules: list[str]):
        self.proc, self.control, self.modules = proc, control, modules
        self.launch: tuple = ()          # (env, log, label): what `restart` starts again
        self.notes: list[str] = []       # one line per restart (meta.json "errors": survived, said)
        self.ready = False               # it said it has imported `modules` (wait_ready)

    @classmethod
    @contextlib.contextmanager
    def started(cls, modules: list[str], env: dict, log: Path, label: str = "",
                wait: bool = True) -> Iterator["ForkServer"]:
        server = cls.start(modules, env, log, label, wait=wait)
        try:
            yield server
        finally:
            server.close()

    @classmethod
    def start(cls, modules: list[str], env: dict, log: Path, label: str = "", wait: bool = True) -> "ForkServer":
        """Start the server and wait until it has imported `modules` (ForkServerError if it exits first).
        `label` goes on its command line (the run folder: tools that find a run's processes by it).
        `wait=False`: return at once, the imports under way (seconds of CPU: the caller builds its
        network meanwhile); `wait_ready()`, or the first `spawn`, waits for them."""
        set_subreaper(True)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = [sys.executable, "-m", "trainers.forkserver", "--fd", str(theirs.fileno()),
                "--preload", ",".join(modules), "--label", label]
        env = dict(env, WAN_PARENT_PID=str(os.getpid()))
        try:
            with open(log, "ab") as out:
                proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                        pass_fds=[theirs.fileno()], start_new_session=True)
        finally:
            theirs.close()
        server = cls(proc, ours, modules)
        server.launch = (env, log, label)
        if wait:
            server.wait_ready()
        return server

    def wait_ready(self) -> None:
        """Wait until the server has imported its modules; a server that exits or hangs first is
        closed and ForkServerError raised (the same again on a second call: it is closed)."""
        if self.ready:
            return
        if self.control.fileno() == -1:
            raise ForkServerError(f"the fork server did not start (see {self.launch[1]})")
        try:
            self._await_ready(self.launch[1])
        except BaseException:
            self.close()
            raise
        self.ready = True

    def trouble(self) -> str | None:
        """Why the server cannot answer now (it exited, or it is stopped: SIGSTOP), or None."""
        code = self.proc.poll()
        if code is not None:
            return f"exited ({describe(code)})"
        return "stopped (SIGSTOP)" if process_state(self.proc.pid) in ("T", "t") else None

    def restart(self, why: str) -> None:
        """Replace a server that died or stopped (its services are ours and run on): kill it, start a
        new one with the same modules; ForkServerError if that one does not start either."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        self.close(grace_s=1.0)
        env, log, label = self.launch
        fresh = type(self).start(self.modules, env, log, label)
        self.proc, self.control, self.launch, self.ready = fresh.proc, fresh.control, fresh.launch, fresh.ready
        self.notes.append(f"the fork server {why}: a new one was started")
        print(f"harness run: the fork server {why}; started a new one", file=sys.stderr)

    def _await_ready(self, log: Path) -> None:
        end = time.monotonic() + READY_TIMEOUT_S
        self.control.settimeout(1.0)
        while True:
            try:
                msg = self.control.recv(4096)
                break
            except socket.timeout:
                if self.proc.poll() is not None or time.monotonic() > end:
                    raise ForkServerError(f"the fork server did not start (see {log})") from None
        if not msg or "ready" not in json.loads(msg):
            raise ForkServerError(f"the fork server did not start (see {log})")

    def spawn(self, argv: list[str], *, cwd: Path | str, env: dict, stdout, netns: str | None = None,
              **_popen) -> ForkedProcess:
        """Fork `argv` ([python, "-m", module, ...]) with `env` in `cwd`, stdout and stderr to the open
        file `stdout`, inside network namespace `netns` (a name in /run/netns) when given."""
        return self.spawn_many([Service(list(argv), env, cwd, stdout, netns)])[0]

    def spawn_many(self, services: list[Service]) -> list[ForkedProcess]:
        """Fork every one of `services` in one request (in their order); they start running together
        once the last is forked. A server that died or stopped (or stops answering) is restarted
        once, and the batch sent again; one still importing its modules is waited for (one that
        never gets there: ForkServerError). A refused batch (a bad service): none of it runs."""
        self.wait_ready()
        if (why := self.trouble()) is not None:
            self.restart(why)
        try:
            return self._spawn_many(services)
        except Unreachable as err:
            with contextlib.suppress(subprocess.TimeoutExpired):   # a killed server's exit status follows its socket's close
                self.proc.wait(timeout=1.0)
            self.restart(self.trouble() or str(err))
        return self._spawn_many(services)

    def _spawn_many(self, services: list[Service]) -> list[ForkedProcess]:
        timeout = REPLY_TIMEOUT_S + REPLY_TIMEOUT_PER_SERVICE_S * len(services)
        local = None   # a service we could not describe (its log or namespace cannot be opened)
        end = time.monotonic() + timeout
        try:
            self._put(json.dumps({"batch": len(services)}).encode(), [], end)
            for service in services:
                if local is not None:   # the server reads the whole batch: an empty request spoils it
                    self._put(b"{}", [], end)
                    continue
                try:
                    self._send(service, end)
                except ForkServerError as err:
                    local = err
                    self._put(b"{}", [], end)
            raw = self._reply(timeout)
            if not raw:   # it closed its end: dying or dead, even if not yet reaped
                raise Unreachable("closed its socket")
            reply = json.loads(raw)
        except socket.timeout:
            raise Unreachable(f"did not answer within {timeout:g} s") from None
        except ValueError as e:
            raise ForkServerError(f"fork server: {type(e).__name__}: {e}") from None
        except OSError as e:
            raise Unreachable(f"could not be reached ({type(e).__name__}: {e})") from None
        if local is not None:
            raise local
        if "pids" not in reply:
            for pid in reply.get("abandoned", []):   # forked, then told to exit unrun: reap them
                with contextlib.suppress(subprocess.TimeoutExpired):
                    ForkedProcess(pid, []).wait(timeout=5.0)
            what = " ".join(services[0].argv[:3]) + (f" and {len(services) - 1} more" if len(services) > 1 else "")
            raise ForkServerError(f"fork server refused {what}: {reply.get('error')}")
        procs = [ForkedProcess(pid, list(service.argv)) for pid, service in zip(reply["pids"], services)]
        strays = [p.pid for p in procs if parent_of(p.pid) != os.getpid()]
        if strays or len(procs) != len(services):
            for proc in procs:
                if proc.pid not in strays:
                    proc.kill()
                    proc.wait()
            raise ForkServerError(f"the forked services {strays} were not handed to us (are we a subreaper?)"
                                  if strays else f"the fork server answered {len(procs)} pids for {len(services)} services")
        return procs

    def _put(self, message: bytes, fds: list[int], end: float) -> None:
        """Send one message (a SOCK_SEQPACKET send is whole or nothing); while the server's buffer is
        full, check each second that it can still read it (Unreachable if not), until `end` (socket.timeout)."""
        self.control.settimeout(1.0)
        while True:
            try:
                socket.send_fds(self.control, [message], fds)
                return
            except socket.timeout:
                if (why := self.trouble()) is not None:
                    raise Unreachable(why) from None
                if time.monotonic() > end:
                    raise

    def _send(self, service: Service, end: float) -> None:
        """One service's request, its log and namespace as descriptors (ours closed once sent: the
        message holds its own references). ForkServerError, nothing sent, when either cannot be opened."""
        with contextlib.ExitStack() as stack:
            try:
                log = service.log if hasattr(service.log, "fileno") else stack.enter_context(open(service.log, "ab"))
                fds = [log.fileno()]
                if service.netns is not None:
                    from harness.net.topology import NETNS_DIR   # pyroute2: off the path to the server's start
                    fds.append(os.open(os.path.join(NETNS_DIR, service.netns), os.O_RDONLY | os.O_CLOEXEC))
                    stack.callback(os.close, fds[-1])
            except OSError as e:
                raise ForkServerError(f"cannot start {' '.join(service.argv[:3])}: {e.strerror}: {e.filename}") from None
            request = json.dumps({"argv": list(service.argv), "env": dict(service.env), "cwd": str(service.cwd)})
            self._put(request.encode(), fds, end)

    def _reply(self, timeout: float) -> bytes:
        """The server's answer; socket.timeout after `timeout` s, Unreachable as soon as the server
        is seen dead or stopped (checked each second: no minute's wait for a server that cannot answer)."""
        end = time.monotonic() + timeout
        self.control.settimeout(1.0)
        while True:
            try:
                return self.control.recv(MAX_REPLY)
            except socket.timeout:
                if (why := self.trouble()) is not None:
                    raise Unreachable(why) from None
                if time.monotonic() > end:
                    raise
            except OSError as e:
                raise Unreachable(f"could not be reached ({type(e).__name__}: {e})") from None

    def close(self, grace_s: float = 5.0) -> None:
        """Close the socket (the server exits at its end), wait for it, SIGKILL it if it lingers."""
        self.control.close()
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(ForkServerError):
            set_subreaper(False)


def describe(code: int) -> str:
    return f"killed by {signal.Signals(-code).name}" if code < 0 and -code in signal.valid_signals() \
        else f"exit code {code}"


def process_state(pid: int) -> str | None:
    """The state letter of `pid` (/proc/<pid>/stat field 3: R, S, T for stopped...), None if it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def parent_of(pid: int) -> int | None:
    """The parent pid of `pid` (/proc/<pid>/stat field 4), None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])
