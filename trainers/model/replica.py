"""A replica's trainable state, stepped identically on the learner and on every worker.

HiLo ships a (compressed) gradient, and every replica re-runs the optimizer step locally, so
learner and workers must hold the same bits: LoRA adapter, AdamW state (m, v, step), the lr
schedule and the policy version. `Replica` holds exactly that. It steps from a *decoded*
gradient (the learner too: it steps from `decode(encode(G))`, never from G), hashes its
state, and snapshots/restores it to bytes with safetensors (no pickle) so that a late or
restarted worker can load a snapshot and replay the logged updates after it.

Bit-exactness: AdamW runs its single-tensor, non-fused path (`foreach=False, fused=False`),
which is elementwise and so independent of the thread count (decoupled weight decay included);
decode is made deterministic by the compressors (see `trainers.compress.kernels.add_outer_`).
Global-norm clipping (`max_grad_norm`) needs a reduction, whose order a multi-threaded sum would
change with the thread count; `global_norm` sums fixed blocks of at most `NORM_BLOCK` elements
(each reduced by one thread: below torch's parallel grain) in float64, in a fixed order, so every
replica computes the same norm and the same scale at any thread count.

A snapshot carries a digest (SHA-256 over every tensor's name, dtype, shape and bytes and over the
other metadata) and is checked whole before anything is loaded from it: the digest, the format, a
version of plain ASCII digits, an optimizer config this code accepts, each adapter tensor with its
AdamW moments of the same shape and a step count, every floating tensor finite, exp_avg_sq >= 0 and
the step a whole number >= 0, the same for every tensor. A file that fails any of these is one
ValueError line: it is never loaded in part. The digest catches damage, not a forger (anyone can
recompute it); the range checks stop what a forger could write.

Snapshots may carry extra named tensors and metadata (`snapshot(extra=..., meta=...)`; `restore`
returns the extras, `snapshot_meta` reads the metadata): the learner's own snapshot file adds its
compressor's state (`Compressor.state_dict`: error-feedback residual, warm starts, generators) and
its run parameters, so that a learner restarted from it continues bit-identically
(trainers/hilo/learner.py `--resume`; tests/trainers/hilo/test_resume.py).
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

SNAPSHOT_FORMAT = "replica-v2"   # v2: the digest (DIGEST_KEY) over the tensors and the metadata
DIGEST_KEY = "digest"
PLAIN_INT = re.compile(r"(0|[1-9][0-9]{0,17})")   # a version as the snapshot writes it: ASCII digits, no sign
MOMENTS = ("exp_avg", "exp_avg_sq", "step")       # AdamW's per-tensor state, beside each adapter/<name>
_SCHEDULES = ("constant", "cosine")


@dataclass(frozen=True)
class OptimConfig:
    """AdamW and its lr schedule; part of the replica's identity (a snapshot records it)."""

    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    warmup_steps: int = 0          # linear warm-up over this many updates
    schedule: str = "constant"     # "constant" or "cosine" (decays to 0 at total_steps)
    total_steps: int = 0           # only for "cosine"
    max_grad_norm: float = 0.0     # clip the decoded gradient's global L2 norm to this before AdamW; 0: off

    def __post_init__(self):
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"lr must be a positive finite number, got {self.lr}")
        if not (0 <= self.beta1 < 1 and 0 <= self.beta2 < 1):
            raise ValueError(f"betas must lie in [0, 1), got ({self.beta1}, {self.beta2})")
        if self.schedule not in _SCHEDULES:
            raise ValueError(f"schedule must be one of {list(_SCHEDULES)}, got {self.schedule!r}")
        if not (self.weight_decay >= 0 and self.max_grad_norm >= 0 and math.isfinite(self.weight_decay)
                and math.isfinite(self.max_grad_norm)):
            raise ValueError(f"weight_decay and max_grad_norm must be finite and >= 0, got "
                             f"{self.weight_decay}, {self.max_grad_norm}")
        if self.schedule == "cosine" and self.total_steps < 1:
            raise ValueError("the cosine schedule needs total_steps >= 1")

    def lr_at(self, step: int) -> float:
        """Learning rate for the update that takes the replica from version `step` to `step + 1`."""
        lr = self.lr
        if self.warmup_steps > 0:
            lr *= min(1.0, (step + 1) / self.warmup_steps)
        if self.schedule == "cosine":
            lr *= 0.5 * (1 + math.cos(math.pi * min(step, self.total_steps) / self.total_steps))
        return lr


