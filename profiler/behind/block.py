"""Block requests behind the wait (bpf/block.bpf.c): every request of the devices under test,
followed by its struct request pointer from start to completion, per (device, class, phase): count,
bytes, sizes, queue time (insert or start -> issue), device time (issue -> completion) and who
submitted it. A loop device's backing device is watched too and reported apart ("backing"), never
mixed with the device under test. See docs/behind-block.md."""

from __future__ import annotations

import ctypes as c
import os
from functools import partial
from typing import TYPE_CHECKING, Any

from .. import units
from ..machine import blockdev
from ..trace import hist, maps

if TYPE_CHECKING:
    from . import Context, Target
    from ..trace.bpf import BpfObject

NAME = "block"
OBJECT = "block"
# What each program feeds (see behind/ext4.py FIGURES). Without block_io_start (before 6.5) a
# request is known from its insert or issue, with the flags left after the flush machinery.
FIGURES = {
    "on_io_start": "block requests submitted (FUA, PREFLUSH, meta) and the flushes they asked for",
    "on_rq_insert": "block queue times",
    "on_rq_issue": "block requests issued",
    "on_rq_requeue": "block requests requeued",
    "on_rq_merge": "block requests merged",
    "on_rq_complete": "block request completions and device times",
    "on_io_done": "block request life times (the /sys/block stat ticks) and completed writes in /sys/block's terms",
    "on_stacked_bio_queue": "the bios of a bio-based device under test (device-mapper: --device-model)",
    "on_stacked_bio_complete": "the times of a bio-based device's bios (device-mapper: --device-model)",
}

SUBMITTER_LEN = 32
DEV_TRACED, DEV_FUA, DEV_BIO = 1, 2, 4  # traced_devs value bits (bpf/block.bpf.c)
COUNTERS = maps.BLK_COUNTERS
FSYNC_OPS = ("fsync", "fdatasync")
WRITE_OPS = ("write", "pwrite64", "writev", "pwritev", "pwritev2")
TOP_SUBMITTERS = 5


class SubKey(c.Structure):
    _fields_ = [("dev", c.c_uint32), ("cls", c.c_uint16), ("phase", c.c_uint16), ("who", c.c_char * SUBMITTER_LEN)]


class SubVal(c.Structure):
    _fields_ = [("count", c.c_uint64), ("bytes", c.c_uint64)]


class RqInfo(c.Structure):
    _fields_ = [
        ("born_ns", c.c_uint64),
        ("start_ns", c.c_uint64),
        ("insert_ns", c.c_uint64),
        ("issue_ns", c.c_uint64),
        ("dev", c.c_uint32),
        ("cls", c.c_uint16),
        ("phase", c.c_uint16),
        ("device_done", c.c_uint8),
        ("ended", c.c_uint8),
        ("pad", c.c_uint16 * 3),
        ("who", c.c_char * SUBMITTER_LEN),
        ("device_ns", c.c_uint64),
        ("owner", maps.RqOwner),
    ]


def _bio_based(name):
    """A device-mapper or md device: stacked over others, it makes no requests of its own."""
    slaves = blockdev.SYS_BLOCK / name / "slaves"
    return slaves.is_dir() and bool(os.listdir(slaves))


def _fua(name):
    try:
        return (blockdev.SYS_BLOCK / name / "queue" / "fua").read_text().strip() == "1"
    except OSError:
        return False


# Collection.


def _stat(v):
    out = {f: getattr(v, f) for f in COUNTERS}
    out["sizes_log2"] = {str(i): n for i, n in enumerate(v.size_log2) if n}
    out["queue"], out["device"] = maps.snapshot_hist(v.queue), maps.snapshot_hist(v.device)
    return out


