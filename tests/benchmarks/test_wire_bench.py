"""Benchmark: the wire against the memory floor, for the fp32 identity update of a rank-64 LoRA
adapter on all 7 projections of Qwen2.5-0.5B (141 MB) and Qwen2.5-1.5B (295 MB), shapes from
the meta-device model (`trainers.model.models.lora_shapes`).

    .venv/bin/python -m pytest tests/benchmarks/test_wire_bench.py -m benchmark -s

Prints figures; asserts nothing about wall-clock time. Each figure is the median of several
repetitions, the floor measured side by side in the same loop (the box is shared and noisy):

- in memory: frame (header + checksum over the payload, no copy) + the one copy the socket
  makes into the receive buffer + unframe (header checks, checksum, `decode` into tensors over
  that buffer, finite check included), against one plain `bytearray` copy of the payload;
- over a localhost TCP socket: `Connection.send` -> `Connection.recv` -> `decode`, against a
  bare `sendall` -> `recv_into` of the same bytes into a preallocated buffer.

`test_connection_against_a_bare_socket` prints the ratio of a loopback `Connection` to a bare
socket for small (1 KB), medium (1 MB) and large (64 MB) bodies: CPU seconds of both ends (the
sender is a thread of this process) and wall seconds, medians of interleaved rounds, the load
average before and after. Set WIRE_BENCH_BEFORE to the path of another wire.py (say
`git show main:trainers/protocol/wire.py > /tmp/wire_before.py`) to measure it side by side.
"""
import importlib.util
import os
import socket
import statistics
import struct
import sys
import threading
import time

import pytest
import torch

from trainers.protocol import wire
from trainers.compress import get_compressor
from trainers.model.models import lora_shapes
from trainers.protocol.wire import Connection, MessageType

MODELS = ("qwen2.5-0.5b", "qwen2.5-1.5b")
REPEATS = 7
TOKEN = "bench"


def _median_seconds(fn, repeats: int = REPEATS) -> float:
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def _in_memory(payload: bytes, decoder) -> dict[str, torch.Tensor]:
    """Frame, deliver into a receive buffer (the socket's copy), unframe and decode."""
    check = wire.token_check(TOKEN)
    parts = wire.encode_frame_parts(MessageType.UPDATE, payload, check=check, sender=0, version=1, seq=0)
    header = bytes(parts[0])
    *_, body_len, crc = wire.parse_header(header, check=check, expected_seq=0, max_body_bytes=1 << 30)
    body, pos = wire.recv_buffer(body_len), 0
    for part in parts[1:]:
        body[pos:pos + len(part)] = part
        pos += len(part)
    wire.verify_checksum(header, body, crc)
    return decoder.decode(body)


def _tcp_pair():
    with socket.create_server(("127.0.0.1", 0)) as srv:
        a = socket.create_connection(srv.getsockname())
        b, _ = srv.accept()
    return a, b


def _over_tcp(payload: bytes, decoder, repeats: int = REPEATS) -> tuple[float, float]:
    """Median seconds of send -> recv -> decode through Connections, and of a bare sendall ->
    recv_into of the same bytes (one direction of one localhost connection each)."""
    a, b = _tcp_pair()
    ca = Connection(a, token=TOKEN, sender=0, peer="w1")
    cb = Connection(b, token=TOKEN, sender=1, peer="learner", max_body_bytes=1 << 30)
    x, y = _tcp_pair()
    n = len(payload)

    def wire_once():
        t = threading.Thread(target=ca.send, args=(MessageType.UPDATE, payload, 1))
        t.start()
        decoder.decode(cb.recv().body)
        t.join()

    def bare_once():
        t = threading.Thread(target=x.sendall, args=(payload,))
        t.start()
        view, got = memoryview(bytearray(n)), 0
        while got < n:
            got += y.recv_into(view[got:])
        t.join()

    w, f = [], []
    for _ in range(repeats):  # interleaved: both see the same load
        w.append(_median_seconds(wire_once, 1))
        f.append(_median_seconds(bare_once, 1))
    ca.close(), cb.close(), x.close(), y.close()
    return statistics.median(w), statistics.median(f)


