"""Compressor benchmark: approximation error, payload bytes and encode + decode time per compressor.

Gradients come in two kinds:
- `synthetic`: LoRA-factor gradients shaped like a rank-64 adapter on all seven projections of a
  named model (default Qwen2.5-0.5B: ~35.2 M adapter parameters; any `--model` name or config
  folder: the factor shapes are read from the model instantiated on the meta device), each factor
  with a power-law spectrum (sigma_j ~ j^-alpha) and per-factor scales spread over a decade, as
  measured LoRA gradients look;
- `real`: gradients of a LoRA adapter on a tiny model built from its config, from a short run
  of next-token training on random bytes.

Budgets are fractions of the full adapter's bytes in bf16 (what full sync ships in the paper).
Every budgeted compressor (spar, topk, powersgd: per-factor ranks, int8: its top blocks) runs at
each budget; `int8` with `-` is its dense layout. `powersgd (rank R)` is PowerSGD at one rank for
every factor (the smallest whose payload reaches the budget, as PyTorch's hook runs it), and
`spar @powersgd-bytes` gets exactly its byte count, for an equal-bytes comparison.
Errors are the first step's (a fresh compressor, no error-feedback history: what equal-bytes
comparisons read). Times are the steady state the services run in: one encoder carrying its error
feedback and one decoder decoding from a receive buffer, the first (warm-up) round not timed, CPU
seconds at `threads` threads, medians over `repeats` rounds, each beside a memcpy of the fp32
gradients' bytes measured in the same process (the `x memcpy` ratio holds on a busy machine).
`torch powerSGD_hook (rank R)` is PyTorch's own hook at the rank of `powersgd (rank R)` (fp32 P and
Q, so twice its bytes; trainers/compress/torch_hook.py), with `spar @hook-bytes` at its byte count.
"""
from __future__ import annotations

import os
import socket
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass

import torch

from trainers.compress import get_compressor, spar
from trainers.compress.base import full_adapter_bytes
from trainers.model.models import lora_shapes
from trainers.model.models import LoraSpec, build_model, lora_gradients, lora_parameters
from trainers.model.replica import OptimConfig, Replica
from trainers.protocol import wire

DEFAULT_MODEL = "qwen2.5-0.5b"   # synthetic gradients' shapes: a named model (trainers/model/model_configs/)
DEFAULT_RANK = 64
# `--shape` presets of `harness bench-compress`: (model, rank). `small` is a quick check.
SHAPES = {"qwen0.5b": (DEFAULT_MODEL, DEFAULT_RANK), "small": ("micro", 16)}
DEFAULT_BUDGETS = (0.0078, 0.016, 0.0625)


@dataclass
class Row:
    gradients: str
    compressor: str
    budget: str
    payload_bytes: int
    fraction_of_full: float
    rel_error: float
    encode_s: float         # steady-state CPU seconds per encode (median)
    decode_s: float         # steady-state CPU seconds per decode (median; a hook row: 0, its call is encode_s)
    memcpy_s: float = 0.0   # CPU seconds of a memcpy of the fp32 gradients, measured beside (median)

    @property
    def total_s(self) -> float:
        return self.encode_s + self.decode_s

    @property
    def total_x(self) -> float:
        """Encode + decode as a multiple of the memcpy beside them."""
        return self.total_s / self.memcpy_s if self.memcpy_s > 0 else float("nan")

    @property
    def encode_x(self) -> float:
        return self.encode_s / self.memcpy_s if self.memcpy_s > 0 else float("nan")

    @property
    def decode_x(self) -> float:
        return self.decode_s / self.memcpy_s if self.memcpy_s > 0 else float("nan")


def model_shapes(model: str = DEFAULT_MODEL, rank: int = DEFAULT_RANK) -> dict[str, tuple[int, int]]:
    """(name -> shape) of the LoRA factors of `model` at `rank` on all seven projections: A is
    (r, d_in), B is (d_out, r), read from the instantiated module (meta device), never a formula."""

    return dict(lora_shapes(model, rank))


