"""One look for every figure: the colour and marker of each method, the phase colours, the
matplotlib settings (PDF Type-42 fonts), and `save` / `save_all` (PDF + PNG). plots.py and
dataparallel_plots.py both draw with it; neither imports the other's privates."""
from __future__ import annotations

import ctypes
import os
import signal
import struct
import threading
import time
import warnings
import zlib
from pathlib import Path

import matplotlib

from trainers import cards

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Okabe & Ito (2008), the colour-blind-safe qualitative palette.
OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]


def _styles(*kinds: str) -> dict[str, tuple[str, str]]:
    """name -> (colour, marker) of every card of `kinds` that states one (a family's other names too)."""
    out: dict[str, tuple[str, str]] = {}
    for card in (c for kind in kinds for c in cards.of(kind)):
        out.update({card.name: card.style} if card.style else {})
        out.update(card.styles)
    return out


# method -> (colour, marker), the same in every figure, each stated on the method's card (trainers/cards).
METHOD_STYLE = _styles("method", "compressor")
# the data-parallel family (its own runs): distinct pairs, none of METHOD_STYLE's, no MARKERS
DP_STYLE = _styles("dataparallel")
MARKERS = ">hp"  # markers no fixed method uses: an unlisted method never looks like a listed one
PHASE_COLOURS = {"rollout": "#009E73", "send_rollouts": "#56B4E9", "receive": "#F0E442", "idle": "#DDDDDD",
                 "train": "#0072B2", "encode": "#E69F00", "send_update": "#D55E00", "decode_replay": "#CC79A7",
                 "hash": "#000000"}
STYLE = {"pdf.fonttype": 42, "ps.fonttype": 42, "font.size": 9, "axes.spines.top": False,
         "axes.spines.right": False, "figure.dpi": 150, "savefig.bbox": "tight", "legend.frameon": False}


