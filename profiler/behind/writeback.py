"""Writeback and dirty throttling behind a traced thread's writes (bpf/writeback.bpf.c):
balance_dirty_pages pauses, the global dirty thresholds, the flusher's work by reason, pages
written, and who started each inode's writeback (fsync or the flusher). docs/behind-writeback.md
says what each figure means and how it is checked.

Over 500 lines, as each behind module: the probe, summaries, report lines and evidence change
together with bpf/writeback.bpf.c.
"""

from __future__ import annotations

import ctypes as c
import os
import re
from collections.abc import Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import units
from ..machine import blockdev, tracefs
from ..causes import check as known_cause
from .scope import in_scope, wide
from ..trace import hist, maps, syscalls

if TYPE_CHECKING:
    from . import Context, Target
    from ..trace.bpf import BpfObject

NAME = "writeback"
OBJECT = "writeback"
# What each program feeds (see behind/ext4.py FIGURES).
FIGURES = {
    "on_balance_dirty_pages": "dirty throttling (pauses, thresholds)",
    "on_global_dirty_state": "the kernel's dirty thresholds",
    "on_writeback_queue": "writeback work queued, by reason",
    "on_writeback_exec": "writeback work run, by reason",
    "on_writeback_start": "writeback passes",
    "on_writeback_written": "writeback passes' pages",
    "on_writeback_wait": "writeback waits",
    "on_writeback_pages_written": "pages written by the flusher",
    "on_writeback_wake_background": "background writeback wakeups",
    "on_sb_mark_inode_writeback": "inodes under writeback",
    "on_writeback_single_inode": "inodes written back",
    "on_folio_wait_writeback": "waits for pages under writeback",
}

BDI_NAME_LEN = 32
# enum wb_who and enum inode_event of bpf/writeback.bpf.c, in order.
WHO_SYSCALL, WHO_USER, WHO_FLUSHER, WHO_KTHREAD = range(4)
WHO_NAMES = {WHO_USER: "user (no syscall)", WHO_FLUSHER: "flusher", WHO_KTHREAD: "kernel thread"}
INODE_EVENTS = ("writeback_started", "written", "folio_waits")
# global_dirty_state's fields, in the tracepoint's (and the BPF struct's) order; the first five
# also keep their minimum and maximum.
GDS_FIELDS = (
    "nr_dirty",
    "nr_writeback",
    "background_thresh",
    "dirty_thresh",
    "dirty_limit",
    "nr_dirtied",
    "nr_written",
)
GDS_RANGED = GDS_FIELDS[:5]
WRITE_OPS = ("write", "pwrite64", "writev", "pwritev", "pwritev2")
THROTTLE_CAUSE = known_cause("dirty throttling")
DIRTY_SYSCTLS = (
    "dirty_bytes",
    "dirty_ratio",
    "dirty_background_bytes",
    "dirty_background_ratio",
    "dirty_writeback_centisecs",
    "dirty_expire_centisecs",
)
SYS_CLASS_BDI = Path("/sys/class/bdi")
SYS_FS_BTRFS = Path("/sys/fs/btrfs")


class BdiName(c.Structure):
    _fields_ = [("name", c.c_char * BDI_NAME_LEN)]


THROTTLE_SUMS = ("checks", "sleeps", "planned_ms", "dirtied", "dirty_sum")
THROTTLE_LAST = (
    "limit_last",
    "setpoint_last",
    "dirty_last",
    "wb_dirty_last",
    "wb_setpoint_last",
    "task_ratelimit_last",
    "dirty_ratelimit_last",
)


class ThrottleVal(c.Structure):
    _fields_ = [
        ("checks", c.c_uint64),
        ("sleeps", c.c_uint64),
        ("planned_ms", c.c_uint64),
        ("dirtied", c.c_uint64),
        ("last_ns", c.c_uint64),
        ("limit_last", c.c_uint64),
        ("limit_min", c.c_uint64),
        ("limit_max", c.c_uint64),
        ("setpoint_last", c.c_uint64),
        ("dirty_last", c.c_uint64),
        ("dirty_min", c.c_uint64),
        ("dirty_max", c.c_uint64),
        ("dirty_sum", c.c_uint64),
        ("wb_dirty_last", c.c_uint64),
        ("wb_setpoint_last", c.c_uint64),
        ("task_ratelimit_last", c.c_uint64),
        ("dirty_ratelimit_last", c.c_uint64),
    ]