def synthetic_gradients(shapes: dict[str, tuple[int, int]], alpha: float = 1.0, seed: int = 0) -> dict[str, torch.Tensor]:
    """Power-law-spectrum factors: G = U diag(s) V^T with random orthonormal U, V."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, (a, b) in shapes.items():
        k = min(a, b)
        u = torch.linalg.qr(torch.randn(a, k, generator=g)).Q
        v = torch.linalg.qr(torch.randn(b, k, generator=g)).Q
        scale = 10 ** (-torch.rand((), generator=g).item())              # factor scales over a decade
        s = scale * torch.arange(1, k + 1, dtype=torch.float32) ** -alpha
        out[name] = (u * s) @ v.T
    return out


def real_trajectory(model: str = "tiny", rank: int = 64, steps: int = 4, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """The adapter gradients of `steps` exact AdamW steps of next-token loss on random bytes, in order
    (the first is every lora_B gradient's zero step)."""
    m = build_model(model, LoraSpec(rank=rank, seed=seed), seed=seed)
    replica = Replica(lora_parameters(m), OptimConfig(lr=1e-3))
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        m.zero_grad(set_to_none=True)
        ids = torch.randint(0, 256, (8, 64), generator=gen)
        m(input_ids=ids, labels=ids).loss.backward()
        out.append({k: v.clone() for k, v in lora_gradients(m).items()})
        replica.step(out[-1])
    return out


def real_gradients(model: str = "tiny", rank: int = 64, steps: int = 3, seed: int = 0) -> dict[str, torch.Tensor]:
    """The adapter gradient after a few exact AdamW steps of next-token loss on random bytes."""
    return real_trajectory(model, rank, steps + 1, seed)[-1]


def rel_error(out: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> float:
    num = sum(float((out[n] - ref[n]).double().norm() ** 2) for n in ref)
    den = sum(float(ref[n].double().norm() ** 2) for n in ref)
    return (num / den) ** 0.5


def memcpy_timer(grads: dict[str, torch.Tensor]):
    """A function returning the CPU seconds of one memcpy of the gradients' fp32 bytes (pages touched first)."""
    src = torch.cat([t.detach().to(torch.float32).reshape(-1) for t in grads.values()])
    dst = torch.empty_like(src)
    dst.copy_(src)
    return lambda: _cpu(lambda: dst.copy_(src))


def measure(kind: str, grads: dict[str, torch.Tensor], name: str, label: str, repeats: int,
            shown_as: str | None = None, memcpy=None, **options) -> Row:
    """`name` with `options`: the first step's payload and error, then the steady state's median encode
    and decode CPU seconds over `repeats` rounds, each beside `memcpy()` (default: of these gradients);
    the row says `shown_as` (default: name)."""
    memcpy = memcpy or memcpy_timer(grads)
    full = full_adapter_bytes([tuple(t.shape) for t in grads.values()], "bf16")
    enc, dec = get_compressor(name, **options), get_compressor(name, **options)
    payload = enc.encode(grads)                          # warm-up round: buffers, warm starts; not timed
    first = len(payload), rel_error(get_compressor(name, **options).decode(payload), grads)
    dec.decode(received(payload), reuse=True)
    copies, enc_s, dec_s = [], [], []
    for _ in range(repeats):
        copies.append(memcpy())
        t0 = time.process_time()
        payload = enc.encode(grads)
        enc_s.append(time.process_time() - t0)
        inbox = received(payload)                        # the socket's copy is the wire's, not the codec's
        dec_s.append(_cpu(lambda: dec.decode(inbox, reuse=True)))
    return Row(kind, shown_as or name, label, first[0], first[0] / full, first[1],
               statistics.median(enc_s), statistics.median(dec_s), statistics.median(copies))


def torch_hook_row(kind: str, grads: dict[str, torch.Tensor], label: str, rank: int, repeats: int, memcpy) -> Row:
    """PyTorch's powerSGD_hook at `rank` (trainers/compress/torch_hook.py): its bytes, first-step error
    and steady-state CPU per step (compression and decompression: the row's encode_s), beside `memcpy()`."""
    from trainers.compress import torch_hook   # torch.distributed: only this row pays for it

    full = full_adapter_bytes([tuple(t.shape) for t in grads.values()], "bf16")
    copies: list[float] = []
    figures = torch_hook.run_hook(grads, rank, repeats, between=lambda: copies.append(memcpy()))
    return Row(kind, "torch powerSGD_hook (rank R)", label, figures.payload_bytes, figures.payload_bytes / full,
               figures.rel_error, statistics.median(figures.cpu_s), 0.0, statistics.median(copies))


def powersgd_rank_for(grads, budget_frac: float) -> int:
    """Smallest uniform PowerSGD rank whose payload is at least `budget_frac` of the bf16 adapter."""
    full = full_adapter_bytes([tuple(t.shape) for t in grads.values()], "bf16")
    per_rank = sum((t.shape[0] + t.shape[1]) * 2 for t in grads.values())   # fp16 P and Q
    return max(1, round(budget_frac * full / per_rank))


def run(kinds=("synthetic", "real"), budgets=DEFAULT_BUDGETS, repeats: int = 5, threads: int = 1,
        model: str = DEFAULT_MODEL, rank: int = DEFAULT_RANK, real_model: str = "tiny", progress=None,
        torch_hook: bool = True) -> list[Row]:
    torch.set_num_threads(threads)
    rows = []

    def add(row: Row) -> Row:
        rows.append(row)
        if progress:
            progress(row)
        return row

    for kind in kinds:
        grads = (synthetic_gradients(model_shapes(model, rank)) if kind == "synthetic"
                 else real_gradients(real_model))
        memcpy = memcpy_timer(grads)
        cell = lambda name, label, shown_as=None, **opts: add(  # noqa: E731
            measure(kind, grads, name, label, repeats, shown_as, memcpy, **opts))
        cell("identity", "-")
        cell("identity", "-", "identity (bf16)", dtype="bf16")
        cell("int8", "-", budget="100%")                                # 100 %: every block, dense
        for frac in budgets:
            label, budget = f"{frac:.2%}", f"{100 * frac:g}%"   # the one budget syntax (trainers/spec.py)
            cell("spar", label, budget=budget)
            cell("spar", label, "spar (sketch)", budget=budget, svd="sketch")
            cell("topk", label, budget=budget)
            cell("int8", label, budget=budget)
            cell("powersgd", label, budget=budget)
            psgd = cell("powersgd", label, "powersgd (rank R)", rank=powersgd_rank_for(grads, frac))
            cell("spar", label, "spar @powersgd-bytes", budget_bytes=psgd.payload_bytes)
            if torch_hook:
                hook = add(torch_hook_row(kind, grads, label, powersgd_rank_for(grads, frac), repeats, memcpy))
                cell("spar", label, "spar @hook-bytes", budget_bytes=hook.payload_bytes)
    return rows


def as_dicts(rows: list[Row]) -> list[dict]:
    return [{**asdict(r), "total_s": r.total_s, "total_x": r.total_x, "encode_x": r.encode_x, "decode_x": r.decode_x}
            for r in rows]


# ---- the memory floor ------------------------------------------------------------------------

# (label, compressor, options) of `floor_ratios`: each at the 1.6 % budget the goals name
FLOOR_CELLS = (("spar@1.6%", "spar", {"budget": "1.6%"}),
               ("spar (sketch 8)@1.6%", "spar", {"budget": "1.6%", "svd": "sketch"}),
               ("powersgd@1.6%", "powersgd", {"budget": "1.6%"}),
               ("topk@1.6%", "topk", {"budget": "1.6%"}),
               ("int8@1.6%", "int8", {"budget": "1.6%"}),
               ("identity", "identity", {}))
TOKEN = "floor"


def _cpu(fn) -> float:
    """Process CPU seconds of `fn()` (all threads: at 2 threads the helper thread's spin counts too;
    over a socket, the sender's thread and the kernel's copies, as system time, count too)."""
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def received(payload) -> memoryview:
    """`payload` where the services hold it: in a wire receive buffer (writable, its end aligned as
    `wire.recv_buffer` aligns it, so fp32 segments at the end are decoded in place)."""
    buf = wire.recv_buffer(len(payload))
    buf[:] = payload
    return buf


def floor_ratios(grads: dict[str, torch.Tensor], cells=FLOOR_CELLS, repeats: int = 5, threads: int = 1,
                 progress=None, wire_path: bool = True) -> list[dict]:
    """Encode and decode CPU time of each cell as a ratio to a memcpy of the fp32 adapter's bytes,
    measured side by side (a copy before every repeat) so the ratio holds on a busy machine.
    Steady state, as the services run: one encoder carries its error feedback from update to
    update, one decoder decodes every payload from a receive buffer; the first round (buffers and
    warm starts being made) is not timed. Then the wire path (`wire_ratios`) for the fp32 identity
    payload. Returns rows {cell, payload_bytes, encode_x, decode_x, total_x, memcpy_s}."""
    torch.set_num_threads(threads)
    src = torch.cat([t.reshape(-1) for t in grads.values()])
    dst = torch.empty_like(src)
    dst.copy_(src)                                                     # touch the pages once
    memcpy = lambda: _cpu(lambda: dst.copy_(src))                      # noqa: E731
    rows = []

    def add(row: dict) -> None:
        rows.append(row)
        if progress:
            progress(row)

    for label, name, options in cells:
        enc, dec = get_compressor(name, **options), get_compressor(name, **options)
        dec.decode(received(enc.encode(grads)), reuse=True)
        copies, encodes, decodes = [], [], []
        for _ in range(repeats):
            copies.append(memcpy())
            payload = None

            def run_encode():
                nonlocal payload
                payload = enc.encode(grads)
            encodes.append(_cpu(run_encode))
            inbox = received(payload)                                  # the socket's copy: the wire rows time it
            decodes.append(_cpu(lambda: dec.decode(inbox, reuse=True)))  # as the services decode
        add(_row(label, len(payload), copies, encodes, decodes))
    if wire_path:
        payload = get_compressor("identity", error_feedback=False).encode(grads)
        for row in wire_ratios(payload, memcpy, repeats):
            add(row)
    return rows


def _row(label: str, payload_bytes: int, copies, encodes, decodes, **extra) -> dict:
    floor = statistics.median(copies)
    e, d = statistics.median(encodes) / floor, statistics.median(decodes) / floor
    return {"cell": label, "payload_bytes": payload_bytes, "encode_x": e, "decode_x": d, "total_x": e + d,
            "memcpy_s": floor, **extra}


def wire_ratios(payload: bytes, memcpy, repeats: int = 5) -> list[dict]:
    """The wire path of one payload against `memcpy()` (CPU seconds of the floor copy), side by side:
    - in memory: encode = framing (header + CRC-32C over the body, `encode_frame_parts`, no copy);
      decode = what a receiver does: a receive buffer, the socket's one copy into it, the header's
      checks and the CRC-32C over header and body (`verify_checksum`);
    - a loopback `Connection` (send on a thread, recv here: both sides, kernel copies included), and a
      bare sendall -> recv_into of the same bytes into a kept buffer (row key `bare_x`, x memcpy)."""
    check = wire.token_check(TOKEN)
    copies, frames, unframes = [], [], []
    for _ in range(repeats):
        copies.append(memcpy())
        parts = []
        frames.append(_cpu(lambda: parts.extend(wire.encode_frame_parts(
            wire.MessageType.UPDATE, payload, check=check, sender=0, version=1, seq=0))))
        unframes.append(_cpu(lambda: _unframe(parts, check)))
    rows = [_row("wire in memory", len(payload), copies, frames, unframes)]
    rows.extend(_loopback(payload, memcpy, repeats))
    return rows


def _unframe(parts: list[memoryview], check: bytes) -> memoryview:
    header = bytes(parts[0])
    *_, body_len, crc = wire.parse_header(header, check=check, expected_seq=0, max_body_bytes=1 << 31)
    body, pos = wire.recv_buffer(body_len), 0
    for part in parts[1:]:                                             # the socket's copy
        body[pos:pos + len(part)] = part
        pos += len(part)
    wire.verify_checksum(header, body, crc)
    return body


def _loopback(payload: bytes, memcpy, repeats: int) -> list[dict]:
    """CPU seconds over two loopback TCP connections, interleaved with the floor copy, of:
    Connection.send -> Connection.recv (a fresh receive buffer per frame, as before `reuse`), the same
    with recv(reuse=True) (the connection's kept buffer), send_prepared of a body checksummed once
    (a broadcast's per-worker cost: its one CRC is shared by every worker) -> recv(reuse=True), and a
    bare sendall -> recv_into of the same bytes into a kept buffer (`bare_x`, x memcpy, on each row)."""
    (a, b), (x, y) = _tcp_pair(), _tcp_pair()
    sender = wire.Connection(a, token=TOKEN, sender=0, peer="w1")
    receiver = wire.Connection(b, token=TOKEN, sender=1, peer="learner", max_body_bytes=1 << 31)
    inbox = memoryview(bytearray(len(payload)))
    prepared = wire.prepare_body(payload)

    def framed(send, body, reuse):
        def go():
            t = threading.Thread(target=send, args=(wire.MessageType.UPDATE, body, 1))
            t.start()
            receiver.recv(reuse=reuse)
            t.join()
        return go

    def bare():
        t = threading.Thread(target=x.sendall, args=(payload,))
        t.start()
        got = 0
        while got < len(inbox):
            got += y.recv_into(inbox[got:])
        t.join()

    ways = {"wire loopback Connection": framed(sender.send, payload, False),
            "wire loopback Connection reuse": framed(sender.send, payload, True),
            "wire loopback prepared+reuse": framed(sender.send_prepared, prepared, True)}
    copies, times, bares = [], {k: [] for k in ways}, []
    try:
        for way in ways.values():
            way()                                                      # warm-up: the kept buffer, socket buffers
        bare()
        for _ in range(repeats):
            copies.append(memcpy())
            for key, way in ways.items():
                times[key].append(_cpu(way))
            bares.append(_cpu(bare))
    finally:
        for c in (sender, receiver):
            c.close()
        x.close(), y.close()
    floor = statistics.median(copies)
    return [_row(key, len(payload), copies, t, [0.0], bare_x=statistics.median(bares) / floor)
            for key, t in times.items()]


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as srv:
        a = socket.create_connection(srv.getsockname())
        b, _ = srv.accept()
    return a, b


def floor_lines(threads: int = 1, repeats: int = 5) -> list[str]:
    """`floor_ratios` on the Qwen2.5-0.5B rank-64 shapes as printed lines, the load average at the
    start and the end of the run (the box is shared) and the allocator setting in force."""
    grads = synthetic_gradients(model_shapes())
    lines = [f"load1 {_load1()} at start; GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES', '')!r}; "
             f"{threads} thread(s), median of {repeats}"]

    def show(r: dict) -> None:
        bare = (f"  (bare sendall->recv_into {r['bare_x']:.1f}x: Connection/bare {r['total_x'] / r['bare_x']:.2f}x)"
                if "bare_x" in r else "")
        lines.append(f"{r['cell']:31s} {r['payload_bytes']:>12,d} B  encode {r['encode_x']:6.1f}x  "
                     f"decode {r['decode_x']:6.1f}x  total {r['total_x']:6.1f}x memcpy "
                     f"({1e3 * r['memcpy_s']:.1f} ms CPU){bare}")
        print(lines[-1], flush=True)

    print(lines[0], flush=True)
    rows = floor_ratios(grads, threads=threads, repeats=repeats, progress=show)
    total = {r["cell"]: r["total_x"] for r in rows}
    lines.append(f"spar / powersgd CPU time: {total['spar@1.6%'] / total['powersgd@1.6%']:.2f}x")
    print(lines[-1], flush=True)
    memcpy = memcpy_timer(grads)
    rank = powersgd_rank_for(grads, 0.016)
    hook = torch_hook_row("synthetic", grads, "1.60%", rank, repeats, memcpy)
    same = measure("synthetic", grads, "spar", "1.60%", repeats, "spar @hook-bytes", memcpy,
                   budget_bytes=hook.payload_bytes)
    for r in (hook, same):
        lines.append(f"{r.compressor:28s} {r.payload_bytes:>12,d} B  total {r.total_x:6.1f}x memcpy  "
                     f"error {r.rel_error:.3f} (rank {rank})")
        print(lines[-1], flush=True)
    lines.append(f"spar / torch powerSGD_hook at equal bytes: CPU {same.total_x / hook.total_x:.2f}x, "
                 f"error {same.rel_error / hook.rel_error:.2f}x; load1 {_load1()} at end")
    print(lines[-1], flush=True)
    return lines


def _load1() -> str:
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def tradeoff_lines(budgets=("1.6%", "6.25%"), steps: int = 6) -> list[str]:
    """Spar's error/time trade-off against PowerSGD at equal bytes on real backward gradients (the
    rank-64 tiny adapter, `steps` AdamW steps of next-token loss, error feedback carried), 1 thread:
    per cell the mean per-step relative error / the error of the summed updates / encode+decode CPU
    seconds per step. "gram, exact eigh" is the default with its leading-eigenpair count raised past
    the rank (every spectrum by eigh, as an earlier spar did)."""
    torch.set_num_threads(1)
    traj = real_trajectory("tiny", 64, steps + 1)[1:]            # one trajectory, its zero step dropped
    lines = [f"load1 {_load1()} at start; rank-64 tiny adapter, {steps} steps, error feedback, 1 thread"]

    def run(name: str, **opts) -> tuple[float, float, int, float]:
        enc, dec = get_compressor(name, **opts), get_compressor(name, **opts)
        errs, size, cpu = [], 0, 0.0
        sum_in = {k: torch.zeros_like(v) for k, v in traj[0].items()}
        sum_out = {k: torch.zeros_like(v) for k, v in traj[0].items()}
        for g in traj:
            t0 = time.process_time()
            payload = enc.encode(g)
            out = dec.decode(payload)
            cpu += time.process_time() - t0
            size = max(size, len(payload))
            errs.append(rel_error(out, g))
            for k in g:
                sum_in[k] += g[k]
                sum_out[k] += out[k]
        return statistics.fmean(errs), rel_error(sum_out, sum_in), size, cpu / len(traj)

    def show(budget: str, label: str, r) -> None:
        lines.append(f"{budget:6s} {label:22s} {r[0]:.3f} / {r[1]:.3f} / {r[3]:.4f} s  ({r[2]:,d} B)")
        print(lines[-1], flush=True)

    print(lines[0], flush=True)
    for budget in budgets:
        psgd = run("powersgd", budget=budget)
        show(budget, "powersgd", psgd)
        for label, opts in (("spar sketch 8", {"svd": "sketch"}), ("spar sketch 16", {"svd": "sketch", "sketch": 16}),
                            ("spar sketch 32", {"svd": "sketch", "sketch": 32}), ("spar gram (default)", {})):
            show(budget, label, run("spar", budget_bytes=psgd[2], **opts))
        kept, spar._GRAM_TOP = spar._GRAM_TOP, 1 << 30
        try:
            show(budget, "spar gram, exact eigh", run("spar", budget_bytes=psgd[2]))
        finally:
            spar._GRAM_TOP = kept
    return lines


if __name__ == "__main__":   # python -m trainers.compress.bench [--tradeoff]: the floor table (a benchmark
    # runs it under each allocator), or spar's error/time trade-off on real gradients
    tradeoff_lines() if "--tradeoff" in sys.argv[1:] else floor_lines()