class Probe:
    def __init__(self, obj: BpfObject) -> None:
        self.obj = obj
        self.devs = obj.map("traced_devs", c.c_uint32, c.c_uint8)
        self.stats = obj.map("blk_stats", maps.BlkKey, maps.BlkVal)
        self.submitters = obj.map("blk_submitters", SubKey, SubVal)
        self.rqs = obj.map("rqs", c.c_uint64, RqInfo)
        self.names: dict[int, str] = {}  # kdev -> name of the devices under test
        self.bio_based: set[str] = set()  # those of them that are device-mapper/md (DEV_BIO)
        # kdev -> {"name", "for": [loop names], "files": [...], "direct_io": [...]}
        self.backing: dict[int, dict[str, Any]] = {}

    def set_targets(self, targets: list[Target]) -> None:
        self.devs.clear()
        self.names = {kdev: name for t in targets for kdev, name in t.block_devs.items()}
        self.bio_based = {name for name in self.names.values() if _bio_based(name)}
        self.backing = {}
        for name in self.names.values():
            below = blockdev.backing_of(name)
            for disk in (below or {}).get("disks", []):
                kdev = blockdev.kdev_of_block(disk)
                if kdev in self.names:
                    continue  # also under test: counted there, not twice
                b = self.backing.setdefault(kdev, {"name": disk, "for": [], "files": [], "direct_io": []})
                b["for"].append(name)
                assert below is not None  # its disks are what this loop walks
                b["files"].append(below["file"])
                b["direct_io"].append(below["direct_io"])
        for kdev, name in [*self.names.items(), *((k, b["name"]) for k, b in self.backing.items())]:
            flags = DEV_TRACED | (DEV_FUA if _fua(name) else 0) | (DEV_BIO if name in self.bio_based else 0)
            self.devs.update(c.c_uint32(kdev), c.c_uint8(flags))

    def reset(self) -> None:
        for m in (self.stats, self.submitters, self.rqs):
            m.clear()

    def snapshot(self) -> dict[str, Any]:
        """{"counts": {device under test: {phase: {class: {count, bytes}}}},
            "devices": {device under test: DEV}, "backing": {backing disk: {"for", "files", "direct_io", **DEV}}}
        DEV = {"phases": {phase: {class: STAT}}, "submitters": {phase: {class: {who: {count, bytes}}}}};
        STAT: the counters of struct blk_val, "sizes_log2" and the "queue"/"device" histograms."""
        per_dev: dict[int, dict[str, Any]] = {}
        for k, v in self.stats.items():
            dev = per_dev.setdefault(k.dev, {"phases": {}, "submitters": {}})
            dev["phases"].setdefault(k.phase, {})[maps.BLK_CLASSES[k.cls]] = _stat(v)
        for k, v in self.submitters.items():
            dev = per_dev.setdefault(k.dev, {"phases": {}, "submitters": {}})
            who = k.who.decode(errors="replace")
            by_cls = dev["submitters"].setdefault(k.phase, {}).setdefault(maps.BLK_CLASSES[k.cls], {})
            by_cls[who] = {"count": v.count, "bytes": v.bytes}
        devices = {
            name: {**per_dev.get(kdev, {"phases": {}, "submitters": {}}), "bio_based": name in self.bio_based}
            for kdev, name in self.names.items()
        }
        backing = {
            b["name"]: {
                "for": b["for"],
                "files": b["files"],
                "direct_io": b["direct_io"],
                **per_dev.get(kdev, {"phases": {}, "submitters": {}}),
            }
            for kdev, b in self.backing.items()
        }
        counts = {
            name: {
                phase: {cls: {"count": s["count"], "bytes": s["bytes"]} for cls, s in classes.items()}
                for phase, classes in dev["phases"].items()
            }
            for name, dev in devices.items()
        }
        return {"counts": counts, "devices": devices, "backing": backing}


# Summary: plain data in, plain data out.


