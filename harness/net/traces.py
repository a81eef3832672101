"""Recorded and synthetic link traces: parse, convert, generate, resample (pure, no kernel).

A trace is a piecewise-constant link over time that loops at its end: rate (bit/s) and, where the
file gives them, one-way delay and random loss. Formats read and written:

* **Mahimahi** delivery opportunities (mm-link): one integer millisecond timestamp per line, each a
  chance to deliver one 1500-byte packet at that ms; the file loops with period = the last
  timestamp, which is itself an opportunity. Recognised by content (every non-empty line a
  non-negative integer), whatever the file is called (``*.mahi``, ``*.up``, ``*.down`` by habit).
  Read into ``MAHIMAHI_BIN_S`` steps (rate = packets in the bin x 12000 bit / bin length); written
  the way Mahimahi's own ``mm-rate-to-events`` writes them (``to_mahimahi``).
* **CSV** (``*.csv``): ``time_s,rate_mbit_s[,delay_ms[,loss_pct]]`` with an optional header line.
  The same reader takes the Pensieve/FCC "cooked" form (``time_s throughput_mbit_s``, whitespace
  separated, no header). Each row holds until the next; the last one for the median step length,
  which closes the loop period.

A trace plays as a schedule of steps every ``interval_s`` seconds (``steps``): step k carries the
time-weighted mean rate of the trace over [k x interval, (k+1) x interval), wrapped around the loop
period, and the delay and loss in force at its start. A rate of 0 (an outage) is played as
``OUTAGE_RATE_BIT_S``: an HTB class cannot be stopped, and 8 kbit/s passes one 1500-byte packet
per 1.5 s, which TCP sees as the outage it is.

Limits (checked when a trace is read, generated or played; one line naming the file, the line
and the field otherwise), so that reading costs time and memory in proportion to the file and
never to the numbers in it:

* a file of at most ``MAX_TRACE_BYTES``, ``MAX_TRACE_ROWS`` CSV rows, read line by line;
* rates within 0 and ``units.RATE_MAX_BIT_S`` (100 Gbit/s), the shaper's range: HTB's rate is a
  u32 of bytes/s (34.4 Gbit/s), extended by TCA_HTB_RATE64 above it, which pyroute2 0.9 sends;
  its burst is a u32 count of psched ticks (15.625 per us), so the 2-MTU burst of the plan
  (``plan.MIN_BURST_BYTES``) fits down to 88 bit/s, and ``units.RATE_MIN_BIT_S`` (1 kbit/s) keeps
  an 11x margin. A rate under ``OUTAGE_RATE_BIT_S`` plays as that floor, as a 0 does;
* steps at least ``MIN_STEP_S`` (1 ms, Mahimahi's resolution) apart and a loop of at most
  ``MAX_SPAN_S`` (7 days, as a profile's schedule); a Mahimahi file's empty bins become one
  outage step, so its steps are at most twice its lines whatever its timestamps;
* played at an interval within ``MIN_INTERVAL_S`` and ``MAX_INTERVAL_S`` and at most
  ``MAX_STEPS`` steps a loop (the plan lists every step of one loop);
* written as Mahimahi: at most ``MAX_MAHIMAHI_LINES`` lines and a loop of at most
  ``MAX_MAHIMAHI_SPAN_S`` (the writer walks the loop ms by ms).

Synthetic traces (``generate``), seeded: ``constant``, ``normal`` (i.i.d. around a mean, clipped
at 0), ``square`` (high/low halves of a period), ``outages`` (one rate, with exponential gaps and
outage lengths), ``diurnal`` (a sine of one period). Every one's time-weighted mean over its whole
loop is the mean asked for: the shape is drawn, then scaled to it (normal's draws after clipping,
outages' rate between outages, square's and diurnal's levels where the loop ends mid-period or the
step does not divide the period), capped at the shaper's top with the rest carried by the other
steps. Square and diurnal need a loop of at least one whole period (a shorter one would be a flat
slice of the shape).
"""
from __future__ import annotations

import bisect
import functools
import math
import random
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from harness import readers, units

