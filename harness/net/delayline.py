"""A userspace delay line on NFQUEUE: the fallback backend's delay, jitter and burst loss.

Why userspace: this kernel has no sch_netem. iptables rules (``-j NFQUEUE --queue-num Q
--queue-bypass``; the kernel has NFQUEUE only as an xtables target) send the packets of one link
direction to one queue; this process holds each packet's verdict for its delay and then accepts
it. It talks nfnetlink_queue directly over an ``AF_NETLINK`` socket because pyroute2 0.9 does not
wrap nfnetlink_queue and the C bindings (NetfilterQueue) issue one verdict per packet from a
Python callback. Here a queue is a FIFO with a fixed release order, so one *batch* verdict
("accept every id <= N") releases everything due; the per-packet work is two ``unpack_from``.

Model per queue: release time = max(previous release, arrival + delay + U(-jitter, +jitter)),
so jitter never reorders packets (TCP would read reordering as loss). Gilbert-Elliott burst loss
drops a packet with an immediate NF_DROP verdict. Packets are copied metadata-only (no payload
crosses to userspace). The kernel queue length is sized by the caller to twice the
bandwidth-delay product; the rule carries ``--queue-bypass`` so packets pass undelayed when no
process is bound (a dead delay line fails open rather than black-holing the link).

Run as ``python -m harness.net.delayline CONFIG_JSON``, one process per node link, started in the
router namespace. A netlink socket belongs to the namespace it was opened in, so each queue
names the namespace whose rules feed it (the up queue: the router's FORWARD path; the down
queue: the node's INPUT path) and the process opens one socket per namespace. CONFIG_JSON is
``{"run_id": "3fa2c1", "queues": [{"num": 2, "netns": "wh3fa2c1-rt", "delay_us": 20000,
"jitter_us": 0, "maxlen": 4096, "ge": null | [p, r, bad_loss, good_loss], "seed": 1234567}, ...]}``;
each queue draws its jitter and burst loss from its own generator seeded with ``seed`` (the plan
derives it from the run id), so a queue's n-th packet gets the same draws in every run with that
id whatever the other queue does. It exits on
SIGTERM/SIGINT and when its parent process dies (checked every loop; PR_SET_PDEATHSIG would
fire when the parent *thread* that started it exits, e.g. the shaper's schedule thread).
"""
from __future__ import annotations

import ctypes
import json
import os
import random
import select
import signal
import socket
import struct
import sys
import time
from collections import deque
from dataclasses import dataclass, field

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG, NFQNL_MSG_VERDICT_BATCH = 0, 1, 2, 3
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN = 1, 2, 3
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NFQNL_CFG_CMD_BIND, NFQNL_CFG_CMD_UNBIND = 1, 2
NFQNL_COPY_META = 1
NF_DROP, NF_ACCEPT = 0, 1
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
SOL_NETLINK, NETLINK_NO_ENOBUFS = 270, 5
PR_SET_TIMERSLACK = 29
_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
NICE = -10
RCVBUF_BYTES = 64 << 20       # ~0.5 M metadata messages: absorbs bursts while we sleep
_HDR = struct.Struct("=IHHII")   # nlmsghdr: len, type, flags, seq, pid
_NFGEN = struct.Struct("!BBH")   # nfgenmsg: family, version, res_id (queue number, big endian)
_LEN_TYPE = struct.Struct("=IH")  # nlmsghdr length and type
# res_id at offset 18; then the first attribute, NFQA_PACKET_HDR: nlattr (4 bytes), packet_id (be32)
_QNUM_ID = struct.Struct("!H4xI")


