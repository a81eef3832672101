"""Calibration: what a profile really gives, per link, next to what it asks for.

``harness calibrate --profile NAME [--workers N]`` builds the topology, applies the profile, and
for every worker measures both directions of its path to the learner:

* goodput: one TCP stream; the receiver reads the kernel's in-order byte count
  (tcp_info.tcpi_bytes_received) at the start and end of a ``secs``-second window that begins
  after a warm-up of max(1 s, 10 RTT) (slow start excluded). On lossy paths the in-order count
  jumps when a hole is filled, so a window edge that falls inside a recovery shifts up to one
  window of bytes across it (seen: 101 % of the rate at 0.01 % loss, 71 ms RTT); goodput is
  therefore only judged on loss-free paths.
* RTT: UDP echo, ``rtt_count`` 64-byte probes 20 ms apart; median and mean (lost probes skipped).
* loss: ``loss_count`` one-way UDP datagrams per direction at a rate well under the link rate;
  the receiver counts distinct sequence numbers.

Expected values for worker ``w`` (path through the router to the learner ``L``)::

    up:   rate = min(w.up.rate, L.down.rate), one-way delay = w.up.delay + L.down.delay,
          loss = 1 - (1 - w.up.loss)(1 - L.down.loss)
    down: the mirror image; RTT = the sum of all four delays.
    goodput target = rate x payload/wire (1448 / 1514 bytes per full TCP segment at 1500 MTU).

Traced links (a profile ``trace``, :mod:`harness.net.traces`): the schedule restarts at each
worker's measurement (its steps logged to ``schedule-<worker>.csv``: due, applied, lag) and the
receiver also counts bytes every ``SAMPLE_S``; goodput over the window is compared with the
trace's mean path rate over the *same* window (its mean, p10/p50/p90 of ``SAMPLE_S`` bins, and
the achieved rate's), so ``ratio`` = goodput / trace mean x wire/payload-free. ``schedule`` in
calibration.json: the steps' applied-vs-due lag (median, p95, max) and how many were skipped.
``playback`` per traced row: the playback error, bytes the link carried vs the bytes of the *recorded*
trace (not its schedule of steps) per window of 100 ms and 1 s (:func:`playback_error`); the HTB rate
changes once per step (the trace's ``interval``, 1 s by default; ``--trace-step`` on `harness calibrate`),
so a trace that swings within a step shows its error at 100 ms, and a finer step removes most of it.

Measurement processes run inside the namespaces: ``python -m harness.net.calibrate serve PORT`` in the
learner, ``python -m harness.net.calibrate probe ...`` in each worker (JSON on stdout). No torch.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from harness.net import traces
from harness.net.profiles import LinkDir
from harness.net.shaper import emulate

PORT = 5201
CHUNK = 256 * 1024
PAYLOAD_OVER_WIRE = 1448 / 1514     # TCP payload per Ethernet frame at 1500 MTU with timestamps
UDP_PROBE_BYTES = 200
TCPI_BYTES_RECEIVED = 128       # offset of tcpi_bytes_received (u64) in struct tcp_info (Linux >= 4.1)
TAIL_S = 1.0                    # the sender keeps sending this long after the receiver's window
SAMPLE_S = 0.1                  # the receiver's byte count is also taken this often (achieved rate over time;
                                # the finest playback-error window)
BIN_S = 0.5                     # the achieved-vs-trace percentiles are of bins this long (SAMPLE_S marks merged)
ERROR_WINDOWS_S = (0.1, 1.0)    # playback error: carried vs the trace's bytes per window of each length
RATE_RES_S = 0.05               # resolution at which a traced path's rate is integrated over a bin


# ---- the server (runs in the learner's namespace) -------------------------------------------

def serve(port: int) -> None:
    """TCP control/stream on ``port``; UDP echo and sink on ``port``."""
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    udp.bind(("0.0.0.0", port))
    sinks: dict[int, set[int]] = {}
    threading.Thread(target=_udp_loop, args=(udp, sinks), daemon=True).start()
    tcp = socket.socket()
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.bind(("0.0.0.0", port))
    tcp.listen(64)
    print("ready", flush=True)
    while True:
        conn, _ = tcp.accept()
        threading.Thread(target=_handle, args=(conn, udp, sinks), daemon=True).start()


def _udp_loop(udp: socket.socket, sinks: dict[int, set[int]]) -> None:
    while True:
        data, addr = udp.recvfrom(2048)
        if data[:1] == b"E":                      # echo probe: send it straight back
            udp.sendto(data, addr)
        elif data[:1] == b"S" and len(data) >= 9:  # sink probe: session id, sequence number
            session, seq = struct.unpack_from("!II", data, 1)
            sinks.setdefault(session, set()).add(seq)


def _handle(conn: socket.socket, udp: socket.socket, sinks: dict[int, set[int]]) -> None:
    with conn:
        f = conn.makefile("rwb")
        req = json.loads(f.readline())
        if req["cmd"] == "recv":          # client sends, we measure
            result = _receive(conn, req["warm_s"], req["secs"])
        elif req["cmd"] == "send":        # we send until the client closes
            result = _send_until_closed(conn, req["secs"])
        elif req["cmd"] == "count":       # how many sink probes of a session arrived
            result = {"received": len(sinks.pop(req["session"], set()))}
        elif req["cmd"] == "blast":       # send UDP sink probes to the client
            result = _blast(udp, (req["host"], req["port"]), req["session"], req["count"], req["pps"])
        else:
            result = {"error": f"unknown cmd {req['cmd']!r}"}
        try:
            f.write(json.dumps(result).encode() + b"\n")
            f.flush()
        except OSError:
            pass  # the client of a "send" stream closes first: nothing to report back


def _bytes_received(conn: socket.socket) -> int:
    """The kernel's in-order byte count for this connection (tcp_info.tcpi_bytes_received):
    independent of when this process gets to read, so a stalled reader cannot bias goodput."""
    info = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    return struct.unpack_from("=Q", info, TCPI_BYTES_RECEIVED)[0]


def _receive(conn: socket.socket, warm_s: float, secs: float) -> dict:
    """Read until EOF; goodput = kernel byte count between start+warm_s and start+warm_s+secs."""
    buf = bytearray(1 << 20)
    start = time.monotonic()
    marks: list[tuple[float, int]] = []       # (time, bytes) every SAMPLE_S through the window, edges included
    n_marks = 1 + max(1, math.ceil(secs / SAMPLE_S - 1e-9))
    conn.settimeout(SAMPLE_S / 10)             # wake up to take a mark even when no data comes
    while True:
        try:
            n = conn.recv_into(buf)
        except socket.timeout:
            n = -1
        now = time.monotonic()
        if len(marks) < n_marks and now - start >= warm_s + min(secs, len(marks) * SAMPLE_S):
            marks.append((now, _bytes_received(conn)))
        if n == 0:
            break
    if len(marks) < 2:
        return {"bytes": 0, "secs": 0.0, "goodput_bit_s": 0.0, "series": []}
    (t0, b0), (t1, b1) = marks[0], marks[-1]
    return {"bytes": b1 - b0, "secs": t1 - t0, "goodput_bit_s": (b1 - b0) * 8 / (t1 - t0),
            "series": [[round(t, 6), b] for t, b in marks]}     # time.monotonic(), in-order bytes


def _send_until_closed(conn: socket.socket, secs: float) -> dict:
    data = b"x" * CHUNK
    end = time.monotonic() + secs
    sent = 0
    while time.monotonic() < end:
        sent += conn.send(data)
    conn.shutdown(socket.SHUT_WR)
    return {"sent": sent}


def _blast(udp: socket.socket, addr: tuple[str, int], session: int, count: int, pps: float) -> dict:
    pad = b"\0" * (UDP_PROBE_BYTES - 9)
    start = time.monotonic()
    for seq in range(count):
        delay = start + seq / pps - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        udp.sendto(b"S" + struct.pack("!II", session, seq) + pad, addr)
    return {"sent": count}


# ---- the probe client (runs in a worker's namespace) ----------------------------------------

def _request(host: str, port: int, req: dict, timeout: float = 60.0) -> dict:
    with socket.create_connection((host, port), timeout=timeout) as conn:
        f = conn.makefile("rwb")
        f.write(json.dumps(req).encode() + b"\n")
        f.flush()
        return json.loads(f.readline())


def goodput_up(host: str, port: int, secs: float, warm_s: float) -> dict:
    """Client -> server stream; the server measures."""
    with socket.create_connection((host, port), timeout=secs + warm_s + 60) as conn:
        f = conn.makefile("rwb")
        f.write(json.dumps({"cmd": "recv", "warm_s": warm_s, "secs": secs}).encode() + b"\n")
        f.flush()
        data = b"x" * CHUNK
        end = time.monotonic() + warm_s + secs + TAIL_S
        while time.monotonic() < end:
            conn.sendall(data)
        conn.shutdown(socket.SHUT_WR)
        return json.loads(f.readline())


def goodput_down(host: str, port: int, secs: float, warm_s: float) -> dict:
    """Server -> client stream; the client measures."""
    with socket.create_connection((host, port), timeout=secs + warm_s + 60) as conn:
        conn.sendall(json.dumps({"cmd": "send", "secs": warm_s + secs + TAIL_S}).encode() + b"\n")
        return _receive(conn, warm_s, secs)


def rtt(host: str, port: int, count: int, interval_s: float = 0.02, wait_s: float = 3.0) -> dict:
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.settimeout(0.001)
    sent: dict[int, float] = {}
    samples: list[float] = []
    for seq in range(count):
        sent[seq] = time.monotonic()
        udp.sendto(b"E" + struct.pack("!I", seq) + b"\0" * 59, (host, port))
        _collect(udp, sent, samples, time.monotonic() + interval_s)
    _collect(udp, sent, samples, time.monotonic() + wait_s, until_done=count)
    return {"samples": len(samples), "median_s": statistics.median(samples) if samples else None,
            "mean_s": statistics.fmean(samples) if samples else None,
            "stdev_s": statistics.pstdev(samples) if len(samples) > 1 else 0.0}


def _collect(udp, sent, samples, deadline, until_done=None):
    while time.monotonic() < deadline:
        if until_done is not None and len(samples) >= until_done:
            return
        try:
            data = udp.recv(2048)
        except (socket.timeout, BlockingIOError):
            continue
        (seq,) = struct.unpack_from("!I", data, 1)
        if seq in sent:
            samples.append(time.monotonic() - sent.pop(seq))


def loss_up(host: str, port: int, count: int, pps: float) -> dict:
    session = int.from_bytes(os.urandom(4), "big")
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    _blast(udp, (host, port), session, count, pps)
    time.sleep(1.5)                 # let the delay line drain (up to 600 ms RTT paths)
    got = _request(host, port, {"cmd": "count", "session": session})["received"]
    return {"sent": count, "received": got}


def loss_down(host: str, port: int, my_addr: str, count: int, pps: float) -> dict:
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    udp.bind((my_addr, 0))
    udp.settimeout(0.2)
    session = int.from_bytes(os.urandom(4), "big")
    seen: set[int] = set()
    stop = threading.Event()

    def recv_loop():
        while not stop.is_set():
            try:
                data = udp.recv(2048)
            except socket.timeout:
                continue
            s, seq = struct.unpack_from("!II", data, 1)
            if s == session:
                seen.add(seq)
    reader = threading.Thread(target=recv_loop, daemon=True)
    reader.start()
    _request(host, port, {"cmd": "blast", "host": my_addr, "port": udp.getsockname()[1],
                          "session": session, "count": count, "pps": pps})
    time.sleep(1.5)
    stop.set()
    reader.join()
    return {"sent": count, "received": len(seen)}


def probe(args: argparse.Namespace) -> dict:
    """Every measurement in turn; the first that cannot complete (a connection or a reply that does
    not come within its timeout: a link too slow, lossy or long for the probe) ends the probe, and
    `incomplete` names it and the error: the parts not measured stay None."""
    host, port = args.host, args.port
    out: dict = {"rtt": {"samples": 0, "median_s": None}, "goodput_up_bit_s": None, "series_up": [],
                 "goodput_down_bit_s": None, "series_down": [], "loss_up": None, "loss_down": None,
                 "incomplete": None}
    stage = "rtt"
    try:
        out["rtt"] = rtt(host, port, args.rtt_count)
        warm = max(1.0, 10 * (out["rtt"]["median_s"] or 0.0))
        for direction, measure_fn in (("up", goodput_up), ("down", goodput_down)):
            stage = f"goodput {direction}"
            got = measure_fn(host, port, args.secs, warm) if args.secs > 0 else {}   # --secs 0: RTT and loss only
            out[f"goodput_{direction}_bit_s"] = got.get("goodput_bit_s")
            out[f"series_{direction}"] = got.get("series", [])
        stage = "loss up"
        out["loss_up"] = loss_up(host, port, args.loss_count, args.pps)
        stage = "loss down"
        out["loss_down"] = loss_down(host, port, args.my_addr, args.loss_count, args.pps)
    except (OSError, ValueError) as err:  # TimeoutError, a reset; ValueError: a reply cut short (not JSON)
        out["incomplete"] = f"{stage}: {type(err).__name__}: {str(err) or 'no detail'}"
    return out


# ---- expectations and verdicts ---------------------------------------------------------------

def binomial_interval(n: int, p: float, conf: float = 0.99) -> tuple[int, int]:
    """Central interval [lo, hi] of Binomial(n, p) holding at least ``conf`` of the mass."""
    if p <= 0:
        return 0, 0
    if p >= 1:
        return n, n
    tail = (1 - conf) / 2
    logs = [math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * math.log(p)
            + (n - k) * math.log1p(-p) for k in range(n + 1)]
    pmf = [math.exp(v) for v in logs]
    acc, lo = 0.0, 0
    for k, v in enumerate(pmf):
        if acc + v > tail:
            lo = k
            break
        acc += v
    acc, hi = 0.0, n
    for k in range(n, -1, -1):
        if acc + pmf[k] > tail:
            hi = k
            break
        acc += pmf[k]
    return lo, hi


@dataclass
class Row:
    node: str
    direction: str
    rate_bit_s: float | None
    goodput_bit_s: float | None      # None: not measured (--secs 0)
    goodput_ratio: float | None      # goodput / rate
    rtt_want_s: float
    rtt_median_s: float | None
    rtt_err_s: float | None
    loss_want: float
    loss_sent: int
    loss_lost: int
    loss_interval: tuple[int, int]
    ok_goodput: bool
    ok_rtt: bool
    ok_loss: bool
    trace: dict | None = None        # traced path: the trace over the measured window vs the achieved rate
    playback: list | None = None     # traced link: playback_error per window length (ERROR_WINDOWS_S)
    incomplete: str | None = None    # the probe stopped: the measurement that could not complete, and why


def expectations(profile, node: str) -> dict:

    w, lrn = profile.link(node), profile.link("learner")

    def path(a: LinkDir, b: LinkDir) -> dict:
        rates = [r for r in (a.rate_bit_s, b.rate_bit_s) if r]
        keep = 1.0
        for d in (a, b):
            keep *= (1 - d.loss_frac) * (1 - (d.burst_loss.mean_loss() if d.burst_loss else 0.0))
        return {"rate_bit_s": min(rates) if rates else None, "loss": 1 - keep,
                "bursty": bool(a.burst_loss or b.burst_loss)}
    rtt_s = w.up.delay_s + lrn.down.delay_s + lrn.up.delay_s + w.down.delay_s
    return {"up": path(w.up, lrn.down), "down": path(lrn.up, w.down), "rtt_s": rtt_s}


def path_rate(profile, node: str, direction: str, t_s: float) -> float | None:
    """The rate of worker ``node``'s path to the learner in ``direction`` at ``t_s`` into the schedule."""
    w, lrn = profile.link(node, t_s), profile.link("learner", t_s)
    a, b = (w.up, lrn.down) if direction == "up" else (lrn.up, w.down)
    rates = [r for r in (a.rate_bit_s, b.rate_bit_s) if r]
    return min(rates) if rates else None


