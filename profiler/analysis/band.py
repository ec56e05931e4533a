"""`fsprof compare --band`: the causes of one latency band of an op, side by side (docs/tail.md).

A run keeps two views of its calls' time: the attribution of all calls (the body's waits sampled,
every wait at or above the tail threshold exact), and the slowest calls whole (the exemplars).
- `max`: each side's slowest call.
- `p99`: the kept slowest calls at or above the side's p99 latency. A run of N calls has about
  N/100 of them; when that is more than the kept ones, the band is its slowest part (said so).
- `p50`, the body: every call's time but its waits at or above the tail threshold, per call. No
  call near the median is kept whole, so this is the mean of the body, not the median call: it
  answers "what the common call spends its time on" once the rare long waits are taken out.

A wait that a filesystem thread ended is split by that thread's own time, pro rata, as the
comparison of whole runs does (compare.expanded_causes)."""

from typing import TYPE_CHECKING, Any

from ..errors import FsprofError
from .decompose import MIN_SHARE, MIN_US, decompose, split_by_workers, worker_causes
from .exemplars import time_by_cause

if TYPE_CHECKING:
    from .evidence import Group

BANDS = ("p50", "p99", "max")


def band_calls(fs: dict[str, Any], op: str, band: str) -> list[dict[str, Any]]:
    """The exemplar calls of `op` in the band (p99 or max), slowest first."""
    calls = fs.get("exemplars", {}).get(op, [])
    if band == "max":
        return calls[:1]
    p99 = fs["syscalls"].get(op, {}).get("p99_ns", 0)
    # At least the slowest: a run of under 100 calls has its p99 inside its slowest one or two.
    return [c for i, c in enumerate(calls) if c["ns"] >= p99 or i == 0]


def band_causes(fs: dict[str, Any], op: str, band: str) -> tuple[dict[str, float], float, int]:
    """({cause: us per call in the band}, us per call, calls) of one filesystem entry, worker-ended
    waits split by the worker's own time."""
    threads = worker_causes(fs)
    if band == "p50":
        b = fs["attribution"].get(op)
        if not b or not b["count"]:
            return {}, 0.0, 0
        tail = b.get("tail", {})
        us = {c: (ns - tail.get("causes", {}).get(c, 0)) / b["count"] / 1e3 for c, ns in b["causes"].items()}
        body_us = (b["wall_ns"] - tail.get("ns", 0)) / b["count"] / 1e3
        return split_by_workers({c: v for c, v in us.items() if v > 0}, threads), body_us, b["count"]
    calls = band_calls(fs, op, band)
    if not calls:
        return {}, 0.0, 0
    total: dict[str, float] = {}
    for call in calls:
        for cause, ns in time_by_cause(call).items():
            total[cause] = total.get(cause, 0) + ns / len(calls) / 1e3
    return split_by_workers(total, threads), sum(c["ns"] for c in calls) / len(calls) / 1e3, len(calls)


def compare_band(base: "Group", other: "Group", op: str, band: str) -> dict[str, Any]:
    """The band's causes, other against base, as compare's decomposition: {band, us_per_call,
    calls (kept whole per run, or the body's count), of_calls (the band's size), causes, ...}."""
    if band not in BANDS:
        raise FsprofError(f"--band must be one of {', '.join(BANDS)}, not {band!r}", exit_code=2)
    causes: dict[str, list[float]] = {}
    latency, calls, of_calls = [0.0, 0.0], [0, 0], [0, 0]
    for g, side in ((base, 0), (other, 1)):
        for _, fs in g.entries:
            if band != "p50" and op not in fs.get("exemplars", {}):
                raise FsprofError(
                    f"{g.name} kept no slowest {op} calls (a run of fsprof before 2026-11-27): only "
                    "--band p50 can be explained",
                    exit_code=2,
                )
            us, lat, n = band_causes(fs, op, band)
            for cause, v in us.items():
                causes.setdefault(cause, [0.0, 0.0])[side] += v / len(g.entries)
            latency[side] += lat / len(g.entries)
            calls[side] += n
            count = fs["syscalls"].get(op, {}).get("count", 0)
            of_calls[side] += {"max": 1, "p99": max(1, round(count / 100)), "p50": count}[band]
    threshold = max(MIN_US, MIN_SHARE * max(latency))
    return {
        "band": band,
        "us_per_call": latency,
        "calls": calls,
        "of_calls": of_calls,
        **decompose(causes, latency[1] - latency[0], threshold),
    }
