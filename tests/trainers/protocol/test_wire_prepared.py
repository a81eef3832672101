"""A broadcast's one checksum: the bytes on the wire are those of an ordinary send, and a corrupted
prepared body is still caught (the kept receive buffers of recv(reuse=True): test_wire_reuse.py)."""
import os

import pytest

from trainers.protocol import wire
from trainers.protocol.wire import MessageType, WireError
from tests.trainers.protocol.pairs import TOKEN, connections




@pytest.mark.parametrize("n", [0, 1, 3, 40, 4096, 1_000_003])
def test_combined_checksum_equals_the_checksum_of_the_joined_bytes(n):
    head, body = os.urandom(40), os.urandom(n)
    assert wire.checksum_combine(wire.checksum(head), wire.checksum(body), n) == wire.checksum(head + body)


def test_the_combine_tables_hold_for_every_byte_of_the_register():
    # checksum_combine looks up each byte of crc(head) in its own table: heads whose CRCs cover many values
    body = os.urandom(1000)
    for _ in range(300):
        head = os.urandom(40)
        assert wire.checksum_combine(wire.checksum(head), wire.checksum(body), 1000) == wire.checksum(head + body)


def test_a_prepared_header_is_byte_for_byte_the_ordinary_one():
    parts = [os.urandom(1000), b"", os.urandom(77)]
    check = wire.token_check(TOKEN)
    for seq, version in ((0, 0), (5, 9), (2**31, 2**31 + 1)):
        assert wire.prepared_header(MessageType.UPDATE, wire.prepare_body(parts), check=check, sender=0,
                                    version=version, seq=seq) == \
            wire.frame_header(MessageType.UPDATE, wire.body_parts(parts), check=check, sender=0, version=version,
                              seq=seq)


def test_one_prepared_body_reaches_several_connections_and_counts_like_send():
    body = wire.prepare_body([os.urandom(5000), os.urandom(123)])
    expected = b"".join(bytes(p) for p in body.parts)
    pairs = [connections() for _ in range(3)]
    try:
        for version in (1, 2):
            for s, _ in pairs:
                assert s.send_prepared(MessageType.UPDATE, body, version) == wire.HEADER_BYTES + len(expected)
            for _, r in pairs:
                frame = r.recv()
                assert (frame.type, frame.version, bytes(frame.body)) == (MessageType.UPDATE, version, expected)
        s, r = pairs[0]
        assert s.counter.total(direction="sent") == r.counter.total(direction="received") == 2 * (44 + len(expected))
    finally:
        for s, r in pairs:
            s.close(), r.close()


def test_a_prepared_body_changed_after_its_checksum_is_rejected_by_the_receiver():
    buf = bytearray(os.urandom(2000))
    body = wire.prepare_body(buf)
    buf[100] ^= 0xFF                                  # the caller broke the contract: the CRC no longer holds
    s, r = connections()
    try:
        s.send_prepared(MessageType.UPDATE, body, 1)
        with pytest.raises(WireError, match="checksum mismatch"):
            r.recv()
    finally:
        s.close(), r.close()


@pytest.mark.parametrize("n", [0, 1, 7, 44, 4095, 65_537, 1_000_003])
def test_the_wire_checksum_is_the_crc32c_package_s_whatever_library_computes_it(n):
    # The wire takes crc32c-rs when it is installed; the frame format is CRC-32C either way.
    import crc32c
    data = memoryview(bytearray(os.urandom(n)))
    for start in (0, 0x12345678, 0xFFFFFFFF):
        assert wire.checksum(data, start) == crc32c.crc32c(data, start)
    assert wire.checksum(data[3:]) == crc32c.crc32c(bytes(data[3:]))