def _merge_stats(stats):
    """One STAT-like summary from several (a class over phases): counters summed, histograms merged."""
    stats = list(stats)
    out = {f: sum(s.get(f, 0) for s in stats) for f in COUNTERS}
    sizes = {}
    for s in stats:
        for slot, n in s.get("sizes_log2", {}).items():
            sizes[int(slot)] = sizes.get(int(slot), 0) + n
    out["avg_bytes"] = out["bytes"] / out["count"] if out["count"] else 0
    out["sizes_log2"] = {str(k): v for k, v in sorted(sizes.items())}
    for h in ("queue", "device"):
        out[h] = hist.merge([s[h] for s in stats if h in s])
    return out


def _classes(phases, indexes=None):
    """{class: merged summary} over the given phase indexes (all when None)."""
    by_cls = {}
    for index, classes in phases.items():
        if indexes is None or int(index) in indexes:
            for cls, s in classes.items():
                by_cls.setdefault(cls, []).append(s)
    return {cls: _merge_stats(by_cls[cls]) for cls in maps.BLK_CLASSES if cls in by_cls}


def _ratio(a, b):
    return a / b if b else None


def _syscall_bytes_written(syscalls):
    """Bytes the traced syscalls wrote (their return values), or None when no figure carries bytes."""
    found = [syscalls[op]["bytes"] for op in WRITE_OPS if op in syscalls and "bytes" in syscalls[op]]
    return sum(found) if found else None


def explain(
    classes: dict[str, dict[str, Any]], syscalls: dict[str, dict[str, Any]], bio_based: bool = False
) -> dict[str, Any]:
    """The counts that explain the times: flushes and FUA writes per fsync, the many-to-one view
    of a flush (fsyncs it served, requests that asked for it), write amplification, average times.
    A bio-based device's flushes are its bios that carry one: empty, or a PREFLUSH write's."""
    fsyncs = sum(syscalls.get(op, {}).get("count", 0) for op in FSYNC_OPS)
    flushing = ("flush", "preflush_write") if bio_based else ("flush",)
    flush = _merge_stats([classes[c] for c in flushing if c in classes])
    fua = sum(s["fua"] for s in classes.values())
    flush_ns = flush["queue"]["total_ns"] + flush["device"]["total_ns"]
    by_syscalls = _syscall_bytes_written(syscalls)
    on_device = sum(classes[c]["bytes"] for c in maps.BLK_WRITE_CLASSES if c in classes)
    return {
        "fsyncs": fsyncs,
        "flushes": flush["count"],
        "flushes_per_fsync": _ratio(flush["count"], fsyncs),
        "fua_writes": fua,
        "fua_writes_per_fsync": _ratio(fua, fsyncs),
        "fsyncs_per_flush": _ratio(fsyncs, flush["count"]),
        "flush_device_ns_per_fsync": _ratio(flush["device"]["total_ns"], fsyncs),
        "flush_ns_per_fsync": _ratio(flush_ns, fsyncs),
        "flushes_asked": flush["flush_asked"],
        "requests_per_flush": _ratio(flush["flush_asked"], flush["count"]),
        "bytes_written_by_syscalls": by_syscalls,
        "device_bytes_written": on_device,
        "write_amplification": _ratio(on_device, by_syscalls) if by_syscalls is not None else None,
        "avg_queue_ns": {cls: s["queue"]["avg_ns"] for cls, s in classes.items() if s["queue"]["count"]},
        "avg_device_ns": {cls: s["device"]["avg_ns"] for cls, s in classes.items() if s["device"]["count"]},
    }


def submitter_group(who: str) -> str:
    """A kworker not running a work item keeps its numbered comm: one group for all of them."""
    return "kworker" if who.startswith("kworker/") else who


def _submitters(by_phase, indexes=None):
    """{class: [{who, count, bytes, share}], largest first, top few}."""
    totals = {}
    for index, classes in by_phase.items():
        if indexes is not None and int(index) not in indexes:
            continue
        for cls, whos in classes.items():
            for who, v in whos.items():
                e = totals.setdefault(cls, {}).setdefault(submitter_group(who), {"count": 0, "bytes": 0})
                e["count"] += v["count"]
                e["bytes"] += v["bytes"]
    out = {}
    for cls in maps.BLK_CLASSES:
        whos = totals.get(cls, {})
        total = sum(v["count"] for v in whos.values())
        ranked = sorted(whos.items(), key=lambda kv: -kv[1]["count"])[:TOP_SUBMITTERS]
        if ranked:
            out[cls] = [{"who": who, **v, "share": v["count"] / total} for who, v in ranked]
    return out