def style(method: str) -> tuple[str, str]:
    """(colour, marker) of a method: fixed for the known ones; for the rest, a CRC of the name
    (the same in every process, unlike hash()) picks a colour and, independently, a marker."""
    if method in METHOD_STYLE or method in DP_STYLE:
        return METHOD_STYLE.get(method) or DP_STYLE[method]
    h = zlib.crc32(method.encode())
    return OKABE_ITO[h % len(OKABE_ITO)], MARKERS[h // len(OKABE_ITO) % len(MARKERS)]


LINK_MARKERS = [None, "o", "s", "^", "v", "D", "P", "X"]   # one more per 8 links: colours repeat, markers do not
LINK_DASHES = {"down": "-", "up": "--"}


def link_style(index: int, direction: str) -> dict:
    """Line style of the link of node number `index` (learner 0, w1 1, ...) in `direction`: colour
    index % 8 (Okabe-Ito), marker index // 8 (none for the first 8 nodes), solid down / dashed up, so
    no two links of a run with up to 64 nodes share a style."""
    return {"color": OKABE_ITO[index % len(OKABE_ITO)], "linestyle": LINK_DASHES.get(direction, ":"),
            "marker": LINK_MARKERS[index // len(OKABE_ITO) % len(LINK_MARKERS)]}


NARROW = 2.0   # a byte axis whose points lie within this factor is linear: a log axis labels its minor ticks there


def bytes_axis(ax) -> None:
    """An x axis of bytes: log (methods' bytes span decades), small tick labels (a log axis within one decade
    labels its minor ticks, which would run into each other at full size); where every point drawn lies
    within NARROW of the others (ddp and lordo-global ship about the same), linear with a few ticks in B /
    kB / MB, since even small minor log labels collide there."""
    from matplotlib.ticker import EngFormatter, MaxNLocator

    xs = [x for line in ax.get_lines() for x in line.get_xdata() if x > 0]
    if xs and max(xs) / min(xs) < NARROW:
        ax.xaxis.set_major_locator(MaxNLocator(4))
        ax.xaxis.set_major_formatter(EngFormatter(unit="B", places=2))
    else:
        ax.set_xscale("log")
    ax.tick_params(axis="x", which="both", labelsize=6)


def save(fig, out: Path, name: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.pdf", out / f"{name}.png"]
    for p in paths:
        fig.savefig(p)
    plt.close(fig)
    return paths


CHILD_TIMEOUT_S = 600.0   # a writer child that has not finished by then is killed and its files written here
PR_SET_PDEATHSIG = 1      # <linux/prctl.h>
JOB = struct.Struct("=I")  # one file to write, as its index: the queue both writers take from
PIPE_CAPACITY = 65536     # bytes a Linux pipe buffers by default (16384 jobs): the queue is written before the fork


def save_all(figures: list[tuple[object, str]], out: Path) -> list[Path]:
    """`save` for several (figure, name): every PDF and PNG is one job, and this process and a forked
    child take the jobs from one queue (a pipe holding their indices, PDFs first: Type-42 font subsetting
    makes them the longer ones) until it is empty, so both cores write files and neither waits long for
    the other. Only where no other thread runs here (a lock another thread held at the fork would stay
    held in the child: `harness run`'s live display is one); else, or for the jobs of a child that
    failed, one after the other here. The files are the same either way. Each figure is closed."""
    out.mkdir(parents=True, exist_ok=True)
    jobs = [(fig, out / f"{name}.pdf") for fig, name in figures] + [(fig, out / f"{name}.png") for fig, name in figures]
    mine: set[int] = set()
    child, queue = None, None
    if len(figures) > 1 and (os.cpu_count() or 1) > 1 and threading.active_count() == 1:
        queue = _queue(len(jobs))
        child = _fork_writer(jobs, queue) if queue is not None else None
    try:
        while child is not None and (index := _take(queue)):
            jobs[index - 1][0].savefig(jobs[index - 1][1])
            mine.add(index - 1)
    except BaseException:
        if child is not None:   # no writer outlives the call
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
        raise
    finally:
        if queue is not None:
            os.close(queue)
    if child is None or not _child_done(child):   # no child, or one that failed: the rest are ours
        for i, (fig, path) in enumerate(jobs):
            if i not in mine:
                fig.savefig(path)
    for fig, _ in figures:
        plt.close(fig)
    return [path for _, name in figures for path in (out / f"{name}.pdf", out / f"{name}.png")]


def _queue(n: int) -> int | None:
    """The read end of a pipe holding the job numbers 1..n (its write end closed: an empty queue reads as
    end of file); None if the pipe cannot hold them. Each read takes one whole number (a pipe read is
    atomic under the pipe's lock, and every number was written at once)."""
    r, w = os.pipe()
    try:
        if n * JOB.size > PIPE_CAPACITY:
            raise OSError("too many jobs for one pipe")
        os.write(w, b"".join(JOB.pack(i) for i in range(1, n + 1)))
    except OSError:
        os.close(r)
        return None
    finally:
        os.close(w)
    return r


def _take(queue: int) -> int:
    """The next job's number (1-based), 0 when the queue is empty."""
    raw = os.read(queue, JOB.size)
    return JOB.unpack(raw)[0] if len(raw) == JOB.size else 0


def _fork_writer(jobs: list[tuple[object, Path]], queue: int) -> int | None:
    """The pid of a child writing the jobs it takes from `queue` (None: fork failed). It dies with us
    (PR_SET_PDEATHSIG) and says nothing: its exit status is its report (0: every job it took written)."""
    try:
        pid = os.fork()
    except OSError:
        return None
    if pid:
        return pid
    code = 1
    try:
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        warnings.simplefilter("ignore")   # no write to a stream whose lock the fork may have copied held
        while index := _take(queue):
            jobs[index - 1][0].savefig(jobs[index - 1][1])
        code = 0
    except BaseException:   # noqa: BLE001 (whatever it was, the parent writes every file it did not write itself)
        code = 1
    finally:
        os._exit(code)


def _child_done(pid: int) -> bool:
    """Whether the PDF child exited 0 (waited for up to CHILD_TIMEOUT_S; killed past it)."""
    end = time.monotonic() + CHILD_TIMEOUT_S
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status) == 0
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return False
