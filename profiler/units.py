"""Units, one home: sizes and durations as users write them, and times as fsprof prints them.
(workloads/ keeps its own parse_size: the workloads run standalone, without fsprof installed.)"""

import math

SIZE_SUFFIXES = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
DURATION_UNITS = {"ms": 1e-3, "s": 1, "m": 60, "h": 3600}


def parse_size(text):
    """'512M', '1G', '16KiB', '4096' -> bytes (binary multiples), > 0; ValueError otherwise."""
    t = str(text).strip().lower().removesuffix("ib").removesuffix("b")
    num, suffix = (t[:-1], t[-1]) if t and t[-1] in SIZE_SUFFIXES else (t, "")
    try:
        value = int(float(num) * SIZE_SUFFIXES[suffix])
    except (ValueError, OverflowError):
        value = 0
    if value <= 0:
        raise ValueError(f"'{text}' is not a size (e.g. 1G, 512M)")
    return value


def parse_duration(text):
    """'30s', '2m', '500ms', '1h', '10' (seconds) -> seconds, > 0; ValueError otherwise."""
    t = str(text).strip().lower()
    unit = next((u for u in ("ms", "s", "m", "h") if t.endswith(u)), "s")
    try:
        value = float(t[:-len(unit)] if t.endswith(unit) else t) * DURATION_UNITS[unit]
    except ValueError:
        value = -1
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"'{text}' is not a positive duration (e.g. 30s, 2m)")
    return value


def fmt_ns(ns, typeset=False):
    """A time with 3 significant digits in the largest unit it reaches: 1.23ms, 456us, 789ns on a
    terminal; typeset (HTML): 1.23 ms, 456 µs, 789 ns."""
    sep, micro = (" ", "µs") if typeset else ("", "us")
    for unit, scale in (("s", 1e9), ("ms", 1e6), (micro, 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g}{sep}{unit}"
    return f"{ns:.0f}{sep}ns"
