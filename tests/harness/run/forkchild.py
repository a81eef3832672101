"""A service for tests/harness/run/test_forkserver.py: reports what a forked process sees, then exits.

    python -m tests.harness.run.forkchild REPORT.json [--exit CODE] [--sleep S]
"""
import argparse
import gc
import json
import os
import random
import sys
import time


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("report")
    p.add_argument("--exit", type=int, default=0)
    p.add_argument("--sleep", type=float, default=0.0)
    args = p.parse_args(argv)
    print("to stdout", flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    with open(args.report + ".tmp", "w") as f:
        json.dump({"pid": os.getpid(), "ppid": os.getppid(), "cwd": os.getcwd(), "env": dict(os.environ),
                   "netns": os.stat("/proc/self/ns/net").st_ino, "sid": os.getsid(0), "random": random.random(),
                   "cmdline": open("/proc/self/cmdline", "rb").read().decode().split("\0")[:-1],
                   "threads": len(os.listdir("/proc/self/task")), "nice": os.getpriority(os.PRIO_PROCESS, 0),
                   "autogroup": open("/proc/self/autogroup").read() if os.path.exists("/proc/self/autogroup") else None,
                   "gc_enabled": gc.isenabled(), "gc_frozen": gc.get_freeze_count(),
                   "gc_full_collections": gc.get_stats()[2]["collections"]},
                  f)
    os.replace(args.report + ".tmp", args.report)
    time.sleep(args.sleep)
    return args.exit
