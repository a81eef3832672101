"""The walk of a run's values through the code: each value built once, and read without going back and forth.

Two walks, each the real code path of `harness run`, traced in this process with sys.setprofile:
- **cli**: the run parameters from the command line (`harness run --no-emulation ...`) to the
  learner's argv (traced until launch starts the learner process: `Processes.start`), then the learner's
  `main(argv)` with that argv and environment until `Learner.run` (everything built, before it
  waits for workers).
- **profile**: the profile from its YAML file (`harness run`, emulated, profile
  `paper-62.5mbit`) to the kernel: traced until `Shaper.apply` (the plan's operations go to
  the kernel through pyroute2 from there). Needs root and network namespaces; the namespaces
  of the one worker built on the way are torn down by `shaper.emulate`'s own `finally`.

The count, as a reader follows the values (one definition for every tree):
1. Frames: calls of functions in the tree's `harness/` and `trainers/` files; module bodies run
   by an import (and what they call) are not walked; library frames in between are transparent.
2. The value: a call is a step of the walk when one of its arguments, `self` excepted, is the
   walk's value or built from it (`tags`): for the cli walk a RunConfig, Variant, Cell,
   RunParams or Stack, a mapping or argparse namespace holding run parameters (three of
   method/seed/workers/updates/model/task/budget/objective), or an argv with --method/--seed;
   for the profile walk a Profile, LinkSpec, Plan or RunConfig, or a profile/link mapping.
   A method called on the value itself (`cfg.workers` through `__getattr__`, a property) reads
   it and is no step. Calls that are no step are transparent: their callees are still followed.
   The entries (cli.main, the learner's main) are always steps.
3. A loop is one step: a function called again from the same line of the same caller frame (a
   loop over the spec's parameters, over nodes) is walked once, at its first call.
4. Depth: a frame is followed only `DEPTH` (3) files deep below its entry (calls within one
   file do not deepen); `any depth` is printed too. Calibrated on 41387c2 (before the rooms):
   depth 3 gives the issue's own figures, 24 returns (cli) and 10 (profile).
5. The profile walk keeps only the files that handle a profile (`PROFILE_FILES`); the cli walk
   keeps every project file.
6. The walk is the sequence of files of the step running now: a call moves to the callee's file,
   its return back to the caller's (not after the walk's end: the frames still running then
   never returned); consecutive entries of one file are one. **Files entered** = distinct
   files; **returns** = entries of a file that the walk had already left (the issue's back and
   forth, launch <-> spec <-> events). The cli walk's two traces (harness, learner) are one
   sequence.
7. A trip: one call of a house function that returned before the walk's end (config.build,
   regime.place, the learner's stack.build), walked from its call to its return with rules 1-6
   at any depth, itself the entry. The walks' spines (cli.main down to the call the walk ends
   in) never return, so a whole walk is no trip; it is counted by its own figure. The worst
   trip is the most returns of any trip the two walks run.
8. Each walk runs in a process of its own (`--walk both` starts both, side by side): what one walk
   cached in its process never shortens the other. The profile walk's run is placed in a regime
   (`--comm-ratio paper`): its pilot, a run of its own (unshaped, cached per machine in the
   models cache), is measured, or found, by another process before the trace, so the walk always
   follows the run that uses it, whatever this machine ran before (the models cache is
   `$WAN_CACHE_DIR` as given, else the walk's own `--out`).

Usage (from the repository root; `--root` walks another checkout, e.g. a `git worktree` of an
older commit, with this tree's venv):
    python tests/benchmarks/walk.py [--root DIR] [--walk cli|profile|both] [--sequence]
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

DEPTH = 3         # files deep (see rule 4); the issue's own counts (24, 10) are this depth's
UNLIMITED = 10**6
# Files that hold a profile or something built from it (links, plans), old and new layout.
PROFILE_FILES = ("harness/net/", "harness/profiles.py", "harness/plan.py", "harness/shaper.py",
                 "harness/topology.py", "harness/backend.py", "harness/doctor.py", "harness/units.py",
                 "harness/config.py", "harness/run/config.py", "harness/launch.py", "harness/run/launch.py",
                 "harness/runcli.py", "harness/run/commands.py", "harness/cli.py")


class Stop(BaseException):
    """Raised from the profile hook at the walk's end (sys.setprofile then unsets the hook)."""


