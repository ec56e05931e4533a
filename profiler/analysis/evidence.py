"""Counts that explain times, each in its scope, for `fsprof compare` (docs/compare.md,
"Evidence"): what an op's own calls did, what one window of the worker that ended its wait did,
the device's requests (per call where the op owns them, else per second), which counts go with
which cause, how each side did its I/O, and the work filesystem threads did for the op.

Reads filesystem entries of result.json only.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import behind
from ..behind.scope import in_scope, wide
from ..causes import TABLE as CAUSES
from ..trace.maps import BLK_CLASSES, BLK_WRITE_CLASSES


@dataclass
class Group:
    """One configuration: one filesystem entry, or its repeats."""

    name: str
    entries: list = field(default_factory=list)  # (result, fs entry)

    @property
    def fs(self) -> dict[str, Any]:
        return self.entries[0][1]

    def per_run(self, fn: Callable[[dict[str, Any]], Any]) -> list[Any]:
        return [fn(fs) for _, fs in self.entries]

    def mean(self, fn: Callable[[dict[str, Any]], float | None]) -> float | None:
        values = [v for v in self.per_run(fn) if v is not None]
        return statistics.fmean(values) if values else None

    def spread(self, fn: Callable[[dict[str, Any]], float | None]) -> float | None:
        values = [v for v in self.per_run(fn) if v is not None]
        return (max(values) - min(values)) if len(values) > 1 else None


# Which counts bear on which cause (substrings of evidence labels): a column of causes.py.
EVIDENCE_WORDS = {c.name: list(c.evidence) for c in CAUSES.values() if c.evidence}


def class_words(cls: str) -> str:
    return cls.replace("_", " ")


OWNER_SHARE = 0.95  # a call owns the device's requests when 95% of those linked to calls are its,
LINKED_COVERAGE = 0.5  # and at least half of the device's requests are linked to a call at all


def causes_ended_by(kind: str) -> list[str]:
    """The wait causes a worker kind's windows end (a jbd2 commit ends journal commit waits)."""
    return [c for c, cause in CAUSES.items() if cause.worker == kind]


def wait_shares(fs: dict[str, Any], kind: str) -> dict[str, float]:
    """{op: its share of the waits that worker `kind` ends}, the pro-rata key by which the worker's
    time, requests and windows are shared among the calls; {} where no call waited on it."""
    waited = causes_ended_by(kind)
    waits = {o: sum(b.get("waits", {}).get(c, 0) for c in waited) for o, b in fs["attribution"].items()}
    total = sum(waits.values())
    return {o: w / total for o, w in waits.items()} if total else {}


def linked_requests(fs: dict[str, Any]) -> dict[str, float]:
    """{op: block requests linked to its calls}: the ones its calls made from their own bios, and
    each filesystem worker's (a jbd2 commit's, a CIL push's) shared among the calls whose waits
    it ended, pro rata to those waits (as work_elsewhere shares the worker's time)."""
    linked = {o: sum(v.get("count", 0) for v in b.get("requests", {}).values()) for o, b in fs["attribution"].items()}
    for kind, w in fs.get("behind", {}).get("workers", {}).items():
        made = sum(v.get("count", 0) for v in in_scope(w, fs).get("requests", {}).values())
        for o, share in wait_shares(fs, kind).items():
            linked[o] += made * share
    return linked


def owns_the_device(fs: dict[str, Any], op: str) -> bool:
    """Whether the device's requests in this run (or phase) are `op`'s: its calls are linked to
    OWNER_SHARE of the requests linked to any call, and LINKED_COVERAGE of the device's requests
    are linked to a call at all (background writeback is linked to none). Then a device count goes
    per call of `op` ("flush requests per fdatasync 2.00 vs 2.00"), not per second, which misleads
    when one side ran faster."""
    linked = linked_requests(fs)
    device = sum(v.get("count", 0) for v in _device_counts(fs).values())
    mine, every = linked.get(op, 0), sum(linked.values())
    return bool(device and every and mine >= OWNER_SHARE * every and every >= LINKED_COVERAGE * device)


def _device_counts(fs):
    """The device under test's requests by class; {} for a bio-based device (zram), where zero
    would be a figure never observed."""
    dev = fs["device"]["name"]
    return (
        fs.get("block", {}).get(dev, {})
        if Path(f"/sys/block/{dev}/mq").exists() or fs["device"].get("request_based")
        else {}
    )