@pytest.mark.benchmark
@pytest.mark.timeout(1800)
def test_wire_against_the_memory_floor():
    lines = []
    for model in MODELS:
        shapes = lora_shapes(model, 64)
        grads = {n: torch.randn(s) for n, s in shapes}
        encoder, decoder = (get_compressor("identity", dtype="fp32", error_feedback=False) for _ in range(2))
        t0 = time.perf_counter()
        payload = encoder.encode(grads)
        encode_s = time.perf_counter() - t0
        check = wire.token_check(TOKEN)
        copy, framed, checksum = [], [], []
        for _ in range(REPEATS):  # interleaved, one of each per round
            copy.append(_median_seconds(lambda: bytearray(memoryview(payload)), 1))
            framed.append(_median_seconds(lambda: _in_memory(payload, decoder), 1))
            checksum.append(_median_seconds(lambda: wire.checksum(payload), 1))
        out = _in_memory(payload, decoder)
        assert all(torch.equal(out[n], g) for n, g in grads.items())
        frame_only = _median_seconds(lambda: wire.encode_frame_parts(MessageType.UPDATE, payload, check=check,
                                                                     sender=0, version=1, seq=0))
        tcp_wire, tcp_bare = _over_tcp(payload, decoder)
        c, f = statistics.median(copy), statistics.median(framed)
        lines.append(
            f"{model}: fp32 identity update {len(payload) / 1e6:.1f} MB | copy {c:.4f} s | "
            f"frame+checksum+unframe+decode {f:.4f} s = {f / c:.2f}x copy (frame alone {frame_only:.4f} s, "
            f"checksum pass {statistics.median(checksum):.4f} s) | compressor encode {encode_s:.3f} s | "
            f"TCP send->recv->decode {tcp_wire:.4f} s vs bare sendall->recv_into {tcp_bare:.4f} s "
            f"= {tcp_wire / tcp_bare:.2f}x")
        del grads, payload, out
    print("\n" + "\n".join(lines))


SIZES = ((1 << 10, 2000), (1 << 20, 64), (64 << 20, 2))  # body bytes, frames per round
ROUNDS = 9


def _wire_before():
    """The wire module named by WIRE_BENCH_BEFORE (None when unset): a baseline to run beside this one."""
    path = os.environ.get("WIRE_BENCH_BEFORE")
    if not path:
        return None
    spec = importlib.util.spec_from_file_location("wire_before", path)
    module = sys.modules["wire_before"] = importlib.util.module_from_spec(spec)  # dataclasses look it up
    spec.loader.exec_module(module)
    return module


def _streams(module, payload: bytes, count: int) -> dict:
    """{way: (send one round, receive one round)}: `count` frames of `payload` through Connections of
    `module` (plain recv, recv(reuse=True), send_prepared -> recv(reuse=True))."""
    a, b = _tcp_pair()
    sender = module.Connection(a, token=TOKEN, sender=0, peer="w1")
    receiver = module.Connection(b, token=TOKEN, sender=1, peer="learner", max_body_bytes=1 << 30)
    prepared = module.prepare_body(payload)

    def sends(send, body):
        def go():
            for _ in range(count):
                send(MessageType.UPDATE, body, 1)
        return go

    def receives(reuse):
        def go():
            for _ in range(count):
                receiver.recv(reuse=reuse)
        return go

    return {"plain": (sends(sender.send, payload), receives(False)),
            "reuse": (sends(sender.send, payload), receives(True)),
            "prepared+reuse": (sends(sender.send_prepared, prepared), receives(True))}


def _bare(payload: bytes, count: int):
    """(send one round, receive one round) of `count` bare sendall -> recv_into of `payload`."""
    x, y = _tcp_pair()
    inbox = memoryview(bytearray(len(payload)))

    def sends():
        for _ in range(count):
            x.sendall(payload)

    def receives():
        for _ in range(count):
            got = 0
            while got < len(inbox):
                got += y.recv_into(inbox[got:])
    return sends, receives