class DirtyStateVal(c.Structure):
    _fields_ = [
        ("count", c.c_uint64),
        ("first_ns", c.c_uint64),
        ("last_ns", c.c_uint64),
        ("first", c.c_uint64 * len(GDS_FIELDS)),
        ("last", c.c_uint64 * len(GDS_FIELDS)),
        ("min", c.c_uint64 * len(GDS_RANGED)),
        ("max", c.c_uint64 * len(GDS_RANGED)),
    ]


class WorkKey(c.Structure):
    _fields_ = [
        ("bdi", c.c_uint16),
        ("phase", c.c_uint16),
        ("reason", c.c_uint8),
        ("integrity", c.c_uint8),
        ("pad", c.c_uint16),
    ]


WORK_COUNTS = ("queued", "executed", "runs", "passes", "pages", "run_ns", "waits")


class WorkVal(c.Structure):
    _fields_ = [
        ("queued", c.c_uint64),
        ("executed", c.c_uint64),
        ("runs", c.c_uint64),
        ("passes", c.c_uint64),
        ("pages", c.c_uint64),
        ("run_ns", c.c_uint64),
        ("pass_max_ns", c.c_uint64),
        ("waits", c.c_uint64),
    ]


class GapKey(c.Structure):
    _fields_ = [("bdi", c.c_uint16), ("phase", c.c_uint16), ("reason", c.c_uint8), ("pad", c.c_uint8 * 3)]


class LastRunKey(c.Structure):
    _fields_ = [("cgroup_ino", c.c_uint64), ("bdi", c.c_uint16), ("reason", c.c_uint8), ("pad", c.c_uint8 * 5)]


class FlushKey(c.Structure):
    _fields_ = [("bdi", c.c_uint16), ("phase", c.c_uint16)]


FLUSH_COUNTS = ("calls", "pages", "background_kicks")


class FlushVal(c.Structure):
    _fields_ = [(name, c.c_uint64) for name in FLUSH_COUNTS]


class InodeKey(c.Structure):
    _fields_ = [
        ("bdi", c.c_uint16),
        ("phase", c.c_uint16),
        ("event", c.c_uint8),
        ("who", c.c_uint8),
        ("nr", c.c_uint16),
    ]


class InodeVal(c.Structure):
    _fields_ = [("count", c.c_uint64), ("pages", c.c_uint64)]


# ---- what the kernel calls things ----


def reason_names(fmt_file: str | Path = tracefs.TRACEFS / "events/writeback/writeback_start/format") -> dict[int, str]:
    """{value: name} of enum wb_reason, from this kernel's own tracepoint format: its print fmt
    lists the names with __print_symbolic(REC->reason, { 0, "background" }, ...)."""
    try:
        text = Path(fmt_file).read_text()
    except OSError:
        return {}
    start = text.find("__print_symbolic(REC->reason")
    if start < 0:
        return {}
    symbols = text[start : text.index(")", start)]
    return {int(v): name for v, name in re.findall(r'\{\s*(\d+)\s*,\s*"([^"]*)"\s*\}', symbols)}


def disk_bdi(kdev: int, name: str) -> tuple[str, str]:
    """The bdi of block device `name` (a partition's is its disk's): named "major:minor"."""
    try:
        disk = blockdev.whole_disk(name)
        return blockdev.kdev_str(blockdev.kdev_of_block(disk)), disk
    except OSError:
        return blockdev.kdev_str(kdev), name


