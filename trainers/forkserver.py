"""The fork server: one process that has imported the services' modules, forking one service per request.

    python -m trainers.forkserver --fd 3 --preload trainers.hilo.learner,trainers.hilo.worker [--label RUN_DIR]

A service started by exec pays for its imports (torch, transformers, peft: ~5 s of CPU and ~270 MB
of private memory each); 16 workers took 6.5 GB and a minute to join on a 2-core box. Forked from
here, a service shares the imported pages copy-on-write (`gc.freeze()` keeps the collector from
writing to them) and starts in ~0.1 s (two forks of a ~350 MB process, on a busy 2-core box).

The harness that started us (harness/run/forkserver.py) talks over the inherited SOCK_SEQPACKET
socket `--fd`: JSON messages, never pickle. A request is a batch of services (a cell's workers: one
round trip for all of them): a header {"batch": n}, then n messages, each what `subprocess.Popen`
would get: {"argv": [python, "-m", module, ...], "env": {...}, "cwd": "..."}, with the open log file
and, optionally, a network namespace as passed file descriptors (SCM_RIGHTS: [log] or [log, netns]).
The reply is {"pids": [N, ...]} (in the batch's order) or {"error": "..."}: a batch with one bad
service forks none. `module` must be one we preloaded.

The services of a batch wait on a start barrier (a pipe) until the last of them is forked: a service
that computed at once (a worker builds its model) would take the CPU the next forks need, so forking
N workers on a busy box took time growing faster than N. A batch we cannot finish (a failed fork)
closes the barrier unreleased: the services forked so far exit without running their module.

Each service is forked twice (zygote -> intermediate -> service) and the intermediate exits at once,
so the service is re-parented to the harness, which made itself a child subreaper: the harness
waits for, signals and reaps it like a process it started itself, and the service's parent-death
signal (trainers.process.die_with_parent) follows the harness. The service then becomes what
`python -m module argv...` would have been: its own session, namespace, stdout/stderr, working
directory, environment, command line (ps and /proc/<pid>/cmdline show the argv) and fresh seeds.

No thread may run here when we fork (a lock held by another thread would stay locked in the child):
the services' environment sets one OpenMP/BLAS thread, and torch's thread pools start in the child
(set_threads). We exit when the harness closes its end of the socket, or with it (die_with_parent).
"""
from __future__ import annotations

import gc

# Run as the server (python -m): its imports (torch, transformers: ~350k objects) go without the collector, which
# would re-scan them every few thousand allocations (~20 % of their time); `preload` freezes them and restarts it.
if __name__ == "__main__":
    gc.disable()

import argparse
import ctypes
import importlib
import json
import os
import random
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path

from trainers.process import die_with_parent, log

MAX_MESSAGE = 1 << 20        # bytes of one request: an argv and an environment
MAX_FDS = 2                  # the log file and the network namespace
MAX_BATCH = 4096             # services in one batch (each holds two descriptors here until it is forked)
REPARENT_WAIT_S = 10.0       # how long a service waits to be handed to the harness before giving up
CLONE_NEWNET = 0x40000000    # <linux/sched.h>
PR_SET_NAME, PR_SET_MM, PR_SET_MM_MAP = 15, 35, 14  # <linux/prctl.h>
ABANDONED = 70               # a service's exit code when its batch was not finished (its barrier closed unreleased)
SPAWN_NICE = -10             # the fork server's scheduling priority (`raise_priority`); its services get the caller's back
_libc = ctypes.CDLL(None, use_errno=True)
_titles: list = []           # the command-line buffers the kernel points at: they must stay alive


# ---- in the service, after the fork ------------------------------------------------------------

def enter_netns(fd: int) -> None:
    """Join the network namespace open at `fd` (we are single-threaded here, as setns requires)."""
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns(network namespace): {os.strerror(err)}")


class _MMMap(ctypes.Structure):
    """struct prctl_mm_map (<linux/prctl.h>): the bounds of a process's memory areas, its command line's among them."""
    _fields_ = [(name, ctypes.c_uint64) for name in ("start_code", "end_code", "start_data", "end_data", "start_brk",
                                                       "brk", "start_stack", "arg_start", "arg_end", "env_start", "env_end")]
    _fields_ += [("auxv", ctypes.c_void_p), ("auxv_size", ctypes.c_uint32), ("exe_fd", ctypes.c_uint32)]


