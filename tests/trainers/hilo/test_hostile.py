"""Hostile peers against a real learner process.

Each test runs a learner and one genuine worker as processes on 127.0.0.1 and attacks the
learner over real sockets, sometimes with the run token (a hostile member), sometimes without
getting past the handshake. Each asserts that the learner did not crash (exit 0, no traceback
in its log), that the attacker was rejected or dropped with the reason, that the genuine
worker's run completed with equal hashes on every live replica, and that the learner's file
descriptors and threads went back to their baseline once the attacker was gone.

Waits are event-driven (the learner's event file, a socket's EOF, a log line) with generous
timeouts that only guard against a hang; nothing asserts how long anything took.
"""
from __future__ import annotations

import os
import resource
import select
import signal
import socket
import time
from pathlib import Path


from tests.trainers.hilo.cluster import TOKEN, Cluster
from trainers.protocol import gate, wire
from trainers.model.rollout import Rollouts
from trainers.protocol.wire import Connection, MessageType
from tests.trainers.flood import idle_flood, refusals

WAIT_S = 300  # a guard against a hang on a busy 2-core box, not a speed requirement


# ----------------------------------------------------------------------------- helpers


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def settle(c: Cluster, max_fds: int, max_threads: int, what: str) -> None:
    """Wait until the learner holds at most `max_fds` descriptors and `max_threads` threads."""
    pid, end = c.procs["learner"].pid, time.monotonic() + WAIT_S
    while True:
        assert c.procs["learner"].poll() is None, f"learner exited during {what}:\n{c.log('learner')}"
        now = fds(pid), threads(pid)
        if now[0] <= max_fds and now[1] <= max_threads:
            return
        assert time.monotonic() < end, f"after {what}: {now[0]} fds / {now[1]} threads, " \
                                       f"baseline {max_fds} / {max_threads}:\n{c.log('learner')}"
        time.sleep(0.02)


def baseline(c: Cluster) -> tuple[int, int]:
    """The learner's fds and threads once it listens (its `start` row is written after listen())."""
    c.wait_for("start", lambda rows: any(r["kind"] == "start" for r in rows), WAIT_S)
    pid = c.procs["learner"].pid
    return fds(pid), threads(pid)


def closed_by_learner(sock: socket.socket, timeout: float = WAIT_S) -> bool:
    """True once the learner has closed `sock` (EOF or reset); whatever it sent before is skipped."""
    sock.settimeout(timeout)
    try:
        while sock.recv(1 << 16):
            pass
    except ConnectionError:
        pass
    except socket.timeout:
        return False
    return True


def rows_of(kind: str, rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["kind"] == kind]


def wait_rows(c: Cluster, kind: str, n: int, **match) -> list[dict]:
    """The learner's rows of `kind` (matching `match`) once there are at least `n` of them."""
    def ok(r):
        return all(r.get(k) == v for k, v in match.items())
    rows = c.wait_for(f"{n} {kind} rows", lambda rows: len([r for r in rows_of(kind, rows) if ok(r)]) >= n, WAIT_S)
    return [r for r in rows_of(kind, rows) if ok(r)]


def wait_refusals(c: Cluster, n: int, *match: str) -> dict[str, int]:
    """{reason: count} of the learner's refused connections once at least `n` of them whose reason
    holds one of `match` are counted (a source's refusals after its first are written once per interval)."""
    def enough(rows):
        return sum(k for reason, k in refusals(rows).items() if any(m in reason for m in match)) >= n
    return refusals(c.wait_for(f"{n} refused connections", enough, WAIT_S))


def frame(msg_type: MessageType, body: bytes, sender: int = 1, seq: int = 0) -> bytes:
    return wire.encode_frame(msg_type, body, check=wire.token_check(TOKEN), sender=sender, version=0, seq=seq)


def connect(c: Cluster) -> socket.socket:
    return socket.create_connection(c.address, timeout=WAIT_S)