def btrfs_bdi(device_names: Sequence[str]) -> str | None:
    """A btrfs filesystem has a bdi of its own ("btrfs-N"): /sys/fs/btrfs/<uuid>/bdi links to it."""
    for fs_dir in sorted(SYS_FS_BTRFS.glob("*/devices")):
        if any((fs_dir / name).exists() for name in device_names):
            link = fs_dir.parent / "bdi"
            if link.exists():
                return link.resolve().name
    return None


def target_bdis(target: Target) -> list[tuple[str, str]]:
    """[(bdi name, what it is)] for one behind.Target, its main bdi (the one its superblock
    writes through) first."""
    found = []
    if target.fs == "btrfs":
        own = btrfs_bdi(list(target.block_devs.values()))
        if own:
            found.append((own, f"btrfs {target.mountpoint}".strip()))
    for kdev, name in target.block_devs.items():
        bdi, disk = disk_bdi(kdev, name)
        if bdi not in [b for b, _ in found]:
            found.append((bdi, disk))
    return [(b, what) for b, what in found if (SYS_CLASS_BDI / b).exists()]


def read_dirty_sysctls() -> dict[str, int]:
    out: dict[str, int] = {}
    for name in DIRTY_SYSCTLS:
        try:
            out[f"vm.{name}"] = int(Path("/proc/sys/vm", name).read_text())
        except (OSError, ValueError):
            pass
    return out


def who_name(who: int, nr: int) -> str:
    return syscalls.name_of(nr) if who == WHO_SYSCALL else WHO_NAMES.get(who, f"who-{who}")


# ---- the probe ----


class Probe:
    def __init__(self, obj: BpfObject) -> None:
        self.obj = obj
        m = obj.map
        self.bdis_map = m("traced_bdis", BdiName, c.c_uint32)
        self.sbs_map = m("traced_sbs", c.c_uint32, c.c_uint32)
        self.bdi_sb = m("bdi_sb", c.c_uint32, c.c_uint32)
        self.throttle = m("throttle", maps.ThrottleKey, ThrottleVal)
        # The pauses' sleeps, timed by syscalls.bpf.c's on_switch (a map of bpf/shared_maps.h).
        self.pause_slept = m("pause_slept", maps.ThrottleKey, maps.PauseVal)
        self.dirty_state = m("dirty_state", c.c_uint32, DirtyStateVal)
        self.work = m("wb_work", WorkKey, WorkVal)
        self.gaps = m("run_gaps", GapKey, maps.Hist)
        self.last_run = m("last_run", LastRunKey, c.c_uint64)
        self.flush = m("wb_flush", FlushKey, FlushVal)
        self.inodes = m("inode_events", InodeKey, InodeVal)
        self.reasons = reason_names()
        # id -> {"name", "device", "sb_devs": [superblocks writing through it]}
        self.bdis: dict[int, dict[str, Any]] = {}

    def set_targets(self, targets: list[Target]) -> None:
        self.bdis_map.clear()
        self.sbs_map.clear()
        for i in range(64):
            self.bdi_sb.update(c.c_uint32(i), c.c_uint32(0))
        self.bdis = {}
        for t in targets:
            for i, (name, what) in enumerate(target_bdis(t)):
                bdi_id = next((k for k, v in self.bdis.items() if v["name"] == name), len(self.bdis) + 1)
                self.bdis.setdefault(bdi_id, {"name": name, "device": what, "sb_devs": []})["sb_devs"].append(t.sb_dev)
                self.bdis_map.update(BdiName(name.encode()), c.c_uint32(bdi_id))
                if len(self.bdis[bdi_id]["sb_devs"]) == 1 and bdi_id < 64:
                    self.bdi_sb.update(c.c_uint32(bdi_id), c.c_uint32(t.sb_dev))
                if i == 0:
                    self.sbs_map.update(c.c_uint32(t.sb_dev), c.c_uint32(bdi_id))

    def reset(self) -> None:
        # `pauses` and `flushers` hold work in flight, not aggregates: they resolve themselves.
        for m in (
            self.throttle,
            self.pause_slept,
            self.dirty_state,
            self.work,
            self.gaps,
            self.last_run,
            self.flush,
            self.inodes,
        ):
            m.clear()

    def reason(self, value: int) -> str:
        return self.reasons.get(value, f"reason-{value}")

    def snapshot(self) -> dict[str, Any]:
        """Plain data: rows keyed by bdi id and phase index, names resolved on this machine."""
        reason = self.reason
        return {
            "bdis": {str(k): v for k, v in self.bdis.items()},
            "page_size": os.sysconf("SC_PAGE_SIZE"),
            "sysctls": read_dirty_sysctls(),
            "throttle": throttle_rows(self.throttle.items(), self.pause_slept.items()),
            "dirty_state": [
                dirty_state_row(k.value, v) for k, v in self.dirty_state.items() if any(x.count for x in v)
            ],
            "work": [
                {
                    "bdi": k.bdi,
                    "phase": k.phase,
                    "reason": reason(k.reason),
                    "integrity": bool(k.integrity),
                    **{f: getattr(v, f) for f in WORK_COUNTS},
                    "pass_max_ns": v.pass_max_ns,
                }
                for k, v in self.work.items()
            ],
            "run_gaps": [
                {"bdi": k.bdi, "phase": k.phase, "reason": reason(k.reason), **maps.snapshot_hist(v)}
                for k, v in self.gaps.items()
            ],
            "flush": [
                {"bdi": k.bdi, "phase": k.phase, **{f: getattr(v, f) for f in FLUSH_COUNTS}}
                for k, v in self.flush.items()
            ],
            "inodes": [
                {
                    "bdi": k.bdi,
                    "phase": k.phase,
                    "event": INODE_EVENTS[k.event],
                    "who": who_name(k.who, k.nr),
                    "count": v.count,
                    "pages": v.pages,
                }
                for k, v in self.inodes.items()
                if k.event < len(INODE_EVENTS)
            ],
        }


