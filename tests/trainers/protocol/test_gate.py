"""The token-less handshake budget and the token peek, over real TCP sockets on 127.0.0.1; and the
per-source row tally. Grace periods are 0 or far away, so nothing depends on timing."""
from __future__ import annotations

import socket
import time

import pytest

from trainers.events import EventLog, Tally, read_events
from trainers.protocol import wire
from trainers.protocol.gate import Gate, await_token

TOKEN = "gate-test-token"


@pytest.fixture
def listener():
    server = socket.create_server(("127.0.0.1", 0))
    opened = []

    def pair(source: str = "127.0.0.1"):
        client = socket.create_connection(server.getsockname(), source_address=(source, 0))
        accepted, addr = server.accept()
        opened.extend([client, accepted])
        return client, accepted, addr[0]

    yield pair
    for s in opened:
        s.close()
    server.close()


def header(token: str = TOKEN) -> bytes:
    return wire.encode_frame(wire.MessageType.HELLO, wire.pack_json({"worker": 1}), check=wire.token_check(token),
                             sender=1, version=0, seq=0)


def test_the_token_is_peeked_and_the_frame_left_for_recv(listener):
    client, accepted, _ = listener()
    data = header()
    client.sendall(data[:10])  # a header in two pieces
    client.sendall(data[10:])
    await_token(accepted, wire.token_check(TOKEN), time.monotonic() + 30)
    frame = wire.Connection(accepted, token=TOKEN, sender=0, peer="w").recv(deadline=time.monotonic() + 30)
    assert frame.type == wire.MessageType.HELLO  # nothing was consumed by the peek


@pytest.mark.parametrize("data, error, reason", [
    (header("another token"), wire.WireError, "wrong run token"),
    (b"GET / HTTP/1.1\r\n\r\n", wire.WireError, "bad magic"),
    (b"", wire.PeerClosed, "closed by peer"),
])
def test_a_wrong_token_garbage_or_eof_is_refused_at_the_peek(listener, data, error, reason):
    client, accepted, _ = listener()
    if data:
        client.sendall(data)
    else:
        client.shutdown(socket.SHUT_WR)
    with pytest.raises(error, match=reason):
        await_token(accepted, wire.token_check(TOKEN), time.monotonic() + 30)


def test_silence_passes_the_token_deadline(listener):
    _, accepted, _ = listener()
    with pytest.raises(wire.DeadlineExceeded, match="run token"):
        await_token(accepted, wire.token_check(TOKEN), time.monotonic() + 0.05)


def test_a_source_at_its_cap_evicts_its_own_oldest_past_the_grace_else_is_refused(listener):
    gate = Gate(max_pending=10, per_source=2, grace_s=3600)
    held = [listener() for _ in range(2)]
    tickets = [gate.enter(acc, src)[0] for _, acc, src in held]
    assert all(tickets)
    _, acc, src = listener()
    ticket, why = gate.enter(acc, src)
    assert ticket is None and "cap of 2 pending connections from 127.0.0.1" in why  # all within their grace
    gate.grace_s = 0
    ticket, why = gate.enter(acc, src)
    assert ticket is not None and tickets[0].evicted and not tickets[1].evicted
    held[0][0].settimeout(30)
    assert held[0][0].recv(1) == b""  # the evicted connection was shut down
    gate.leave(tickets[1])  # showing the token frees the slot
    assert gate.pending() == 1 and gate.evicted == 1 and gate.refused == 1


def test_a_newcomer_from_a_smaller_holder_evicts_the_largest_holder(listener):
    gate = Gate(max_pending=3, per_source=3, grace_s=0)
    flood = [listener("127.0.0.2") for _ in range(3)]
    tickets = [gate.enter(acc, src)[0] for _, acc, src in flood]
    _, acc, src = listener("127.0.0.1")
    ticket, _ = gate.enter(acc, src)
    assert ticket is not None and tickets[0].evicted and gate.pending() == 3


def test_the_tally_writes_one_row_per_source_per_interval_with_the_count(tmp_path):
    events = EventLog(tmp_path, "learner")
    tally = Tally(events, "rejected", interval_s=3600)
    for i in range(10_000):
        tally.add(f"10.0.0.{i % 3}", reason="wrong run token" if i % 2 else f"reason {i % 40}")
    rows = read_events(events.path)
    assert len(rows) == 3 and all(r["count"] == 1 for r in rows)  # the first of each source, at once
    tally.flush()  # nothing due within the interval
    assert len(read_events(events.path)) == 3
    tally.flush(due_only=False)
    events.close()
    rows = read_events(events.path)
    assert len(rows) == 6 and sum(r["count"] for r in rows) == 10_000 == tally.total
    for r in rows[3:]:
        assert len(r["reasons"]) <= Tally.MAX_REASONS + 1 and sum(r["reasons"].values()) == r["count"]
