"""TCP_INFO counters (trainers/protocol/wire.py tcp_info, Connection.tcp_delta) on real loopback sockets."""
import socket
import threading
import time

from trainers.protocol import wire
from trainers.protocol.wire import Connection, MessageType


def _pair():
    srv = socket.create_server(("127.0.0.1", 0))
    a = socket.create_connection(srv.getsockname())
    b, _ = srv.accept()
    srv.close()
    return a, b


def _drain(sock, n):
    got = 0
    while got < n:
        got += len(sock.recv(1 << 20))


def test_tcp_info_counts_what_the_kernel_sent_and_received():
    a, b = _pair()
    with a, b:
        before = wire.tcp_info(a)
        a.sendall(b"x" * 300_000)
        _drain(b, 300_000)
        time.sleep(0.05)                     # the last ACK
        after, peer = wire.tcp_info(a), wire.tcp_info(b)
    assert after["bytes_sent"] - before["bytes_sent"] == 300_000        # loopback: nothing retransmitted
    assert after["bytes_acked"] - before["bytes_acked"] == 300_000
    assert after["bytes_retrans"] == 0 and after["total_retrans"] == 0
    assert peer["bytes_received"] == 300_000
    assert after["segs_out"] > 0 and peer["segs_in"] > 0


def test_tcp_info_of_a_closed_socket_is_empty():
    a, b = _pair()
    a.close()
    b.close()
    assert wire.tcp_info(a) == {}


def test_connection_delta_covers_each_frame_once():
    a, b = _pair()
    ca, cb = Connection(a, token="t", sender=0, peer="b"), Connection(b, token="t", sender=1, peer="a")
    try:
        first = ca.send(MessageType.UPDATE, b"y" * 50_000, 1)
        reader = threading.Thread(target=cb.recv)
        reader.start()
        reader.join(10)
        time.sleep(0.05)
        d1 = ca.tcp_delta()
        second = ca.send(MessageType.UPDATE, b"z" * 20_000, 2)
        cb.recv()
        time.sleep(0.05)
        d2 = ca.tcp_delta()
        assert d1["bytes_sent"] == first and d2["bytes_sent"] == second      # frames = socket bytes on loopback
        assert cb.tcp_delta()["bytes_received"] == first + second
        assert wire.sum_counts([d1, d2])["bytes_sent"] == first + second
    finally:
        ca.close()
        cb.close()