def throttle_rows(
    throttle: Iterable[tuple[maps.ThrottleKey, ThrottleVal]], pauses: Iterable[tuple[maps.ThrottleKey, maps.PauseVal]]
) -> list[dict[str, Any]]:
    """One row per (bdi, phase, who) of balance_dirty_pages (one value for all CPUs:
    bpf/writeback.bpf.c), with its pauses' sleeps (pause_slept, under the same key)."""
    slept = {bytes(k): v for k, v in pauses}  # ctypes keys compare by their bytes
    rows = []
    for k, v in throttle:
        seen, p = v.checks > 0, slept.get(bytes(k), maps.PauseVal())
        rows.append(
            {
                "bdi": k.bdi,
                "phase": k.phase,
                "who": who_name(k.who, k.nr),
                "last_ns": v.last_ns,
                **{f: getattr(v, f) for f in THROTTLE_SUMS},
                **{f: getattr(v, f) if seen else 0 for f in THROTTLE_LAST},
                **{f: getattr(v, f) if seen else 0 for f in ("limit_min", "limit_max", "dirty_min", "dirty_max")},
                "unmatched": p.unmatched,
                "slept": maps.snapshot_hist(p.slept),
            }
        )
    return rows


def dirty_state_row(phase: int, per_cpu: list[DirtyStateVal]) -> dict[str, Any]:
    seen = [v for v in per_cpu if v.count]
    first = min(seen, key=lambda v: v.first_ns)
    last = max(seen, key=lambda v: v.last_ns)
    return {
        "phase": phase,
        "count": sum(v.count for v in seen),
        "first_ns": first.first_ns,
        "last_ns": last.last_ns,
        "first": dict(zip(GDS_FIELDS, first.first)),
        "last": dict(zip(GDS_FIELDS, last.last)),
        "min": {f: min(v.min[i] for v in seen) for i, f in enumerate(GDS_RANGED)},
        "max": {f: max(v.max[i] for v in seen) for i, f in enumerate(GDS_RANGED)},
    }


# ---- summary ----