MTU_BYTES = 1500                    # a Mahimahi delivery opportunity carries one MTU-sized packet
MAHIMAHI_BIN_S = 0.1                # Mahimahi timestamps binned to 100 ms steps when read
MTU_BITS = MTU_BYTES * 8
UNROLL_MAX_MS = 600_000             # to_mahimahi writes up to 10 min of loops to close on whole packets
UNROLL_MAX_LINES = 1_000_000        # ... and up to a million more lines doing so
_WHOLE = 1e-9                       # a count of packets this close to an integer is whole (float sums)
OUTAGE_RATE_BIT_S = 8e3             # what a rate of 0 plays as (HTB needs a rate; >= units' 1 kbit/s floor)
MAX_TRACE_BYTES = 64 << 20         # a file read at all (a 10-minute 100 Mbit/s Mahimahi file is ~35 MB)
MAX_TRACE_ROWS = 1_000_000          # CSV rows (a day at 0.1 s steps is 864,000)
MAX_SPAN_S = 7 * 86400.0            # one loop of a trace, as a profile's schedule reaches
MIN_STEP_S = 1e-3                   # steps of a CSV trace at least 1 ms apart (Mahimahi's resolution)
MIN_INTERVAL_S, MAX_INTERVAL_S = 0.01, 3600.0   # how often a played trace may change the link
MAX_STEPS = 100_000                 # steps of one loop at the interval played (a plan lists them all)
MAX_MAHIMAHI_LINES = 10_000_000     # lines written by to_mahimahi (one a 1500-byte packet)
MAX_MAHIMAHI_SPAN_S = 3600.0        # a Mahimahi file's loop as written (the writer walks it ms by ms)
MAX_STAT_BINS = 100_000             # stats() widens its bins past this many (a week of 1 s bins is 604,800)
TRACE_DIR = Path(__file__).resolve().parents[2] / "netem_profiles" / "traces"
KINDS = ("constant", "normal", "square", "outages", "diurnal")
MAHIMAHI_SUFFIXES = (".mahi", ".up", ".down", ".trace")
_STAMP = re.compile(r"[0-9]+")       # ASCII digits only: str.isdigit() takes '²', which int() refuses


class TraceError(ValueError):
    """A trace that cannot be used; str() is one line naming the file, line or field."""


