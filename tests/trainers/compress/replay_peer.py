"""A second replica in its own process: decode payloads with a fresh compressor, print a hash.

Usage: python -m tests.trainers.compress.replay_peer DIR [THREADS]
DIR holds `<compressor>.json` ({"options": ..., "count": n, "replay": true|false}) and
`<compressor>.<t>.bin` payloads. replay (the default): step a fresh micro replica with every
decoded payload and hash its state; replay false: hash the decoded gradients themselves (any
layout). THREADS (default 2, a different count than the learner's): torch threads for decode.
Prints one JSON object {compressor: hash}.
"""
import hashlib
import json
import pathlib
import sys

import torch

from tests.trainers.compress.common import new_replica
from trainers.compress import get_compressor


def decoded_hash(grads: list[dict[str, torch.Tensor]]) -> str:
    """sha256 over the names and raw bytes of every decoded tensor, in order."""
    h = hashlib.sha256()
    for g in grads:
        for name, t in g.items():
            h.update(name.encode() + t.contiguous().numpy().tobytes())
    return h.hexdigest()


def main(folder: str, threads: int = 2) -> None:
    torch.set_num_threads(threads)
    root, hashes = pathlib.Path(folder), {}
    for spec_file in sorted(root.glob("*.json")):
        spec = json.loads(spec_file.read_text())
        compressor = get_compressor(spec_file.stem, **spec["options"])
        payloads = [(root / f"{spec_file.stem}.{t}.bin").read_bytes() for t in range(spec["count"])]
        if spec.get("replay", True):
            _, replica = new_replica()
            for payload in payloads:
                replica.step(compressor.decode(payload))
            hashes[spec_file.stem] = replica.state_hash()
        else:
            hashes[spec_file.stem] = decoded_hash([compressor.decode(p) for p in payloads])
    print(json.dumps(hashes))


if __name__ == "__main__":
    main(sys.argv[1], *[int(a) for a in sys.argv[2:3]])
