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
    """Round functions: `count` frames of `payload` from a sender thread to this thread, through
    Connections of `module` (plain recv, recv(reuse=True), send_prepared -> recv(reuse=True))."""
    a, b = _tcp_pair()
    sender = module.Connection(a, token=TOKEN, sender=0, peer="w1")
    receiver = module.Connection(b, token=TOKEN, sender=1, peer="learner", max_body_bytes=1 << 30)
    prepared = module.prepare_body(payload)

    def way(send, body, reuse):
        def go():
            thread = threading.Thread(target=lambda: [send(MessageType.UPDATE, body, 1) for _ in range(count)])
            thread.start()
            for _ in range(count):
                receiver.recv(reuse=reuse)
            thread.join()
        return go

    return {"plain": way(sender.send, payload, False), "reuse": way(sender.send, payload, True),
            "prepared+reuse": way(sender.send_prepared, prepared, True)}


def _bare(payload: bytes, count: int):
    x, y = _tcp_pair()
    inbox = memoryview(bytearray(len(payload)))

    def go():
        thread = threading.Thread(target=lambda: [x.sendall(payload) for _ in range(count)])
        thread.start()
        for _ in range(count):
            got = 0
            while got < len(inbox):
                got += y.recv_into(inbox[got:])
        thread.join()
    return go


@pytest.mark.benchmark
@pytest.mark.timeout(1800)
def test_connection_against_a_bare_socket():
    before = _wire_before()
    lines = [f"load average {os.getloadavg()} at start; Connection / bare socket, CPU (both ends) | wall, "
             f"median of {ROUNDS} interleaved rounds" + (f"; before = {os.environ['WIRE_BENCH_BEFORE']}" if before else "")]
    print("\n" + lines[0], flush=True)
    for size, count in SIZES:
        payload = os.urandom(size)
        ways = {"bare": _bare(payload, count)}
        ways.update({f"after {k}": v for k, v in _streams(wire, payload, count).items()})
        if before is not None:
            ways.update({f"before {k}": v for k, v in _streams(before, payload, count).items()})
        for go in ways.values():
            go()                                                   # warm-up: kept buffers, socket buffers
        cpu, wall = {k: [] for k in ways}, {k: [] for k in ways}
        for _ in range(ROUNDS):
            for key, go in ways.items():
                c0, w0 = time.process_time(), time.perf_counter()
                go()
                cpu[key].append(time.process_time() - c0)
                wall[key].append(time.perf_counter() - w0)
        c, w = (statistics.median(cpu["bare"]), statistics.median(wall["bare"]))
        cells = [f"{k} {statistics.median(cpu[k]) / c:.2f}x | {statistics.median(wall[k]) / w:.2f}x"
                 for k in ways if k != "bare"]
        lines.append(f"{size:>10,d} B x {count:<4d} bare {1e6 * c / count:9.1f} us CPU/frame  " + "  ".join(cells))
        print(lines[-1], flush=True)
    lines.append(f"load average {os.getloadavg()} at end")
    print(lines[-1], flush=True)