@dataclass
class Node:
    file: str
    code: str                               # file:line of the function's definition
    line: int                               # the caller's line that made this call
    tags: frozenset = frozenset()           # what its arguments are (see `tags`)
    returned: bool = False                  # False: still running when the walk ended
    children: list["Node"] = field(default_factory=list)


_RUN_KEYS = {"method", "seed", "workers", "updates", "model", "task", "budget", "objective"}
_LINK_KEYS = {"rate", "delay", "jitter", "loss", "up", "down"}


def _tag(value) -> set[str]:
    kind = type(value).__name__
    out = {kind}
    if isinstance(value, dict) or kind == "Namespace":
        keys = set(value if isinstance(value, dict) else vars(value))
        if len(keys & _RUN_KEYS) >= 3:
            out.add("run-values")
        if keys & {"defaults", "schedule", "workers"} and "name" in keys or keys & _LINK_KEYS:
            out.add("profile-values")
    elif isinstance(value, (list, tuple)) and any(v in ("--method", "--seed") for v in value if isinstance(v, str)):
        out.add("run-values")
    return out


def tags(frame) -> frozenset:
    """The kinds of a call's arguments (self included): class names, and 'run-values' /
    'profile-values' for a mapping or argv that holds a run's parameters / a profile's links."""
    code = frame.f_code
    n = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)
    out: set[str] = set()
    for i, name in enumerate(code.co_varnames[:n]):
        value = frame.f_locals.get(name)
        found = _tag(value)
        out |= {f"self:{t}" for t in found} if i == 0 and name == "self" else found
        if isinstance(value, dict) and name in ("kwargs", "given"):
            out |= {t for v in value.values() for t in _tag(v)}
    return frozenset(out)


class Recorder:
    """The call tree of project frames under `entry`; library frames between them are transparent."""

    def __init__(self, root: str, stop):
        self.root = os.path.realpath(root) + os.sep
        self.stop = stop                    # frame -> bool: end the walk at this call
        self.nodes: dict[object, Node] = {}  # live frame -> its node
        self.top = Node("<root>", "", 0)
        self.files: dict[object, str | None] = {}
        self.base = None                    # the frame of `run`: the walk's entries are called below it

    def _file(self, code) -> str | None:
        if code not in self.files:
            path = os.path.realpath(code.co_filename)
            rel = path[len(self.root):] if path.startswith(self.root) else None
            ok = rel is not None and rel.split(os.sep)[0] in ("harness", "trainers") and code.co_name != "<module>"
            self.files[code] = rel if ok else None
        return self.files[code]

    def _parent(self, frame) -> Node | None:
        """The node of the nearest project frame above; None inside an import (not walked)."""
        back = frame.f_back
        while back is not None and back is not self.base:
            if back in self.nodes:
                return self.nodes[back]
            if back.f_code.co_filename.startswith("<frozen importlib") or back.f_code.co_name == "<module>":
                return None
            back = back.f_back
        return self.top

    def __call__(self, frame, event, arg):
        if event == "call":
            if self.stop(frame):
                raise Stop
            rel = self._file(frame.f_code)
            if rel is None:
                return
            parent = self._parent(frame)
            if parent is None:
                return
            caller = frame.f_back
            node = Node(rel, f"{rel}:{frame.f_code.co_firstlineno}", caller.f_lineno if caller is not None else 0,
                        tags=tags(frame))
            parent.children.append(node)
            self.nodes[frame] = node
        elif event == "return" and frame in self.nodes:
            self.nodes.pop(frame).returned = True

    def run(self, fn, *args):
        self.base = sys._getframe()
        sys.setprofile(self)
        try:
            fn(*args)
        except Stop:
            pass
        finally:
            sys.setprofile(None)
            self.nodes.clear()
        return self.top


def sequence(top: Node, carries, depth: int = DEPTH, keep=lambda f: True) -> list[str]:
    """The files walked, in order (rules 2-6 of the module docstring). `carries(tags)`: the call
    takes the walk's value; a call that does not is transparent (its callees are followed)."""
    out: list[str] = []

    def visit(node: Node, level: int, current: str | None) -> None:
        if keep(node.file) and (level == 1 or carries(node.tags)):
            current = node.file
            out.append(current)
        seen = set()
        for child in node.children:
            deeper = level + (child.file != node.file)  # a call within the same file is no step
            if (child.line, child.code) in seen or deeper > depth:
                continue
            seen.add((child.line, child.code))
            visit(child, deeper, current)
            if not child.returned:
                return  # the walk ended inside it
            if current is not None:
                out.append(current)

    for entry in top.children:
        visit(entry, 1, None)
    return [f for i, f in enumerate(out) if i == 0 or out[i - 1] != f]


