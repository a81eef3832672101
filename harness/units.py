"""tc-style unit parsing: rates, times, percentages and sizes, parsed once at the edge.

Rates: ``bit`` or a bare number is bit/s; ``kbit``/``mbit``/``gbit``/``tbit`` are SI (x1000) and
``kibit``/``mibit``/... binary (x1024), in any case, as in tc(8). The ``bps`` family is read as
tcconfig (``tcset --rate``) and network people read it, by case: ``Kbps``/``Mbps``/``Gbps`` are
*bits* per second, ``Bps``/``KBps``/``MBps``/``GBps`` (a capital B) *bytes* per second (x8). An
all-lowercase ``bps``/``kbps``/``mbps``/... is refused: tc(8) reads it as bytes, tcconfig as bits,
and the two readings differ 8-fold (``62.5mbps``: 500 Mbit/s or 62.5 Mbit/s); the message gives
both. Times: ``s``/``sec``/``secs``, ``ms``/``msec``/``msecs``,
``us``/``usec``/``usecs``, ``ns``; a bare number is refused (but ``0``): tc(8) reads it as
microseconds, a help that says "[unit: s]" as seconds, and ``--delay 20`` was a 20 us link. Percentages need
``%`` (a bare ``0`` is accepted): ``loss: 0.05`` is ambiguous (5 % or 0.05 %?) so it is an
error. Every parser raises :class:`UnitError` whose message names the value and the reason;
callers prefix the field name.
"""
from __future__ import annotations

import math
import re

_NUM = r"([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
_SPLIT = re.compile(rf"^\s*{_NUM}\s*([a-zA-Z%]*)\s*$")

# multiplier to bit/s
RATE_UNITS = {
    "": 1, "bit": 1,
    "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
    "kibit": 1024, "mibit": 1024**2, "gibit": 1024**3, "tibit": 1024**4,
}
# the bps family, case-sensitive (see the module docstring): prefix -> multiplier to bit/s
BPS_PREFIXES = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12,
                "ki": 1024, "mi": 1024**2, "gi": 1024**3, "ti": 1024**4}
_BPS = re.compile(r"^([kmgt]i?|)(b)ps$", re.IGNORECASE)
RATE_MIN_BIT_S = 1e3          # 1 kbit/s
RATE_MAX_BIT_S = 100e9        # 100 Gbit/s
DELAY_MAX_S = 10.0            # more than 10 s one way is not a WAN
LIMIT_MAX_PKTS = 2**31 - 1    # u32 in the kernel; pyroute2 0.9 packs pfifo's limit as a signed int

# multiplier to seconds
TIME_UNITS = {
    "s": 1.0, "sec": 1.0, "secs": 1.0,
    "ms": 1e-3, "msec": 1e-3, "msecs": 1e-3,
    "us": 1e-6, "usec": 1e-6, "usecs": 1e-6, "ns": 1e-9,
}


class UnitError(ValueError):
    """A value that does not parse as the unit expected; the message names value and reason."""


def _split(value: object, kind: str) -> tuple[float, str]:
    if isinstance(value, bool):
        raise UnitError(f"{quote(value)} is not a {kind}")
    if isinstance(value, (int, float)):
        number, unit = float(value), ""
    elif isinstance(value, str):
        match = _SPLIT.match(value)
        if not match:
            raise UnitError(f"{quote(value)} is not a {kind}")
        number, unit = float(match.group(1)), match.group(2)   # case kept: the bps family needs it
    else:
        raise UnitError(f"{quote(value)} is not a {kind}")
    if not math.isfinite(number):
        raise UnitError(f"{quote(value)} is not a finite {kind}")
    return number, unit


def parse_rate(value: object) -> float:
    """``"62.5mbit"`` -> 62.5e6 (bit/s). Must be > 0, and within 1 kbit/s and 100 Gbit/s."""
    number, unit = _split(value, "rate")
    rate = number * _rate_multiplier(value, number, unit)
    if rate <= 0:
        raise UnitError(f"{quote(value)}: rate must be > 0")
    if not RATE_MIN_BIT_S <= rate <= RATE_MAX_BIT_S:
        bare = f" (a number without a unit is bit/s: {number:g}mbit?)" if not unit and rate < RATE_MIN_BIT_S else ""
        raise UnitError(f"{quote(value)}: rate must be within {format_rate(RATE_MIN_BIT_S)} and "
                        f"{format_rate(RATE_MAX_BIT_S)}{bare}")
    return rate


