"""The wire without whole-payload copies: frames of several buffers over real TCP sockets, partial
sends, the length cap before any allocation, the checksum over a body read in chunks, and
tensors decoded as views over the receive buffer, equal bit for bit to what was sent."""
import socket
import struct
import threading

import pytest
import torch

from trainers.protocol import dtypes, wire
from trainers.compress import get_compressor
from trainers.protocol.wire import Connection, MessageType, WireError
from tests.trainers.protocol.pairs import TOKEN, connections, tcp_pair





def address_range(buf) -> range:
    start = torch.frombuffer(buf, dtype=torch.uint8).data_ptr()
    return range(start, start + len(buf))


def mixed_tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    special = torch.tensor([0.0, -0.0, 1e-45, -3.4e38, float("inf"), float("nan")])  # bits, not values
    return {"a": torch.cat([torch.randn(300_000, generator=g), special]).reshape(-1, 2),
            "b": torch.randn(1000, 64, generator=g).to(torch.bfloat16),
            "ids": torch.randint(-2**62, 2**62, (777,), generator=g),
            "mask": torch.rand(13, generator=g) > 0.5,
            "h": torch.randn(5, 7, generator=g).to(torch.float16),
            "c": torch.randn(64, 1000, generator=g)}


def same_bits(x: torch.Tensor, y: torch.Tensor) -> bool:
    return x.dtype == y.dtype and x.shape == y.shape and bytes(dtypes.byte_view(x)) == bytes(dtypes.byte_view(y))


def test_setup_makes_sendmsg_partial():
    # The premise of the next test: with a small send buffer and a socket timeout, one sendmsg
    # call writes only part of a large frame.
    a, b = tcp_pair(sndbuf=4096)
    a.settimeout(5)
    try:
        assert 0 < a.sendmsg([memoryview(bytes(4 << 20))]) < 4 << 20
    finally:
        a.close(), b.close()


def test_multi_buffer_frame_round_trips_over_tcp_with_partial_sends():
    ca, cb = connections(sndbuf=4096)
    ca.sock.settimeout(30)  # sendmsg then returns after each partial write
    tensors = mixed_tensors()
    body = wire.pack_tensor_parts(tensors, meta={"batch": 7})
    assert len(body) == 1 + len(tensors)  # a table buffer, then one view per tensor: nothing joined
    got = []
    reader = threading.Thread(target=lambda: got.append(cb.recv()))
    reader.start()
    written = ca.send(MessageType.ROLLOUTS, body, version=3)
    reader.join(60)
    frame = got[0]
    assert written == frame.nbytes == wire.HEADER_BYTES + wire.body_len(body)
    assert bytes(frame.body) == b"".join(body) == wire.pack_tensors(tensors, meta={"batch": 7})
    assert ca.counter.total(direction="sent") == cb.counter.total(direction="received") == written
    assert cb.counter.total(direction="received", field="payload") == wire.body_len(body)
    out, meta = wire.unpack_tensors(frame.body)
    assert meta == {"batch": 7} and list(out) == list(tensors)
    assert all(same_bits(out[n], t) for n, t in tensors.items())
    ca.close(), cb.close()


def test_decoded_tensors_are_views_over_the_receive_buffer():
    ca, cb = connections()
    # Each tensor is followed by a whole number of its own elements: all land aligned.
    tensors = {"C": torch.randn(3, 5).to(torch.bfloat16), "A": torch.randn(64, 896), "B": torch.randn(896, 64)}
    ca.send(MessageType.ROLLOUTS, wire.pack_tensor_parts(tensors))
    frame = cb.recv()
    out, _ = wire.unpack_tensors(frame.body)
    inside = address_range(frame.body)
    assert all(out[n].data_ptr() in inside for n in tensors)  # no copy: the buffer's end is aligned
    assert all(same_bits(out[n], t) for n, t in tensors.items())
    ca.close(), cb.close()


def test_identity_update_decodes_over_the_receive_buffer_bit_for_bit():
    ca, cb = connections()
    grads = {"l0.lora_A": torch.randn(64, 896), "l0.lora_B": torch.randn(896, 64)}
    encoder, decoder = get_compressor("identity", dtype="fp32"), get_compressor("identity", dtype="fp32")
    payload = encoder.encode(grads)
    ca.send(MessageType.UPDATE, payload, version=1)
    frame = cb.recv()
    assert bytes(frame.body) == payload
    decoded = decoder.decode(frame.body)
    assert all(same_bits(decoded[n], g) for n, g in grads.items())
    assert all(decoded[n].data_ptr() in address_range(frame.body) for n in grads)
    ca.close(), cb.close()