def trace_window(profile, node: str, direction: str, series: list, start: float) -> dict:
    """The path's scheduled rate over the receiver's window (``series``: [time.monotonic(), bytes] every
    SAMPLE_S, ``start``: the schedule's time 0) next to the achieved rate, per BIN_S bin (bit/s)."""
    want, got = [], []
    marks = series[::max(1, round(BIN_S / SAMPLE_S))]
    for (t0, b0), (t1, b1) in zip(marks, marks[1:]):
        ts = [t0 - start + (k + 0.5) * RATE_RES_S for k in range(max(1, round((t1 - t0) / RATE_RES_S)))]
        want.append(statistics.fmean(path_rate(profile, node, direction, t) or 0.0 for t in ts))
        got.append((b1 - b0) * 8 / (t1 - t0))
    if not want:
        return {}

    def pct(xs):
        q = statistics.quantiles(xs, n=10, method="inclusive") if len(xs) > 1 else xs * 9
        return {"mean_bit_s": statistics.fmean(xs), "p10_bit_s": q[0], "p50_bit_s": q[4], "p90_bit_s": q[8]}
    return {"window_s": [round(marks[0][0] - start, 3), round(marks[-1][0] - start, 3)], "bin_s": BIN_S,
            "trace": pct(want), "achieved": pct(got), "trace_bins_bit_s": [round(x) for x in want],
            "achieved_bins_bit_s": [round(x) for x in got]}