def _rate_multiplier(value: object, number: float, unit: str) -> float:
    """bit/s per unit of `unit` (as typed); UnitError for an unknown or an ambiguous unit."""
    if unit.lower() in RATE_UNITS:
        return RATE_UNITS[unit.lower()]
    match = _BPS.match(unit)
    if not match:
        raise UnitError(f"{quote(value)} has unknown rate unit {quote(unit)} (use bit, kbit, mbit, gbit, "
                        "Mbps = Mbit/s, MBps = Mbyte/s, ...)")
    prefix, b = match.group(1), match.group(2)
    mult = BPS_PREFIXES[prefix.lower()]
    if b == "B":
        return 8 * mult
    if prefix[:1].isupper():
        return mult
    bits = f"{number:g}{prefix}bit"
    raise UnitError(f"{quote(value)} is ambiguous: tc reads {unit} as bytes/s ({format_rate(8 * mult * number)}), "
                    f"tcconfig as bits/s ({format_rate(mult * number)}); write {bits!r} or "
                    f"'{number:g}{prefix.capitalize()}Bps'")


def parse_time(value: object) -> float:
    """``"20ms"`` -> 0.02 (seconds). Must be >= 0."""
    number, unit = _split(value, "time")
    unit = unit.lower()
    if number < 0:   # before the unit: "-10 needs a unit: -10ms" suggested another bad value
        raise UnitError(f"{quote(value)} is negative: a time is 0 or more ({-number:g}ms?)")
    if unit == "" and number != 0:
        raise UnitError(f"{quote(value)} needs a unit: {number:g}ms, {number:g}s")
    if unit not in TIME_UNITS and unit != "":
        raise UnitError(f"{quote(value)} has unknown time unit {quote(unit)} (use s, ms, us)")
    seconds = number * TIME_UNITS[unit] if unit else 0.0
    if seconds < 0:
        raise UnitError(f"{quote(value)}: time must be >= 0")
    return seconds


def parse_delay(value: object) -> float:
    """A one-way delay or jitter: a time within 0 and 10 s."""
    seconds = parse_time(value)
    if seconds > DELAY_MAX_S:
        raise UnitError(f"{quote(value)}: must be within 0 and {format_time(DELAY_MAX_S)} (more is not a WAN)")
    return seconds


def parse_percent(value: object) -> float:
    """``"0.1%"`` -> 0.001 (fraction in [0, 1])."""
    number, unit = _split(value, "percentage")
    if unit != "%" and not (unit == "" and number == 0):
        raise UnitError(f"{quote(value)} needs a '%' suffix (e.g. '0.1%')")
    if not 0 <= number <= 100:
        raise UnitError(f"{quote(value)}: percentage must be within 0% and 100%")
    return number / 100.0


def parse_loss(value: object) -> float:
    """Random loss: a percentage in [0 %, 100 %) (100 % is a link that is down, not lossy)."""
    frac = parse_percent(value)
    if frac >= 1.0:
        raise UnitError(f"{quote(value)}: loss must be below 100% (a link that drops everything is down)")
    return frac


def parse_count(value: object, minimum: int = 1, maximum: int = LIMIT_MAX_PKTS) -> int:
    """A whole number of packets (queue limits), within ``minimum`` and ``maximum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise UnitError(f"{quote(value)} is not a whole number of packets")
    if value < minimum:
        raise UnitError(f"{quote(value)}: must be >= {minimum}")
    if value > maximum:
        raise UnitError(f"{quote(value)}: must be <= {maximum} packets")
    return value


def quote(value: object) -> str:
    """A value as a message quotes it: repr, cut to 40 characters (messages stay one line)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def format_rate(bit_s: float) -> str:
    """62.5e6 -> '62.5mbit' (inverse of parse_rate, for printing plans and `show`)."""
    for unit, mult in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bit_s >= mult:
            return f"{bit_s / mult:g}{unit}"
    return f"{bit_s:g}bit"


def format_time(seconds: float) -> str:
    """0.02 -> '20ms'; 0.0005 -> '500us'."""
    if seconds >= 1:
        return f"{seconds:g}s"
    if seconds * 1e3 >= 1 or seconds == 0:
        return f"{round(seconds * 1e3, 6):g}ms"
    return f"{round(seconds * 1e6, 3):g}us"


def format_percent(frac: float) -> str:
    return f"{round(frac * 100, 6):g}%"
