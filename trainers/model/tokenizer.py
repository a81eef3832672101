"""A byte-level tokenizer for the tiny CPU models: no vocabulary file, nothing to download.

Ids 0-255 are raw UTF-8 bytes; the special tokens follow. A Hugging Face path brings its own
tokenizer instead (see `trainers.model.models.build_tokenizer`).
"""
from __future__ import annotations

from typing import Sequence


class ByteTokenizer:
    """UTF-8 bytes as tokens, plus pad / bos / eos."""

    n_bytes = 256
    pad_token_id = 256
    bos_token_id = 257
    eos_token_id = 258
    vocab_size = 259

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        ids = list(text.encode("utf-8"))
        if add_bos:
            ids.insert(0, self.bos_token_id)
        if add_eos:
            ids.append(self.eos_token_id)
        return ids

    def decode(self, ids: Sequence[int], stop_at_eos: bool = True) -> str:
        out = bytearray()
        for i in ids:
            i = int(i)
            if i == self.eos_token_id and stop_at_eos:
                break
            if 0 <= i < self.n_bytes:
                out.append(i)
        # A sampled byte sequence may split a multi-byte character: replace, never raise.
        return out.decode("utf-8", errors="replace")
