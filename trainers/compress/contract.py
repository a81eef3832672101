"""The compressor contract (trainers/compress/base.py) as checks that say what fails.

One implementation for both users: the test suite (tests/trainers/compress/test_contract.py runs
every check on every registered compressor) and `harness check NAME` (any registered compressor,
in-tree or a plugin). Each check returns None when the compressor keeps that part of the contract,
else a one-line reason. The checks:

- round_trip:   decode(encode(G)) has G's names, shapes, fp32 dtype, finite values
- fresh_decode: a fresh instance with the same options decodes a payload to the same bits
- deterministic: two instances encode the same gradients to the same bytes
- bytes:        every payload is `stated_bytes(layout)` long (exact), or within [0.9, 1] of it (a cap)
- error_feedback: sum(decoded) + residual == sum(inputs) over 8 updates (1e-5 of the largest input)
- threads:      a payload decodes to the same bits at 1 and at 2 torch threads, each in a fresh process,
                on factors of more than 32k elements (where torch splits elementwise kernels)
- replay:       a learner stepping AdamW from decode(encode(G)) and a replica in another process
                stepping from the same payloads (fresh compressor, 2 threads) hash equal after 12 steps
- state:        state_dict() is named tensors only; after 3 updates it goes through safetensors
                bytes into a fresh instance (load_state_dict), which then encodes the next 3
                updates to the same bytes as the original and ends with the same residual and state_dict bits
                (what a learner restarted from its snapshot relies on)

Gradients are real: a LoRA adapter (rank 8) on the `micro` model along a short exact-gradient
trajectory, so that both factors carry signal. The peer process is this module:
`python -m trainers.compress.contract DIR THREADS` (what it reads is described in `peer`).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from trainers import compress
from trainers.model.models import LoraSpec, build_model, lora_gradients, lora_parameters
from trainers.model.replica import OptimConfig, Replica

MODEL, LORA, OPTIM = "micro", LoraSpec(rank=8, seed=1), OptimConfig(lr=5e-3)
# A budget that leaves a budgeted compressor room beyond its table on the micro adapter (~19 k
# elements: 1.6 % would be ~600 bytes, mostly tensor names).
CHECK_BUDGET = "10%"
EF_TOLERANCE = 1e-5                  # of the largest summed input element: float rounding only
BYTES_FILL = 0.9                     # a cap's payloads fill at least this fraction of it
REPLAY_STEPS = 12
# Factors past torch's 32k-element grain, so that elementwise kernels split across threads.
THREAD_SHAPES = {"l0.lora_A": (64, 2048), "l0.lora_B": (2048, 64), "l1.lora_A": (512, 512)}


def options_for(name: str, **given) -> dict:
    """The options a check builds `name` with: CHECK_BUDGET for a budgeted compressor, then `given`."""
    budgeted = issubclass(compress.compressor_class(name), compress.BudgetedCompressor)
    return {**({"budget": CHECK_BUDGET} if budgeted else {}), **given}


# ---- real gradients of the micro model ------------------------------------------------------------

def batch(step: int, size: int = 4, length: int = 24) -> torch.Tensor:
    """Token ids for training step `step`: a fixed function of the step, identical in every process."""
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randint(0, 256, (size, length), generator=g)


def gradient(model, step: int) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    ids = batch(step)
    model(input_ids=ids, labels=ids).loss.backward()
    return lora_gradients(model)


def new_replica(seed: int = 0):
    model = build_model(MODEL, LORA, seed=seed)
    return model, Replica(lora_parameters(model), OPTIM)


def warm_gradients(n: int) -> list[dict[str, torch.Tensor]]:
    """`n` real gradients taken along a short exact-gradient trajectory (so both A and B get signal)."""
    model, replica = new_replica()
    out = []
    for step in range(n):
        g = gradient(model, step)
        out.append(g)
        replica.step(g)
    return out[1:] if n > 1 else out  # the first has lora_A grads of exactly zero (B starts at zero)


def decoded_hash(grads: list[dict[str, torch.Tensor]]) -> str:
    """sha256 over the names and raw bytes of every decoded tensor, in order."""
    h = hashlib.sha256()
    for g in grads:
        for name, t in g.items():
            h.update(name.encode() + t.contiguous().numpy().tobytes())
    return h.hexdigest()


# ---- the checks: None = kept, else one line ---------------------------------------------------------

def round_trip(name: str, options: dict, grads: list) -> str | None:
    g = grads[0]
    out = compress.get_compressor(name, **options).decode(compress.get_compressor(name, **options).encode(g))
    if list(out) != list(g):
        return f"decode returned tensors {list(out)[:3]}..., encoded {list(g)[:3]}..."
    for n in g:
        if out[n].shape != g[n].shape or out[n].dtype != torch.float32:
            return f"{n}: decoded {tuple(out[n].shape)} {out[n].dtype}, expected {tuple(g[n].shape)} torch.float32"
        if not torch.isfinite(out[n]).all():
            return f"{n}: decoded values hold NaN or inf"
    return None


def fresh_decode(name: str, options: dict, grads: list) -> str | None:
    c = compress.get_compressor(name, **options)
    for t, g in enumerate(grads[:3]):
        payload = c.encode(g)
        a, b = c.decode(payload), compress.get_compressor(name, **options).decode(payload)
        if not all(torch.equal(a[n], b[n]) for n in a):
            return f"update {t}: a fresh instance decodes the payload to other bits (decode is not pure)"
    return None


def deterministic(name: str, options: dict, grads: list) -> str | None:
    first, second = compress.get_compressor(name, **options), compress.get_compressor(name, **options)
    for t, g in enumerate(grads[:4]):
        if first.encode(g) != second.encode(g):
            return f"update {t}: two instances encode the same gradients to different bytes"
    return None


def payload_size(name: str, options: dict, grads: list) -> str | None:
    c = compress.get_compressor(name, **options)
    layout = [(n, tuple(t.shape)) for n, t in grads[0].items()]
    try:
        stated = int(c.stated_bytes(layout))
    except NotImplementedError as err:
        return str(err)
    for t, g in enumerate(grads[:4]):
        size = len(c.encode(g))
        if c.exact_bytes and size != stated:
            return f"update {t}: payload of {size} bytes, {stated} stated (exact)"
        if not c.exact_bytes and not BYTES_FILL * stated <= size <= stated:
            return f"update {t}: payload of {size} bytes, outside [{BYTES_FILL:g}, 1] x the stated cap of {stated}"
    return None


def error_feedback(name: str, options: dict, grads: list) -> str | None:
    c = compress.get_compressor(name, **options)
    sent = {n: torch.zeros_like(t, dtype=torch.float64) for n, t in grads[0].items()}
    given = {n: torch.zeros_like(t, dtype=torch.float64) for n, t in grads[0].items()}
    for g in grads:
        out = c.decode(c.encode(g))
        for n in g:
            sent[n] += out[n].double()
            given[n] += g[n].double()
    residual = c.residual()
    scale = max(float(t.abs().max()) for t in given.values())
    for n in given:
        gap = float((sent[n] + residual.get(n, torch.zeros_like(sent[n])).double() - given[n]).abs().max())
        if gap > EF_TOLERANCE * scale:
            return f"{n}: decoded + residual misses the inputs' sum by {gap:.3g} ({gap / scale:.2g} of the largest)"
    return None


def threads(name: str, options: dict, grads: list, folder: str | os.PathLike | None = None) -> str | None:
    g = torch.Generator().manual_seed(7)
    synthetic = [{n: torch.randn(s, generator=g) for n, s in THREAD_SHAPES.items()} for _ in range(2)]
    with _folder(folder) as root:
        c = compress.get_compressor(name, **options)
        payloads = [c.encode(x) for x in synthetic]
        _write(root, name, options, payloads, replay=False)
        expected = decoded_hash([compress.get_compressor(name, **options).decode(p) for p in payloads])
        for count in (1, 2):
            got = peer_hashes(root, count).get(name)
            if got != expected:
                return f"decoded bits at {count} thread(s) differ from this process's"
    return None


def replay(name: str, options: dict, grads: list, folder: str | os.PathLike | None = None) -> str | None:
    model, learner = new_replica()
    c = compress.get_compressor(name, **options)
    payloads = []
    for t in range(REPLAY_STEPS):
        payloads.append(c.encode(gradient(model, t)))
        learner.step(c.decode(payloads[-1]))
    with _folder(folder) as root:
        _write(root, name, options, payloads, replay=True)
        got = peer_hashes(root, 2).get(name)
    if got != learner.state_hash():
        return f"a replica in another process replaying the {REPLAY_STEPS} payloads ends at another state hash"
    return None


STATE_AT = 3                         # updates encoded before the state is saved


def state(name: str, options: dict, grads: list) -> str | None:
    original = compress.get_compressor(name, **options)
    for g in grads[:STATE_AT]:
        original.encode(g)
    saved = original.state_dict()
    odd = [k for k, v in saved.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
    if odd:
        return f"state_dict() holds entries that are not named tensors: {odd[:3]}"
    restored = compress.get_compressor(name, **options)
    restored.load_state_dict(st_load(st_save({k: v.contiguous() for k, v in saved.items()})))
    for t, g in enumerate(grads[STATE_AT:2 * STATE_AT], start=STATE_AT):
        if original.encode(g) != restored.encode(g):
            return (f"update {t}: an instance restored from state_dict() encodes other bytes than the original "
                    f"(state that state_dict() does not hold)")
    mine, theirs = original.residual(), restored.residual()
    if list(mine) != list(theirs) or not all(torch.equal(mine[n], theirs[n]) for n in mine):
        return "the restored instance ends with another error-feedback residual than the original"
    mine, theirs = original.state_dict(), restored.state_dict()
    if sorted(mine) != sorted(theirs) or not all(torch.equal(mine[k], theirs[k]) for k in mine):
        return "the restored instance ends with another state_dict() than the original"
    return None


CHECKS: dict[str, Callable[..., str | None]] = {
    "round_trip": round_trip, "fresh_decode": fresh_decode, "deterministic": deterministic, "bytes": payload_size,
    "error_feedback": error_feedback, "threads": threads, "replay": replay, "state": state}


def run(name: str, options: dict | None = None, checks: tuple[str, ...] = tuple(CHECKS),
        grads: list | None = None) -> dict[str, str | None]:
    """Every check of `checks` on compressor `name`: check -> None (kept) or the reason it fails.
    A check that raises fails with the exception's line (a contract broken loudly is still broken)."""
    options = options_for(name, **(options or {}))
    grads = grads if grads is not None else warm_gradients(9)
    out = {}
    for check in checks:
        try:
            out[check] = CHECKS[check](name, options, grads)
        except Exception as err:   # noqa: BLE001 - reported, not raised: the command lists every failure
            out[check] = f"raised {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    return out