def _in_a_thread(sends, receives):
    """A round with the sender a thread of this process: CPU seconds of both ends (one process)."""
    def go() -> float:
        c0 = time.process_time()
        thread = threading.Thread(target=sends)
        thread.start()
        receives()
        thread.join()
        return time.process_time() - c0
    return go


class _ForkedSender:
    """The senders of several ways in one forked child process (as a worker and its learner are): a
    round writes the way's index on a control socket, receives here, and reads back the child's CPU
    seconds. No GIL is shared between the two ends, unlike `_in_a_thread`."""

    def __init__(self, sends: list):
        self.ctrl, child = socket.socketpair()
        self.pid = os.fork()
        if self.pid == 0:  # the child: run what it is told until told to stop, then leave without cleanup
            code = 0
            try:
                self.ctrl.close()
                while (k := child.recv(1)) and k[0] < len(sends):
                    c0 = time.process_time()
                    sends[k[0]]()
                    child.sendall(struct.pack("d", time.process_time() - c0))
            except BaseException:
                code = 1
            os._exit(code)
        child.close()

    def way(self, k: int, receives):
        def go() -> float:
            c0 = time.process_time()
            self.ctrl.sendall(bytes([k]))
            receives()
            (child_s,) = struct.unpack("d", self.ctrl.recv(8, socket.MSG_WAITALL))
            return time.process_time() - c0 + child_s
        return go

    def close(self):
        self.ctrl.sendall(bytes([255]))
        os.waitpid(self.pid, 0)
        self.ctrl.close()


def _rounds(ways: dict, size: int, count: int, where: str) -> str:
    """Interleaved rounds of each way (a function returning its CPU seconds); the line of ratios to bare."""
    for go in ways.values():
        go()                                                           # warm-up: kept buffers, socket buffers
    cpu, wall = {k: [] for k in ways}, {k: [] for k in ways}
    for _ in range(ROUNDS):
        for key, go in ways.items():
            w0 = time.perf_counter()
            cpu[key].append(go())
            wall[key].append(time.perf_counter() - w0)
    c, w = (statistics.median(cpu["bare"]), statistics.median(wall["bare"]))
    cells = [f"{k} {statistics.median(cpu[k]) / c:.2f}x | {statistics.median(wall[k]) / w:.2f}x"
             for k in ways if k != "bare"]
    line = f"{size:>10,d} B x {count:<4d} {where:7s} bare {1e6 * c / count:9.1f} us CPU/frame  " + "  ".join(cells)
    print(line, flush=True)
    return line


@pytest.mark.benchmark
@pytest.mark.timeout(1800)
def test_connection_against_a_bare_socket():
    before = _wire_before()
    lines = [f"load average {os.getloadavg()} at start; Connection / bare socket, CPU (both ends) | wall, "
             f"median of {ROUNDS} interleaved rounds; sender a thread of this process (one GIL for both "
             f"ends), then a forked process" + (f"; before = {os.environ['WIRE_BENCH_BEFORE']}" if before else "")]
    print("\n" + lines[0], flush=True)
    for size, count in SIZES:
        payload = os.urandom(size)
        pairs = {"bare": _bare(payload, count)}
        pairs.update({f"after {k}": v for k, v in _streams(wire, payload, count).items()})
        if before is not None:
            pairs.update({f"before {k}": v for k, v in _streams(before, payload, count).items()})
        threaded = {k: _in_a_thread(*v) for k, v in pairs.items()}
        lines.append(_rounds(threaded, size, count, "thread"))
        forked = _ForkedSender([sends for sends, _ in pairs.values()])  # after the thread rounds: it takes
        try:                                                             # the senders' sequence numbers along
            lines.append(_rounds({k: forked.way(i, v[1]) for i, (k, v) in enumerate(pairs.items())}, size, count,
                                 "process"))
        finally:
            forked.close()
    lines.append(f"load average {os.getloadavg()} at end")
    print(lines[-1], flush=True)
