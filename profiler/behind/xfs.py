"""The XFS log behind the wait (bpf/xfs.bpf.c): log forces by caller, iclog writes timed from
xlog_sync to I/O completion, force waits, CIL pushes and the periodic log worker as worker windows,
log space reservation waits, and delayed allocation. docs/behind-xfs.md says what each figure means
and how it is checked against the per-mount counters in /sys/fs/xfs/<dev>/stats/stats.

Over 500 lines, as each behind module: the probe, summaries, report lines and evidence change
together with bpf/xfs.bpf.c.
"""

from __future__ import annotations

import ctypes as c
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import units
from ..causes import check as known_cause
from .scope import in_scope, wide
from ..trace import hist, maps, symbols, syscalls

if TYPE_CHECKING:
    from . import Context, Target
    from ..trace.bpf import BpfObject

NAME = "xfs"
OBJECT = "xfs"
# What each program feeds (see behind/ext4.py FIGURES).
FIGURES = {
    "on_log_force": "XFS log forces",
    "on_iclog_force": "XFS log forces by iclog",
    "on_iclog_force_lsn": "XFS log forces by LSN",
    "on_iclog_switch": "XFS iclog switches",
    "on_iclog_release": "XFS iclog releases",
    "on_iclog_syncing": "XFS iclog sync times",
    "on_iclog_sync": "XFS iclog writes (count, size)",
    "on_iclog_write": "XFS iclog write times",
    "on_iclog_sync_done": "XFS iclog write completion times",
    "on_iclog_wait_on": "XFS waits on iclogs",
    "on_iclog_clean": "XFS iclog recycling",
    "on_iclog_activate": "XFS iclog activation",
    "on_log_reserve": "XFS log space reservations",
    "on_log_regrant": "XFS log space regrants",
    "on_log_reserve_exit": "XFS log space reservation times",
    "on_log_regrant_exit": "XFS log space regrant times",
    "on_grant_sleep": "XFS log space waits",
    "on_grant_wake": "XFS log space wakeups",
    "on_grant_wake_up": "XFS log space wakeups",
    "on_cil_wait": "XFS CIL throttling waits",
    "on_work_start": "XFS CIL push and log worker time",
    "on_work_end": "XFS CIL push and log worker time",
    "on_iomap_alloc": "XFS delayed allocations",
    "on_map_blocks_alloc": "XFS delayed-allocation conversions at writeback",
    "on_map_blocks_found": "XFS writeback mappings found",
    "on_delalloc_enospc": "XFS delayed-allocation ENOSPC retries",
    "on_inodegc_worker": "XFS inodegc worker windows (unlinked inodes' blocks freed in the background)",
    "on_need_inactive": "XFS inodes queued for inodegc, by the op that queued them",
    "on_inactivating": "XFS inodes inactivated, and where",
    **{
        f"place_xfs_{event}": "calls by absolute path placed on XFS"
        for event in ("lookup", "getattr", "setattr", "create", "remove", "rename", "link")
    },
}

CIL_PUSH_WORKER = maps.WORKER_KINDS[3]  # "xfs cil push": xlog_cil_push_work runs
LOG_WORKER = maps.WORKER_KINDS[4]  # "xfs log worker": xfs_log_worker runs
INODEGC_WORKER = maps.WORKER_KINDS[7]  # "xfs inodegc": xfs_inodegc_worker runs
FSYNC_OPS = ("fsync", "fdatasync")
FORCE_WAIT_CAUSE = known_cause("log force wait")  # the attribution cause of profiler/analysis/rules/xfs.toml
NO_SYSCALL = 0xFFFF

# enum xfs_hist of bpf/xfs.bpf.c, in order.
HISTS = ("iclog_write", "cil_push", "grant_sleep", "log_worker")
# enum alloc_event of bpf/xfs.bpf.c, in order.
ALLOC_EVENTS = (
    "delalloc_reserved",
    "allocated_at_write",
    "converted_at_writeback",
    "found_at_writeback",
    "delalloc_enospc",
    "inactive_queued",
    "inactivated",
)

# The xfs_log_force tracepoint fires in four functions; its caller_ip (the traced function's return
# address) names the function that called it. A caller that is itself a log force function means
# the trace came from xlog_cil_force_seq inside that force; the AIL's xlog_cil_flush is called from
# xfsaild_push. Only xfs_log_force and xfs_log_force_seq count in xs_log_force.
FORCE_FUNCTIONS = {"xfs_log_force", "xfs_log_force_seq"}
AIL_FUNCTIONS = {"xfsaild_push", "xfsaild"}