def recorded_trace(profile, node: str, direction: str) -> traces.Trace | None:
    """The trace worker ``node``'s link plays in ``direction`` (scaled as the profile scales it), as recorded:
    not the schedule of steps it is played as."""
    link = profile.link(node)
    ref = (link.up if direction == "up" else link.down).trace
    return ref.load() if ref is not None else None


def playback_error(trace: traces.Trace, series: list, start: float, window_s: float) -> dict:
    """Bytes the link carried (the receiver's in-order count, ``series``: [time.monotonic(), bytes] every
    SAMPLE_S) vs the bytes the recorded ``trace`` offers over the same windows of ``window_s`` (its bits x
    PAYLOAD_OVER_WIRE: the trace counts 1500-byte frames, the receiver TCP payload). Each window's error
    is (carried - trace) / the trace's mean bytes per window, so an outage window (trace 0) counts too:
    ``mean_abs``, ``p90_abs``, ``max_abs`` of those; ``total`` = carried / trace over the whole window - 1."""
    step = max(1, round(window_s / SAMPLE_S))
    marks = series[::step]
    carried, offered = [], []
    for (t0, b0), (t1, b1) in zip(marks, marks[1:]):
        carried.append(b1 - b0)
        offered.append(trace.bits(t0 - start, t1 - start) / 8 * PAYLOAD_OVER_WIRE)
    if not offered or sum(offered) <= 0:
        return {"window_s": window_s, "windows": 0}
    mean = statistics.fmean(offered)
    errs = sorted(abs(c - o) / mean for c, o in zip(carried, offered))
    return {"window_s": window_s, "windows": len(errs), "mean_abs": statistics.fmean(errs),
            "p90_abs": errs[min(len(errs) - 1, int(0.9 * len(errs)))], "max_abs": errs[-1],
            "total": sum(carried) / sum(offered) - 1, "carried_bytes": carried,
            "trace_bytes": [round(o) for o in offered]}