class Replica:
    """LoRA adapter + AdamW state + policy version, keyed by parameter name in a fixed order."""

    def __init__(self, params: dict[str, torch.nn.Parameter], optim: OptimConfig | None = None):
        if not params:
            raise ValueError("a replica needs at least one trainable tensor")
        self.params = dict(params)
        self.optim_config = optim or OptimConfig()
        c = self.optim_config
        self.optimizer = torch.optim.AdamW(list(self.params.values()), lr=c.lr, betas=(c.beta1, c.beta2),
                                           eps=c.eps, weight_decay=c.weight_decay, foreach=False, fused=False)
        self.version = 0
        self._init_state()

    def _init_state(self) -> None:
        # What AdamW would create lazily on its first step; created up front so that hashes and
        # snapshots cover the same tensors at every version.
        for p in self.params.values():
            self.optimizer.state[p] = {"step": torch.tensor(0.0),
                                       "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                                       "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}

    # -- stepping ---------------------------------------------------------------------------
    def step(self, grads: dict[str, torch.Tensor]) -> None:
        """One AdamW step from a decoded gradient; version -> version + 1."""
        self._check_layout({n: tuple(g.shape) for n, g in grads.items()}, "gradient")
        if self.optim_config.max_grad_norm > 0:
            grads = clip_by_global_norm(grads, self.optim_config.max_grad_norm)[0]
        for name, p in self.params.items():
            p.grad = grads[name].detach().to(dtype=p.dtype, copy=True)
        for group in self.optimizer.param_groups:
            group["lr"] = self.optim_config.lr_at(self.version)
        self.optimizer.step()
        for p in self.params.values():
            p.grad = None
        self.version += 1

    def adapter(self) -> dict[str, torch.Tensor]:
        return {n: p.detach().clone() for n, p in self.params.items()}

    def load_adapter(self, tensors: dict[str, torch.Tensor], version: int) -> None:
        """Full synchronisation: take the learner's adapter as is (optimizer state untouched)."""
        self._check_layout({n: tuple(t.shape) for n, t in tensors.items()}, "adapter")
        with torch.no_grad():
            for name, p in self.params.items():
                p.copy_(tensors[name])
        self.version = int(version)

    # -- hashing ----------------------------------------------------------------------------
    def policy_hash(self) -> str:
        """Hash of the adapter as held: what the replica samples with."""
        h = hashlib.sha256()
        for name, p in self.params.items():
            _update(h, name, p)
        return h.hexdigest()[:32]

    def optimizer_hash(self) -> str:
        h = hashlib.sha256()
        for name, p in self.params.items():
            state = self.optimizer.state[p]
            for key in ("step", "exp_avg", "exp_avg_sq"):
                _update(h, f"{key}/{name}", state[key])
        return h.hexdigest()[:32]

    def state_hash(self) -> str:
        """Everything a replica's future depends on: version, adapter, optimizer state, schedule."""
        h = hashlib.sha256()
        h.update(json.dumps({"version": self.version, "optim": asdict(self.optim_config)}, sort_keys=True).encode())
        h.update(self.policy_hash().encode())
        h.update(self.optimizer_hash().encode())
        return h.hexdigest()[:32]

    # -- snapshots --------------------------------------------------------------------------
    def snapshot(self, extra: dict[str, torch.Tensor] | None = None, meta: dict[str, str] | None = None) -> bytes:
        """Adapter, AdamW state, version and config as safetensors bytes; `extra` named tensors ride
        along (a learner's compressor state) and come back from `restore`; `meta` strings join the
        metadata (`snapshot_meta`)."""
        tensors = {f"extra/{k}": v.detach().contiguous() for k, v in (extra or {}).items()}
        for name, p in self.params.items():
            state = self.optimizer.state[p]
            tensors[f"adapter/{name}"] = p.detach().contiguous()
            tensors[f"exp_avg/{name}"] = state["exp_avg"].contiguous()
            tensors[f"exp_avg_sq/{name}"] = state["exp_avg_sq"].contiguous()
            tensors[f"step/{name}"] = state["step"].reshape(1)
        meta = {**(meta or {}), "format": SNAPSHOT_FORMAT, "version": str(self.version),
                "optim": json.dumps(asdict(self.optim_config), sort_keys=True)}
        meta[DIGEST_KEY] = snapshot_digest(tensors, meta)
        return st_save(tensors, metadata=meta)

    def restore(self, blob: bytes) -> dict[str, torch.Tensor]:
        """Load a snapshot of a replica with the same layout and optimizer config; returns its extras.
        The whole file is checked first (`check_snapshot`): a bad one raises and changes nothing."""
        meta, tensors = self.check_snapshot(blob)
        with torch.no_grad():
            for name, p in self.params.items():
                p.copy_(_get(tensors, f"adapter/{name}", p.shape))
                self.optimizer.state[p] = {
                    "step": _get(tensors, f"step/{name}", (1,)).reshape(()).to(torch.float32).clone(),
                    "exp_avg": _get(tensors, f"exp_avg/{name}", p.shape).to(p.dtype).clone(),
                    "exp_avg_sq": _get(tensors, f"exp_avg_sq/{name}", p.shape).to(p.dtype).clone()}
        self.version = int(meta["version"])
        return {k[len("extra/"):]: t.clone() for k, t in tensors.items() if k.startswith("extra/")}

    def check_snapshot(self, blob: bytes) -> tuple[dict[str, str], dict[str, torch.Tensor]]:
        """(metadata, tensors) of a snapshot this replica can load: checked whole (`read_snapshot`),
        with this replica's optimizer config and adapter layout; one-line ValueError otherwise."""
        meta, tensors = read_snapshot(blob)
        if json.loads(meta["optim"]) != asdict(self.optim_config):
            raise ValueError(f"snapshot optimizer config {meta['optim']} differs from this replica's")
        self._check_layout({n[len("adapter/"):]: tuple(t.shape) for n, t in tensors.items()
                            if n.startswith("adapter/")}, "snapshot")
        return meta, tensors

    def _check_layout(self, shapes: dict[str, tuple[int, ...]], what: str) -> None:
        mine = {n: tuple(p.shape) for n, p in self.params.items()}
        if shapes != mine:
            missing = sorted(set(mine) - set(shapes))[:1]
            extra = sorted(set(shapes) - set(mine))[:1]
            wrong = sorted(n for n in set(mine) & set(shapes) if mine[n] != shapes[n])[:1]
            raise ValueError(f"{what} does not match the adapter: missing {missing}, unexpected {extra}, "
                             f"wrong shape {wrong}")