def as_sys_block_stat(classes: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Our figures in the terms of /sys/block/<dev>/stat: requests completed and their ticks (ms,
    start to end). The kernel counts an empty flush request (served by a flush, never issued) as a
    write, and the flush request itself as a flush."""

    def ios(names):  # a lost completion (see bpf/block.bpf.c) still ended the request
        return sum(classes[c]["completed"] + classes[c]["lost"] for c in names if c in classes)

    def ms(names):
        return sum(classes[c]["life_ns"] for c in names if c in classes) / 1e6

    flush = classes.get("flush", {})
    return {
        "read_ios": ios(["read"]),
        "read_ticks_ms": ms(["read"]),
        "write_ios": ios(maps.BLK_WRITE_CLASSES) + flush.get("unissued", 0),
        "write_ticks_ms": ms(maps.BLK_WRITE_CLASSES) + flush.get("unissued_life_ns", 0) / 1e6,
        "discard_ios": ios(["discard"]),
        "discard_ticks_ms": ms(["discard"]),
        "flush_ios": ios(["flush"]),
        "flush_ticks_ms": ms(["flush"]),
    }


def _device(dev, ctx, with_syscalls):
    phases = {}
    for index in sorted({int(i) for i in dev.get("phases", {})}):
        name = ctx.phase_name(index)
        classes = _classes(dev["phases"], {index})
        entry = {"index": index, "classes": classes, "submitters": _submitters(dev.get("submitters", {}), {index})}
        if with_syscalls:
            entry["explain"] = explain(
                classes, ctx.phases.get(name, {}).get("syscalls", {}), bio_based=dev.get("bio_based", False)
            )
        phases[name] = entry
    classes = _classes(dev.get("phases", {}))
    out = {
        **({"bio_based": True} if dev.get("bio_based") else {}),
        "classes": classes,
        "as_sys_block_stat": as_sys_block_stat(classes),
        "submitters": _submitters(dev.get("submitters", {})),
        "phases": phases,
    }
    if with_syscalls:
        out["explain"] = explain(classes, ctx.syscalls, bio_based=dev.get("bio_based", False))
    return out


def summarize(raw: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """{"devices": {device under test: DEVICE}, "backing": {disk: {"for", "files", "direct_io", **DEVICE}}}
    DEVICE = {classes: {class: CLASS}, as_sys_block_stat, submitters: {class: [..]}, explain,
    phases: {name: {index, classes, submitters, explain}}}; the backing disks have no "explain"
    (other users' I/O is in it)."""
    mine = set(ctx.block_devs.values())
    devices = {name: _device(dev, ctx, True) for name, dev in raw.get("devices", {}).items() if name in mine}
    backing: dict[str, dict[str, Any]] = {}
    for name, dev in raw.get("backing", {}).items():
        if mine & set(dev.get("for", [])):
            backing[name] = {k: dev[k] for k in ("for", "files", "direct_io")} | _device(dev, ctx, False)
    for d in [*devices.values(), *backing.values()]:
        _unknown_without(d, raw.get("left_out", ()))
    return {"devices": devices, "backing": backing} if devices or backing else {}


# Figures only a program this kernel may lack counts: unknown (None), never a wrong 0, without it.
# block_io_start (6.5) sees a request's flags before the flush machinery strips PREFLUSH and FUA;
# block_io_done (6.5) ends its life as /sys/block/<dev>/stat's ticks do, and sees the end of an
# empty flush request the flush machinery served (no insert, issue or completion tracepoint
# before 6.5: 6.1 ends it in __blk_mq_end_request), which /sys/block counts as a write.
NEEDS = {
    "on_io_start": ("explain", ("fua_writes", "fua_writes_per_fsync", "flushes_asked", "requests_per_flush")),
    "on_io_done": (
        "as_sys_block_stat",
        ("write_ios", "read_ticks_ms", "write_ticks_ms", "discard_ticks_ms", "flush_ticks_ms"),
    ),
}


def _unknown_without(device, left_out):
    for prog in left_out:
        if prog in NEEDS:
            part, keys = NEEDS[prog]
            for section in [device, *device.get("phases", {}).values()]:
                for key in keys:
                    if key in section.get(part, {}):
                        section[part][key] = None


# Terminal view.

_us = partial(units.fmt_time, ms_from=10 * units.MS, missing="-")


def _per(x):
    return "n/a" if x is None else f"{x:.2f}"


def _who(ranked, n=2):
    return ", ".join(f"{e['who']} {100 * e['share']:.0f}%" for e in ranked[:n] if e["share"] >= 0.005)


def _class_rows(d, fsyncs=0):
    """One row per class seen: count, average size, queue and device time, top submitters."""
    rows = []
    for cls, s in d["classes"].items():
        if not (s["count"] or s["unissued"]):
            continue
        label = cls.replace("_", " ")
        if cls == "flush":
            extra = [
                f"{s['count'] / fsyncs:.2f}/fsync" if fsyncs else "",
                f"+{s['unissued']} empty requests" if s["unissued"] else "",
            ]
            label += f" ({', '.join(x for x in extra if x)})" if any(extra) else ""
            who = _who(d["submitters"].get(cls, []))
            who = f"asked by {who}" if who else ""
        else:
            if s["fua"] and cls != "fua_write":
                label += f" ({s['fua']} FUA)"
            who = _who(d["submitters"].get(cls, []))
        if s["lost"]:
            who += f" [{s['lost']} completions untraced]"
        size = units.fmt_bytes(s["avg_bytes"]) if s["count"] and cls != "flush" else "-"
        q, dv = s["queue"], s["device"]
        rows.append(
            f"     {label:<42} {s['count']:>7} {size:>10} {_us(q['avg_ns'] if q['count'] else None):>10} "
            f"{_us(dv['avg_ns'] if dv['count'] else None):>11}   {who}"
        )
    return rows


def _header(title):
    return f"   {title:<44} {'count':>7} {'avg size':>10} {'queue avg':>10} {'device avg':>11}   submitted by"


def report_lines(section: dict[str, Any], fs: dict[str, Any]) -> list[str]:
    lines = []
    for name, d in section.get("devices", {}).items():
        e = d["explain"]
        if d.get("bio_based"):  # its bios, timed through everything below it
            lines.append(_header(f"bios to {name} (under test, bio-based: time to completion below)"))
        else:
            lines.append(_header(f"block requests to {name} (under test)"))
        lines.extend(_class_rows(d, e["fsyncs"]) or ["     none"])
        amp = e["write_amplification"]
        lines.append(
            f"     per fsync: {_per(e['flushes_per_fsync'])} flushes ({_us(e['flush_device_ns_per_fsync'] or 0)} "
            f"of flush device time), {_per(e['fua_writes_per_fsync'])} FUA writes; per flush: "
            f"{_per(e['fsyncs_per_flush'])} fsyncs, {_per(e['requests_per_flush'])} requests asking; "
            "write amplification "
            + (
                f"{amp:.2f} ({units.fmt_bytes(e['device_bytes_written'])} on {name} / "
                f"{units.fmt_bytes(e['bytes_written_by_syscalls'])} written by syscalls)"
                if amp is not None
                else "n/a"
            )
        )
    for name, b in section.get("backing", {}).items():
        how = "direct I/O" if all(b["direct_io"]) else "buffered"
        lines.append(_header(f"backing {name} (under {', '.join(b['for'])}, {how})"))
        lines.extend(_class_rows(b) or ["     none"])
        lines.append(f"     (all of {name}'s requests during the run: other users' I/O is included)")
    return lines
