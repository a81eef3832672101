"""A job that knows nothing of the harness: torch.distributed env:// on gloo, one all_reduce of
rank + 1, its environment and result written to $WAN_RUN_DIR/result-<rank>.json. No step marks."""
import json
import os
import socket

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
x = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(x)
big = torch.ones(250_000)           # 1 MB: enough bytes that every link's counters move
dist.all_reduce(big)
keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "WAN_NODE", "WAN_RUN_DIR", "WAN_EVENTS")
probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
probe.connect((os.environ["MASTER_ADDR"], 9))   # no packet: just which local address routes there
doc = {"env": {k: os.environ.get(k) for k in keys}, "sum": x.item(), "big": big[0].item(),
       "rank": dist.get_rank(), "world": dist.get_world_size(), "local_address": probe.getsockname()[0]}
with open(os.path.join(os.environ["WAN_RUN_DIR"], f"result-{os.environ['RANK']}.json"), "w") as fh:
    json.dump(doc, fh)
# every rank reaches teardown before any closes its connections: gloo aborts a rank whose peer
# hangs up while its own threads still read ("terminate called without an active exception")
dist.barrier()
dist.destroy_process_group()