def _mm_map() -> _MMMap:
    """Our memory map as it stands (/proc/self/stat fields 26-28 and 45-51, the break from sbrk(0))."""
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    field = lambda n: int(fields[n - 3])  # noqa: E731  (fields after the command name start at 3)
    _libc.sbrk.restype = ctypes.c_void_p
    return _MMMap(start_code=field(26), end_code=field(27), start_stack=field(28), start_data=field(45),
                  end_data=field(46), start_brk=field(47), brk=_libc.sbrk(0), arg_start=field(48), arg_end=field(49),
                  env_start=field(50), env_end=field(51), auxv=None, auxv_size=0, exe_fd=0xFFFFFFFF)  # -1: keep exe


def set_cmdline(argv: list[str]) -> None:
    """Show `argv` as our command line (/proc/<pid>/cmdline, ps) and its module as our name (comm),
    as if we had been exec'ed: tools and tests find services by their argv. PR_SET_MM_MAP with the
    exe link kept needs no capability (PR_SET_MM_ARG_START would need CAP_SYS_RESOURCE); where the
    kernel refuses it, the fork server's command line stays and only the name changes."""
    module = argv[2] if len(argv) > 2 else argv[0]
    _libc.prctl(PR_SET_NAME, ctypes.c_char_p(module.rsplit(".", 1)[-1].encode()[:15]), 0, 0, 0)
    raw = b"\0".join(a.encode() for a in argv) + b"\0"
    buf = ctypes.create_string_buffer(raw, len(raw))
    mm = _mm_map()
    mm.arg_start, mm.arg_end = ctypes.addressof(buf), ctypes.addressof(buf) + len(raw)
    if _libc.prctl(PR_SET_MM, PR_SET_MM_MAP, ctypes.byref(mm), ctypes.sizeof(mm), 0) == 0:
        _titles.append(buf)


def raise_priority() -> int | None:
    """Schedule the fork server ahead of its services; returns the nice value to give them back
    (None: nothing changed). With autogroup scheduling (kernel.sched_autogroup_enabled) every
    session shares the CPU equally, and every service is a session of its own: with N services busy
    (joined workers compute at once), a fork server of default weight got 1/(N+1) of the CPU for each
    fork, so starting N workers took time growing as N^1.5. Nice -10 (~9x the weight) for our
    session and our process puts its forks ahead of them (the harness's own part of each start
    still gets a share that shrinks with the busy services); it needs CAP_SYS_NICE (root, as
    emulated runs are), and without it nothing changes. A service leaves our session (setsid) and
    takes back the caller's nice (`become`) before it runs its module."""
    base = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        os.setpriority(os.PRIO_PROCESS, 0, SPAWN_NICE)
    except OSError:
        return None
    try:
        with open("/proc/self/autogroup", "w") as fh:
            fh.write(str(SPAWN_NICE))
    except OSError:
        pass  # no autogroup scheduling: the process's nice is what counts
    return base


def reseed() -> None:
    """The seeds a fresh process would have: Python's and NumPy's global generators from the OS
    (forked, every service would draw the same numbers), torch's default generator at its default seed."""
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        torch.manual_seed(torch.initial_seed())


def await_harness(harness_pid: int) -> None:
    """Wait until the intermediate has exited and we are the harness's child (its subreaper)."""
    end = time.monotonic() + REPARENT_WAIT_S
    while os.getppid() != harness_pid:
        if time.monotonic() > end:
            log("forkserver", f"pid {os.getpid()} was not handed to the harness (pid {harness_pid}); exiting")
            os._exit(70)
        time.sleep(0.001)


def await_barrier(barrier: int) -> None:
    """Block until the fork server has forked the whole batch (it writes one byte per service);
    an end of file instead (the batch failed, or the server died) means: exit, run nothing."""
    if os.read(barrier, 1) != b"g":
        os._exit(ABANDONED)
    os.close(barrier)


