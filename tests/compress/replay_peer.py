"""A second replica in its own process: decode payloads with a fresh compressor, replay, print the hash.

Usage: python -m tests.compress.replay_peer DIR
DIR holds `<compressor>.json` ({"options": ..., "count": n}) and `<compressor>.<t>.bin` payloads.
Prints one JSON object {compressor: state_hash}.
"""
import json
import pathlib
import sys

import torch

from tests.compress.common import new_replica
from trainers.compress import get_compressor


def main(folder: str) -> None:
    torch.set_num_threads(2)  # a different thread count than the learner's: decode must not care
    root, hashes = pathlib.Path(folder), {}
    for spec_file in sorted(root.glob("*.json")):
        spec = json.loads(spec_file.read_text())
        compressor = get_compressor(spec_file.stem, **spec["options"])
        _, replica = new_replica()
        for t in range(spec["count"]):
            replica.step(compressor.decode((root / f"{spec_file.stem}.{t}.bin").read_bytes()))
        hashes[spec_file.stem] = replica.state_hash()
    print(json.dumps(hashes))


if __name__ == "__main__":
    main(sys.argv[1])