@dataclass(frozen=True)
class Trace:
    """Steps starting at ``times_s`` (the first at 0), each holding until the next; loops at ``period_s``."""
    name: str
    times_s: tuple[float, ...]
    rate_bit_s: tuple[float, ...]
    period_s: float
    delay_s: tuple[float, ...] | None = None
    loss_frac: tuple[float, ...] | None = None

    def index_at(self, t_s: float) -> int:
        """The step in force at ``t_s`` seconds (looped)."""
        t = t_s % self.period_s
        lo, hi = 0, len(self.times_s) - 1
        while lo < hi:                       # last step whose start <= t
            mid = (lo + hi + 1) // 2
            if self.times_s[mid] <= t:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def mean_rate(self, start_s: float, end_s: float) -> float:
        """Time-weighted mean rate over [start_s, end_s) (bit/s), looping at the period."""
        if end_s <= start_s:
            return self.rate_bit_s[self.index_at(start_s)]
        return self.bits(start_s, end_s) / (end_s - start_s)

    def bits(self, start_s: float, end_s: float) -> float:
        """Bits the trace offers over [start_s, end_s): the difference of the cumulative bits at
        both ends (whole loops x the loop's bits + the part of one loop), so a window of many
        loops costs no more than one, and a time a float's width off a loop's edge cannot send
        the sum backwards (the step-by-step walk it replaces could loop forever there)."""
        return self._bits_to(end_s) - self._bits_to(start_s) if end_s > start_s else 0.0

    @functools.cached_property
    def _cum_bits(self) -> tuple[float, ...]:
        """Bits from the loop's start to each step's start, and the loop's total last."""
        out = [0.0]
        for i, rate in enumerate(self.rate_bit_s):
            nxt = self.times_s[i + 1] if i + 1 < len(self.times_s) else self.period_s
            out.append(out[-1] + rate * (nxt - self.times_s[i]))
        return tuple(out)

    def _bits_to(self, t_s: float) -> float:
        loops = math.floor(t_s / self.period_s)
        y = min(self.period_s, max(0.0, t_s - loops * self.period_s))
        i = max(0, bisect.bisect_right(self.times_s, y) - 1)
        cum = self._cum_bits
        return loops * cum[-1] + cum[i] + self.rate_bit_s[i] * (y - self.times_s[i])

    def steps(self, interval_s: float, until_s: float) -> list[dict]:
        """The schedule over [0, until_s): one step per interval (see the module docstring);
        TraceError past ``MAX_STEPS`` steps or outside the interval's range."""
        check_interval(interval_s, until_s, self.name)
        out = []
        for k in range(max(1, math.ceil(until_s / interval_s - 1e-9))):
            t = k * interval_s
            out.append(self.step(t, interval_s))
        return out

    def step(self, t_s: float, interval_s: float) -> dict:
        """Step starting at ``t_s``: {at_s, rate_bit_s (>= OUTAGE_RATE_BIT_S), delay_s?, loss_frac?}."""
        i = self.index_at(t_s)
        row = {"at_s": round(t_s, 6), "rate_bit_s": round(max(OUTAGE_RATE_BIT_S, self.mean_rate(t_s, t_s + interval_s)), 1)}
        if self.delay_s is not None:
            row["delay_s"] = self.delay_s[i]
        if self.loss_frac is not None:
            row["loss_frac"] = self.loss_frac[i]
        return row

    def stats(self, start_s: float = 0.0, end_s: float | None = None, bin_s: float = 1.0) -> dict:
        """Mean and percentiles (p10, p50, p90 of ``bin_s`` means) of the rate over a window (bit/s)."""
        end = self.period_s if end_s is None else end_s
        bin_s = max(bin_s, (end - start_s) / MAX_STAT_BINS)   # time in proportion to the file, not its span
        bins = [self.mean_rate(t, min(end, t + bin_s)) for t in _frange(start_s, end, bin_s)]
        q = statistics.quantiles(bins, n=10, method="inclusive") if len(bins) > 1 else bins * 9
        return {"mean_bit_s": self.mean_rate(start_s, end), "p10_bit_s": q[0], "p50_bit_s": q[4],
                "p90_bit_s": q[8], "min_bit_s": min(bins), "max_bit_s": max(bins), "window_s": end - start_s}


def check_interval(interval_s: float, until_s: float, name: str, what: str = "interval") -> int:
    """Steps of ``interval_s`` over ``until_s`` seconds; TraceError naming ``what`` when the interval
    is outside [MIN_INTERVAL_S, MAX_INTERVAL_S] or the steps would be more than MAX_STEPS."""
    if not (math.isfinite(interval_s) and MIN_INTERVAL_S <= interval_s <= MAX_INTERVAL_S):
        raise TraceError(f"{name}: {what} {units.quote(interval_s)} s must be within "
                         f"{units.format_time(MIN_INTERVAL_S)} and {units.format_time(MAX_INTERVAL_S)}")
    n = max(1, math.ceil(until_s / interval_s - 1e-9))
    if n > MAX_STEPS:
        raise TraceError(f"{name}: a loop of {until_s:g} s played every {units.format_time(interval_s)} ({what}) is {n} "
                         f"steps, more than {MAX_STEPS} (use a longer {what})")
    return n


def _frange(start: float, end: float, step: float) -> list[float]:
    n = max(1, math.ceil((end - start) / step - 1e-9))
    return [start + k * step for k in range(n)]


# ---- reading ------------------------------------------------------------------------------------

def resolve(name_or_path: str | Path, directory: Path = TRACE_DIR) -> Path:
    """A shipped trace by file name (``cellular-lte.csv``) or a path; TraceError when neither exists."""
    path = Path(name_or_path)
    if path.is_file():
        return path.resolve()
    shipped = directory / str(name_or_path)
    if shipped.is_file():
        return shipped
    names = ", ".join(sorted(p.name for p in directory.glob("*") if p.suffix in (".csv", *MAHIMAHI_SUFFIXES)))
    raise TraceError(f"trace: {str(name_or_path)!r} is neither a file nor a shipped trace (shipped: {names})")