@dataclass
class Queue:
    num: int
    delay_s: float
    jitter_s: float = 0.0
    maxlen: int = 4096
    ge: tuple[float, float, float, float] | None = None   # p, r, bad_loss, good_loss (fractions)
    netns: str | None = None                                # namespace whose netfilter feeds this queue
    rng: random.Random = field(default_factory=lambda: random.Random(0))  # parse_config seeds it per run
    sock: socket.socket | None = None
    pending: deque = field(default_factory=deque)          # [release_time, last packet_id]
    last_release: float = 0.0
    bad: bool = False                                       # Gilbert-Elliott state
    stats: dict = field(default_factory=lambda: {"packets": 0, "ge_dropped": 0})

    def release_time(self, now: float) -> float:
        jitter = self.rng.uniform(-self.jitter_s, self.jitter_s) if self.jitter_s else 0.0
        self.last_release = max(self.last_release, now + self.delay_s + jitter)
        return self.last_release

    def ge_drop(self) -> bool:
        p, r, bad_loss, good_loss = self.ge
        self.bad = (self.rng.random() >= r) if self.bad else (self.rng.random() < p)
        return self.rng.random() < (bad_loss if self.bad else good_loss)


def _attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * ((4 - length % 4) % 4)


def _msg(msg_type: int, queue: int, attrs: bytes, flags: int = NLM_F_REQUEST, seq: int = 0) -> bytes:
    body = _NFGEN.pack(socket.AF_UNSPEC, 0, queue) + attrs
    return _HDR.pack(_HDR.size + len(body), (NFNL_SUBSYS_QUEUE << 8) | msg_type, flags, seq, 0) + body


