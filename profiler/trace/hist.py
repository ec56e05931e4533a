"""Latency histograms: the kernel's linear-in-log slots (bpf/fsprof.h fine_slot) turned into
percentiles, log2 buckets and merges. A slot's value range is exact, so a percentile read at the
slot's midpoint is within half a slot width (1/32 of the value, 3.1%) of the true figure."""

from collections.abc import Iterable, Mapping
from typing import Any

from .maps import FINE_SUB_BITS, HIST_SLOTS

SUB = 1 << FINE_SUB_BITS


def slot_range(slot: int) -> tuple[int, int]:
    """[low, high) in ns of a fine slot."""
    if slot < SUB:
        return slot, slot + 1
    e = (slot >> FINE_SUB_BITS) + FINE_SUB_BITS - 1
    sub = slot & (SUB - 1)
    width = 1 << (e - FINE_SUB_BITS)
    low = (SUB + sub) * width
    return low, low + width


def percentile(fine: Mapping[Any, int], q: float, max_ns: int | None = None) -> float:
    """The q-quantile (0..1) of a sparse {slot: count} histogram, at the slot midpoint (never
    beyond the recorded maximum)."""
    total = sum(fine.values())
    if not total:
        return 0
    rank = q * total
    seen = 0
    for slot in sorted(fine, key=int):
        seen += fine[slot]
        if seen >= rank:
            low, high = slot_range(int(slot))
            mid = (low + high) / 2
            return min(mid, max_ns) if max_ns else mid
    return max_ns or 0


def log2_buckets(fine: Mapping[Any, int]) -> list[int]:
    """Counts per power of two (bucket i holds [2^i, 2^(i+1)) ns; bucket 0 also holds 0)."""
    out = [0] * HIST_SLOTS
    for slot, n in fine.items():
        low, _ = slot_range(int(slot))
        out[min(max(low.bit_length() - 1, 0), HIST_SLOTS - 1)] += n
    return out


def merge(hists: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """One histogram summary from several (e.g. a syscall over all phases)."""
    fine: dict[int, int]
    fine, count, total, mx = {}, 0, 0, 0
    hists = list(hists)
    for h in hists:
        for slot, n in h["fine"].items():
            fine[int(slot)] = fine.get(int(slot), 0) + n
        count += h["count"]
        total += h["total_ns"]
        mx = max(mx, h["max_ns"])
    merged = {"count": count, "total_ns": total, "max_ns": mx, "fine": fine}
    if any("bytes" in h for h in hists):
        merged["bytes"] = sum(h.get("bytes", 0) for h in hists)
    return summarize(merged)


def summarize(h: dict[str, Any]) -> dict[str, Any]:
    """The plain-data form stored in result.json: counts, percentiles and both bucket layouts."""
    fine = {int(k): v for k, v in h["fine"].items()}
    out = {
        "count": h["count"],
        "total_ns": h["total_ns"],
        "max_ns": h["max_ns"],
        "avg_ns": h["total_ns"] / h["count"] if h["count"] else 0,
        "p50_ns": percentile(fine, 0.50, h["max_ns"]),
        "p95_ns": percentile(fine, 0.95, h["max_ns"]),
        "p99_ns": percentile(fine, 0.99, h["max_ns"]),
        "log2_ns": log2_buckets(fine),
        "fine": {str(k): v for k, v in sorted(fine.items())},
    }
    if "bytes" in h:  # read/write-type syscalls: bytes moved (their positive return values)
        out["bytes"] = h["bytes"]
    return out
