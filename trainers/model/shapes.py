"""The LoRA factor shapes of a model at a rank, as a JSON file: what the harness's cost model needs to
size a run's adapter without importing torch itself.

    python -m trainers.model.shapes --model micro --rank 8 --out /path/shapes.json
    python -m trainers.model.shapes --model micro --full --out /path/shapes.json
writes {"model": ..., "rank": ..., "shapes": [[parameter name, [rows, cols]], ...]} (lora_shapes: read
from the model built on the meta device; with --full, every parameter of the model, rank null: what a
data-parallel replica synchronises under --dp-train full), whole and then renamed. `harness run` forks it from its
fork server, whose torch is imported already, while the cells run (harness/run/launch.py); the harness
checks the file and keeps the shapes in its models cache (harness/projection/prediction.py), so the
prediction after the cells runs in the harness's own process.
"""
from __future__ import annotations

import argparse
import json
import os
import warnings
from pathlib import Path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainers.model.shapes")
    p.add_argument("--model", required=True, help="a tiny config's name, a named shape or a config folder")
    table = p.add_mutually_exclusive_group(required=True)
    table.add_argument("--rank", type=int, help="the LoRA rank: the adapter's factors")
    table.add_argument("--full", action="store_true", help="every parameter of the model instead")
    p.add_argument("--out", required=True, help="the JSON file to write")
    args = p.parse_args(argv)
    # torch: imported already where the fork server forks us
    from trainers.model.models import lora_shapes, parameter_shapes

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            shapes = parameter_shapes(args.model) if args.full else lora_shapes(args.model, args.rank)
    except ValueError as e:   # a rank below 1, a model without the targeted projections
        p.error(str(e))
    out = Path(args.out)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"model": args.model, "rank": args.rank,
                               "shapes": [[name, list(shape)] for name, shape in shapes]}))
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