def trips(top: Node, carries, keep=lambda f: True) -> list[tuple[int, str, list[str]]]:
    """(returns, function, sequence) of every trip below `top` (rule 7), most returns first."""
    out = []

    def walk(node: Node) -> None:
        if node.returned:
            seq = sequence(Node("<trip>", "", 0, children=[node]), carries, UNLIMITED, keep)
            out.append((count(seq)[1], node.code, seq))
        seen = set()
        for child in node.children:
            if (child.line, child.code) not in seen:
                seen.add((child.line, child.code))
                walk(child)

    for entry in top.children:
        walk(entry)
    return sorted(out, key=lambda t: -t[0])


def count(seq: list[str]) -> tuple[int, int]:
    """(files entered, returns to a file already left)."""
    seen, returns = set(), 0
    for f in seq:
        returns += f in seen
        seen.add(f)
    return len(seen), returns


# ---- the two walks ------------------------------------------------------------------------------

def _cli(argv: list[str]) -> None:
    import harness.cli as cli

    sys.argv = ["harness", *argv]
    said = io.StringIO()
    try:
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
            cli.main()
    except SystemExit:
        pass
    finally:
        _said.append(said.getvalue())


_said: list[str] = []  # what each traced `harness run` printed (the reason, when it ended early)


def _learner_spawn(captured: dict):
    """Stop where launch starts the learner process (`Processes.start("learner", ...)`, whatever
    spawns it), keeping its argv and environment."""
    def stop(frame) -> bool:
        code = frame.f_code
        if code.co_name != "start" or not code.co_filename.endswith("launch.py"):
            return False
        if frame.f_locals.get("name") != "learner":
            return False
        captured.update(argv=list(frame.f_locals["argv"]), env=dict(frame.f_locals["env"]))
        return True
    return stop


def cli_walk(root: str, out: str) -> list[Node]:
    captured: dict = {}
    flags = ["run", "--no-emulation", "--model", "micro", "--method", "spar", "--seeds", "1", "--updates", "1",
             "--workers", "1", "--out", out, "--run-id", "walk"]
    harness_tree = Recorder(root, _learner_spawn(captured)).run(_cli, flags)
    if "argv" not in captured:
        raise SystemExit("walk: the harness never started the learner; it said:\n" + _said[-1][-2000:])
    argv = captured["argv"]
    module = argv[argv.index("-m") + 1]
    env = captured["env"]
    env.pop("WAN_PARENT_PID", None)  # the learner runs in this process: no parent-death signal to ask for
    os.environ.update(env)
    import importlib

    learner = importlib.import_module(module)
    at_run = lambda f: f.f_code.co_name == "run" and f.f_code.co_filename.endswith("learner.py")
    handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        learner_tree = Recorder(root, at_run).run(learner.main, argv[argv.index("-m") + 2:])
    finally:
        signal.signal(signal.SIGTERM, handlers[0])
        signal.signal(signal.SIGINT, handlers[1])
    return [harness_tree, learner_tree]


PROFILE_RUN = {"profile": "paper-62.5mbit", "model": "micro", "method": "spar", "seed": "1", "updates": 1,
               "workers": 1}


def _pilot_first(root: str, out: str) -> None:
    """The regime pilot of the profile walk's run, measured (or found in the cache) in another process
    (rule 8), untraced."""
    code = ("import sys; from harness.run import config, regime; "
            f"cfg = config.build(**{PROFILE_RUN!r}, out_dir={out!r}); "
            "cfg.comm_ratio_target is None or regime.measured(cfg, say=lambda line: None)")
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit("walk: the regime pilot failed:\n" + done.stderr[-3000:])