class XlogCounts(c.Structure):
    _fields_ = [
        (n, c.c_uint64)
        for n in (
            "iclog_syncs",
            "iclog_bytes",
            "iclog_data_bytes",
            "iclog_flush",
            "iclog_fua",
            "iclog_bio_writes",
            "sync_to_write_ns",
            "iclog_done",
            "done_to_clean_ns",
            "iclog_cleans",
            "iclog_force",
            "iclog_force_lsn",
            "iclog_switch",
            "iclog_release",
            "iclog_syncing",
            "iclog_activate",
            "force_wait_ns",
            "force_waits_woken",
            "log_reserve",
            "log_regrant",
            "grant_sleep_reserve",
            "grant_sleep_write",
            "grant_sleep_kthread",
            "grant_sleep_kthread_ns",
            "grant_wake_up",
            "cil_throttle",
            "lost_iclog",
        )
    ]


COUNT_FIELDS = tuple(f[0] for f in XlogCounts._fields_)


class XfsKey(c.Structure):
    _fields_ = [("dev", c.c_uint32), ("phase", c.c_uint16), ("pad", c.c_uint16)]


class HistKey(c.Structure):
    _fields_ = [("dev", c.c_uint32), ("phase", c.c_uint16), ("which", c.c_uint16)]


class ForceKey(c.Structure):
    _fields_ = [
        ("dev", c.c_uint32),
        ("phase", c.c_uint16),
        ("nr", c.c_uint16),
        ("seq", c.c_uint8),
        ("kthread", c.c_uint8),
        ("pad", c.c_uint16),
        ("pad2", c.c_uint32),
        ("caller_ip", c.c_uint64),
    ]


class WaitKey(c.Structure):
    _fields_ = [
        ("dev", c.c_uint32),
        ("phase", c.c_uint16),
        ("nr", c.c_uint16),
        ("slept", c.c_uint8),
        ("kthread", c.c_uint8),
        ("pad", c.c_uint16),
        ("pad2", c.c_uint32),
        ("caller_ip", c.c_uint64),
    ]


class AllocKey(c.Structure):
    _fields_ = [
        ("dev", c.c_uint32),
        ("phase", c.c_uint16),
        ("nr", c.c_uint16),
        ("event", c.c_uint8),
        ("kthread", c.c_uint8),
        ("pad", c.c_uint16),
    ]


class AllocVal(c.Structure):
    _fields_ = [("count", c.c_uint64), ("blocks", c.c_uint64)]


class XfsCfg(c.Structure):
    _fields_ = [("cil_push_work", c.c_uint64), ("log_worker", c.c_uint64), ("inodegc_worker", c.c_uint64)]


def kernel_functions() -> dict[str, int]:
    """{name: address} of the work functions bpf/xfs.bpf.c recognises in workqueue tracepoints."""
    return symbols.text_addresses(("xlog_cil_push_work", "xfs_log_worker", "xfs_inodegc_worker"), "xfs")


# Fields of the per-mount /sys/fs/xfs/<dev>/stats/stats lines this module compares with (the
# kernel's struct __xfsstats order; "log" and "push_ail" are split there by offset, so "push_ail"
# begins with the log space counters).
STAT_FIELDS = {
    "log": ("writes", "blocks", "noiclogs", "force", "force_sleep"),
    "push_ail": (
        "try_logspace",
        "sleep_logspace",
        "push_ail",
        "success",
        "pushbuf",
        "pinned",
        "locked",
        "flushing",
        "restarts",
        "flush",
    ),
    "xstrat": ("quick", "split"),
    "xpc": ("xstrat_bytes", "write_bytes", "read_bytes"),
}


def stats_dir_name(kdev: int) -> str | None:
    """The name XFS gives a mount under /sys/fs/xfs/ (its data device, e.g. loop3 or sda1)."""
    link = Path(f"/sys/dev/block/{kdev >> 20}:{kdev & 0xFFFFF}")
    return link.resolve().name if link.exists() else None


def read_mount_stats(name: str) -> dict[str, dict[str, int]] | None:
    """{line: {field: value}} of /sys/fs/xfs/<name>/stats/stats, for the lines of STAT_FIELDS."""
    try:
        text = Path(f"/sys/fs/xfs/{name}/stats/stats").read_text()
    except OSError:
        return None
    out: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] in STAT_FIELDS:
            out[parts[0]] = dict(zip(STAT_FIELDS[parts[0]], map(int, parts[1:])))
    return out