def evidence(fs: dict[str, Any], op: str, per_call: bool = False) -> dict[str, float]:
    """Counts that explain times, each in its scope (docs/compare.md, "Evidence"). Per op, only
    what the op's own calls did: the block requests it made from its own bios, how often it
    blocked for each cause, and for a wait a filesystem worker ends (a jbd2 commit) what one
    window of that worker did. The device's requests: per call of the op where it owns them
    (per_call: owns_the_device on every side), else per second of the run (or of the phase),
    saying that no call owns them; the write amplification and the behind modules' counts are
    run-wide. A run-wide count is never divided by an op's count."""
    b = fs["attribution"].get(op, {})
    n = b.get("count", 0)
    out: dict[str, float] = {}
    if n and "requests" in b:
        for cls in BLK_CLASSES:
            if cls in b["requests"] or cls in _SCOPED_CLASSES:
                out[f"{class_words(cls)} requests made in its calls, per {op}"] = (
                    b["requests"].get(cls, {}).get("count", 0) / n
                )
            out.update(_request_times(b["requests"].get(cls, {}), f"{class_words(cls)} requests made in its calls"))
    workers = fs.get("behind", {}).get("workers", {})
    for cause, waits in b.get("waits", {}).items() if n else ():
        out[f"times blocked in {cause}, per {op}"] = waits / n
        kind = CAUSES[cause].worker if cause in CAUSES else None
        w = in_scope(workers.get(kind), fs)
        if w.get("windows") and "requests" in w:
            for cls in BLK_CLASSES:
                if cls in w["requests"] or cls in _WORKER_CLASSES:
                    out[f"{class_words(cls)} requests per {kind} (the work that ends its {cause})"] = (
                        w["requests"].get(cls, {}).get("count", 0) / w["windows"]
                    )
                out.update(_request_times(w["requests"].get(cls, {}), f"{class_words(cls)} requests of the {kind}"))
    secs = fs.get("elapsed_s") or 0
    counts = _device_counts(fs)
    # Where no call's requests were counted (a kernel without block_getrq, an older run), whether
    # a call owns them is not known, and the rate does not say so.
    linked = any("requests" in b for b in fs["attribution"].values())
    scope = f"{wide(fs)}; no one call owns them" if linked else wide(fs)
    for cls in ("flush", "fua_write", "preflush_write", "sync_write", "async_write", "read"):
        if cls in counts and per_call and n:
            out[f"{class_words(cls)} requests to the device per {op} (all of the device's: its calls own them)"] = (
                counts[cls]["count"] / n
            )
        elif cls in counts and secs:
            out[f"{class_words(cls)} requests to the device per second ({scope})"] = counts[cls]["count"] / secs
    written = sum(h.get("bytes", 0) for name, h in fs["syscalls"].items() if "write" in name)
    device_bytes = sum(counts.get(c, {}).get("bytes", 0) for c in BLK_WRITE_CLASSES)
    if written:
        out[f"write amplification, {wide(fs)} (device bytes / bytes written by the syscalls)"] = device_bytes / written
    for module in behind.MODULES:
        fn = getattr(module, "evidence", None)
        section = fs.get("behind", {}).get(module.NAME)
        if fn and section:
            out.update(fn(section, fs, op))
    return out


def _request_times(v: dict[str, int], what: str) -> dict[str, float]:
    """The mean times of the timed requests of one class (maps.requests_of), in us: on the device
    (none for an empty cache flush, which the queue's own flush request serves) and from start to
    end (queue, device, and a cache flush run before a PREFLUSH write)."""
    t = v.get("timed")
    if not t:
        return {}
    out = {f"{what}: us from start to end, each": v["life_ns"] / t / 1e3}
    if v["device_ns"]:
        out[f"{what}: us on the device, each"] = v["device_ns"] / t / 1e3
    return out


# Classes shown per op even at zero on both sides: a sync write or flush an op did not make is news.
_SCOPED_CLASSES = ("flush", "sync_write")
_WORKER_CLASSES = ("flush", "preflush_write", "fua_write")  # a worker's barrier, or its absence
_SCOPED_ZERO_SHOWN = tuple(f"{class_words(c)} requests made in its calls" for c in _SCOPED_CLASSES)