def send_and_expect_close(c: Cluster, data: bytes) -> None:
    with connect(c) as s:
        try:
            s.sendall(data)
        except ConnectionError:
            pass  # closed while we were still sending: what a frame-too-large check may do
        assert closed_by_learner(s)


def wait_log(c: Cluster, name: str, text: str) -> None:
    end = time.monotonic() + WAIT_S
    while text not in c.log(name):
        assert c.procs[name].poll() is None, f"{name} exited before logging {text!r}:\n{c.log(name)}"
        assert time.monotonic() < end, f"{name} never logged {text!r}:\n{c.log(name)}"
        time.sleep(0.05)


def assert_survived(c: Cluster, s: dict, updates: int) -> None:
    """The learner exited cleanly, the run completed, and every live replica agrees."""
    assert c.returncodes["learner"] == 0, c.log("learner")
    assert "Traceback" not in c.log("learner")
    assert s["complete"] is True and s["updates"] == updates, s
    assert s["consistent"] is True, s
    assert "w1" in s["state_hashes"] and len(set(s["state_hashes"].values())) == 1, s["state_hashes"]
    assert not s["hash_mismatches"]


class Member:
    """A peer holding the run token: it says HELLO as `worker`, reads its WELCOME, then misbehaves."""

    def __init__(self, c: Cluster, worker: int):
        self.sock = connect(c)
        self.conn = Connection(self.sock, token=TOKEN, sender=worker, peer="learner")
        self.conn.send(MessageType.HELLO, wire.pack_json({"worker": worker}))
        assert self.conn.recv().type == MessageType.WELCOME

    def send(self, msg_type: MessageType, body: bytes) -> None:
        try:
            self.conn.send(msg_type, body)
        except ConnectionError:
            pass

    def send_raw(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except ConnectionError:
            pass

    def close(self) -> None:
        self.conn.close()


def rollouts_body(batch: int = 0, meta_extra: dict | None = None, **fields) -> bytes:
    r = Rollouts(problem_index=[0], prompt_ids=[[1, 2]], completion_ids=[[3]], logprobs=[[-1.0]], rewards=[0.0],
                 **fields)
    return wire.pack_tensors(r.to_tensors(), meta={"batch": batch, "worker": 1, **(meta_extra or {})})


def table_body(table: bytes) -> bytes:
    import struct

    return struct.pack("!I", len(table)) + table


# ----------------------------------------------------------------------------- hostile members

# (what it sends, as a function of the member; a piece of the reason the learner gives)
MEMBER_CASES = {
    "HASH with a list for the version": (lambda m: m.send(MessageType.HASH, b'{"version":[1]}'),
                                         "'version' must be an integer"),
    "HASH with a number for the hash": (
        lambda m: m.send(MessageType.HASH, b'{"version":0,"policy_hash":7,"optimizer_hash":null}'),
        "'policy_hash' must be a string"),
    "HASH of 200k [": (lambda m: m.send(MessageType.HASH, b"[" * 200_000), "exceeds 4096"),  # was RecursionError
    "HASH of 2000 [": (lambda m: m.send(MessageType.HASH, b"[" * 2000), "nested 2000 deep"),
    "HASH of a 40-digit-plus integer": (
        lambda m: m.send(MessageType.HASH, b'{"version":' + b"9" * 50 + b"}"), "integer of 50 digits"),
    "oversized HASH": (lambda m: m.send(MessageType.HASH, wire.pack_json({"version": 0, "policy_hash": "a" * 300_000,
                                                                          "optimizer_hash": None})),
                       "exceeds 4096"),
    "a frame over --max-frame-bytes": (
        lambda m: m.send_raw(frame(MessageType.HASH, b"x" * (2 << 20), seq=1)), "frame too large"),
    "ROLLOUTS meta nested 200k deep": (
        lambda m: m.send(MessageType.ROLLOUTS, table_body(b'{"meta":{"batch":' + b"[" * 200_000 + b"]" * 200_000
                                                          + b'},"tensors":[]}')), "nested 200002 deep"),
    "ROLLOUTS meta with an unknown key": (
        lambda m: m.send(MessageType.ROLLOUTS, rollouts_body(meta_extra={"pickle": 1})), "unknown key 'pickle'"),
    "ROLLOUTS at another temperature": (  # used to crash train_step (concat refuses mixed temperatures)
        lambda m: m.send(MessageType.ROLLOUTS, rollouts_body(temperature=0.5)), "temperature 0.5"),
    "ROLLOUTS from a future policy": (
        lambda m: m.send(MessageType.ROLLOUTS, rollouts_body(policy_version=10**6)), "policy version 1000000"),
    "an UPDATE from a worker": (lambda m: m.send(MessageType.UPDATE, b"\0" * 16), "unexpected UPDATE"),
}


def test_hostile_members_are_dropped_and_the_genuine_worker_completes(tmp_path):
    """A token holder joins as worker 1 and sends each bad message in turn (rejoining after each
    drop) while the learner waits at batch 0; each time it is dropped with the reason and the
    learner goes on. Then the cap of pending connections is full when the genuine worker 1
    arrives: it is turned away, retries, joins once there is room, and completes the run."""
    updates = 3
    with Cluster(tmp_path / "run", workers=1, autostart=False, method="spar", updates=updates,
                 learner_flags=["--max-pending-connections", "2", "--handshake-timeout", "600", "--token-timeout", "600",
                                "--worker-timeout", "900", "--join-timeout", "900",
                                "--max-frame-bytes", str(1 << 20)]) as c:
        base_fds, base_threads = baseline(c)
        for i, (name, (attack, reason)) in enumerate(MEMBER_CASES.items(), start=1):
            m = Member(c, worker=1)
            wait_rows(c, "joined", i, worker=1)
            attack(m)
            dropped = wait_rows(c, "dropped", i, worker=1)[-1]
            assert reason in dropped["reason"], (name, dropped)
            assert closed_by_learner(m.sock), name
            m.close()
            settle(c, base_fds, base_threads, name)  # its socket closed, its reader thread gone

        # The cap: two silent connections fill it; the genuine worker, arriving after their grace,
        # takes the older one's slot (evicted, closed) and joins although they never time out.
        idle = [connect(c) for _ in range(2)]
        settle_until = time.monotonic() + 2 * gate.GRACE_S
        while time.monotonic() < settle_until:  # past their grace: they may be evicted now
            time.sleep(0.1)
        c.start_worker(1)
        assert closed_by_learner(idle[0])
        wait_refusals(c, 1, "evicted")
        for s in idle:
            s.close()
        s = c.wait()
    assert_survived(c, s, updates)
    assert [d["worker"] for d in s["dropped"]] == [1] * len(MEMBER_CASES)
    assert c.returncodes["w1"] == 0


# ----------------------------------------------------------------------------- before the handshake


def hello(body: bytes) -> bytes:
    return frame(MessageType.HELLO, body)


HANDSHAKE_CASES = {
    "nested HELLO": (hello(b'{"worker":' + b"[" * 500 + b"]" * 500 + b"}"), "nested 501 deep"),
    "HELLO of 200k [": (hello(b"[" * 200_000), "frame too large"),
    "HELLO with a string worker": (hello(b'{"worker":"1"}'), "'worker' must be an integer"),
    "HELLO with a boolean worker": (hello(b'{"worker":true}'), "'worker' must be an integer, got a boolean"),
    "HELLO with an unknown key": (hello(b'{"worker":1,"extra":{}}'), "unknown key 'extra'"),
    "HELLO with NaN": (hello(b'{"worker":NaN}'), "NaN is not JSON"),
    "oversized HELLO": (hello(wire.pack_json({"worker": 1, "pad": "x" * 5000})), "exceeds 1024"),
    "HELLO with a duplicate key": (hello(b'{"worker":1,"worker":1}'), "duplicate key"),
}


def test_hostile_connections_are_cut_before_the_handshake(tmp_path):
    """Bad HELLOs, a slowloris and a burst over the cap are rejected with their reasons; the reader
    threads end and the sockets close; then a genuine worker joins and completes the run."""
    updates = 3
    with Cluster(tmp_path / "run", workers=1, autostart=False, method="identity", updates=updates,
                 learner_flags=["--handshake-timeout", "5", "--max-pending-connections", "4"]) as c:
        base_fds, base_threads = baseline(c)
        for name, (data, _) in HANDSHAKE_CASES.items():
            send_and_expect_close(c, data)
        rejected = wait_refusals(c, len(HANDSHAKE_CASES), "")
        for name, (_, reason) in HANDSHAKE_CASES.items():
            assert any(reason in r for r in rejected), (name, reason, rejected)
        settle(c, base_fds, base_threads, "bad HELLOs")

        # Slowloris: a valid HELLO, one byte every 0.25 s; a per-recv timeout of 5 s would never fire.
        data, sent = hello(wire.pack_json({"worker": 1})), 0
        with connect(c) as s:
            for byte in data:
                try:
                    s.sendall(bytes([byte]))
                except ConnectionError:
                    break
                sent += 1
                if select.select([s], [], [], 0.25)[0]:  # readable: the learner closed it
                    break
            assert closed_by_learner(s)
        assert sent < len(data), "the slow HELLO was never cut"
        wait_refusals(c, 1, "handshake timed out")
        settle(c, base_fds, base_threads, "the slowloris")

        # Over the cap: 4 pending connections are allowed; each of 2 more is refused or, once the
        # oldest are past their grace, takes an old one's slot: 2 connections are closed at once.
        idle = [connect(c) for _ in range(4)]
        extra = [connect(c) for _ in range(2)]
        over = wait_refusals(c, 2, "over the cap of 4", "evicted")
        assert sum(k for r, k in over.items() if "over the cap of 4" in r or "evicted" in r) == 2, over
        for s in idle + extra:
            assert closed_by_learner(s)  # refused, evicted, or cut at the token deadline
            s.close()
        settle(c, base_fds, base_threads, "the connections over the cap")

        c.start_worker(1)
        s = c.wait()
    assert_survived(c, s, updates)
    assert not s["dropped"]
    assert all(r["source"] == "127.0.0.1" for r in c.events("learner") if r["kind"] == "rejected")


# ----------------------------------------------------------------------------- out of file descriptors


def accept_queue(port: int) -> int:
    """Connections waiting in the kernel's accept queue of the listener on 127.0.0.1:`port`
    (the rx_queue of a LISTEN socket in /proc/net/tcp)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == f"0100007F:{port:04X}" and fields[3] == "0A":
            return int(fields[4].split(":")[1], 16)
    raise AssertionError(f"no listener on 127.0.0.1:{port}")


def test_running_out_of_file_descriptors_does_not_stop_the_listener(tmp_path):
    """With its descriptor limit lowered (prlimit), junk connections make the learner's accept()
    fail with EMFILE; a genuine worker connects meanwhile and waits in the accept queue; once the
    junk closes, the listener recovers, the worker joins, and the run completes."""
    updates = 3
    with Cluster(tmp_path / "run", workers=1, autostart=False, method="identity", updates=updates,
                 learner_flags=["--handshake-timeout", "600", "--token-timeout", "600", "--liveness", "600",
                                "--max-pending-connections", "64", "--max-pending-per-source", "64"]) as c:
        base_fds, base_threads = baseline(c)
        pid, port = c.procs["learner"].pid, c.address[1]
        _, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (base_fds + 8, hard))

        junk = []
        for _ in range(60):  # past the limit; the kernel's accept queue holds what accept() cannot take
            junk.append(connect(c))
            if rows_of("accept_error", c.events("learner")):
                break
        error = c.wait_for("accept() to fail", lambda rows: bool(rows_of("accept_error", rows)), WAIT_S)
        assert "Too many open files" in rows_of("accept_error", error)[0]["error"]
        queued = accept_queue(port)
        c.start_worker(1)
        end = time.monotonic() + WAIT_S
        while accept_queue(port) <= queued:  # the worker has connected; nobody answers it yet
            assert time.monotonic() < end and c.procs["w1"].poll() is None, c.log("w1")
            time.sleep(0.05)
        for s in junk:
            s.close()
        wait_rows(c, "joined", 1, worker=1)
        os.kill(c.procs["w1"].pid, signal.SIGSTOP)  # hold the run while the junk is counted out
        try:
            # w1's connection; the learner serves it from its event loop (no thread per connection):
            # the +2 is room for threads torch starts once training begins.
            settle(c, base_fds + 1, base_threads + 2, "the junk connections closed")
        finally:
            os.kill(c.procs["w1"].pid, signal.SIGCONT)
        s = c.wait()
    assert_survived(c, s, updates)
    events = c.events("learner")
    assert len(rows_of("accept_error", events)) == 1 and rows_of("accept_recovered", events)  # once per burst


# ----------------------------------------------------------------------------- a member that stops reading


def test_a_member_that_stops_reading_is_dropped_instead_of_stalling_the_learner(tmp_path):
    """A member that joins and then never reads would block every send to it for ever; a send that
    makes no progress for --worker-timeout seconds fails instead, and the member is dropped."""
    from trainers.hilo.learner import Learner
    from trainers.spec import RunParams

    learner = Learner(RunParams(method="identity", workers=1, updates=3, model="micro", objective="grpo"), TOKEN,
                      str(tmp_path), ("127.0.0.1", 0), worker_timeout_s=1.0)
    sock = None
    try:
        learner.members.listen()
        sock = socket.create_connection(learner.address, timeout=WAIT_S)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        Connection(sock, token=TOKEN, sender=1, peer="learner").send(MessageType.HELLO, wire.pack_json({"worker": 1}))
        end = time.monotonic() + WAIT_S
        while 1 not in learner.members.peers or learner.members.peers[1].catching_up is not None:
            assert time.monotonic() < end  # a member whose catch-up (the WELCOME) is written
            learner.pump(0.1)
        msg = b"\0" * (16 << 20)  # more than the socket buffers of both ends hold
        for version in range(1, 20):
            learner.members.broadcast(msg, version)  # returns: the send fails instead of blocking
            if 1 not in learner.members.peers:
                break
        assert [d["worker"] for d in learner.members.dropped] == [1]
        assert "send failed" in learner.members.dropped[0]["reason"]
    finally:
        if sock is not None:
            sock.close()
        learner.close()


def test_the_caps_and_deadlines_are_learner_flags_with_checked_values(tmp_path, monkeypatch, capsys):
    from trainers.hilo import learner

    monkeypatch.setenv("RUN_TOKEN", TOKEN)
    for argv, message in ((["--max-pending-connections", "0"], "--max-pending-connections: '0' is outside [1, "),
                          (["--handshake-timeout", "0"], "--handshake-timeout: '0' is outside ["),
                          (["--handshake-timeout", "nan"], "--handshake-timeout: 'nan' is not a finite number")):
        try:
            learner.main(["--run-dir", str(tmp_path), *argv])
        except SystemExit as e:
            assert e.code == 2
        else:
            raise AssertionError(f"{argv} was accepted")
        assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing written


# ----------------------------------------------------------------------------- memory, joins, forged ids


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


class PeakRSS:
    """The largest RSS of process `pid` seen while this runs (sampled every 10 ms in a thread)."""

    def __init__(self, pid: int):
        import threading

        self.pid, self.peak, self._stop = pid, 0.0, False
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self):
        while not self._stop:
            try:
                self.peak = max(self.peak, rss_mib(self.pid))
            except (OSError, AssertionError):
                return  # the process is gone
            time.sleep(0.01)

    def stop(self) -> float:
        self._stop = True
        self.thread.join(5)
        return self.peak


def test_valid_frames_streamed_during_the_final_evaluation_do_not_grow_the_learner(tmp_path):
    """D1: once the loop is over the learner evaluates without reading its inbox; a token holder
    that says HELLO then and streams large, well-formed frames used to be queued without bound (3 GB
    and an OOM kill in the probe). Now the learner closes its listener and every connection before
    the evaluation: its RSS stays within two frames of where it was, and the cell completes with
    its evaluations."""
    frame_mib, frames = 16, 40  # 640 MiB offered: what the old learner would have queued
    with Cluster(tmp_path / "run", workers=1, method="full", updates=3, eval_every=1,
                 learner_flags=["--max-frame-bytes", str(frame_mib << 20)]) as c:
        pid = c.procs["learner"].pid
        c.procs["w1"].wait(timeout=WAIT_S)  # it got STOP: the learner is evaluating now
        before = rss_mib(pid)
        peak = PeakRSS(pid)
        sent = 0
        try:
            m = Member.__new__(Member)
            m.sock = connect(c)
            m.conn = Connection(m.sock, token=TOKEN, sender=1, peer="learner")
            m.conn.send(MessageType.HELLO, wire.pack_json({"worker": 1}))
            junk = b"\0" * (frame_mib << 20)
            for _ in range(frames):
                m.conn.send(MessageType.ROLLOUTS, junk)
                sent += 1
        except OSError:
            pass  # refused or cut by the learner: what the fix does
        s = c.wait()
        grew = peak.stop() - before
    print(f"\nD1: learner RSS {before:.0f} MiB before the flood, peak {before + grew:.0f} MiB; {sent} frames taken")
    assert s["complete"] is True and s["status"] == "complete", s
    assert [r["version"] for r in c.events("learner") if r["kind"] == "eval"] == [0, 1, 2, 3]
    assert grew < 2 * frame_mib + 32, f"learner RSS grew {grew:.0f} MiB while {sent} frames of {frame_mib} MiB came"


def test_a_members_inbox_is_bounded_in_bytes_while_the_learner_is_busy(tmp_path):
    """D1, during the loop: while the main thread trains (it does not pump), a member that streams
    valid frames gets at most one frame's budget queued; the rest waits in the socket buffers and
    then in the sender, whose send stops moving (TCP backpressure)."""
    from trainers.hilo.learner import Learner
    from trainers.spec import RunParams

    frame = 4 << 20
    learner = Learner(RunParams(method="full", workers=1, updates=3, model="micro", objective="grpo"), TOKEN,
                      str(tmp_path), ("127.0.0.1", 0), max_frame_bytes=frame)
    sock = None
    try:
        learner.members.listen()
        sock = socket.create_connection(learner.address, timeout=WAIT_S)
        conn = Connection(sock, token=TOKEN, sender=1, peer="learner")
        conn.send(MessageType.HELLO, wire.pack_json({"worker": 1}))
        end = time.monotonic() + WAIT_S
        while 1 not in learner.members.peers:
            assert time.monotonic() < end
            learner.pump(0.1)
        sock.settimeout(5)  # a send that moves no byte for 5 s: the learner stopped taking them
        sent, body = 0, b"\0" * frame
        try:
            for _ in range(40):  # 160 MiB offered while nobody pumps
                conn.send(MessageType.HASH, body)
                sent += 1
        except OSError:
            pass
        queued = sum(len(item[3].body) for item in list(learner.members.inbox.queue) if item[0] == "frame")
        assert sent < 40, "every frame was taken: nothing pushed back"
        assert queued <= 2 * frame, f"{queued} bytes queued from one member"
    finally:
        if sock is not None:
            sock.close()
        learner.close()


def test_idle_connections_without_the_token_cannot_starve_joins(tmp_path):
    """D2: 24 threads from three addresses re-open idle connections as fast as the learner closes
    them; they used to hold all 16 handshake slots until the workers gave up. Now the token-less
    budget holds them all and the token must show within 3 s: both genuine workers join and the
    run completes (the workers' own address: tests/trainers/hilo/test_admission.py)."""
    import threading

    stop = threading.Event()
    with Cluster(tmp_path / "run", workers=2, autostart=False, method="full", updates=3) as c:
        baseline(c)
        attackers = idle_flood(c.address, ["127.0.0.2", "127.0.0.3", "127.0.0.4"], 24, stop)
        try:
            c.wait_for("a timed-out idle connection", lambda rows: any(
                "handshake timed out" in r for r in refusals(rows)), WAIT_S)
            for w in (1, 2):
                c.start_worker(w, extra=["--connect-timeout", "60"])
            wait_rows(c, "joined", 2)
        finally:
            stop.set()
            for t in attackers:
                t.join(30)
        s = c.wait()
    assert_survived(c, s, 3)
    assert not s["dropped"]


def test_a_hello_forging_a_connected_workers_id_is_refused_and_costs_it_nothing(tmp_path):
    """D3: four HELLOs claiming to be worker 1 while it is connected used to replace its connection
    each time, using up its 3 reconnects. Now each is refused and w1 finishes without a reconnect."""
    with Cluster(tmp_path / "run", workers=1, method="full", updates=3,
                 learner_flags=["--liveness", "600"]) as c:  # w1 is held below, longer than 10 s on a busy box
        wait_rows(c, "joined", 1, worker=1)
        os.kill(c.procs["w1"].pid, signal.SIGSTOP)  # hold the run: its connection stays open meanwhile
        try:
            for _ in range(4):
                with connect(c) as s:
                    Connection(s, token=TOKEN, sender=1, peer="learner").send(
                        MessageType.HELLO, wire.pack_json({"worker": 1}))
                    assert closed_by_learner(s)
            refused = wait_refusals(c, 4, "already connected")
        finally:
            os.kill(c.procs["w1"].pid, signal.SIGCONT)
        s = c.wait()
    assert_survived(c, s, 3)
    assert set(refused) == {"worker 1 is already connected"}, refused
    assert not [r for r in c.events("w1") if r["kind"] == "connection_lost"]
    assert not [r for r in c.events("learner") if r["kind"] in ("replaced", "disconnected")]


# ----------------------------------------------------------------------------- liveness


def test_a_silent_member_is_dropped_after_the_liveness_deadline_not_per_update(tmp_path):
    """A token holder joins as worker 2 (HELLO, WELCOME) and then says nothing, its socket open.
    It used to hold batch 0 for --worker-timeout (900 s here) and each later join would again; now
    the learner drops it once no byte of it arrived for --liveness (3 s) and the genuine w1, whose
    heartbeats keep it in while it samples, completes every update."""
    updates = 4
    with Cluster(tmp_path / "run", workers=2, autostart=False, method="spar", updates=updates,
                 learner_flags=["--worker-timeout", "900", "--liveness", "3"]) as c:
        c.start_worker(1)
        wait_rows(c, "joined", 1, worker=1)
        with connect(c) as s:
            silent = Connection(s, token=TOKEN, sender=2, peer="learner")
            silent.send(MessageType.HELLO, wire.pack_json({"worker": 2}))
            welcome = wire.unpack_json(silent.recv().body)
            assert welcome["heartbeat_s"] == 0.75  # a quarter of the deadline
            dropped = wait_rows(c, "dropped", 1, worker=2)[0]
            assert closed_by_learner(s)
        s = c.wait(timeout=WAIT_S)  # far below the 900 s the member used to cost
    assert_survived(c, s, updates)
    assert "silent for 3 s (the liveness deadline)" in dropped["reason"], dropped
    assert [d["worker"] for d in s["dropped"]] == [2]
    assert c.returncodes["w1"] == 0