def become(request: dict, fds: list[int], control: socket.socket, harness_pid: int, nice: int | None = None,
           barrier: int | None = None, others: tuple[int, ...] = ()) -> None:
    """Turn this forked process into `python -m <module> <args>` as `request` describes; never returns.
    `others`: the batch's descriptors that are not ours (closed here); `barrier`: waited on first."""
    code = 1
    try:
        control.close()
        for fd in others:
            os.close(fd)
        os.setsid()  # as start_new_session: a Ctrl-C at the terminal reaches the harness, which stops us in order
        if nice is not None:
            os.setpriority(os.PRIO_PROCESS, 0, nice)  # the caller's priority, not the fork server's (raising it needs no privilege)
        if barrier is not None:
            await_barrier(barrier)
        await_harness(harness_pid)
        log_fd, netns_fd = fds[0], (fds[1] if len(fds) > 1 else None)
        if netns_fd is not None:
            enter_netns(netns_fd)
            os.close(netns_fd)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        die_with_parent()  # $WAN_PARENT_PID is the harness, our parent now: SIGTERM when it dies
        argv = request["argv"]
        set_cmdline(argv)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        reseed()
        sys.argv = [argv[2], *argv[3:]]
        code = run_module(argv[2], argv[3:])
    except SystemExit as e:  # argparse's usage errors, sys.exit() in main
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        with_flush_exit(code)


def run_module(module: str, args: list[str]) -> int:
    code = importlib.import_module(module).main(args)
    return code if isinstance(code, int) else 0


