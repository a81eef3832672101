"""Compressors of the HiLo family, registered by name (the name is the interface).

    >>> from trainers.compress import available, get_compressor
    >>> c = get_compressor("spar", budget="1.6%")
    >>> payload = c.encode(grads)          # bytes: exactly what goes on the wire
    >>> grads_hat = c.decode(payload)      # pure; every replica steps from this

The contract is documented in `trainers/compress/base.py`; `trainers/compress/contract.py` checks
it on any registered compressor (`harness check NAME`). A compressor is one file and its card
(trainers/cards/compressors.py: name, class, options, budget, byte rule, plot style); a compressor from
another package brings its card through the entry-point group `wan_harness.cards` (or, without a
card, its class through `wan_harness.compressors`: docs/PLUGINS.md).
"""
from __future__ import annotations

from trainers.compress.base import BudgetedCompressor, Compressor, OptionError, PayloadError
from trainers.registry import Registry

_REGISTRY: Registry[Compressor] = Registry("compressor", "compressors", plugin="compressor", base=Compressor,
                                           error=OptionError, carded=True)
register = _REGISTRY.register
available = _REGISTRY.available
get_compressor = _REGISTRY.get
compressor_class = _REGISTRY.get_class
in_tree = _REGISTRY.in_tree
plugin_names = _REGISTRY.plugin_names

__all__ = ["BudgetedCompressor", "Compressor", "OptionError", "PayloadError", "available", "compressor_class",
           "get_compressor", "in_tree", "plugin_names", "register"]