class DelayLine:
    """Holds the queues of one node link. A netlink socket belongs to the namespace it was
    created in, so one process serves the up queue (router namespace) and the down queue (the
    node's namespace) through one socket per namespace."""

    def __init__(self, queues: list[Queue]):
        self.queues = {q.num: q for q in queues}
        self.socks: dict[str, socket.socket] = {}
        self.buf = bytearray(1 << 20)
        self.running = True
        for q in queues:
            if q.netns not in self.socks:
                self.socks[q.netns] = _open_socket(q.netns)
            q.sock = self.socks[q.netns]
            self._bind(q)

    def _request(self, sock: socket.socket, payload: bytes) -> None:
        sock.send(payload)
        sock.recv_into(self.buf)
        _, mtype, _, _, _ = _HDR.unpack_from(self.buf, 0)
        if mtype == NLMSG_ERROR:
            (err,) = struct.unpack_from("=i", self.buf, _HDR.size)
            if err:
                raise OSError(-err, f"nfnetlink_queue config: {os.strerror(-err)}")

    def _bind(self, q: Queue) -> None:
        flags = NLM_F_REQUEST | NLM_F_ACK
        self._request(q.sock, _msg(NFQNL_MSG_CONFIG, q.num, _attr(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_BIND, 0)), flags))
        self._request(q.sock, _msg(NFQNL_MSG_CONFIG, q.num, _attr(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META)), flags))
        self._request(q.sock, _msg(NFQNL_MSG_CONFIG, q.num, _attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", q.maxlen)), flags))

    def _verdict(self, q: Queue, packet_id: int, verdict: int, batch: bool) -> None:
        kind = NFQNL_MSG_VERDICT_BATCH if batch else NFQNL_MSG_VERDICT
        q.sock.send(_msg(kind, q.num, _attr(NFQA_VERDICT_HDR, struct.pack("!II", verdict, packet_id))))

    def _drain(self, sock: socket.socket) -> None:
        """Read every queued packet notification without blocking; schedule each one.
        This is the hot loop (one pass per packet at up to ~100 k packets/s): no calls but
        two unpack_from per packet."""
        now = time.monotonic()
        buf, head, ids, queues = self.buf, _LEN_TYPE.unpack_from, _QNUM_ID.unpack_from, self.queues
        packet_type = (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET
        while True:
            try:
                n = sock.recv_into(buf, 0, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            off = 0
            while off + 16 <= n:
                length, mtype = head(buf, off)
                if length < 16:
                    break
                if mtype == packet_type:
                    qnum, packet_id = ids(buf, off + 18)
                    q = queues.get(qnum)
                    if q is not None:
                        self._schedule(q, packet_id, now)
                off += (length + 3) & ~3

    def _schedule(self, q: Queue, packet_id: int, now: float) -> None:
        q.stats["packets"] += 1
        if q.ge is not None and q.ge_drop():
            q.stats["ge_dropped"] += 1
            self._verdict(q, packet_id, NF_DROP, batch=False)
            return
        release = q.release_time(now)
        pending = q.pending
        if pending and pending[-1][0] == release:
            pending[-1][1] = packet_id     # same release time (same read, no jitter): one entry
        else:
            pending.append([release, packet_id])

    def _release_due(self) -> float | None:
        """Accept everything due now (one batch verdict per queue); return the next due time."""
        now = time.monotonic()
        nxt = None
        for q in self.queues.values():
            last = None
            while q.pending and q.pending[0][0] <= now:
                last = q.pending.popleft()[1]
            if last is not None:
                self._verdict(q, last, NF_ACCEPT, batch=True)
            if q.pending and (nxt is None or q.pending[0][0] < nxt):
                nxt = q.pending[0][0]
        return nxt

    def run(self) -> None:
        # select() takes a timeval (microseconds); poll/epoll would round waits up to whole ms
        socks = list(self.socks.values())
        parent = os.getppid()
        while self.running and os.getppid() == parent:
            nxt = self._release_due()
            timeout_s = 0.2 if nxt is None else max(0.0, nxt - time.monotonic())
            readable, _, _ = select.select(socks, [], [], timeout_s)
            for sock in readable:
                self._drain(sock)

    def close(self) -> None:
        # Accept what we hold so a clean stop loses nothing; unbinding then restores bypass.
        for q in self.queues.values():
            if q.pending:
                self._verdict(q, q.pending[-1][1], NF_ACCEPT, batch=True)
            q.sock.send(_msg(NFQNL_MSG_CONFIG, q.num, _attr(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_UNBIND, 0))))
        for sock in self.socks.values():
            sock.close()


def _setns(netns_name: str) -> None:
    fd = os.open(f"/run/netns/{netns_name}", os.O_RDONLY)   # missing namespace: an error
    try:
        if _libc.setns(fd, _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns({netns_name})")
    finally:
        os.close(fd)


def _open_socket(netns_name: str | None) -> socket.socket:
    """An nfnetlink socket in ``netns_name`` (None: the current one); the process stays where it was."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        if netns_name:
            _setns(netns_name)
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    finally:
        _libc.setns(home, _CLONE_NEWNET)
        os.close(home)
    sock.setsockopt(socket.SOL_SOCKET, 33, RCVBUF_BYTES)   # SO_RCVBUFFORCE (root)
    sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
    sock.bind((0, 0))
    return sock


def parse_config(text: str) -> list[Queue]:
    doc = json.loads(text)
    return [Queue(num=int(q["num"]), delay_s=q["delay_us"] / 1e6, jitter_s=q.get("jitter_us", 0) / 1e6,
                  maxlen=int(q.get("maxlen", 4096)), ge=tuple(q["ge"]) if q.get("ge") else None,
                  netns=q.get("netns"), rng=random.Random(int(q["seed"])))
            for q in doc["queues"]]


def _prctl_setup() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0)    # 1 us: wake-ups land on the release time
    # Ahead of ordinary processes: a delay line that waits for a CPU adds that wait to every
    # packet it holds (and overflows its kernel queue). Root only; without it we run as is.
    try:
        os.setpriority(os.PRIO_PROCESS, 0, NICE)
    except OSError:
        pass


def main(argv: list[str]) -> int:
    _prctl_setup()
    line = DelayLine(parse_config(argv[1]))

    def stop(signum, frame):
        line.running = False
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print("ready", flush=True)   # the parent waits for this before sending traffic
    try:
        line.run()
    finally:
        line.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