def work_elsewhere(fs: dict[str, Any], op: str) -> dict[str, dict[str, Any]]:
    """{worker kind: {"us_per_op", "cpu_us_per_op", "link"}}: the time filesystem threads spent in
    their windows (wall, and on CPU) for this op's calls, per op. A worker's time is shared among
    the ops that caused it, pro rata to what links them: the waits of a cause it ends (a jbd2
    commit ends journal commit waits) or what a behind module counts per op (work_links(): the
    inodes an unlink queued for XFS inodegc). A worker no event links to any op has "link" None
    and its run-wide time per second (us_per_s). Not part of the op's wall time: a thread's
    work may overlap the op's wait for it, or come after the op returned."""
    workers = fs.get("behind", {}).get("workers", {})
    attribution = fs["attribution"]
    n = attribution.get(op, {}).get("count", 0)
    links: dict[str, dict[str, Any]] = {}
    for module in behind.MODULES:
        fn = getattr(module, "work_links", None)
        section = fs.get("behind", {}).get(module.NAME)
        if fn and section:
            links.update(fn(section, fs))
    out: dict[str, dict[str, Any]] = {}
    for kind, w in workers.items():
        w = in_scope(w, fs)
        if not w.get("wall_ns"):
            continue
        share, how = None, None
        shares = wait_shares(fs, kind)
        if shares:
            share, how = shares.get(op, 0.0), f"by the {' and '.join(causes_ended_by(kind))}s it ends"
        elif kind in links:
            share, how = links[kind]["shares"].get(op, 0.0), links[kind]["by"]
        if share is None:
            secs = fs.get("elapsed_s") or 0
            out[kind] = {"link": None, "us_per_s": w["wall_ns"] / 1e3 / secs if secs else None}
        elif n:
            out[kind] = {
                "link": how,
                "us_per_op": w["wall_ns"] * share / n / 1e3,
                "cpu_us_per_op": w.get("oncpu_ns", 0) * share / n / 1e3,
            }
    return out


