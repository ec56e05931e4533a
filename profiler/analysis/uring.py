"""io_uring requests side by side (`fsprof compare`): an engine that does its I/O through io_uring
spends its time in io_uring_enter waiting for completions, which the workload's decomposition
shows as calls on no filesystem; what those waits were made of is its requests, by opcode. For
each opcode either side submitted: how many, their time from submission to completion, the block
requests they made with the time each took, and the io-wq workers' off-CPU time per request by
cause (docs/io_uring.md). Per request, so that a side that ran faster is not read as doing more."""

import statistics
from typing import Any

from ..causes import URING_ELSEWHERE
from .evidence import Group


def is_uring_op(op: str) -> bool:
    """Whether `op` names io_uring requests of one opcode ("io_uring fsync"), not a syscall."""
    return op.startswith("io_uring ")


def as_calls(fs: dict[str, Any], op: str) -> dict[str, Any]:
    """The filesystem entry with the io_uring requests of opcode `op` shaped as a syscall's calls,
    for `compare --op "io_uring fsync"`: their count and submission-to-completion time, its causes
    (the io-wq worker's off-CPU time by cause, its blocked intervals counted as waits, and the rest
    of the time "outside an io-wq worker's waits": issued inline and on the device, queued for a
    worker, the worker on CPU, posting), and the block requests they made as the calls' own. Their
    latency histogram joins `syscalls` for p50 and p99 only: the workload's decomposition reads
    the entry as it is, not this."""
    h = fs.get("io_uring", {}).get(op)
    if not h or not h["count"]:
        return fs
    wq = fs.get("io_uring_io_wq", {}).get(op, {})
    causes = dict(wq.get("causes", {}))
    causes[URING_ELSEWHERE] = max(h["total_ns"] - sum(causes.values()), 0)
    calls: dict[str, Any] = {
        "count": h["count"],
        "wall_ns": h["total_ns"],
        "causes": causes,
        "waits": wq.get("waits", {}),
    }
    if op in fs.get("io_uring_block_requests", {}):
        calls["requests"] = fs["io_uring_block_requests"][op]
    return {**fs, "attribution": {**fs["attribution"], op: calls}, "syscalls": {**fs["syscalls"], op: h}}


def as_calls_group(g: Group, op: str) -> Group:
    return Group(g.name, [(r, as_calls(fs, op)) for r, fs in g.entries])


def _figures(fs: dict[str, Any], op: str) -> dict[tuple[str, str], float]:
    """One run's figures of one opcode, keyed (what, of what): ("count", ""), ("us", "") per
    request, ("p99_us", ""), ("io_wq_us", cause) per request, ("per_request", class), and the
    mean time of each timed block request of a class, ("device_us", class) and ("life_us", class)
    (no device time for empty cache flushes: the queue's own flush request serves them)."""
    h = fs.get("io_uring", {}).get(op)
    if not h or not h["count"]:
        return {}
    n = h["count"]
    out = {("count", ""): n, ("us", ""): h["total_ns"] / n / 1e3, ("p99_us", ""): h["p99_ns"] / 1e3}
    for cause, ns in fs.get("io_uring_io_wq", {}).get(op, {}).get("causes", {}).items():
        out[("io_wq_us", cause)] = ns / n / 1e3
    for cls, v in fs.get("io_uring_block_requests", {}).get(op, {}).items():
        out[("per_request", cls)] = v["count"] / n
        if v.get("timed"):
            out[("life_us", cls)] = v["life_ns"] / v["timed"] / 1e3
            if v["device_ns"]:
                out[("device_us", cls)] = v["device_ns"] / v["timed"] / 1e3
    return out


def _side(g: Group, op: str) -> dict[tuple[str, str], float]:
    """A configuration's figures: each the mean over the repeats that have it."""
    runs = [_figures(fs, op) for _, fs in g.entries]
    keys = {k for r in runs for k in r}
    return {k: statistics.fmean(r[k] for r in runs if k in r) for k in keys}


def uring_pairs(base: Group, other: Group) -> list[dict[str, Any]]:
    """Per opcode either side submitted, the one with most time first: {"op", "count", "us",
    "p99_us", "io_wq_us": {cause: pair}, "requests": {class: {"per_request", "device_us",
    "life_us"}: pair}}, each pair [base, other] (None where that side has no such figure)."""
    ops = sorted({op for g in (base, other) for _, fs in g.entries for op in fs.get("io_uring", {})})
    rows = []
    for op in ops:
        sides = [_side(base, op), _side(other, op)]

        def pair(key):
            return [s.get(key) for s in sides]

        keys = {k for s in sides for k in s}
        rows.append(
            {
                "op": op,
                "count": pair(("count", "")),
                "us": pair(("us", "")),
                "p99_us": pair(("p99_us", "")),
                "io_wq_us": {c: pair(("io_wq_us", c)) for what, c in sorted(keys) if what == "io_wq_us"},
                "requests": {
                    cls: {what: pair((what, cls)) for what in ("per_request", "device_us", "life_us")}
                    for cls in sorted({c for what, c in keys if what == "per_request"})
                },
            }
        )
    time = lambda r: max((n or 0) * (us or 0) for n, us in zip(r["count"], r["us"]))  # noqa: E731
    return sorted(rows, key=lambda r: -time(r))