# ---- the peer: a second replica in its own process ---------------------------------------------------

@contextlib.contextmanager
def _folder(folder):
    """A given folder, or a temporary one removed on exit."""
    if folder is not None:
        yield Path(folder)
        return
    with tempfile.TemporaryDirectory(prefix="wh-contract-") as tmp:
        yield Path(tmp)


def _write(root: Path, name: str, options: dict, payloads: list[bytes], replay: bool) -> None:
    for t, payload in enumerate(payloads):
        (root / f"{name}.{t}.bin").write_bytes(payload)
    (root / f"{name}.json").write_text(json.dumps({"options": options, "count": len(payloads), "replay": replay}))


def peer_hashes(folder: str | os.PathLike, threads: int) -> dict[str, str]:
    """Run `peer` on `folder` in a fresh process limited to `threads` torch threads."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "trainers.compress.contract", str(folder), str(threads)],
                          env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"peer process failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def peer(folder: str, threads: int = 2) -> dict[str, str]:
    """DIR holds `<compressor>.json` ({"options": ..., "count": n, "replay": true|false}) and
    `<compressor>.<t>.bin` payloads. replay: step a fresh micro replica with every decoded payload
    and hash its state; else hash the decoded gradients themselves (any layout)."""
    torch.set_num_threads(threads)
    root, hashes = Path(folder), {}
    for spec_file in sorted(root.glob("*.json")):
        doc = json.loads(spec_file.read_text())
        c = compress.get_compressor(spec_file.stem, **doc["options"])
        payloads = [(root / f"{spec_file.stem}.{t}.bin").read_bytes() for t in range(doc["count"])]
        if doc.get("replay", True):
            _, replica = new_replica()
            for payload in payloads:
                replica.step(c.decode(payload))
            hashes[spec_file.stem] = replica.state_hash()
        else:
            hashes[spec_file.stem] = decoded_hash([c.decode(p) for p in payloads])
    return hashes


if __name__ == "__main__":
    print(json.dumps(peer(sys.argv[1], *[int(a) for a in sys.argv[2:3]])))