# Elements per block of the global norm's sum: below torch's parallel grain (32,768), so one thread
# reduces each block whatever the thread count, and the blocks are added in a fixed order.
NORM_BLOCK = 16_384


def global_norm(grads: dict[str, torch.Tensor]) -> float:
    """The joint L2 norm of `grads`, bit-identical at any thread count (float64 block sums)."""
    total = 0.0
    for g in grads.values():
        flat = g.detach().reshape(-1).to(torch.float64)
        for start in range(0, flat.numel(), NORM_BLOCK):
            block = flat[start:start + NORM_BLOCK]
            total += float((block * block).sum())
    return math.sqrt(total)


def clip_by_global_norm(grads: dict[str, torch.Tensor], max_norm: float) -> tuple[dict[str, torch.Tensor], float]:
    """Scale all gradients so their joint L2 norm is at most `max_norm`; returns (grads, norm before)."""
    norm = global_norm(grads)
    if max_norm <= 0 or norm <= max_norm:
        return grads, norm
    scale = max_norm / (norm + 1e-6)  # a Python float: the same scale on every replica
    return {n: g * scale for n, g in grads.items()}, norm


def _update(h, name: str, t: torch.Tensor) -> None:
    t = t.detach().contiguous().cpu()
    h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
    h.update((t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes())


def snapshot_meta(blob: bytes) -> dict[str, str]:
    """A snapshot's metadata (format, version, optim and what `snapshot(meta=...)` added), after the
    whole snapshot has been read and checked; a blob that is not one raises ValueError in one line."""
    return read_snapshot(blob)[0]


def snapshot_digest(tensors: dict[str, torch.Tensor], meta: dict[str, str]) -> str:
    """SHA-256 over the metadata but the digest itself (sorted JSON) and every tensor's name, dtype,
    shape and bytes, in name order."""
    h = hashlib.sha256(json.dumps({k: v for k, v in meta.items() if k != DIGEST_KEY}, sort_keys=True).encode())
    for name in sorted(tensors):
        _update(h, name, tensors[name])
    return h.hexdigest()


def read_snapshot(blob: bytes) -> tuple[dict[str, str], dict[str, torch.Tensor]]:
    """(metadata, tensors) of a replica snapshot, checked whole (the module doc: digest, format,
    version, optimizer config, layout, finite values, AdamW state in range); one-line ValueError."""
    try:
        blob = bytes(blob)
        tensors = st_load(blob)
        meta = _snapshot_metadata(blob)
    except Exception as exc:
        why = " ".join(str(exc).split())[:200]
        raise ValueError(f"unreadable replica snapshot ({type(exc).__name__}: {why})") from None
    if meta.get("format") != SNAPSHOT_FORMAT:
        raise ValueError(f"not a {SNAPSHOT_FORMAT} snapshot (format {str(meta.get('format'))[:40]!r})")
    if meta.get(DIGEST_KEY) != snapshot_digest(tensors, meta):
        raise ValueError("the snapshot's digest does not match its contents: the file was changed or damaged "
                         "after it was written")
    if not PLAIN_INT.fullmatch(str(meta.get("version", ""))):
        raise ValueError(f"snapshot version {str(meta.get('version'))[:40]!r} is not a plain decimal integer")
    _check_optim(meta.get("optim"))
    _check_tensors(tensors)
    return meta, tensors


def _check_optim(text) -> OptimConfig:
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise TypeError(f"a {type(doc).__name__}, not an object")
        return OptimConfig(**doc)
    except (TypeError, ValueError) as exc:   # JSONDecodeError is a ValueError; unknown keys a TypeError
        raise ValueError(f"snapshot optimizer config is not usable ({' '.join(str(exc).split())[:120]})") from None


def _check_tensors(tensors: dict[str, torch.Tensor]) -> None:
    """Each adapter/<name> with exp_avg/<name>, exp_avg_sq/<name> of its shape and a one-element
    step/<name>; nothing else but extra/*; floating tensors finite; exp_avg_sq >= 0; every step the
    same whole number >= 0."""
    names = {k[len("adapter/"):] for k in tensors if k.startswith("adapter/")}
    if not names:
        raise ValueError("snapshot holds no adapter tensor")
    for key, t in tensors.items():
        kind, _, name = key.partition("/")
        if kind != "extra" and (kind not in ("adapter", *MOMENTS) or name not in names):
            raise ValueError(f"snapshot entry {key!r} belongs to no adapter tensor")
        if t.dtype.is_floating_point and not bool(torch.isfinite(t).all()):
            raise ValueError(f"snapshot entry {key!r} holds NaN or infinite values")
    steps = set()
    for name in sorted(names):
        adapter = tensors[f"adapter/{name}"]
        if not adapter.dtype.is_floating_point:
            raise ValueError(f"snapshot entry 'adapter/{name}' is {adapter.dtype}, not a floating tensor")
        for kind in ("exp_avg", "exp_avg_sq"):
            t = _get(tensors, f"{kind}/{name}", adapter.shape)
            if not t.dtype.is_floating_point:
                raise ValueError(f"snapshot entry '{kind}/{name}' is {t.dtype}, not a floating tensor")
        if bool((tensors[f"exp_avg_sq/{name}"] < 0).any()):
            raise ValueError(f"snapshot entry 'exp_avg_sq/{name}' has negative values (AdamW's second moment "
                             "is a mean of squares)")
        step = _get(tensors, f"step/{name}", (1,)).double().item()
        if not (step >= 0 and step == int(step)):
            raise ValueError(f"snapshot entry 'step/{name}' is {step:g}, not a whole number >= 0")
        steps.add(int(step))
    if len(steps) > 1:
        raise ValueError(f"snapshot step counts differ between adapter tensors ({sorted(steps)[:4]})")


def snapshot_step(tensors: dict[str, torch.Tensor]) -> int:
    """The AdamW step count of a checked snapshot's tensors (the same for every adapter tensor)."""
    return int(next(t for k, t in tensors.items() if k.startswith("step/")).double().item())


def _snapshot_metadata(blob: bytes) -> dict[str, str]:
    # safetensors layout: u64 header length, then a JSON header whose "__metadata__" holds ours
    # (st_load has already checked the layout, and that the metadata maps strings to strings).
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + n])
    meta = header.get("__metadata__") or {}
    if not isinstance(meta, dict):
        raise ValueError("snapshot metadata is not an object")
    return meta


def _get(tensors: dict[str, torch.Tensor], key: str, shape) -> torch.Tensor:
    t = tensors.get(key)
    if t is None or tuple(t.shape) != tuple(shape):
        raise ValueError(f"snapshot entry {key!r} is missing or has the wrong shape")
    return t