def test_a_body_over_the_huge_page_threshold_is_received_in_place_and_outlives_its_frame():
    """From HUGE_PAGES_FROM bytes the receive buffer is its own huge-page mapping: still writable,
    end-aligned, decoded in place, bit for bit (-0.0 included), and alive while a tensor views it."""
    ca, cb = connections()
    g = torch.Generator().manual_seed(1)
    grads = {"l0.lora_A": torch.randn(64, 9728, generator=g), "l0.lora_B": torch.randn(9728, 64, generator=g)}
    grads["l0.lora_A"][0, :3] = torch.tensor([0.0, -0.0, 1e-45])
    payload = get_compressor("identity", dtype="fp32").encode(grads)
    assert len(payload) > wire.HUGE_PAGES_FROM
    sender = threading.Thread(target=ca.send, args=(MessageType.UPDATE, payload, 1))   # more than a socket holds
    sender.start()
    frame = cb.recv()
    sender.join()
    assert not frame.body.readonly and (torch.frombuffer(frame.body, dtype=torch.uint8).data_ptr()
                                        + len(frame.body)) % wire.RECV_ALIGN == 0
    decoded = get_compressor("identity", dtype="fp32").decode(frame.body)
    assert all(decoded[n].data_ptr() in address_range(frame.body) for n in grads)
    del frame
    import gc
    gc.collect()
    assert all(same_bits(decoded[n], t) for n, t in grads.items())
    ca.close(), cb.close()


def test_more_buffers_than_one_sendmsg_takes():
    ca, cb = connections()
    tensors = {f"t{i}": torch.full((i % 5 + 1,), float(i)) for i in range(3 * wire.MAX_IOV)}
    ca.send(MessageType.ROLLOUTS, wire.pack_tensor_parts(tensors))
    out, _ = wire.unpack_tensors(cb.recv().body)
    assert all(torch.equal(out[n], t) for n, t in tensors.items())
    ca.close(), cb.close()


def test_a_length_over_the_cap_is_refused_before_allocating_and_the_cap_itself_is_accepted():
    cap = 1 << 20
    for announced, reason in ((cap + 1, "frame too large"), (cap, "closed in the middle of a body: 0 of")):
        a, b = tcp_pair()
        cb = Connection(b, token=TOKEN, sender=0, peer="w1", max_body_bytes=cap)
        header = wire.HEADER.pack(wire.MAGIC, wire.FORMAT_VERSION, int(MessageType.UPDATE), 0,
                                  wire.token_check(TOKEN), 1, 0, 0, announced, 0)
        a.sendall(header)
        a.shutdown(socket.SHUT_WR)  # no body byte follows
        with pytest.raises(WireError, match=reason):
            cb.recv()
        a.close(), cb.close()


@pytest.mark.parametrize("at", [0, 1 << 19, (3 << 20) - 1])
def test_a_corrupted_body_is_caught_by_the_checksum(at):
    # 3 MiB: the body arrives in many chunks, and the checksum runs across them.
    a, b = tcp_pair()
    cb = Connection(b, token=TOKEN, sender=0, peer="w1")
    body = torch.randn(3 << 18).view(torch.uint8).numpy().tobytes()
    parts = wire.encode_frame_parts(MessageType.UPDATE, body, check=wire.token_check(TOKEN), sender=1,
                                    version=0, seq=0)
    bad = bytearray(body)
    bad[at] ^= 0x10
    got = []
    reader = threading.Thread(target=lambda: got.append(pytest.raises(WireError, cb.recv)))
    reader.start()
    wire.send_parts(a, [parts[0], memoryview(bad)])
    reader.join(60)
    assert "checksum mismatch" in str(got[0].value)
    a.close(), cb.close()


def test_a_reader_that_takes_no_bytes_fails_the_send_by_so_sndtimeo():
    # What membership.py sets on every member's socket: a send that moves no byte for this long fails.
    ca, cb = connections(sndbuf=4096)
    ca.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 0, 200_000))  # 0.2 s
    with pytest.raises(OSError):
        ca.send(MessageType.UPDATE, bytes(64 << 20))
    ca.close(), cb.close()


def test_encode_frame_is_the_parts_joined():
    check = wire.token_check(TOKEN)
    parts = [b"abc", bytearray(b"de"), memoryview(b""), torch.arange(3, dtype=torch.int32).numpy()]
    frame = wire.encode_frame(MessageType.UPDATE, parts, check=check, sender=1, version=2, seq=3)
    joined = b"abcde" + bytes(dtypes.byte_view(torch.arange(3, dtype=torch.int32)))
    assert frame == wire.encode_frame(MessageType.UPDATE, joined, check=check, sender=1, version=2, seq=3)
    assert frame[wire.HEADER_BYTES:] == joined and wire.body_len(parts) == len(joined)
    wire.verify_checksum(frame[:wire.HEADER_BYTES], frame[wire.HEADER_BYTES:], int.from_bytes(frame[40:44], "big"))