def summarize(raw: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """The section of result.json: per phase and in total ("all"), for the bdis of ctx's filesystem."""
    if not raw:
        return {}
    bdis = {int(k): b for k, b in raw.get("bdis", {}).items() if ctx.sb_dev in b["sb_devs"]}
    names = {k: b["name"] for k, b in bdis.items()}
    rows = {
        part: [r for r in raw.get(part, []) if r["bdi"] in bdis]
        for part in ("throttle", "work", "run_gaps", "flush", "inodes")
    }
    rows["dirty_state"] = raw.get("dirty_state", [])  # global: every phase's, whatever the device
    phases: dict[str, dict[str, Any]] = {}
    for index in sorted({r["phase"] for part in rows.values() for r in part}):
        pname = ctx.phase_name(index)
        phase = ctx.phases.get(pname, {})
        phases[pname] = phase_summary(
            {part: [r for r in rs if r["phase"] == index] for part, rs in rows.items()},
            names,
            phase.get("syscalls", {}),
            phase.get("attribution", {}),
        )
    return {
        "bdis": {b["name"]: {"device": b["device"]} for b in bdis.values()},
        "page_size": raw.get("page_size"),
        "sysctls": raw.get("sysctls", {}),
        "all": phase_summary(rows, names, ctx.syscalls, total_attribution(ctx.phases)),
        "phases": phases,
    }


def total_attribution(phases: dict[str, dict[str, Any]]) -> dict[str, dict[str, dict[str, int]]]:
    """{op: {"causes": {cause: ns}}} over every phase."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for p in phases.values():
        for op, b in p.get("attribution", {}).items():
            causes = out.setdefault(op, {"causes": {}})["causes"]
            for cause, ns in b.get("causes", {}).items():
                causes[cause] = causes.get(cause, 0) + ns
    return out


def phase_summary(
    rows: dict[str, list[dict[str, Any]]],
    bdi_names: dict[int, str],
    syscall_hists: dict[str, dict[str, Any]],
    attribution: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    return {
        "throttle": throttle_summary(rows["throttle"], syscall_hists, attribution),
        "dirty_state": dirty_state_summary(rows["dirty_state"]),
        "writeback": work_summary(rows["work"], bdi_names),
        "run_interval": gap_summary(rows["run_gaps"]),
        "flusher": {f: sum(r[f] for r in rows["flush"]) for f in FLUSH_COUNTS},
        "pages_written_by_flusher": sum(r["pages"] for r in rows["work"]),
        "inodes": inode_summary(rows["inodes"]),
    }


def throttle_summary(
    rows: list[dict[str, Any]], syscall_hists: dict[str, dict[str, Any]], attribution: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """balance_dirty_pages pauses (all tasks dirtying the bdis, by who), against the traced write
    syscalls' wall time and the attribution's "dirty throttling" cause."""
    if not rows:
        return {}
    slept = hist.merge([r["slept"] for r in rows])
    checks = sum(r["checks"] for r in rows)
    newest = max(rows, key=lambda r: r["last_ns"])
    writes = [op for op in WRITE_OPS if op in syscall_hists]
    write_count = sum(syscall_hists[op]["count"] for op in writes)
    write_wall = sum(syscall_hists[op]["total_ns"] for op in writes)
    in_writes = [r for r in rows if r["who"] in WRITE_OPS]
    in_write_ns = sum(r["slept"]["total_ns"] for r in in_writes)
    attributed = sum(attribution.get(op, {}).get("causes", {}).get(THROTTLE_CAUSE, 0) for op in writes)
    by_who: dict[str, dict[str, int]] = {}
    for r in rows:
        w = by_who.setdefault(r["who"], {"checks": 0, "pauses": 0, "pause_ns": 0})
        w["checks"] += r["checks"]
        w["pauses"] += r["slept"]["count"]
        w["pause_ns"] += r["slept"]["total_ns"]
    return {
        "checks": checks,
        "announced": sum(r["sleeps"] for r in rows),
        "pauses": slept["count"],
        "pause_ns": slept["total_ns"],
        "max_ns": slept["max_ns"],
        "avg_ns": slept["avg_ns"],
        "pause_hist": slept,
        "planned_ms": sum(r["planned_ms"] for r in rows),
        "pauses_not_seen_sleeping": sum(r["unmatched"] for r in rows),
        "dirtied_pages": sum(r["dirtied"] for r in rows),
        "limit": {
            "last": newest["limit_last"],
            "min": min((r["limit_min"] for r in rows if r["checks"]), default=0),
            "max": max(r["limit_max"] for r in rows),
        },
        "dirty": {
            "last": newest["dirty_last"],
            "min": min((r["dirty_min"] for r in rows if r["checks"]), default=0),
            "max": max(r["dirty_max"] for r in rows),
            "avg": sum(r["dirty_sum"] for r in rows) / checks if checks else 0,
        },
        "setpoint_last": newest["setpoint_last"],
        "wb_dirty_last": newest["wb_dirty_last"],
        "wb_setpoint_last": newest["wb_setpoint_last"],
        "task_ratelimit_kbps_last": newest["task_ratelimit_last"],
        "dirty_ratelimit_kbps_last": newest["dirty_ratelimit_last"],
        "by_who": by_who,
        "write_syscalls": {"count": write_count, "wall_ns": write_wall},
        "in_write_ns": in_write_ns,
        "per_write_ns": in_write_ns / write_count if write_count else 0,
        "share_of_write_time": in_write_ns / write_wall if write_wall else 0,
        "attributed_ns": attributed,
    }


def dirty_state_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The global thresholds (pages) the kernel computed: last, min and max; the change of the
    global dirtied/written page counters (/proc/vmstat nr_dirtied, nr_written) between the
    phase's first and last computation."""
    rows = [r for r in rows if r["count"]]
    if not rows:
        return {}
    first = min(rows, key=lambda r: r["first_ns"])
    last = max(rows, key=lambda r: r["last_ns"])
    return {
        "count": sum(r["count"] for r in rows),
        "last": last["last"],
        "min": {f: min(r["min"][f] for r in rows) for f in GDS_RANGED},
        "max": {f: max(r["max"][f] for r in rows) for f in GDS_RANGED},
        "span_ns": last["last_ns"] - first["first_ns"],
        "nr_dirtied_delta": last["last"]["nr_dirtied"] - first["first"]["nr_dirtied"],
        "nr_written_delta": last["last"]["nr_written"] - first["first"]["nr_written"],
    }


def work_summary(rows: list[dict[str, Any]], bdi_names: dict[int, str]) -> dict[str, dict[str, dict[str, int]]]:
    """{bdi name: {reason: counts}}; a data-integrity (WB_SYNC_ALL) work's reason gets " (integrity)"."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for r in rows:
        reason = r["reason"] + (" (integrity)" if r["integrity"] else "")
        e = out.setdefault(bdi_names.get(r["bdi"], str(r["bdi"])), {}).setdefault(
            reason, {**{f: 0 for f in WORK_COUNTS}, "pass_max_ns": 0}
        )
        for f in WORK_COUNTS:
            e[f] += r[f]
        e["pass_max_ns"] = max(e["pass_max_ns"], r["pass_max_ns"])
    return out


def gap_summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """{reason: interval between consecutive runs of one cgroup writeback}: the periodic flusher's
    gap is vm.dirty_writeback_centisecs while there is dirty data."""
    out: dict[str, dict[str, Any]] = {}
    for reason in sorted({r["reason"] for r in rows}):
        h = hist.merge([r for r in rows if r["reason"] == reason])
        out[reason] = {k: h[k] for k in ("count", "avg_ns", "p50_ns", "p95_ns", "max_ns")}
    return out


def inode_summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, int]]]:
    """{event: {who: {count, pages}}}: inodes put under writeback by fsync, the flusher, ...;
    inodes the flusher wrote (pages); folio writeback waits."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for r in rows:
        e = out.setdefault(r["event"], {}).setdefault(r["who"], {"count": 0, "pages": 0})
        e["count"] += r["count"]
        e["pages"] += r["pages"]
    return out


# ---- report ----

ms = partial(units.fmt_time, ms_from=100 * units.US)


def report_lines(section: dict[str, Any], fs: dict[str, Any]) -> list[str]:
    total = section.get("all") if section else None
    if not total:
        return []
    lines = []
    lines.extend(throttle_lines(total["throttle"], total["dirty_state"], section))
    lines.extend(work_lines(total))
    lines.extend(inode_lines(total["inodes"]))
    return lines


def throttle_lines(t: dict[str, Any], gds: dict[str, Any], section: dict[str, Any]) -> list[str]:
    lines = []
    if t and t["pauses"]:
        lines.append(
            f"   dirty throttling: {t['pauses']} pauses (avg {ms(t['avg_ns'])}, max {ms(t['max_ns'])}), "
            f"{100 * t['share_of_write_time']:.0f}% of write time "
            f"({ms(t['per_write_ns'])} per write; attribution says "
            f"{100 * t['attributed_ns'] / max(t['write_syscalls']['wall_ns'], 1):.0f}%)"
        )
    if gds:
        sysctls = section.get("sysctls", {})
        setting = (
            f"vm.dirty_bytes {sysctls['vm.dirty_bytes']}"
            if sysctls.get("vm.dirty_bytes")
            else f"vm.dirty_ratio {sysctls.get('vm.dirty_ratio', '?')}%"
        )
        last = gds["last"]
        lines.append(
            f"   dirty limit {last['dirty_thresh']} pages ({setting}), "
            f"background {last['background_thresh']}, "
            f"smoothed limit {last['dirty_limit']}; dirty pages up to {gds['max']['nr_dirty']}, "
            f"under writeback up to {gds['max']['nr_writeback']} (machine-wide)"
        )
    return lines


def work_lines(total: dict[str, Any]) -> list[str]:
    lines = []
    for bdi, reasons in total["writeback"].items():
        parts = [
            f"{reason} {w['runs']} runs {w['pages']} pages {ms(w['run_ns'])}"
            for reason, w in sorted(reasons.items(), key=lambda kv: -kv[1]["pages"])
            if w["runs"] or w["queued"]
        ]
        if parts:
            lines.append(f"   writeback of {bdi}: " + ", ".join(parts))
    periodic = total["run_interval"].get("periodic")
    if periodic and periodic["count"]:
        lines.append(f"   periodic flusher every {periodic['p50_ns'] / 1e9:.2f} s (median of {periodic['count']} gaps)")
    return lines


def inode_lines(inodes: dict[str, dict[str, Any]]) -> list[str]:
    started = inodes.get("writeback_started", {})
    if not started:
        return []
    return [
        "   inode writeback started by: "
        + ", ".join(f"{who} {v['count']}" for who, v in sorted(started.items(), key=lambda kv: -kv[1]["count"]))
    ]


def evidence(section: dict[str, Any], fs: dict[str, Any], op: str) -> dict[str, float]:
    """Counts that explain dirty throttling, for `fsprof compare`: run-wide (a pause is counted
    for the writer, whatever syscall it was in; the op's own pauses are its "times blocked in
    dirty throttling")."""
    throttle = in_scope(section, fs).get("throttle", {})
    limit = section.get("dirty_state", {}).get("last", {}).get("dirty_limit")
    if not fs.get("elapsed_s") or not throttle:
        return {}
    out = {f"dirty throttling pauses per second ({wide(fs)})": throttle.get("pauses", 0) / fs["elapsed_s"]}
    if throttle.get("pauses"):
        # Slept, from the tracepoint to the switch-in: not the tracepoint's `pause`, which is what
        # the kernel planned (jiffy-granular; longer on average with HZ=250).
        out["dirty throttling pause slept (tracepoint to wakeup), avg us"] = throttle["avg_ns"] / 1e3
    if limit is not None:
        out["dirty limit the kernel used, pages"] = limit
    return out