def judge(node: str, direction: str, want: dict, rtt_want: float, got: dict, window: dict | None = None) -> Row:
    goodput = got[f"goodput_{direction}_bit_s"]
    rate = window["trace"]["mean_bit_s"] if window else want["rate_bit_s"]
    ratio = goodput / rate if rate and goodput is not None else None
    incomplete = got.get("incomplete")
    loss = got[f"loss_{direction}"] or {"sent": 0, "received": 0}   # None: not measured (incomplete)
    lost = loss["sent"] - loss["received"]
    interval = binomial_interval(loss["sent"], want["loss"])
    med = got["rtt"]["median_s"]
    err = None if med is None else med - rtt_want
    return Row(node=node, direction=direction, rate_bit_s=rate, goodput_bit_s=goodput, goodput_ratio=ratio,
               rtt_want_s=rtt_want, rtt_median_s=med, rtt_err_s=err, loss_want=want["loss"],
               loss_sent=loss["sent"], loss_lost=lost, loss_interval=interval,
               # goodput is judged on loss-free paths only: with random loss TCP cannot reach the
               # rate (Mathis: rate <= MSS / RTT x 1.22 / sqrt(p)), so the rate is not a target there
               # (a probe that could not complete passes nothing: its link was not measured)
               ok_goodput=not incomplete and (ratio is None or want["loss"] > 0 or 0.90 <= ratio <= 1.0),
               ok_rtt=not incomplete and err is not None and abs(err) <= max(0.002, 0.05 * rtt_want),
               # burst loss is correlated: the binomial interval does not apply, so it is not judged
               ok_loss=not incomplete and (want["bursty"] or interval[0] <= lost <= interval[1]),
               trace=window or None, incomplete=incomplete)