def profile_walk(root: str, out: str) -> list[Node]:
    at_apply = lambda f: f.f_code.co_name == "apply" and f.f_code.co_filename.endswith("shaper.py")
    _pilot_first(root, out)
    flags = ["run", "--profile", PROFILE_RUN["profile"], "--model", PROFILE_RUN["model"], "--method",
             PROFILE_RUN["method"], "--seeds", PROFILE_RUN["seed"], "--updates", str(PROFILE_RUN["updates"]),
             "--workers", str(PROFILE_RUN["workers"]), "--out", out, "--run-id", "walk-profile"]
    return [Recorder(root, at_apply).run(_cli, flags)]


RUN_VALUES = {"RunConfig", "Variant", "Cell", "RunParams", "Stack", "run-values"}
PROFILE_VALUES = {"Profile", "LinkSpec", "Plan", "RunConfig", "profile-values"}


def _rules(name: str):
    """(carries, keep) of a walk: which calls take its value, which files it keeps (rules 2, 5)."""
    values = RUN_VALUES if name == "cli" else PROFILE_VALUES
    keep = (lambda f: True) if name == "cli" else (lambda f: f.startswith(PROFILE_FILES))
    return (lambda tags: bool(tags & values)), keep


def walk_sequence(name: str, trees: list[Node], depth: int = DEPTH) -> list[str]:
    """One walk's files in order: its trees (harness, then learner) walked one after the other."""
    carries, keep = _rules(name)
    seq = [f for t in trees for f in sequence(t, carries, depth, keep)]
    return [f for i, f in enumerate(seq) if i == 0 or seq[i - 1] != f]


def walk_trips(name: str, trees: list[Node], shown: int = 5) -> list[dict]:
    """The `shown` worst trips of a walk's trees (rule 7)."""
    carries, keep = _rules(name)
    found = sorted((t for tree in trees for t in trips(tree, carries, keep)), key=lambda t: -t[0])
    return [{"function": code, "returns": n, "sequence": seq} for n, code, seq in found[:shown]]


def measure(name: str, root: str) -> dict:
    """One walk, traced in this process (rule 8): per depth, files entered, returns and the
    sequence; and its worst trips."""
    walks = {"cli": cli_walk, "profile": profile_walk}
    with tempfile.TemporaryDirectory(prefix="walk-") as out:
        trees = walks[name](root, out)
    found: dict = {}
    for depth, what in ((DEPTH, f"depth {DEPTH}"), (UNLIMITED, "any depth")):
        seq = walk_sequence(name, trees, depth)
        files, returns = count(seq)
        found[what] = {"files": files, "returns": returns, "sequence": seq}
    found["trips"] = walk_trips(name, trees)
    return found


def _measure_apart(names: tuple[str, ...], root: str) -> dict:
    """`measure` of each walk in a process of its own (rule 8), side by side; each prints its JSON last."""
    procs = {name: subprocess.Popen([sys.executable, os.path.abspath(__file__), "--root", root, "--walk", name,
                                     "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name in names}
    found = {}
    for name, proc in procs.items():
        out, err = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"walk: the {name} walk failed:\n{err[-3000:]}")
        found[name] = json.loads(out.strip().splitlines()[-1])[name]
    return found


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", default=".", help="the checkout to walk (default: this one)")
    p.add_argument("--walk", choices=("cli", "profile", "both"), default="both")
    p.add_argument("--sequence", action="store_true", help="print the files walked, in order")
    p.add_argument("--json", action="store_true", help="print one JSON document: per walk and depth, files "
                   "entered, returns and the sequence (what tests/benchmarks/test_walk.py reads)")
    args = p.parse_args(argv)
    root = os.path.realpath(args.root)
    sys.path.insert(0, root)  # before the editable install's finder: the checkout given is the one walked
    os.chdir(root)
    names = ("cli", "profile") if args.walk == "both" else (args.walk,)
    found = {names[0]: measure(names[0], root)} if len(names) == 1 else _measure_apart(names, root)
    if args.json:
        print(json.dumps(found))
        return 0
    for name, walk in found.items():
        for what in (f"depth {DEPTH}", "any depth"):
            w = walk[what]
            print(f"{name} walk ({what}): {w['files']} files entered, {w['returns']} returns to a file already left")
            if args.sequence:
                print("  " + " -> ".join(w["sequence"]))
        for i, t in enumerate(walk["trips"][:1 if not args.sequence else None]):
            print(f"{name} walk, {'worst ' if i == 0 else ''}trip {t['function']}: {t['returns']} returns"
                  + (f"\n  {' -> '.join(t['sequence'])}" if args.sequence else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