def elsewhere_pairs(
    base: Group, other: Group, op: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """[{kind, us_per_op: [base, other], cpu_us_per_op, link}] linked to the op on either side,
    largest change first; [{kind, us_per_s}] of those linked on neither side; [{thread,
    cpu_us_per_s}] of the filesystems' own kernel threads, all their work (kthreads.py)."""
    linked: dict[str, dict[str, Any]]
    unlinked: dict[str, dict[str, Any]]
    threads: dict[str, dict[str, Any]]
    linked, unlinked, threads = {}, {}, {}
    for g, side in ((base, 0), (other, 1)):
        for _, fs in g.entries:
            for kind, e in work_elsewhere(fs, op).items():
                if e["link"]:
                    row = linked.setdefault(
                        kind, {"kind": kind, "us_per_op": [0.0, 0.0], "cpu_us_per_op": [0.0, 0.0], "link": e["link"]}
                    )
                    row["us_per_op"][side] += e["us_per_op"] / len(g.entries)
                    row["cpu_us_per_op"][side] += e["cpu_us_per_op"] / len(g.entries)
                elif e["us_per_s"] is not None:
                    row = unlinked.setdefault(kind, {"kind": kind, "us_per_s": [0.0, 0.0]})
                    row["us_per_s"][side] += e["us_per_s"] / len(g.entries)
            secs = fs.get("elapsed_s") or 0
            for name, t in fs.get("kernel_threads", {}).items() if secs else ():
                row = threads.setdefault(name, {"thread": name, "cpu_us_per_s": [0.0, 0.0]})
                row["cpu_us_per_s"][side] += t["cpu_ns"] / 1e3 / secs / len(g.entries)
    ranked = sorted(
        (r for r in linked.values() if any(r["us_per_op"])), key=lambda r: -abs(r["us_per_op"][1] - r["us_per_op"][0])
    )
    return (
        ranked,
        [r for k, r in sorted(unlinked.items()) if k not in linked],
        sorted(threads.values(), key=lambda r: -abs(r["cpu_us_per_s"][1] - r["cpu_us_per_s"][0])),
    )


def assign_evidence(cmp: dict[str, Any]) -> dict[str, Any]:
    """Which counts go with which listed cause (by the cause's evidence words), and the rest:
    {"causes": {cause: [label]}, "other_moved": [...], "only": [[base's], [other's]],
    "steady": [...], "zero": [...]}. A count "moved" by more than 5% of the larger side."""
    op, ev = cmp["op"], cmp["evidence"]
    both = {k: (x, y) for k, (x, y) in ev.items() if x is not None and y is not None}
    moved = [k for k, (x, y) in both.items() if abs(y - x) > 0.05 * max(abs(x), abs(y), 1e-9)]
    used: set[str]
    by_cause: dict[str, list[str]]
    used, by_cause = set(), {}
    for c in cmp["causes"]:
        words = EVIDENCE_WORDS.get(c["cause"].split(" > ")[0], []) + (
            [c["cause"].rsplit(": ", 1)[-1]] if " > " in c["cause"] else []
        )
        mine = [k for k in moved if k not in used and any(w in k.replace(f" per {op}", "") for w in words)]
        used.update(mine)
        by_cause[c["cause"]] = mine
    return {
        "causes": by_cause,
        "other_moved": [k for k in moved if k not in used],
        "only": [[k for k, v in ev.items() if v[side] and v[1 - side] is None] for side in (0, 1)],
        "steady": [k for k, (x, y) in both.items() if (x or y) and k not in moved],
        "zero": [k for k, (x, y) in both.items() if not x and not y and k.startswith(_SCOPED_ZERO_SHOWN)],
    }


def mechanism(fs: dict[str, Any], op: str) -> dict[str, Any] | None:
    """How `op`'s calls did their I/O, per call, where the op owns the device's requests
    (owns_the_device): each class's requests per call by who submitted them (the caller, jbd2,
    a worker: the block module's submitters), with the device's average time per request; and
    the caller's waits per call by cause (the waits one thread makes inside one call follow one
    another: each is an I/O round it could not overlap); and for each worker whose window ends
    one of those waits (a jbd2 commit), its windows per call and how many times one window
    blocked, in sequence too. Whole runs only: the submitters are counted over the run."""
    n = fs["attribution"].get(op, {}).get("count", 0)
    dev = fs["device"]["name"]
    block = fs.get("behind", {}).get("block", {}).get("devices", {}).get(dev, {})
    if not n or not block or fs.get("phase_view"):
        return None
    requests: dict[str, dict[str, Any]] = {}
    for cls, rows in block.get("submitters", {}).items():
        device = block.get("classes", {}).get(cls, {}).get("device", {})
        requests[cls] = {
            "per_call": sum(r["count"] for r in rows) / n,
            "by": {r["who"]: r["count"] / n for r in rows},
            "device_us": device.get("avg_ns", 0) / 1e3 if device.get("count") else None,
        }
    waits = {c: w / n for c, w in fs["attribution"][op].get("waits", {}).items()}
    return {"requests": requests, "waits": waits, "workers": _worker_rounds(fs, op, n)}


def _worker_rounds(fs, op, n):
    """{worker kind: {"windows_per_call", "blocked_per_window"}} of the workers whose windows end
    the op's waits: their windows shared among the calls by those waits (as linked_requests), and
    their blocked (not runnable) intervals per window, from the trace's worker records."""
    out = {}
    for kind, w in fs.get("behind", {}).get("workers", {}).items():
        windows, share = in_scope(w, fs).get("windows", 0), wait_shares(fs, kind).get(op, 0.0)
        if windows and share:
            blocked = sum(
                r["count"] for r in fs.get("trace", {}).get("workers", []) if r["kind"] == kind and not r["runnable"]
            )
            out[kind] = {"windows_per_call": windows * share / n, "blocked_per_window": blocked / windows}
    return out


def evidence_pairs(base: Group, other: Group, op: str) -> dict[str, list[float | None]]:
    """{count: [base, other]}, each side the mean over its repeats. A count one side's filesystem
    does not have (jbd2 commits on XFS) is None there, not 0. The device's counts go per call
    only where the op owns them on both sides, so that the two sides read alike."""
    per_call = all(owns_the_device(fs, op) for g in (base, other) for _, fs in g.entries)
    ev: dict[str, list[float | None]] = {}
    for g, side in ((base, 0), (other, 1)):
        for _, fs in g.entries:
            for k, v in evidence(fs, op, per_call).items():
                pair = ev.setdefault(k, [None, None])
                pair[side] = (pair[side] or 0.0) + v / len(g.entries)
    return ev