def calibrate(profile, n_workers: int = 1, secs: float = 3.0, rtt_count: int = 50,
              loss_count: int = 2000, backend: str | None = None, out_dir: Path | None = None) -> list[Row]:
    """Build, apply, measure every worker link, tear down. Returns one row per link direction."""
    rows: list[Row] = []
    lags: dict[str, dict] = {}       # worker -> the lag of its schedule's steps (traced profiles)
    with emulate(profile, n_workers, backend=backend) as (topo, shaper):
        learner = topo.nodes["learner"]
        server = topo.run_in("learner", [sys.executable, "-m", "harness.net.calibrate", "serve", str(PORT)],
                             stdout=subprocess.PIPE, text=True)
        try:
            if server.stdout.readline().strip() != "ready":
                raise RuntimeError("calibration server did not start")
            for name in topo.workers:
                traced = bool(profile.trace_intervals(list(topo.nodes)))
                log = (out_dir or Path(".")) / f"schedule-{name}.csv" if traced else None
                if traced:   # the trace from its start for each worker, its steps logged
                    shaper.restart_schedule(profile, topo, log)
                rows += _measure(profile, topo, name, learner.address, secs, rtt_count, loss_count,
                                 shaper.schedule_start if traced else None)
                if traced:
                    shaper.stop_schedule()
                    lags[name] = schedule_lag(log)
        finally:
            server.kill()
            server.wait()
        backend_used = shaper.plan.backend
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "calibration.json").write_text(json.dumps(
            {"profile": profile.name, "backend": backend_used, "rows": [asdict(r) for r in rows],
             "schedule": lags}, indent=1))
    return rows


