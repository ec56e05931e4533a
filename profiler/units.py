"""Units, one home: sizes and durations as users write them, and times as fsprof prints them.
(workloads/common.parse_size is this parse_size as an argparse type.)"""

import math

SIZE_SUFFIXES = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
DURATION_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}


def parse_size(text: str | int, zero_ok: bool = False, examples: str = "1G, 512M") -> int:
    """'512M', '1G', '16KiB', '4096' -> bytes (binary multiples), > 0; ValueError otherwise.
    zero_ok: 0 is a size too (the workloads leave it to their own check, which names the option);
    examples: the sizes the error sentence suggests (a workload's are block sizes)."""
    t = str(text).strip().lower().removesuffix("ib").removesuffix("b")
    num, suffix = (t[:-1], t[-1]) if t and t[-1] in SIZE_SUFFIXES else (t, "")
    try:
        value = int(float(num) * SIZE_SUFFIXES[suffix])
    except (ValueError, OverflowError):
        value = -1
    if value < (0 if zero_ok else 1):
        raise ValueError(f"'{text}' is not a size (e.g. {examples})")
    return value


def parse_duration(text: str | float) -> float:
    """'30s', '2m', '500ms', '250us', '1h', '10' (seconds) -> seconds, > 0; ValueError otherwise."""
    t = str(text).strip().lower()
    unit = next((u for u in ("us", "ms", "s", "m", "h") if t.endswith(u)), "s")
    try:
        value = float(t[: -len(unit)] if t.endswith(unit) else t) * DURATION_UNITS[unit]
    except ValueError:
        value = -1
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"'{text}' is not a positive duration (e.g. 30s, 2m)")
    return value


def fmt_ns(ns: float, typeset: bool = False) -> str:
    """A time with 3 significant digits in the largest unit it reaches: 1.23ms, 456us, 789ns on a
    terminal; typeset (HTML): 1.23 ms, 456 µs, 789 ns."""
    sep, micro = (" ", "µs") if typeset else ("", "us")
    for unit, scale in (("s", 1e9), ("ms", 1e6), (micro, 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g}{sep}{unit}"
    return f"{ns:.0f}{sep}ns"


US, MS, S = 1e3, 1e6, 1e9  # in ns
_NS_PER = {"ns": 1, "us": 1000, "s": 1_000_000_000}


# Not fmt_ns: the behind sections and compare print fixed decimals per unit, each switching unit
# where its text always has (tests compare that text byte for byte).
def fmt_time(
    t: float | None,
    *,
    ms_from: float | None,
    unit: str = "ns",
    us_digits: int = 0,
    ms_digits: int = 1,
    s_from: float | None = None,
    fine_below: float | None = None,
    missing: str | None = None,
    signed: bool = False,
) -> str:
    """A duration t (in `unit`: ns, us or s) in us, or in ms from `ms_from` ns (None: never), or
    with 2 decimals in s from `s_from` ns: '812 us', '12.3 ms'. fine_below: under it (ns), one more
    decimal in us; missing: the text for None; signed: '+' or '-' before the size.
    t is scaled straight to the unit shown (t / 1e3, never via ns), so every digit stays as it was."""
    if t is None and missing is not None:
        return missing
    assert t is not None
    if signed:
        return ("+" if t >= 0 else "-") + fmt_time(
            abs(t),
            ms_from=ms_from,
            unit=unit,
            us_digits=us_digits,
            ms_digits=ms_digits,
            s_from=s_from,
            fine_below=fine_below,
        )
    per, size = _NS_PER[unit], abs(t)

    def shown(scale, digits, name):
        value = t * (per // scale) if per >= scale else t / (scale // per)
        return f"{value:.{digits}f} {name}"

    if s_from is not None and size >= s_from / per:
        return shown(S, 2, "s")
    if ms_from is not None and size >= ms_from / per:
        return shown(MS, ms_digits, "ms")
    fine = fine_below is not None and size < fine_below / per
    return shown(US, us_digits + 1 if fine else us_digits, "us")


def fmt_bytes(b: float) -> str:
    """'4.0 KiB', '55.4 MiB', '512 B'."""
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale:
            return f"{b / scale:.1f} {unit}"
    return f"{b:.0f} B"