def load(name_or_path: str | Path) -> Trace:
    """Mahimahi or CSV, told apart by content, not by the file's name: a file whose first line is a
    bare integer is Mahimahi whatever its suffix, anything else is read as CSV. A Mahimahi suffix
    on text that is neither gets the Mahimahi reader's error (naming the first line that is not a
    timestamp). The file is read within the limits of the module docstring; TraceError names the
    file and the bad line."""
    path = resolve(name_or_path)
    try:
        text = readers.read_text(path, "trace", MAX_TRACE_BYTES)
    except readers.FileError as err:
        raise TraceError(str(err)) from None
    name = path.name if path.name.isprintable() else repr(path.name)   # messages stay one line
    if is_mahimahi(text):
        return parse_mahimahi(text, name)
    if path.suffix in MAHIMAHI_SUFFIXES:
        try:
            return parse_csv(text, name)            # a CSV under a Mahimahi name is what it holds
        except TraceError:
            return parse_mahimahi(text, name)       # raises, naming the first line that is not a timestamp
    return parse_csv(text, name)


def _lines(text: str):
    """(line number, stripped line) of every non-empty line, without a list of them all."""
    pos, n = 0, 0
    while pos <= len(text):
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end
        n += 1
        line = text[pos:end].strip()
        if line:
            yield n, line
        pos = end + 1


def is_mahimahi(text: str) -> bool:
    """The first non-empty line one non-negative integer: Mahimahi's format. A CSV has two fields
    a row (comma or whitespace separated) and may have a header or decimals, so it never matches.
    Whether the rest are timestamps going forward is ``parse_mahimahi``'s to say (one line naming
    the first that is not), not a reason to read the file as something else."""
    first = next(_lines(text), None)
    return first is not None and _STAMP.fullmatch(first[1]) is not None