def with_flush_exit(code: int) -> None:
    """Leave without the interpreter's teardown, as the services' own __main__ does (daemon threads
    blocked in recv() must not race it), and without the fork server's atexit handlers."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


# ---- in the fork server ----------------------------------------------------------------------------

def check_request(request: dict, fds: list[int], preloaded: set[str]) -> str | None:
    """Why `request` (one service of a batch) cannot be served, or None."""
    argv = request.get("argv")
    if not (isinstance(argv, list) and len(argv) >= 3 and all(isinstance(a, str) for a in argv) and argv[1] == "-m"):
        return "argv must be [python, '-m', module, args...]"
    if argv[2] not in preloaded:
        return f"module {argv[2]!r} was not preloaded (preloaded: {', '.join(sorted(preloaded))})"
    if not isinstance(request.get("env"), dict) or not isinstance(request.get("cwd"), str):
        return "env (an object) and cwd (a string) are required"
    if not 1 <= len(fds) <= MAX_FDS:
        return f"expected the log file and optionally a network namespace as file descriptors, got {len(fds)}"
    return None


def spawn(request: dict, fds: list[int], control: socket.socket, harness_pid: int, nice: int | None = None,
          barrier: tuple[int, int] | None = None, others: tuple[int, ...] = ()) -> int:
    """Fork the service through an intermediate that exits at once; returns the service's pid.
    `barrier`: the start barrier's (read, write) ends; the service waits on the read end."""
    sys.stdout.flush(), sys.stderr.flush()
    read, write = os.pipe()
    intermediate = os.fork()
    if intermediate == 0:
        try:
            os.close(read)
            if barrier is not None:
                os.close(barrier[1])  # only the server may release (or, by dying, abandon) the batch
            service = os.fork()
            if service == 0:
                os.close(write)
                become(request, fds, control, harness_pid, nice, barrier and barrier[0], others)
            os.write(write, str(service).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        pid = pipe.read()
    os.waitpid(intermediate, 0)  # its exit hands the service to the harness (the subreaper)
    if not pid:
        raise OSError("the intermediate process did not fork the service")
    return int(pid)


def receive_batch(control: socket.socket, preloaded: set[str]) -> tuple[list[tuple[dict, list[int]]], str | None] | None:
    """The services of one batch (each request with its descriptors) and why the batch cannot be
    served (None: it can); None when the harness closed its end. All n messages are read even when
    one is bad, so that the next batch starts at its header."""
    batch: list[tuple[dict, list[int]]] = []
    problem = None
    try:
        msg, fds, _flags, _addr = socket.recv_fds(control, MAX_MESSAGE, MAX_FDS)
    except ConnectionResetError:
        return None
    if not msg:
        return None
    try:
        header = json.loads(msg)
        n = header.get("batch") if isinstance(header, dict) else None
    except ValueError as e:
        header, n = None, None
        problem = f"{type(e).__name__}: {e}"
    for fd in fds:
        os.close(fd)
    if not (isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= MAX_BATCH):
        return [], problem or f'a request starts with {{"batch": n}}, 1 <= n <= {MAX_BATCH}'
    for i in range(n):
        try:
            msg, fds, _flags, _addr = socket.recv_fds(control, MAX_MESSAGE, MAX_FDS)
        except ConnectionResetError:
            msg, fds = b"", []
        if not msg:
            close_all(batch)
            for fd in fds:
                os.close(fd)
            return None
        try:
            request = json.loads(msg)
            why = check_request(request, fds, preloaded) if isinstance(request, dict) else "not a JSON object"
        except ValueError as e:
            request, why = {}, f"{type(e).__name__}: {e}"
        if why is not None and problem is None:
            problem = f"service {i + 1} of {n}: {why}"
        batch.append((request, fds))
    return batch, problem


def close_all(batch: list[tuple[dict, list[int]]]) -> None:
    for _request, fds in batch:
        for fd in fds:
            os.close(fd)


def spawn_batch(batch: list[tuple[dict, list[int]]], control: socket.socket, harness_pid: int,
                nice: int | None, pids: list[int]) -> None:
    """Fork every service of `batch` (their pids appended to `pids`), then release them together (the
    start barrier); OSError if a fork fails: the services forked so far (in `pids`) exit at the
    barrier, so the whole batch runs or none of it. Each service's descriptors are closed once it is forked."""
    barrier = os.pipe()
    every = [fd for _request, fds in batch for fd in fds]
    try:
        for k, (request, fds) in enumerate(batch):
            others = tuple(fd for fd in every if fd not in fds)
            pids.append(spawn(request, fds, control, harness_pid, nice, barrier, others))
            for fd in fds:
                os.close(fd)
            every = [fd for fd in every if fd not in fds]
            batch[k] = (request, [])
        os.write(barrier[1], b"g" * len(pids))  # a pipe holds 64 KiB: room for every service's byte
    finally:
        os.close(barrier[1])
        os.close(barrier[0])


def serve(control: socket.socket, preloaded: set[str], harness_pid: int, nice: int | None = None) -> None:
    """Answer batches until the harness closes its end."""
    while True:
        received = receive_batch(control, preloaded)
        if received is None:
            return
        batch, problem = received
        pids: list[int] = []
        try:
            if problem is None:
                spawn_batch(batch, control, harness_pid, nice, pids)
            reply = {"error": problem} if problem else {"pids": pids}
        except OSError as e:  # those forked exit at the barrier: the harness reaps them (they are its children)
            reply = {"error": f"{type(e).__name__}: {e}", "abandoned": pids}
        finally:
            close_all(batch)
        control.send(json.dumps(reply).encode())


def preload(modules: list[str]) -> set[str]:
    """Import the services' modules (and so torch, transformers, peft) once, then freeze what the
    collector tracks: a collection in a child would otherwise write to (and so copy) every page.
    Python's own recipe for a fork server (the gc module's docs): the collector is off while we import
    (from our first line), everything is frozen before the first fork, and collecting starts again for what
    comes after it, here and in the services. The few MB of unreachable cycles the imports left are frozen
    with the rest rather than collected first (a full collection of the imports: ~0.2 s): nothing reaches
    them, so no process ever writes to their pages."""
    for name in modules:
        importlib.import_module(name)
    gc.freeze()
    gc.enable()
    if threading.active_count() > 1 or len(os.listdir("/proc/self/task")) > 1:
        log("forkserver", f"warning: {len(os.listdir('/proc/self/task'))} threads before forking "
                          "(set OMP_NUM_THREADS=1): a lock another thread holds stays held in the services")
    return set(modules)


def main(argv=None) -> int:
    die_with_parent()  # first thing: a harness that dies takes us with it
    p = argparse.ArgumentParser(prog="python -m trainers.forkserver", description=__doc__.split("\n")[0])
    p.add_argument("--fd", type=int, required=True, help="the inherited SOCK_SEQPACKET socket to the harness")
    p.add_argument("--preload", required=True, help="comma list of the service modules to import and serve")
    p.add_argument("--label", default="", help="ignored: names the run in our command line (ps, cleanup)")
    args = p.parse_args(argv)
    modules = [m for m in args.preload.split(",") if m]
    if not modules:
        p.error("--preload names no module")
    control = socket.socket(fileno=args.fd)
    harness_pid = os.getppid()
    nice = raise_priority()
    preloaded = preload(modules)
    control.send(json.dumps({"ready": sorted(preloaded)}).encode())
    serve(control, preloaded, harness_pid, nice)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(code)