def stats_delta(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    return {line: {f: v - before.get(line, {}).get(f, 0) for f, v in fields.items()} for line, fields in after.items()}


def who(kthread: int, nr: int) -> str:
    """The context of an event: a kernel thread, or the syscall of the workload's thread."""
    if kthread:
        return "kernel thread"
    return syscalls.name_of(nr) if nr != NO_SYSCALL else "process (no syscall)"


class Probe:
    def __init__(self, obj: BpfObject) -> None:
        self.obj = obj
        self.devs = obj.map("xfs_devs", c.c_uint32, c.c_uint8)
        self.cfg = obj.map("xfs_cfg", c.c_uint32, XfsCfg)
        self.counts = obj.map("xlog_counts", XfsKey, XlogCounts)
        self.hists = obj.map("xlog_hists", HistKey, maps.Hist)
        self.forces = obj.map("log_forces", ForceKey, c.c_uint64)
        self.waits = obj.map("force_waits", WaitKey, c.c_uint64)
        self.alloc = obj.map("xfs_alloc", AllocKey, AllocVal)
        # In-flight state (an iclog between sync and clean, a thread in a reservation): kept across
        # reset() so that work started before a run still ends cleanly, dropped with the targets.
        self.inflight = [
            obj.map("iclog_io", c.c_uint64, c.c_char * 24),
            obj.map("iclog_waiters", c.c_uint64, c.c_char * 24),
            obj.map("grant_state", c.c_uint32, c.c_char * 16),
        ]
        fns = kernel_functions()
        # An address of 0 never matches a work function: that window is then not opened.
        self.cfg.update(
            c.c_uint32(0),
            XfsCfg(
                cil_push_work=fns.get("xlog_cil_push_work", 0),
                log_worker=fns.get("xfs_log_worker", 0),
                inodegc_worker=fns.get("xfs_inodegc_worker", 0),
            ),
        )

    def set_targets(self, targets: list[Target]) -> None:
        self.devs.clear()
        for m in self.inflight:
            m.clear()
        self.stat_names: dict[int, str | None] = {}
        for t in targets:
            if t.fs == "xfs":
                self.devs.update(c.c_uint32(t.sb_dev), c.c_uint8(1))
                self.stat_names[t.sb_dev] = stats_dir_name(t.sb_dev)

    def _read_stats(self):
        return {dev: read_mount_stats(name) for dev, name in getattr(self, "stat_names", {}).items() if name}

    def reset(self) -> None:
        for m in (self.counts, self.hists, self.forces, self.waits, self.alloc):
            m.clear()
        # The kernel's own per-mount counters over the same interval as the maps (the oracle).
        self.stats_at_reset = self._read_stats()

    def snapshot(self) -> dict[str, Any]:
        """Plain records keyed by superblock dev and phase index; callers as function names."""
        counts = []
        for k, v in self.counts.items():
            counts.append({"dev": k.dev, "phase": k.phase, **{f: getattr(v, f) for f in COUNT_FIELDS}})
        hists = [
            {
                "dev": k.dev,
                "phase": k.phase,
                "which": HISTS[k.which] if k.which < len(HISTS) else str(k.which),
                **maps.snapshot_hist(v),
            }
            for k, v in self.hists.items()
        ]
        forces = [
            {
                "dev": k.dev,
                "phase": k.phase,
                "seq": bool(k.seq),
                "who": who(k.kthread, k.nr),
                "kthread": bool(k.kthread),
                "caller": symbols.name(k.caller_ip),
                "count": v,
            }
            for k, v in self.forces.items()
        ]
        waits = [
            {
                "dev": k.dev,
                "phase": k.phase,
                "slept": bool(k.slept),
                "who": who(k.kthread, k.nr),
                "kthread": bool(k.kthread),
                "caller": symbols.name(k.caller_ip),
                "count": v,
            }
            for k, v in self.waits.items()
        ]
        alloc = [
            {
                "dev": k.dev,
                "phase": k.phase,
                "event": ALLOC_EVENTS[k.event] if k.event < len(ALLOC_EVENTS) else str(k.event),
                "who": who(k.kthread, k.nr),
                "kthread": bool(k.kthread),
                "count": v.count,
                "blocks": v.blocks,
            }
            for k, v in self.alloc.items()
        ]
        kernel = [
            {"dev": dev, "name": self.stat_names[dev], **stats_delta(before, after)}
            for dev, after in self._read_stats().items()
            if after and (before := getattr(self, "stats_at_reset", {}).get(dev))
        ]
        return {
            "counts": counts,
            "hists": hists,
            "forces": forces,
            "waits": waits,
            "alloc": alloc,
            "kernel_stats": kernel,
        }


# ---- summarize: raw records -> the section stored in result.json --------------------------------


def force_kind(rec: dict[str, Any]) -> str:
    """What an xfs_log_force tracepoint hit was (see FORCE_FUNCTIONS)."""
    if rec["caller"] in FORCE_FUNCTIONS:
        return "cil_step"
    if rec["seq"] and rec["caller"] in AIL_FUNCTIONS:
        return "ail_cil_flush"
    return "force_seq" if rec["seq"] else "force_all"


def _ratio(a, b):
    return a / b if b else None


def _add(d, key, n):
    d[key] = d.get(key, 0) + n


def log_forces(recs: list[dict[str, Any]]) -> dict[str, Any]:
    """Forces as xs_log_force counts them, by kind, caller and context."""
    out: dict[str, Any] = {
        "count": 0,
        "to_sequence": 0,
        "whole_log": 0,
        "cil_steps": 0,
        "ail_cil_flushes": 0,
        "from_kernel_threads": 0,
        "by_caller": {},
        "by_context": {},
    }
    for r in recs:
        kind = force_kind(r)
        if kind == "cil_step":
            out["cil_steps"] += r["count"]
            continue
        if kind == "ail_cil_flush":
            out["ail_cil_flushes"] += r["count"]
            continue
        out["count"] += r["count"]
        out["to_sequence" if kind == "force_seq" else "whole_log"] += r["count"]
        out["from_kernel_threads"] += r["count"] if r["kthread"] else 0
        _add(out["by_caller"], r["caller"], r["count"])
        _add(out["by_context"], r["who"], r["count"])
    return out


def force_waits(recs: list[dict[str, Any]], counts: dict[str, int]) -> dict[str, Any]:
    """xlog_wait_on_iclog calls, those that slept (xs_log_force_sleep counts them) and their time."""
    out: dict[str, Any] = {
        "calls": sum(r["count"] for r in recs),
        "slept": 0,
        "slept_by_caller": {},
        "slept_by_context": {},
        "woken": counts["force_waits_woken"],
        "wait_ns": counts["force_wait_ns"],
    }
    for r in recs:
        if r["slept"]:
            out["slept"] += r["count"]
            _add(out["slept_by_caller"], r["caller"], r["count"])
            _add(out["slept_by_context"], r["who"], r["count"])
    out["avg_wait_ns"] = _ratio(out["wait_ns"], out["woken"])
    return out


def iclogs(counts: dict[str, int], write_hist: dict[str, Any]) -> dict[str, Any]:
    n = counts["iclog_syncs"]
    return {
        "writes": n,
        "bytes": counts["iclog_bytes"],
        "blocks": counts["iclog_bytes"] // 512,
        "data_bytes": counts["iclog_data_bytes"],
        "avg_bytes": _ratio(counts["iclog_bytes"], n),
        "with_flush": counts["iclog_flush"],
        "with_fua": counts["iclog_fua"],
        "bio_submissions": counts["iclog_bio_writes"],
        "completed": counts["iclog_done"],
        "write_time": write_hist,
        "avg_sync_to_submit_ns": _ratio(counts["sync_to_write_ns"], counts["iclog_bio_writes"]),
        "avg_completion_ns": _ratio(counts["done_to_clean_ns"], counts["iclog_cleans"]),
        "switches": counts["iclog_switch"],
        "releases": counts["iclog_release"],
        "activations": counts["iclog_activate"],
        "force_head_checks": counts["iclog_force"],
        "force_lsn_steps": counts["iclog_force_lsn"],
        "not_seen_synced": counts["lost_iclog"],
    }


def log_space(counts: dict[str, int], sleep_hist: dict[str, Any]) -> dict[str, Any]:
    sleeps = counts["grant_sleep_reserve"] + counts["grant_sleep_write"]
    return {
        "reservations": counts["log_reserve"],
        "regrants": counts["log_regrant"],
        "sleeps": sleeps,
        "sleeps_reserve_head": counts["grant_sleep_reserve"],
        "sleeps_write_head": counts["grant_sleep_write"],
        "sleep_time": sleep_hist,
        "sleeps_of_kernel_threads": counts["grant_sleep_kthread"],
        "sleep_ns_of_kernel_threads": counts["grant_sleep_kthread_ns"],
        "waiters_woken": counts["grant_wake_up"],
        "cil_throttles": counts["cil_throttle"],
    }


def window(h: dict[str, Any], breakdown: dict[str, Any] | None) -> dict[str, Any]:
    """A worker's windows: their count and time (the probe's) and the off-CPU causes (assemble's)."""
    breakdown = breakdown or {}
    off = breakdown.get("offcpu_ns", 0)
    return {
        "count": h["count"],
        "total_ns": h["total_ns"],
        "avg_ns": h["avg_ns"],
        "time": h,
        "offcpu_ns": off,
        "cpu_ns": max(h["total_ns"] - off, 0),
        "causes": dict(breakdown.get("causes", {})),
        "other_wait_frames": dict(breakdown.get("other_wait_frames", {})),
    }


INODEGC_EVENTS = ("inactive_queued", "inactivated")


def delalloc(recs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {e: {"count": 0, "blocks": 0, "by_context": {}} for e in ALLOC_EVENTS if e not in INODEGC_EVENTS}
    for r in recs:
        if r["event"] in INODEGC_EVENTS:
            continue
        e = out.setdefault(r["event"], {"count": 0, "blocks": 0, "by_context": {}})
        e["count"] += r["count"]
        e["blocks"] += r["blocks"]
        _add(e["by_context"], r["who"], r["count"])
    return out


def inodegc(recs: list[dict[str, Any]], worker: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Background inactivation of unlinked inodes: who queued them (by syscall, or a kernel
    thread), where they were inactivated, and the inodegc workers' windows (their count, wall,
    on-CPU and off-CPU time and block requests, from the worker windows)."""
    out: dict[str, dict[str, Any]] = {
        "queued": {"count": 0, "by_context": {}},
        "inactivated": {"count": 0, "by_context": {}},
    }
    for r in recs:
        if r["event"] in INODEGC_EVENTS:
            e = out["queued" if r["event"] == "inactive_queued" else "inactivated"]
            e["count"] += r["count"]
            _add(e["by_context"], r["who"], r["count"])
    w = worker or {}
    out["worker"] = {k: w[k] for k in ("windows", "wall_ns", "oncpu_ns", "offcpu_ns", "causes", "requests") if k in w}
    return out


def fsyncs_in(syscall_hists: dict[str, dict[str, Any]]) -> int:
    return sum(syscall_hists.get(op, {}).get("count", 0) for op in FSYNC_OPS)


def force_wait_by_attribution(attribution: dict[str, dict[str, Any]]) -> int:
    """ns of the fsyncs' wall time the attribution put under "log force wait" (the waiter's view)."""
    return sum(attribution.get(op, {}).get("causes", {}).get(FORCE_WAIT_CAUSE, 0) for op in FSYNC_OPS)


def many_to_one(fig: dict[str, Any], fsyncs: int, attributed_wait_ns: int) -> dict[str, Any]:
    """Both views of one log force serving many fsyncs: per fsync (the waiter's) and per event."""
    forces, writes = fig["log_forces"]["count"], fig["iclogs"]["writes"]
    pushes = fig["cil_push"]["count"]
    if not fsyncs:  # no waiter: only the event's own figures mean something
        return {"fsyncs": 0, "iclog_writes_per_force": _ratio(writes, forces)}
    # An fsync forces the log only when its inode has changes in the log; the others (overwrites
    # of allocated blocks) only flush the device cache. The event's view counts those that forced.
    forcing = sum(n for who, n in fig["log_forces"]["by_context"].items() if who in FSYNC_OPS)
    return {
        "fsyncs": fsyncs,
        "fsyncs_forcing_the_log": forcing,
        "log_forces_per_fsync": _ratio(forces, fsyncs),
        "iclog_writes_per_fsync": _ratio(writes, fsyncs),
        "iclog_writes_per_force": _ratio(writes, forces),
        "log_bytes_per_fsync": _ratio(fig["iclogs"]["bytes"], fsyncs),
        "fsyncs_per_iclog_write": _ratio(forcing, writes),
        "fsyncs_per_cil_push": _ratio(forcing, pushes),
        "force_wait_ns_per_fsync": _ratio(attributed_wait_ns, fsyncs),
        "force_waits_slept_per_fsync": _ratio(fig["force_waits"]["slept"], fsyncs),
    }


def figures(
    recs: dict[str, list[dict[str, Any]]],
    syscall_hists: dict[str, dict[str, Any]],
    attribution: dict[str, dict[str, Any]],
    workers: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """One phase's (or all phases') figures from its records."""
    counts = {f: sum(r[f] for r in recs["counts"]) for f in COUNT_FIELDS}
    hists = {which: hist.merge([h for h in recs["hists"] if h["which"] == which]) for which in HISTS}
    fig: dict[str, Any] = {
        "log_forces": log_forces(recs["forces"]),
        "iclogs": iclogs(counts, hists["iclog_write"]),
        "force_waits": force_waits(recs["waits"], counts),
        "cil_push": window(hists["cil_push"], workers.get(CIL_PUSH_WORKER)),
        "log_worker": window(hists["log_worker"], workers.get(LOG_WORKER)),
        "log_space": log_space(counts, hists["grant_sleep"]),
        "delalloc": delalloc(recs["alloc"]),
        "inodegc": inodegc(recs["alloc"], workers.get(INODEGC_WORKER)),
    }
    fig["per_fsync"] = many_to_one(fig, fsyncs_in(syscall_hists), force_wait_by_attribution(attribution))
    return fig


# Sections only a program this kernel may lack fills: None (unknown), never a wrong 0, without it.
# 5.10 has no xlog_iclog_* tracepoints, and no BTF for XFS's own (the log space and allocation ones).
NEEDS = {
    "on_iclog_sync": ("iclogs", "force_waits"),
    "on_log_reserve": ("log_space",),
    "on_map_blocks_alloc": ("delalloc",),
    "on_inodegc_worker": ("inodegc",),
}
# per_fsync's figures from the iclogs and force waits.
_PER_FSYNC_OF_ICLOGS = (
    "iclog_writes_per_fsync",
    "iclog_writes_per_force",
    "log_bytes_per_fsync",
    "fsyncs_per_iclog_write",
    "force_waits_slept_per_fsync",
)


def _unknown_without(fig, left_out):
    for prog in left_out:
        for part in NEEDS.get(prog, ()):
            fig[part] = None
            if part == "iclogs":
                for key in _PER_FSYNC_OF_ICLOGS:
                    if key in fig["per_fsync"]:
                        fig["per_fsync"][key] = None


def _select(raw, keep):
    return {part: [r for r in raw.get(part, []) if keep(r)] for part in ("counts", "hists", "forces", "waits", "alloc")}


def _worker_breakdowns(ctx, phase_name=None):
    """{worker kind: breakdown} of all phases, or of one phase."""
    out = {}
    for kind, w in (ctx.workers or {}).items():
        b = w.get("all") if phase_name is None else w.get("phases", {}).get(phase_name)
        if b:
            out[kind] = b
    return out


def force_wait_of_all_phases(ctx: Context) -> dict[str, dict[str, dict[str, int]]]:
    """The fsyncs' "log force wait" over all phases, shaped like an attribution entry."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for p in ctx.phases.values():
        for op, b in p.get("attribution", {}).items():
            if op in FSYNC_OPS:
                causes = out.setdefault(op, {"causes": {}})["causes"]
                _add(causes, FORCE_WAIT_CAUSE, b["causes"].get(FORCE_WAIT_CAUSE, 0))
    return out


def summarize(raw: dict[str, Any], ctx: Context) -> dict[str, Any]:
    if ctx.fs != "xfs" or not raw:
        return {}
    mine = _select(raw, lambda r: r["dev"] == ctx.sb_dev)
    if not any(mine.values()):
        return {}
    phases: dict[str, dict[str, Any]] = {}
    for index in sorted({r["phase"] for part in mine.values() for r in part}):
        name = ctx.phase_name(index)
        p = ctx.phases.get(name, {})
        phases[name] = figures(
            _select(mine, lambda r: r["phase"] == index),
            p.get("syscalls", {}),
            p.get("attribution", {}),
            _worker_breakdowns(ctx, name),
        )
    section: dict[str, Any] = {
        "all": figures(mine, ctx.syscalls, force_wait_of_all_phases(ctx), _worker_breakdowns(ctx)),
        "phases": phases,
    }
    for fig in [section["all"], *phases.values()]:
        _unknown_without(fig, raw.get("left_out", ()))
    kernel = next((k for k in raw.get("kernel_stats", []) if k["dev"] == ctx.sb_dev), None)
    if kernel:
        section["kernel_counters"] = kernel_counters(kernel, section["all"])
    return section


def kernel_counters(k: dict[str, Any], fig: dict[str, Any]) -> dict[str, Any]:
    """The per-mount counters of the kernel over the same interval, next to ours where they count
    the same events. Force sleeps the kernel counts without a tracepoint: waits for the previous
    iclog's write before closing this one (xlog_force_lsn) and for an earlier checkpoint's commit
    record (xlog_cil_force_seq)."""
    log, ail, xstrat, xpc = k.get("log", {}), k.get("push_ail", {}), k.get("xstrat", {}), k.get("xpc", {})
    return {
        "source": f"/sys/fs/xfs/{k['name']}/stats/stats",
        "log_writes": log.get("writes"),
        "log_blocks": log.get("blocks"),
        "noiclogs": log.get("noiclogs"),
        "log_forces": log.get("force"),
        "force_sleeps": log.get("force_sleep"),
        "try_logspace": ail.get("try_logspace"),
        "sleep_logspace": ail.get("sleep_logspace"),
        "ail_pushes": ail.get("push_ail"),
        "ail_cil_flushes": ail.get("flush"),
        "delalloc_conversions": xstrat.get("quick"),
        "delalloc_converted_bytes": xpc.get("xstrat_bytes"),
        "ours": {
            "log_writes": i["writes"] if (i := fig["iclogs"]) else None,
            "log_blocks": i["blocks"] if i else None,
            "log_forces": fig["log_forces"]["count"],
            "force_sleeps_on_iclogs": w["slept"] if (w := fig["force_waits"]) else None,
            "reservations": s["reservations"] + s["regrants"] if (s := fig["log_space"]) else None,
            "sleep_logspace": s["sleeps"] if s else None,
            "ail_cil_flushes": fig["log_forces"]["ail_cil_flushes"],
            "delalloc_conversions": d["converted_at_writeback"]["count"] if (d := fig["delalloc"]) else None,
            "delalloc_converted_blocks": d["converted_at_writeback"]["blocks"] if d else None,
        },
        "force_sleeps_without_tracepoint": (log["force_sleep"] - w["slept"]) if "force_sleep" in log and w else None,
    }


# ---- report -------------------------------------------------------------------------------------

_us = partial(units.fmt_time, ms_from=None, missing="n/a")


def _per(x):
    return f"{x:.2f}" if x is not None else "n/a"


def _kib(b):
    return f"{b / 1024:.1f} KiB" if b is not None else "n/a"


def _top(d, n=3):
    return ", ".join(f"{k} {v}" for k, v in sorted(d.items(), key=lambda kv: -kv[1])[:n])


def _kernel_note(k):
    if not k:
        return ""
    return f"; the kernel counted {k['log_forces']} forces, {k['log_writes']} log writes"


def report_lines(section: dict[str, Any], fs: dict[str, Any]) -> list[str]:
    fig = section.get("all")
    if not fig:
        return []
    f, i, w, per = fig["log_forces"], fig["iclogs"], fig["force_waits"], fig["per_fsync"]
    k = section.get("kernel_counters")
    fsyncs = per["fsyncs"]
    if i is None or w is None:  # a kernel without the iclog tracepoints (5.10)
        lines = [
            f"   behind log force wait (XFS log): {f['count']} log forces ("
            + (f"{_per(per['log_forces_per_fsync'])} per fsync; " if fsyncs else "")
            + f"{_top(f['by_caller']) or 'none'}); iclog writes and force waits unknown on this kernel"
            + _kernel_note(k)
            + (f"; {_us(per['force_wait_ns_per_fsync'])} of log force wait per fsync" if fsyncs else "")
        ]
        return lines + _space_lines(fig, per, fsyncs)
    wt = i["write_time"]
    each = lambda key: f"{_per(per[key])} per fsync, " if fsyncs else ""  # noqa: E731
    lines = [
        f"   behind log force wait (XFS log): {f['count']} log forces ("
        + (f"{_per(per['log_forces_per_fsync'])} per fsync; " if fsyncs else "")
        + f"{_top(f['by_caller']) or 'none'}), {i['writes']} iclog writes ({each('iclog_writes_per_fsync')}"
        f"{_per(per['iclog_writes_per_force'])} per force, avg {_kib(i['avg_bytes'])}, "
        f"{i['with_flush']} with cache flush, {i['with_fua']} FUA)" + _kernel_note(k),
        f"     iclog write sync→done: avg {_us(wt['avg_ns'] if wt['count'] else None)} "
        f"(p50 {_us(wt['p50_ns'])}, p99 {_us(wt['p99_ns'])})"
        + (f", {_per(per['fsyncs_per_iclog_write'])} log-forcing fsyncs per iclog write" if fsyncs else "")
        + (
            f" ({fsyncs - per['fsyncs_forcing_the_log']} fsyncs forced no log)"
            if fsyncs and fsyncs > per["fsyncs_forcing_the_log"]
            else ""
        )
        + f"; {w['slept']} force waits slept on an iclog, avg {_us(w['avg_wait_ns'])} to wakeup"
        + (
            f" (+{k['force_sleeps_without_tracepoint']} other force sleeps)"
            if k and k.get("force_sleeps_without_tracepoint")
            else ""
        )
        + (f"; {_us(per['force_wait_ns_per_fsync'])} of log force wait per fsync" if fsyncs else ""),
    ]
    return lines + _space_lines(fig, per, fsyncs)


def _space_lines(fig, per, fsyncs):
    """The report's CIL push, log space, delayed allocation and inodegc lines."""
    lines = []
    cil = fig["cil_push"]
    if cil["count"]:
        causes = ", ".join(f"{name} {_us(ns / cil['count'])}" for name, ns in list(cil["causes"].items())[:3])
        lines.append(
            f"     CIL pushes: {cil['count']}"
            + (f" ({_per(per['fsyncs_per_cil_push'])} log-forcing fsyncs per push)" if fsyncs else "")
            + f", avg {_us(cil['avg_ns'])} = on CPU {_us(cil['cpu_ns'] / cil['count'])}"
            + (f" + {causes}" if causes else "")
            + " per push"
        )
    s = fig["log_space"]
    d = fig["delalloc"]
    space = "log space: unknown on this kernel"
    if s is not None:
        space = (
            f"log space: {s['sleeps']} reservation waits"
            + (
                f" (avg {_us(s['sleep_time']['avg_ns'])}, {s['sleeps_of_kernel_threads']} by kernel threads)"
                if s["sleeps"]
                else ""
            )
            + f", {s['cil_throttles']} CIL throttles"
        )
    alloc = "delayed allocation: unknown on this kernel"
    if d is not None:
        conv = d["converted_at_writeback"]
        alloc = (
            f"delayed allocation: {d['delalloc_reserved']['count']} reservations at write, {conv['count']} "
            f"converted at writeback ({_top(conv['by_context']) or 'none'})"
        )
    lines.append(f"     {space}; {alloc}")
    gc = fig.get("inodegc") or {}
    if gc.get("queued", {}).get("count") or gc.get("worker", {}).get("windows"):
        w = gc.get("worker", {})
        lines.append(
            f"     inodegc: {gc['queued']['count']} inodes queued for inactivation "
            f"({_top(gc['queued']['by_context']) or 'none'}), {gc['inactivated']['count']} inactivated "
            f"({_top(gc['inactivated']['by_context']) or 'none'}); {w.get('windows', 0)} worker runs, "
            f"{_us(w.get('wall_ns', 0))} ({_us(w.get('oncpu_ns', 0))} on CPU): the unlinked files' "
            "blocks are freed there, after the unlink returned"
        )
    return lines


def work_links(section: dict[str, Any], fs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{worker kind: {"by", "shares": {op: share}}}: inodegc's work shared among the ops by the
    inodes each queued for inactivation (xfs_inode_set_need_inactive in its calls), in the
    comparison's scope (the run, or one phase)."""
    queued = (in_scope(section, fs).get("inodegc") or {}).get("queued", {})
    total = queued.get("count", 0)
    if not total:
        return {}
    return {
        INODEGC_WORKER: {
            "by": "by the inodes each queued for inactivation",
            "shares": {who: n / total for who, n in queued["by_context"].items()},
        }
    }


def evidence(section: dict[str, Any], fs: dict[str, Any], op: str) -> dict[str, float]:
    """Counts that explain a log force wait, for `fsprof compare`: the log forces the op's own
    calls made (per op), and log forces and iclog writes per second of the run (run-wide). No
    "iclog writes per log force": most iclog writes are the CIL's background pushes, which no
    event links to a force (an untar's 223 per force were that), so the two stay two rates."""
    fig = in_scope(section, fs)
    n = fs["attribution"].get(op, {}).get("count", 0)
    forces, writes = fig.get("log_forces", {}), (fig.get("iclogs") or {}).get("writes")
    if not forces:
        return {}
    out: dict[str, float] = {}
    if n:
        out[f"XFS log forces made in its calls, per {op}"] = forces.get("by_context", {}).get(op, 0) / n
    if fs.get("elapsed_s"):
        out[f"XFS log forces per second ({wide(fs)})"] = forces.get("count", 0) / fs["elapsed_s"]
        if writes is not None:  # unknown without the iclog tracepoints (5.10)
            out[f"XFS iclog writes per second ({wide(fs)})"] = writes / fs["elapsed_s"]
    return out