def schedule_lag(log: Path) -> dict:
    """Applied-vs-due lag of a schedule's steps (seconds; the first row, time 0, excluded)."""
    with log.open() as fh:
        rows = [r for r in csv.DictReader(fh) if float(r["at_s"]) > 0]
    applied = sorted({(r["at_s"], float(r["lag_s"])) for r in rows if r["skipped"] != "True"})
    lags = sorted(lag for _, lag in applied)
    if not lags:
        return {"steps": 0, "skipped": 0}
    return {"steps": len(lags), "skipped": len({r["at_s"] for r in rows if r["skipped"] == "True"}),
            "lag_median_s": statistics.median(lags), "lag_p95_s": lags[min(len(lags) - 1, int(0.95 * len(lags)))],
            "lag_max_s": lags[-1]}


def _measure(profile, topo, name, host, secs, rtt_count, loss_count, schedule_start=None) -> list[Row]:
    want = expectations(profile, name)
    rates = [r for r in (want["up"]["rate_bit_s"], want["down"]["rate_bit_s"]) if r]
    # probes at <= 20 % of the slowest rate (200-byte datagrams), at most 2000 per second
    pps = min(2000.0, (min(rates) * 0.2 / (8 * (UDP_PROBE_BYTES + 42))) if rates else 2000.0)
    argv = [sys.executable, "-m", "harness.net.calibrate", "probe", host, str(PORT), topo.nodes[name].address,
            "--secs", str(secs), "--rtt-count", str(rtt_count), "--loss-count", str(loss_count), "--pps", f"{pps:.1f}"]
    proc = topo.run_in(name, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"probe in {name} failed: {err.strip().splitlines()[-1] if err.strip() else proc.returncode}")
    got = json.loads(out)
    windows = {d: trace_window(profile, name, d, got[f"series_{d}"], schedule_start) if schedule_start else None
               for d in ("up", "down")}
    rows = [judge(name, d, want[d], want["rtt_s"], got, windows[d]) for d in ("up", "down")]
    for row in rows:
        recorded = recorded_trace(profile, name, row.direction) if schedule_start else None
        if recorded is not None and len(got[f"series_{row.direction}"]) > 1:
            row.playback = [playback_error(recorded, got[f"series_{row.direction}"], schedule_start, w)
                            for w in ERROR_WINDOWS_S]
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.net.calibrate")
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("port", type=int)
    p = sub.add_parser("probe")
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("my_addr")
    p.add_argument("--secs", type=float, default=3.0)
    p.add_argument("--rtt-count", type=int, default=50)
    p.add_argument("--loss-count", type=int, default=2000)
    p.add_argument("--pps", type=float, default=1000.0)
    args = parser.parse_args(argv[1:])
    if args.cmd == "serve":
        serve(args.port)
    else:
        print(json.dumps(probe(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
