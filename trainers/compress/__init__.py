"""Compressors of the HiLo family, registered by name (the name is the interface).

    >>> from trainers.compress import available, get_compressor
    >>> c = get_compressor("spar", budget="1.6%")
    >>> payload = c.encode(grads)          # bytes: exactly what goes on the wire
    >>> grads_hat = c.decode(payload)      # pure; every replica steps from this

The contract is documented in `trainers/compress/base.py`.
"""
from __future__ import annotations

from trainers.compress.base import Compressor, OptionError, PayloadError
from trainers.compress.identity import IdentityCompressor
from trainers.compress.int8 import Int8Compressor
from trainers.compress.powersgd import PowerSGDCompressor
from trainers.compress.spar import SparCompressor
from trainers.compress.topk import TopKCompressor

_REGISTRY: dict[str, type[Compressor]] = {
    cls.name: cls for cls in (IdentityCompressor, SparCompressor, PowerSGDCompressor,
                              TopKCompressor, Int8Compressor)
}

__all__ = ["Compressor", "OptionError", "PayloadError", "available", "get_compressor"]


def available() -> list[str]:
    return sorted(_REGISTRY)


def get_compressor(name: str, **options) -> Compressor:
    if name not in _REGISTRY:
        raise OptionError(f"unknown compressor {name!r}; valid: {available()}")
    return _REGISTRY[name](**options)
