"""recv(reuse=True)'s kept receive buffers and their release contract, over real TCP sockets: a
body no one refers to any more is read into again (no allocation per frame), a body still
referred to (the frame, a slice of it, a tensor decoded over it, a queue that holds it) is never
overwritten, and a released frame's body cannot be read by mistake."""
import os
import queue
import threading

import pytest
import torch

from trainers.compress import get_compressor
from trainers.protocol import wire
from trainers.protocol.wire import Connection, MessageType
from tests.trainers.protocol.pairs import TOKEN, connections

# One size a bytearray holds, one an uninitialised tensor's storage, one a huge-page mapping.
SIZES = [100, 100_000, wire.HUGE_PAGES_FROM + 1000]



def address(body) -> int:
    return torch.frombuffer(body, dtype=torch.uint8).data_ptr()


def send_all(sender: Connection, bodies) -> threading.Thread:
    """Send `bodies` from a thread (a large one does not fit the socket's buffer)."""
    thread = threading.Thread(target=lambda: [sender.send(MessageType.UPDATE, b, 1) for b in bodies])
    thread.start()
    return thread


@pytest.mark.parametrize("size", SIZES)
def test_a_body_dropped_before_the_next_recv_is_read_into_the_same_buffer(size):
    s, r = connections()
    bodies = [os.urandom(size) for _ in range(4)]
    try:
        sender = send_all(s, bodies)
        addresses = []
        for body in bodies:
            frame = r.recv(reuse=True)
            assert bytes(frame.body) == body and not frame.body.readonly
            assert (address(frame.body) + size) % wire.RECV_ALIGN == 0
            addresses.append(address(frame.body))
            del frame
        sender.join()
        assert len(set(addresses)) == 1 and r.fresh_buffers == 0
        s.send(MessageType.UPDATE, bodies[0], 1)
        assert address(r.recv().body) != addresses[0]        # without reuse: a buffer of its own
    finally:
        s.close(), r.close()


@pytest.mark.parametrize("size", SIZES)
def test_bodies_still_held_are_never_overwritten(size):
    s, r = connections()
    bodies = [os.urandom(size) for _ in range(6)]
    try:
        sender = send_all(s, bodies)
        held = [r.recv(reuse=True) for _ in bodies]           # a consumer that keeps every frame
        sender.join()
        assert [bytes(f.body) for f in held] == bodies
        assert len({address(f.body) for f in held}) == len(bodies)
        assert r.fresh_buffers == len(bodies) - wire.KEPT_BUFFERS
    finally:
        s.close(), r.close()


def test_a_slice_or_a_decoded_tensor_keeps_its_buffer_from_reuse_until_it_is_gone():
    s, r = connections()
    grads = {"a": torch.randn(64, 300), "b": torch.randn(300, 64)}
    payload = get_compressor("identity", dtype="fp32").encode(grads)
    decoder = get_compressor("identity", dtype="fp32")
    others = [os.urandom(len(payload)) for _ in range(3)]
    try:
        sender = send_all(s, [payload, *others])
        frame = r.recv(reuse=True)
        decoded = decoder.decode(frame.body)                  # views over the receive buffer
        tail = frame.body[-16:]
        first = address(frame.body)
        assert decoded["a"].data_ptr() in range(first, first + len(payload))
        expected_tail = bytes(tail)
        del frame
        for body in others:                                   # the tensors' buffer is still in use
            frame = r.recv(reuse=True)
            assert bytes(frame.body) == body and address(frame.body) != first
            del frame
        sender.join()
        assert all(torch.equal(decoded[n], g) for n, g in grads.items()) and bytes(tail) == expected_tail
        del decoded, tail
        taken = set()
        for _ in range(wire.KEPT_BUFFERS):                    # now free: one of the kept buffers again
            s.send(MessageType.UPDATE, others[0], 1)
            frame = r.recv(reuse=True)
            taken.add(address(frame.body))
        assert first in taken
    finally:
        s.close(), r.close()


def test_a_released_frame_cannot_be_read_and_its_buffer_is_reused():
    s, r = connections()
    first, second = os.urandom(5000), os.urandom(5000)
    try:
        sender = send_all(s, [first, second])
        frame = r.recv(reuse=True)
        where = address(frame.body)
        log = [frame]                                          # kept (say, in a log) after its release
        frame.release()
        with pytest.raises(ValueError, match="released"):
            bytes(log[0].body)
        with pytest.raises(ValueError, match="released"):
            log[0].nbytes
        nxt = r.recv(reuse=True)
        sender.join()
        assert bytes(nxt.body) == second and address(nxt.body) == where
        frame.release()                                        # twice: harmless
    finally:
        s.close(), r.close()


def test_a_reader_thread_ahead_of_its_consumer_hands_over_intact_frames():
    """The worker's shape: a reader thread receives with reuse into a queue while the consumer
    is still busy with earlier frames; every frame the consumer takes holds its own bytes."""
    s, r = connections()
    bodies = [os.urandom(50_000 + i) for i in range(40)]
    inbox: queue.Queue = queue.Queue()

    def read():
        for _ in bodies:
            inbox.put(r.recv(reuse=True))

    try:
        sender, reader = send_all(s, bodies), threading.Thread(target=read)
        reader.start()
        for i, body in enumerate(bodies):
            frame = inbox.get(timeout=30)
            if i % 7 == 0:
                reader.join(0.05)                               # a slow step: the reader runs ahead
            assert bytes(frame.body) == body
            del frame
        sender.join(), reader.join()
        assert r.fresh_buffers < len(bodies)
    finally:
        s.close(), r.close()


def test_reuse_of_a_bad_frame_still_fails_with_one_reason():
    s, r = connections()
    try:
        s.send(MessageType.UPDATE, os.urandom(3000), 1)
        good = r.recv(reuse=True)
        parts = wire.encode_frame_parts(MessageType.UPDATE, os.urandom(3000), check=wire.token_check(TOKEN),
                                        sender=0, version=1, seq=1)
        bad = bytearray(parts[1])
        bad[7] ^= 1
        wire.send_parts(s.sock, [parts[0], memoryview(bad)])
        with pytest.raises(wire.WireError, match="checksum mismatch"):
            r.recv(reuse=True)
        assert len(good.body) == 3000
    finally:
        s.close(), r.close()
