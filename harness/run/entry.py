"""`harness run`'s body, the first code after its flags are parsed: it starts the run's fork server
(harness/run/forkserver.py) before anything else, so that the server's imports (torch, transformers,
peft: seconds of CPU, on the other core) overlap the rest of the harness's own imports, its checks
(run id, --log, the preflight), the run's metadata and its network; then it hands over to
harness/run/commands.py `run_command` (kept out of this module: importing it is half a second).

The server is stopped when the command returns, however it returns (a bad flag: one line, exit 2; a
failed preflight; Ctrl-C; a crash), and it dies with us if we are killed (its parent-death signal).
Until the run folder exists its log is a temporary file in the nearest existing folder above it (the
same file system: launch.fork_server moves it in with a rename). None with --dry-run or
--spawn exec (and so none for a config that does not build: commands says why), and never for
containers (`harness run` does not start them).
"""
from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from pathlib import Path
from typing import Any, Iterator

from harness.run import config
from harness.run.config import RunConfig


def run_command(values: dict[str, Any], run_id: str | None, out: str, dry_run: bool, quiet: bool, json_out: bool,
                log: str | None) -> int:
    """`harness run`: the spec's values (harness/run/flags.py) -> a RunConfig -> commands.run, its fork server
    started as soon as the config is known; a bad value is one line, exit 2 (commands.run_command)."""
    try:
        cfg = config.build(**values, run_id=run_id, out_dir=out)
    except ValueError:
        cfg = None   # commands.run_command builds it again and says why
    with early_fork_server(cfg, dry_run) as server:
        from harness.run import commands

        return commands.run_command(values, run_id, out, dry_run, quiet, json_out, log, cfg=cfg, early=server)


@contextlib.contextmanager
def early_fork_server(cfg: RunConfig | None, dry_run: bool) -> Iterator[Any]:
    """The fork server for `cfg`'s run, its imports under way (None where the run has none); stopped,
    and its temporary log removed if the run never took it, on the way out."""
    if cfg is None or dry_run or cfg.spawn != "fork":
        yield None
        return
    from harness.run import launch
    from harness.run.forkserver import ForkServer, ForkServerError

    log = nearest_folder(Path(cfg.run_dir).parent) / f".forkserver-{os.getpid()}-{secrets.token_hex(4)}.log"
    label = cfg.run_dir if cfg.run_id is not None else Path(cfg.out_dir)   # the run id may come later (claim_run_id)
    try:
        server = ForkServer.start(launch.server_modules(cfg), launch.python_env(launch.cache_dir(cfg), threads=1),
                                  log, label=str(label), wait=False)
    except (OSError, ForkServerError):   # the run starts its own, as without this
        log.unlink(missing_ok=True)
        yield None
        return
    try:
        yield server
    finally:
        server.close()
        with contextlib.suppress(OSError):
            log.unlink()   # still here: the run stopped before its folder took the log


def nearest_folder(path: Path) -> Path:
    """The nearest existing, writable folder at or above `path` (--out, or above it when it does not exist
    yet; never the run folder, which must be empty for the run to claim it); else the system's temporary folder."""
    for folder in [path.resolve(), *path.resolve().parents]:
        if folder.is_dir():
            return folder if os.access(folder, os.W_OK) else Path(tempfile.gettempdir())
    return Path(tempfile.gettempdir())