def parse_mahimahi(text: str, name: str) -> Trace:
    """Delivery opportunities binned to MAHIMAHI_BIN_S steps; a run of empty bins is one outage step,
    so the steps are at most twice the lines, whatever the timestamps say."""
    bin_ms = round(MAHIMAHI_BIN_S * 1000)
    counts: dict[int, int] = {}
    last = -1
    for n, line in _lines(text):
        if not _STAMP.fullmatch(line):
            raise TraceError(f"{name}:{n}: {line[:40]!r} is not a millisecond timestamp")
        if len(line) > 12:
            raise TraceError(f"{name}:{n}: timestamp {line[:20]}... ms is past a loop of {MAX_SPAN_S:g} s")
        ms = int(line)
        if ms < last:
            raise TraceError(f"{name}:{n}: timestamp {ms} is before the previous one ({last}): "
                             "Mahimahi timestamps never go back")
        if ms > MAX_SPAN_S * 1000:
            raise TraceError(f"{name}:{n}: timestamp {ms} ms is past a loop of {MAX_SPAN_S:g} s (the longest "
                             "trace read)")
        last = ms
        counts[ms // bin_ms] = counts.get(ms // bin_ms, 0) + 1     # integer bins: 300 / 1000 / 0.1 is 2.999...
    if last <= 0:
        raise TraceError(f"{name}: no delivery opportunity after 0 ms (a Mahimahi trace loops at its last timestamp)")
    period = last / 1000
    top = last // bin_ms
    if top * bin_ms == last and top > 0:   # the last stamp on a bin's edge is the period: the bin before it
        counts[top - 1] = counts.get(top - 1, 0) + counts.pop(top)
    times: list[float] = []
    rates: list[float] = []
    nxt = 0                                # the bin after the previous step's
    for k in sorted(counts):
        if k > nxt:                        # the empty bins until this one: one outage step
            times.append(round(nxt * MAHIMAHI_BIN_S, 6))
            rates.append(0.0)
        start = round(k * MAHIMAHI_BIN_S, 6)
        times.append(start)
        rates.append(counts[k] * MTU_BITS / (min(period, start + MAHIMAHI_BIN_S) - start))
        nxt = k + 1
    _check_rates(rates, name)
    return Trace(name, tuple(times), tuple(rates), period)


def _check_rates(rates, name: str) -> None:
    for rate in rates:
        if rate > units.RATE_MAX_BIT_S:
            raise TraceError(f"{name}: rate {units.format_rate(rate)} is above {units.format_rate(units.RATE_MAX_BIT_S)}, "
                             "the fastest link the shaper sets")


def parse_csv(text: str, name: str) -> Trace:
    rows: list[list[float]] = []
    first = True
    for n, line in _lines(text):
        fields = line.replace(",", " ").split()
        if not fields or fields[0].startswith("#"):
            continue
        try:
            values = [float(f) for f in fields[:5]]
        except ValueError:
            if first:
                first = False                # a header line (the first)
                continue
            raise TraceError(f"{name}:{n}: {line[:60]!r} is not numbers") from None
        if not 2 <= len(fields) <= 4 or not all(math.isfinite(v) for v in values):
            raise TraceError(f"{name}:{n}: expected time_s,rate_mbit_s[,delay_ms[,loss_pct]], finite numbers")
        if not 0 <= values[1] <= units.RATE_MAX_BIT_S / 1e6:
            raise TraceError(f"{name}:{n}: rate_mbit_s {values[1]:g} must be within 0 and "
                             f"{units.RATE_MAX_BIT_S / 1e6:g} (a rate >= 0, at most the fastest link the shaper sets)")
        if len(values) > 2 and not 0 <= values[2] <= units.DELAY_MAX_S * 1e3:
            raise TraceError(f"{name}:{n}: delay_ms {values[2]:g} must be within 0 and {units.DELAY_MAX_S * 1e3:g}")
        if len(values) > 3 and not 0 <= values[3] < 100:
            raise TraceError(f"{name}:{n}: loss_pct {values[3]:g} must be within 0 and <100")
        if rows:
            gap = values[0] - rows[-1][0]
            if gap <= 0:
                raise TraceError(f"{name}:{n}: time_s {values[0]:g} is not after the previous row's; times must increase")
            if gap < MIN_STEP_S:
                raise TraceError(f"{name}:{n}: time_s {values[0]:g} is {gap:.3g} s after the previous row, less than "
                                 f"the {MIN_STEP_S * 1e3:g} ms a step must last")
            if values[0] - rows[0][0] > MAX_SPAN_S:
                raise TraceError(f"{name}:{n}: time_s {values[0]:g} is past a loop of {MAX_SPAN_S:g} s from the first "
                                 "row (the longest trace read)")
        first = False
        if len(rows) >= MAX_TRACE_ROWS:
            raise TraceError(f"{name}:{n}: more than {MAX_TRACE_ROWS} rows")
        rows.append(values)
    return _from_rows(rows, name)


def _from_rows(rows: list[list[float]], name: str) -> Trace:
    if not rows:
        raise TraceError(f"{name}: no rows")
    t0 = rows[0][0]
    times = [r[0] - t0 for r in rows]
    if any(b <= a for a, b in zip(times, times[1:])):
        raise TraceError(f"{name}: times must increase")
    step = statistics.median([b - a for a, b in zip(times, times[1:])]) if len(times) > 1 else 1.0
    width = min(len(r) for r in rows)
    delay = tuple(r[2] / 1e3 for r in rows) if width > 2 else None
    loss = tuple(r[3] / 100 for r in rows) if width > 3 else None
    if delay is not None and not all(0 <= d <= 10 for d in delay):
        raise TraceError(f"{name}: delay_ms must be within 0 and 10000")
    if loss is not None and not all(0 <= p < 1 for p in loss):
        raise TraceError(f"{name}: loss_pct must be within 0 and <100")
    if times[-1] + step > MAX_SPAN_S:
        raise TraceError(f"{name}: a loop of {times[-1] + step:g} s is longer than {MAX_SPAN_S:g} s")
    return Trace(name, tuple(round(t, 6) for t in times), tuple(r[1] * 1e6 for r in rows),
                 times[-1] + step, delay, loss)


# ---- writing ------------------------------------------------------------------------------------

def to_csv(trace: Trace) -> str:
    head = ["time_s", "rate_mbit_s"] + (["delay_ms"] if trace.delay_s else []) + (["loss_pct"] if trace.loss_frac else [])
    lines = [",".join(head)]
    for i, t in enumerate(trace.times_s):
        row = [f"{t:g}", f"{trace.rate_bit_s[i] / 1e6:.6g}"]
        if trace.delay_s:
            row.append(f"{trace.delay_s[i] * 1e3:.6g}")
        if trace.loss_frac:
            row.append(f"{trace.loss_frac[i] * 100:.6g}")
        lines.append(",".join(row))
    return "\n".join(lines) + "\n"


def to_mahimahi(trace: Trace) -> str:
    """Delivery opportunities as Mahimahi's own ``mm-rate-to-events`` makes them from the trace's
    rates, on a period that closes on whole packets. Delay and loss have no place in the format
    and are dropped.

    What Mahimahi does (ravinet/mahimahi, ``scripts/mm-rate-to-events``, KJW 2017; and
    ``src/frontend/link_queue.cc``, mm-link's reader): mm-rate-to-events reads one number a
    millisecond (the kilobits that ms can carry), keeps a reserve of bits starting at 0, and for
    ms k (counted from 0) adds that ms's bits, then prints ``k`` once for every 12000 bits the
    reserve holds, taking them out; the reserve carries on, nothing else is written (the output
    stops at the last packet). mm-link reads every line as one 1500-byte opportunity, timestamps
    never decreasing, the last one > 0, and loops by adding the last timestamp to its clock when
    the list runs out: so the last line is both an opportunity and the period.

    Here: ms k's bits are what the trace offers over [k, k+1) ms (a step boundary inside a ms
    counts both steps) and the events are exactly mm-rate-to-events's for those bits (reserve
    from 0, stamp ``k``; a reserve a billionth of a packet short of one, a float sum's error,
    counts as one), with two things mm-rate-to-events never needed, since it does not loop:

    * the period. A file holds a whole number of opportunities per loop, and the trace's loop
      rarely carries a whole number of packets (50 kbit/s x 1 s = 4.17: a line added on the
      period makes 5 a loop, 60 kbit/s; the remainder dropped makes 4, 48 kbit/s). So the file
      unrolls the loop: it holds the fewest copies of the trace's loop (m) whose bits are a
      whole number of packets (6 loops, 25 packets, exactly 50 kbit/s), while that stays within
      ``UNROLL_MAX_MS`` of loop and ``UNROLL_MAX_LINES`` more lines; the file's period is then
      m x the trace's (the same link: the rates repeat). When no such m fits (a long trace,
      rates that are not round numbers), m = 1 and the loop keeps mm-rate-to-events's count,
      the loop's bits rounded down: under one packet a loop short, which a loop of minutes
      never shows.
    * the last line is the period. The file's last packet (mm-rate-to-events's last line k,
      the ms that completed it: Q - 1 on a link busy to the end) is written at the file's period
      Q (ms) instead: mm-link loops at its last line, and that line is this packet's opportunity,
      not one more. It moves later by Q - k ms: 1 ms on a link carrying to its end, across the
      quiet tail on a loop that ends in an outage. (mm-rate-to-events's own output, fed to
      mm-link, loops at its last packet instead, k ms, not at the end of the rates it read.) A trace that carries no
      whole packet in any loop is written as the one line Q (the format needs a line).

    Read back (``parse_mahimahi``), every 100 ms bin holds the trace's packets over that bin to
    within one: the packets before a time are the floor of the bits before it (in 12000s), so a
    bin's count is a difference of two floors; moving the last packet onto the period keeps that
    when the file's bits are whole (nothing accrues after the last packet). Where m = 1 leaves a
    remainder (under one packet, never delivered), the bins between the last packet and the
    period may be short by that much more: up to 1 + remainder there."""
    if trace.period_s > MAX_MAHIMAHI_SPAN_S:
        raise TraceError(f"{trace.name}: a loop of {trace.period_s:g} s is longer than the {MAX_MAHIMAHI_SPAN_S:g} s "
                         "written as Mahimahi (write it as CSV)")
    packets = trace.bits(0.0, trace.period_s) / MTU_BITS
    if packets > MAX_MAHIMAHI_LINES:
        raise TraceError(f"{trace.name}: one loop carries {packets:.3g} packets, more than the {MAX_MAHIMAHI_LINES} "
                         "lines written as Mahimahi (one a packet; write it as CSV)")
    period_ms = max(1, round(trace.period_s * 1000))
    bits = _ms_bits(trace, period_ms)
    loop_packets = sum(bits) / MTU_BITS
    loops = 1
    for m in range(1, max(1, UNROLL_MAX_MS // period_ms) + 1):
        if m > 1 and (m - 1) * loop_packets > UNROLL_MAX_LINES:
            break
        if abs(m * loop_packets - round(m * loop_packets)) <= _WHOLE:
            loops = m
            break
    lines, reserve = [], 0.0
    for loop in range(loops):
        base = loop * period_ms
        for k, b in enumerate(bits):
            reserve += b
            while reserve >= MTU_BITS * (1 - _WHOLE):
                lines.append(base + k)
                reserve -= MTU_BITS
    if lines:
        lines[-1] = loops * period_ms
    else:
        lines.append(loops * period_ms)
    return "\n".join(map(str, lines)) + "\n"


def _ms_bits(trace: Trace, period_ms: int) -> list[float]:
    """Bits the trace offers in each ms [k, k+1) of one loop of ``period_ms`` ms (steps in order)."""
    out = [0.0] * period_ms
    edges = [round(t * 1000, 6) for t in trace.times_s] + [round(trace.period_s * 1000, 6)]
    for i, rate in enumerate(trace.rate_bit_s):
        lo, hi = edges[i], min(edges[i + 1], period_ms)
        k = int(lo)
        while k < hi and rate:
            out[k] += rate * (min(k + 1, hi) - max(k, lo)) / 1000
            k += 1
    return out


def save(trace: Trace, path: str | Path) -> Path:
    """Written in the format its suffix names (Mahimahi suffixes, else CSV); TraceError (one line) when
    the folder is missing or not writable, before anything is computed."""
    path = Path(path)
    try:
        readers.check_output(path, "trace")
        return readers.write_text(path, to_mahimahi(trace) if path.suffix in MAHIMAHI_SUFFIXES else to_csv(trace),
                                  "trace")
    except readers.FileError as err:
        raise TraceError(str(err)) from None


# ---- generating ---------------------------------------------------------------------------------

def generate(kind: str, *, seconds: float = 120.0, mean_bit_s: float = 30e6, step_s: float = 1.0, seed: int = 0,
             sd_frac: float = 0.3, low_frac: float = 0.3, period_s: float = 20.0,
             outage_every_s: float = 30.0, outage_s: float = 2.0, name: str | None = None) -> Trace:
    """A synthetic trace (see the module docstring); the same arguments give the same trace."""
    if kind not in KINDS:
        raise TraceError(f"kind: {kind!r} is unknown (valid: {', '.join(KINDS)})")
    _within("seconds", seconds, MIN_STEP_S, MAX_SPAN_S, "s")
    _within("step", step_s, MIN_STEP_S, seconds, "s")
    if seconds / step_s > MAX_TRACE_ROWS:
        raise TraceError(f"step: {step_s:g} s over {seconds:g} s is {math.ceil(seconds / step_s)} rows, more than "
                         f"{MAX_TRACE_ROWS} (use a longer step)")
    if abs(seconds / step_s - round(seconds / step_s)) > 1e-6:
        raise TraceError(f"step: {step_s:g} s steps do not fill the {seconds:g} s loop (--seconds) whole; a CSV "
                         "trace's last row holds for one step, so the file would loop at another length "
                         "(use a --step that divides --seconds)")
    _within("mean", mean_bit_s, units.RATE_MIN_BIT_S, units.RATE_MAX_BIT_S, "bit/s")
    _within("sd", sd_frac, 0.0, 10.0, "x the mean")
    _within("low", low_frac, 0.0, 1.0, "x the mean")
    _within("period", period_s, MIN_STEP_S, MAX_SPAN_S, "s")
    _within("outage-every", outage_every_s, MIN_STEP_S, MAX_SPAN_S, "s")
    _within("outage", outage_s, MIN_STEP_S, MAX_SPAN_S, "s")
    if kind in ("square", "diurnal") and seconds < period_s:
        raise TraceError(f"seconds: a {seconds:g} s loop (--seconds) cannot hold one whole {period_s:g} s period "
                         f"(--period) of a {kind} trace, so its mean would not be the mean asked for "
                         "(use --seconds of at least --period)")
    peak = {"square": 2 - low_frac, "diurnal": 2 - low_frac, "normal": 1 + 10 * sd_frac}.get(kind, 1.0)
    if kind != "normal" and mean_bit_s * peak > units.RATE_MAX_BIT_S:
        raise TraceError(f"mean: {units.format_rate(mean_bit_s)} peaks at {units.format_rate(mean_bit_s * peak)}, "
                         f"above {units.format_rate(units.RATE_MAX_BIT_S)}, the fastest link the shaper sets")
    rng = random.Random(seed)
    times = _frange(0.0, seconds, step_s)
    rates = {"constant": lambda: [mean_bit_s] * len(times),
             "normal": lambda: [max(0.0, rng.gauss(mean_bit_s, sd_frac * mean_bit_s)) for _ in times],
             "square": lambda: [mean_bit_s * (2 - low_frac if (t % period_s) < period_s / 2 else low_frac)
                                for t in times],
             "outages": lambda: _outages(times, mean_bit_s, rng, outage_every_s, outage_s),
             "diurnal": lambda: [mean_bit_s * (1 + (1 - low_frac) * math.sin(2 * math.pi * t / period_s)) for t in times],
             }[kind]()
    starts = tuple(round(t, 6) for t in times)
    lengths = [b - a for a, b in zip(starts, starts[1:] + (seconds,))]
    rates = _scaled_to_mean(rates, lengths, mean_bit_s, kind, seed, seconds)
    return Trace(name or f"{kind}-s{seed}", starts, tuple(rates), seconds)


def _scaled_to_mean(rates: list[float], lengths: list[float], mean: float, kind: str, seed: int,
                    seconds: float) -> list[float]:
    """``rates`` times one factor so that their time-weighted mean over ``lengths`` is ``mean``;
    a step the factor takes past the shaper's top is held there and the others scaled again to
    carry its share (each round caps at least one more step, so at most one round a step)."""
    top, total = units.RATE_MAX_BIT_S, sum(lengths)
    out, capped = [min(r, top) for r in rates], [False] * len(rates)
    for _ in range(len(rates) + 1):
        free_bits = sum(r * d for r, d, c in zip(out, lengths, capped) if not c)
        want_bits = mean * total - top * sum(d for d, c in zip(lengths, capped) if c)
        if free_bits <= 0:
            if not any(capped):
                raise TraceError(f"mean: the {kind} trace (seed {seed}) is at 0 over its whole {seconds:g} s loop, "
                                 "so no rate gives it a mean (use a longer --seconds"
                                 + (" or a shorter --outage)" if kind == "outages" else ")"))
            raise TraceError(f"mean: {units.format_rate(mean)} over the {kind} trace's {seconds:g} s loop needs more than "
                             f"{units.format_rate(top)}, the fastest link the shaper sets, where it is not at 0")
        factor = want_bits / free_bits
        out = [r if c else r * factor for r, c in zip(out, capped)]
        over = [i for i, r in enumerate(out) if r > top and not capped[i]]
        if not over:
            return out
        for i in over:
            out[i], capped[i] = top, True
    raise AssertionError("unreachable: every round caps a step")


def _within(what: str, value: float, lo: float, hi: float, unit: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and lo <= value <= hi):
        raise TraceError(f"{what}: {units.quote(value)} must be a number within {lo:g} and {hi:g} {unit}")


def _outages(times: list[float], mean: float, rng: random.Random, every_s: float, length_s: float) -> list[float]:
    """``mean`` outside outages; outage starts ~ exponential gaps of mean ``every_s``, lengths ~ exp(``length_s``)."""
    out, next_start, end = [], rng.expovariate(1 / every_s), -1.0
    for t in times:
        if t >= next_start:
            end = next_start + rng.expovariate(1 / length_s)
            next_start = end + rng.expovariate(1 / every_s)
        out.append(0.0 if t < end else mean)
    return out
