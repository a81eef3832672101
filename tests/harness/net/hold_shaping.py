"""Test helper: build a topology, apply a profile, print the run id, then wait to be killed.

``python tests/harness/net/hold_shaping.py PROFILE WORKERS [emulate]``: with ``emulate`` it uses the
guarded context manager (teardown on SIGTERM); without, it applies and never cleans up, like a
controller that gets SIGKILLed.
"""
import sys
import time

from harness.net import profiles, shaper, topology
from harness.net.plan import build_plan


def main() -> None:
    prof, workers = profiles.load(sys.argv[1]), int(sys.argv[2])
    if len(sys.argv) > 3 and sys.argv[3] == "emulate":
        with shaper.emulate(prof, workers, backend="fallback") as (topo, _):
            print(topo.run_id, flush=True)
            time.sleep(600)
    else:
        topo = topology.Topology.create(topology.new_run_id(), workers)
        shaper.Shaper(build_plan(prof, topo, "fallback")).apply()
        print(topo.run_id, flush=True)
        time.sleep(600)


if __name__ == "__main__":
    main()
