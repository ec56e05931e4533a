"""btrfs behind the wait (bpf/btrfs.bpf.c): fsyncs, tree-log syncs and full transaction commits
(who committed, and the kernel's commit timer per commit), superblock writes, ordered extents and
space reservation tickets, per phase. docs/behind-btrfs.md says what each figure means and how it
is checked against /sys/fs/btrfs/<fsid>/commit_stats and bpftrace.

Over 500 lines, as each behind module: one filesystem's probe, its summaries, its report lines
and its evidence change together with bpf/btrfs.bpf.c.
"""

from __future__ import annotations

import ctypes as c
import fcntl
import glob
import os
import re
import uuid
from collections.abc import Iterable, Sequence
from functools import lru_cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import units
from ..causes import check as known_cause
from ..trace import bpf, hist, maps

if TYPE_CHECKING:
    from . import Context, Target

NAME = "btrfs"
OBJECT = "btrfs"
# What each program feeds (see behind/ext4.py FIGURES).
FIGURES = {
    "on_sync_file": "btrfs fsyncs by path (tree-log or full commit)",
    "on_transaction_commit": "btrfs transaction commits",
    "on_transaction_commit_timed": "btrfs transaction commit times",
    "on_bio_queue": "btrfs superblock and log writes",
    "on_oe_add": "btrfs ordered extents added",
    "on_oe_start": "btrfs ordered extents waited for",
    "on_oe_finish": "btrfs ordered-extent I/O completions",
    "on_oe_remove": "btrfs ordered extents finished (life time)",
    "on_reserve_ticket": "btrfs space-reservation tickets",
    "on_flush_space": "btrfs space flushing",
    "on_trigger_flush": "btrfs space flushing triggers",
    "on_space_reservation": "btrfs space reservations; calls by absolute path placed on btrfs",
}

# enum btrfs_event of bpf/btrfs.bpf.c, in order.
EVENTS = (
    "sync_file",
    "commit",
    "oe_add",
    "oe_start",
    "oe_finish",
    "oe_remove",
    "ticket",
    "flush_space",
    "trigger_flush",
    "super_write",
)
# enum btrfs_hist of bpf/btrfs.bpf.c, in order.
HISTS = ("commit", "ticket_wait", "oe_life")
ORDERED_TYPES = ("regular", "nocow", "prealloc", "compressed", "direct")
TRIGGER_REASONS = ("enospc", "preempt", "other")
SPACE_KINDS = {1: "data", 2: "system", 4: "metadata"}
FSYNC_OPS = ("fsync", "fdatasync")
# Causes of profiler/analysis/rules/btrfs.toml (and common.toml) an fsync's time is split into.
LOG_SYNC_CAUSE = known_cause("btrfs tree-log sync")
COMMIT_CAUSE = known_cause("btrfs transaction commit")
FLUSH_CAUSE = known_cause("cache flush")
RESERVATION_CAUSE = known_cause("space reservation")
NO_STACK = "[stack not captured]"

# Who ran a commit, from the innermost frame outwards: the first rule with a matching frame wins.
COMMITTERS = (
    ("fsync", ("btrfs_sync_file",)),
    ("btrfs-transaction", ("transaction_kthread",)),
    ("sync/syncfs", ("btrfs_sync_fs", "sync_filesystem", "ksys_sync", "iterate_supers")),
    ("space flushing", ("flush_space", "btrfs_async_reclaim_*", "btrfs_preempt_reclaim_*", "priority_reclaim_*")),
    ("aborted (cleanup)", ("cleanup_transaction", "btrfs_cleanup_transaction")),
)
# What wrote a superblock: a tree-log sync (btrfs_sync_log writes the primary copy only) or a commit.
SUPER_WRITERS = (("tree-log sync", ("btrfs_sync_log",)), ("transaction commit", ("btrfs_commit_transaction",)))


class FsidKey(c.Structure):
    _fields_ = [("fsid", c.c_uint8 * 16)]


class BtKey(c.Structure):
    _fields_ = [
        ("dev", c.c_uint32),
        ("phase", c.c_uint16),
        ("event", c.c_uint16),
        ("arg", c.c_uint32),
        ("stackid", c.c_int32),
    ]


class BtVal(c.Structure):
    _fields_ = [("count", c.c_uint64), ("bytes", c.c_uint64), ("total_ns", c.c_uint64), ("max_ns", c.c_uint64)]


class HistKey(c.Structure):
    _fields_ = [("dev", c.c_uint32), ("phase", c.c_uint16), ("which", c.c_uint16)]


class OeKey(c.Structure):
    _fields_ = [
        ("dev", c.c_uint32),
        ("pad", c.c_uint32),
        ("root", c.c_uint64),
        ("ino", c.c_uint64),
        ("file_offset", c.c_uint64),
    ]


class OeVal(c.Structure):
    _fields_ = [("add_ns", c.c_uint64), ("phase", c.c_uint32), ("pad", c.c_uint32)]


class ResvKey(c.Structure):
    _fields_ = [("dev", c.c_uint32), ("phase", c.c_uint16), ("reserve", c.c_uint16), ("type", c.c_char * 24)]


class CommitSeen(c.Structure):
    _fields_ = [("commit_count", c.c_uint64), ("last_ns", c.c_uint64)]


# --- which fsid is which filesystem ------------------------------------------------------------

SYSFS = Path("/sys/fs/btrfs")


def fsid_of_devices(names: Iterable[str]) -> str | None:
    """The fsid (UUID string) of the btrfs on block devices `names`: /sys/fs/btrfs/<fsid>/devices/
    holds a link per member device. None if no mounted btrfs has one of them."""
    for name in names:
        for link in glob.glob(str(SYSFS / "*" / "devices" / name)):
            return Path(link).parent.parent.name
    return None


def fsid_of_mount(mountpoint: str) -> str | None:
    """The fsid of the btrfs mounted at `mountpoint`, by BTRFS_IOC_FS_INFO (its fsid at offset 16)."""
    btrfs_ioc_fs_info = 0x8400941F  # _IOR(0x94, 31, struct btrfs_ioctl_fs_info_args), 1024 bytes
    buf = bytearray(1024)
    try:
        fd = os.open(mountpoint, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        fcntl.ioctl(fd, btrfs_ioc_fs_info, buf)
    except OSError:
        return None
    finally:
        os.close(fd)
    return str(uuid.UUID(bytes=bytes(buf[16:32])))


def partition_start(name: str) -> int:
    """Start sector of a partition (tracepoints report the partition's sectors from the disk's
    start); 0 for a whole device."""
    try:
        return int(Path(f"/sys/class/block/{name}/start").read_text())
    except (OSError, ValueError):
        return 0


def commit_stats(fsid: str) -> dict[str, int]:
    """/sys/fs/btrfs/<fsid>/commit_stats as {name: int} (the oracle for commits and their time)."""
    out: dict[str, int] = {}
    for line in (SYSFS / fsid / "commit_stats").read_text().splitlines():
        name, _, value = line.partition(" ")
        out[name] = int(value)
    return out


# --- collection --------------------------------------------------------------------------------


class Probe:
    def __init__(self, obj: bpf.BpfObject) -> None:
        self.obj = obj
        self.fsids = obj.map("traced_fsids", FsidKey, c.c_uint32)
        self.super_devs = obj.map("super_devs", c.c_uint32, c.c_uint64)
        self.counts = obj.map("bt_counts", BtKey, BtVal)
        self.hists = obj.map("bt_hists", HistKey, maps.Hist)
        self.inflight = obj.map("oe_inflight", OeKey, OeVal)
        self.resv = obj.map("space_resv", ResvKey, BtVal)
        self.commit_last = obj.map("commit_last", c.c_uint32, CommitSeen)
        self.interleaved = obj.map("commit_interleaved", c.c_uint32, c.c_uint64)
        self.targets: dict[int, str] = {}  # superblock dev -> fsid
        self._interleaved_at_reset = 0

    def set_targets(self, targets: list[Target]) -> None:
        self.fsids.clear()
        self.super_devs.clear()
        self.targets = {}
        for t in targets:
            if t.fs != "btrfs":
                continue
            fsid = fsid_of_devices(t.block_devs.values()) or (t.mountpoint and fsid_of_mount(t.mountpoint))
            if not fsid:
                continue
            self.targets[t.sb_dev] = fsid
            key = FsidKey()
            key.fsid[:] = list(uuid.UUID(fsid).bytes)
            self.fsids.update(key, c.c_uint32(t.sb_dev))
            for kdev, name in t.block_devs.items():
                self.super_devs.update(c.c_uint32(kdev), c.c_uint64(partition_start(name)))

    def reset(self) -> None:
        for m in (self.counts, self.hists, self.inflight, self.resv, self.commit_last):
            m.clear()
        # A per-CPU array cannot be cleared: report the change since reset.
        self._interleaved_at_reset = self._read_interleaved()

    def _read_interleaved(self):
        return sum(self.interleaved.lookup(c.c_uint32(0)) or [0])

    def snapshot(self) -> dict[str, Any]:
        """Plain data: every aggregate with its superblock (or block) dev and phase index; the
        collector fetches the stacks it names (its "stack" keys)."""
        events = []
        for k, v in self.counts.items():
            events.append(
                {
                    "dev": k.dev,
                    "phase": k.phase,
                    "event": EVENTS[k.event] if k.event < len(EVENTS) else str(k.event),
                    "arg": k.arg,
                    "stack": k.stackid,
                    "count": v.count,
                    "bytes": v.bytes,
                    "total_ns": v.total_ns,
                    "max_ns": v.max_ns,
                }
            )
        hists = []
        for k, v in self.hists.items():
            hists.append({"dev": k.dev, "phase": k.phase, "which": HISTS[k.which], **maps.snapshot_hist(v)})
        resv = [
            {
                "dev": k.dev,
                "phase": k.phase,
                "reserve": bool(k.reserve),
                "type": k.type.decode(errors="replace"),
                "count": v.count,
                "bytes": v.bytes,
            }
            for k, v in self.resv.items()
        ]
        inflight: dict[int, int] = {}
        for k, _ in self.inflight.items():
            inflight[k.dev] = inflight.get(k.dev, 0) + 1
        last = {str(k.value): v.last_ns for k, v in self.commit_last.items()}
        return {
            "fsids": {str(dev): fsid for dev, fsid in self.targets.items()},
            "events": events,
            "hists": hists,
            "space_reservation": resv,
            "oe_inflight": {str(d): n for d, n in inflight.items()},
            "commit_last_ns": last,
            "commit_interleaved": self._read_interleaved() - self._interleaved_at_reset,
        }


# --- summary -----------------------------------------------------------------------------------


@lru_cache(maxsize=4)
def kernel_enum(name: str) -> dict[int, str]:
    """{value: name} of enum `name` as this kernel's BTF has it (vmlinux.h, its dump, lies beside
    the BPF objects compiled against it)."""
    header = bpf.BUILD_DIR / "vmlinux.h"
    try:
        text = header.read_text()
    except OSError:
        return {}
    m = re.search(r"^enum " + re.escape(name) + r" \{\n(.*?)^\};", text, re.M | re.S)
    if not m:
        return {}
    out: dict[int, str] = {}
    for line in m.group(1).splitlines():
        item = re.match(r"\s*(\w+) = (-?\d+),", line)
        if item:
            out[int(item.group(2))] = item.group(1)
    return out


def flush_name(value: int) -> str:
    return kernel_enum("btrfs_reserve_flush_enum").get(value, f"flush {value}").removeprefix("BTRFS_RESERVE_").lower()


def flush_state_name(value: int) -> str:
    return kernel_enum("btrfs_flush_state").get(value, f"state {value}").lower()


def classify(frames: Sequence[str] | None, table: Sequence[tuple[str, Sequence[str]]]) -> str:
    """The first name of `table` ((name, frame patterns) pairs) with a frame in `frames`."""
    if not frames:
        return NO_STACK
    for name, patterns in table:
        rx = re.compile("|".join(p.replace("*", ".*") for p in patterns) + "$")
        if any(rx.match(f) for f in frames):
            return name
    return "other: " + next((f for f in frames if f.startswith("btrfs_")), frames[0])


def _add(d, key, n):
    d[key] = d.get(key, 0) + n


def _per(a, b):
    return a / b if b else None


class Figures:
    """The btrfs figures of one phase (or of the whole run), from that phase's records."""

    def __init__(
        self,
        events: list[dict[str, Any]],
        hists: list[dict[str, Any]],
        resv: list[dict[str, Any]],
        frames: dict[int, list[str]],
        left_out: Sequence[str] = (),
    ) -> None:
        self.events, self.hists, self.resv, self.frames = events, hists, resv, frames
        # btrfs_finish_ordered_extent (6.5) unseen: completions unknown, not 0.
        self.finish_unseen = "on_oe_finish" in left_out
        self.tickets_unseen = "on_reserve_ticket" in left_out  # 5.10: no btrfs_reserve_ticket

    def of(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == event]

    def count(self, event: str) -> int:
        return sum(e["count"] for e in self.of(event))

    def fsyncs(self) -> dict[str, int]:
        recs = self.of("sync_file")
        return {"count": sum(e["count"] for e in recs), "datasync": sum(e["count"] for e in recs if e["arg"])}

    def commits(self) -> dict[str, Any]:
        by: dict[str, int] = {}
        for e in self.of("commit"):
            _add(by, classify(self.frames.get(e["stack"]), COMMITTERS), e["count"])
        timed = self.hist("commit")
        return {
            "count": self.count("commit"),
            "by_committer": dict(sorted(by.items(), key=lambda kv: -kv[1])),
            # The kernel's commit timer (commit_stats), per commit: from the start of the
            # commit's critical section (after waiting for the previous commit) to its
            # superblock being written.
            "time": timed,
        }

    def super_writes(self) -> dict[str, Any]:
        """Superblock writes by what wrote them and by copy; log syncs = primary copies written by
        btrfs_sync_log on the busiest device (every device gets one per write_all_supers)."""
        by_writer: dict[str, int]
        by_mirror: dict[str, int]
        per_dev_log: dict[int, int]
        by_writer, by_mirror, per_dev_log = {}, {}, {}
        for e in self.of("super_write"):
            writer = classify(self.frames.get(e["stack"]), SUPER_WRITERS)
            _add(by_writer, writer, e["count"])
            _add(by_mirror, "primary" if e["arg"] == 0 else f"mirror {e['arg']}", e["count"])
            if writer == "tree-log sync" and e["arg"] == 0:
                _add(per_dev_log, e["dev"], e["count"])
        return {
            "count": self.count("super_write"),
            "by_writer": by_writer,
            "by_copy": by_mirror,
            "tree_log_syncs": max(per_dev_log.values(), default=0),
        }

    def ordered_extents(self) -> dict[str, Any]:
        added = self.of("oe_add")
        n, nbytes = sum(e["count"] for e in added), sum(e["bytes"] for e in added)
        by_type: dict[str, int] = {}
        for e in added:
            _add(by_type, ORDERED_TYPES[e["arg"]] if e["arg"] < len(ORDERED_TYPES) else str(e["arg"]), e["count"])
        finished = self.of("oe_finish")
        return {
            "added": n,
            "bytes": nbytes,
            "avg_bytes": _per(nbytes, n),
            "by_type": by_type,
            "started_and_waited": self.count("oe_start"),
            # bio completions over ordered extents' ranges: a large extent completes in several.
            "io_completions": None if self.finish_unseen else sum(e["count"] for e in finished),
            "io_failed": None if self.finish_unseen else sum(e["count"] for e in finished if not e["arg"]),
            "removed": self.count("oe_remove"),
            # added -> removed: data I/O plus the completion work (file extent item, csums).
            "life": self.hist("oe_life"),
        }

    def reservations(self) -> dict[str, Any]:
        tickets = self.of("ticket")
        by_kind: dict[str, dict[str, int]] = {}
        for e in tickets:
            kind = f"{SPACE_KINDS.get((e['arg'] >> 8) & 0xFF, 'mixed')} {flush_name(e['arg'] & 0xFF)}"
            k = by_kind.setdefault(kind, {"count": 0, "bytes": 0, "wait_ns": 0, "max_ns": 0, "failed": 0})
            k["count"] += e["count"]
            k["bytes"] += e["bytes"]
            k["wait_ns"] += e["total_ns"]
            k["max_ns"] = max(k["max_ns"], e["max_ns"])
            k["failed"] += e["count"] if e["arg"] >> 16 else 0
        flushes: dict[str, dict[str, int]] = {}
        for e in self.of("flush_space"):
            name = flush_state_name(e["arg"] & 0xFF) + (" (preemptive)" if e["arg"] & 0x100 else "")
            f = flushes.setdefault(name, {"count": 0, "bytes": 0, "failed": 0})
            f["count"] += e["count"]
            f["bytes"] += e["bytes"]
            f["failed"] += e["count"] if e["arg"] & 0x200 else 0
        triggers: dict[str, int] = {}
        for e in self.of("trigger_flush"):
            _add(triggers, TRIGGER_REASONS[min(e["arg"] >> 8, 2)], e["count"])
        resv: dict[str, dict[str, dict[str, int]]] = {}
        for r in self.resv:
            t = resv.setdefault(r["type"], {})
            side = t.setdefault("reserve" if r["reserve"] else "release", {"count": 0, "bytes": 0})
            side["count"] += r["count"]
            side["bytes"] += r["bytes"]
        ticket_figures = {
            "tickets": sum(e["count"] for e in tickets),
            "ticket_bytes": sum(e["bytes"] for e in tickets),
            "ticket_wait_ns": sum(e["total_ns"] for e in tickets),
            "ticket_wait": self.hist("ticket_wait"),
            "tickets_by_kind": by_kind,
        }
        if self.tickets_unseen:  # unknown, never a wrong 0
            ticket_figures = dict.fromkeys(ticket_figures)
        return {
            **ticket_figures,
            "flush_space": flushes,
            "flushes_triggered": triggers,
            "space_reservation": resv,
        }

    def hist(self, which: str) -> dict[str, Any] | None:
        recs = [h for h in self.hists if h["which"] == which]
        if not recs:
            return None
        merged = hist.merge(recs)
        merged.pop("log2_ns", None)
        return merged


def fsync_breakdown(attribution: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The fsync-family breakdowns of one phase's attribution, merged by hand (count, wall time,
    causes, wakers)."""
    out: dict[str, Any] = {"count": 0, "wall_ns": 0, "causes": {}, "wakers": {}}
    for op in FSYNC_OPS:
        b = attribution.get(op)
        if not b:
            continue
        out["count"] += b["count"]
        out["wall_ns"] += b["wall_ns"]
        for cause, ns in b["causes"].items():
            _add(out["causes"], cause, ns)
        for cause, by in b.get("wakers", {}).items():
            for who, ns in by.items():
                _add(out["wakers"].setdefault(cause, {}), who, ns)
    return out


def many_to_one(fig: dict[str, Any], fsync_attr: dict[str, Any], elapsed_s: float | None) -> dict[str, Any]:
    """Both views of the work behind fsyncs: per fsync (the waiter's) and per event (how many
    fsyncs one log sync or commit served). Waits are the fsync syscalls' own causes, so they sum
    to no more than the fsyncs' wall time."""
    fsyncs = fig["fsyncs"]["count"]
    commits, log_syncs = fig["commits"]["count"], fig["superblock_writes"]["tree_log_syncs"]
    in_fsync = fig["commits"]["by_committer"].get("fsync", 0)
    n_sys = fsync_attr["count"]
    causes = fsync_attr["causes"]
    wait_us = lambda cause: causes.get(cause, 0) / n_sys / 1e3 if n_sys else None  # noqa: E731
    return {
        "commits_per_fsync": _per(commits, fsyncs),
        "commits_per_s": _per(commits, elapsed_s),
        "full_commits_in_fsync": in_fsync,
        "tree_log_syncs": log_syncs,
        "tree_log_syncs_per_fsync": _per(log_syncs, fsyncs),
        "fsyncs_per_tree_log_sync": _per(fsyncs, log_syncs),
        "fsyncs_per_commit": _per(fsyncs, commits),
        # Fsyncs that neither synced the log nor committed themselves: batched into another
        # fsync's log sync, waited for another thread's commit, or had nothing to log.
        "fsyncs_served_by_others": max(fsyncs - log_syncs - in_fsync, 0) if fsyncs else 0,
        "fsync_syscalls": n_sys,
        "tree_log_sync_us_per_fsync": wait_us(LOG_SYNC_CAUSE),
        "commit_wait_us_per_fsync": wait_us(COMMIT_CAUSE),
        "cache_flush_us_per_fsync": wait_us(FLUSH_CAUSE),
        "reservation_wait_us_per_fsync": wait_us(RESERVATION_CAUSE),
        "wakers": {
            cause: fsync_attr["wakers"][cause]
            for cause in (LOG_SYNC_CAUSE, COMMIT_CAUSE, FLUSH_CAUSE)
            if cause in fsync_attr["wakers"]
        },
    }


def figures(
    events: list[dict[str, Any]],
    hists: list[dict[str, Any]],
    resv: list[dict[str, Any]],
    frames: dict[int, list[str]],
    fsync_attr: dict[str, Any],
    elapsed_s: float | None,
    left_out: Sequence[str] = (),
) -> dict[str, Any]:
    f = Figures(events, hists, resv, frames, left_out)
    out: dict[str, Any] = {
        "fsyncs": f.fsyncs(),
        "commits": f.commits(),
        "superblock_writes": f.super_writes(),
        "ordered_extents": f.ordered_extents(),
        "reservations": f.reservations(),
    }
    out["many_to_one"] = many_to_one(out, fsync_attr, elapsed_s)
    # Without its program a figure is unknown (None), never a wrong 0: on 5.10 only the superblock
    # writes (a vmlinux tracepoint) and the fsyncs' own waits remain.
    unknown = [part for prog, part in NEEDS.items() if prog in left_out]
    for part in unknown:
        out[part] = None
    if "fsyncs" in unknown or "commits" in unknown:
        out["many_to_one"] = {k: out["many_to_one"][k] for k in _MANY_TO_ONE_OF_WAITS}
    return out


NEEDS = {
    "on_sync_file": "fsyncs",
    "on_transaction_commit": "commits",
    "on_oe_add": "ordered_extents",
    "on_space_reservation": "reservations",
}
# many_to_one's figures that need no btrfs program: the log syncs (superblock writes) and the
# fsync syscalls' own waits.
_MANY_TO_ONE_OF_WAITS = (
    "tree_log_syncs",
    "fsync_syscalls",
    "tree_log_sync_us_per_fsync",
    "commit_wait_us_per_fsync",
    "cache_flush_us_per_fsync",
    "reservation_wait_us_per_fsync",
    "wakers",
)


def summarize(raw: dict[str, Any], ctx: Context) -> dict[str, Any]:
    if not raw or str(ctx.sb_dev) not in raw.get("fsids", {}):
        return {}
    mine = lambda e: e["dev"] == ctx.sb_dev or (e["event"] == "super_write" and e["dev"] in ctx.block_devs)  # noqa: E731
    events = [e for e in raw["events"] if mine(e)]
    hists = [h for h in raw["hists"] if h["dev"] == ctx.sb_dev]
    resv = [r for r in raw["space_reservation"] if r["dev"] == ctx.sb_dev]
    frames = ctx.stacks  # the events' stack ids, symbolised by assemble
    phases: dict[str, dict[str, Any]] = {}
    for index in sorted({r["phase"] for r in events + hists + resv}):
        name = ctx.phase_name(index)
        phase = ctx.phases.get(name, {})
        pick = lambda recs: [r for r in recs if r["phase"] == index]  # noqa: E731
        phases[name] = figures(
            pick(events),
            pick(hists),
            pick(resv),
            frames,
            fsync_breakdown(phase.get("attribution", {})),
            phase.get("elapsed_s"),
            raw.get("left_out", ()),
        )
    all_attr = [fsync_breakdown(p.get("attribution", {})) for p in ctx.phases.values()]
    total_attr: dict[str, Any] = {
        "count": sum(a["count"] for a in all_attr),
        "wall_ns": sum(a["wall_ns"] for a in all_attr),
        "causes": {},
        "wakers": {},
    }
    for a in all_attr:
        for cause, ns in a["causes"].items():
            _add(total_attr["causes"], cause, ns)
        for cause, by in a["wakers"].items():
            for who, ns in by.items():
                _add(total_attr["wakers"].setdefault(cause, {}), who, ns)
    return {
        "fsid": raw["fsids"][str(ctx.sb_dev)],
        "all": figures(events, hists, resv, frames, total_attr, ctx.elapsed_s, raw.get("left_out", ())),
        "phases": phases,
        "last_commit_ns": raw.get("commit_last_ns", {}).get(str(ctx.sb_dev)),
        "commits_interleaved": raw.get("commit_interleaved", 0),
        "ordered_extents_in_flight": raw.get("oe_inflight", {}).get(str(ctx.sb_dev), 0),
        # No tracepoint pair brackets a commit or a log sync in one thread: no worker windows.
        "worker_windows": None,
    }


# --- terminal view -----------------------------------------------------------------------------


def _kib(n):
    return f"{n / 1024:.1f} KiB"


_us = partial(units.fmt_time, ms_from=units.MS, us_digits=1, ms_digits=2)


def _fmt(x, spec=".3f"):
    return "n/a" if x is None else format(x, spec)


def _wait_lines(m: dict[str, Any]) -> list[str]:
    """The fsyncs' own waits on btrfs's work, per fsync, and who ended them."""
    if not m["fsync_syscalls"]:
        return []
    lines = [
        f"     per fsync: tree-log sync {_fmt(m['tree_log_sync_us_per_fsync'], '.1f')} us, "
        f"commit wait {_fmt(m['commit_wait_us_per_fsync'], '.1f')} us, "
        f"cache flush {_fmt(m['cache_flush_us_per_fsync'], '.1f')} us, "
        f"reservation wait {_fmt(m['reservation_wait_us_per_fsync'], '.1f')} us"
    ]
    for cause, by in m["wakers"].items():
        total = sum(by.values()) or 1
        lines.append(
            f"     {cause} ended by: " + ", ".join(f"{w} {100 * ns / total:.0f}%" for w, ns in list(by.items())[:3])
        )
    return lines


def report_lines(section: dict[str, Any], fs: dict[str, Any]) -> list[str]:
    a = section.get("all")
    if not a:
        return []
    if a["fsyncs"] is None or a["commits"] is None:  # a kernel without btrfs's programs (5.10)
        m = a["many_to_one"]
        unknown = ", ".join(part.replace("_", " ") for part in NEEDS.values() if a.get(part) is None)
        head = f"   behind btrfs: {m['tree_log_syncs']} tree-log syncs (superblock writes); {unknown} unknown"
        return [head + " on this kernel", *_wait_lines(m)]
    fsyncs, commits, m = a["fsyncs"]["count"], a["commits"], a["many_to_one"]
    who = ", ".join(f"{n} by {name}" for name, n in commits["by_committer"].items())
    lines = [
        f"   behind btrfs: {fsyncs} fsyncs -> {m['tree_log_syncs']} tree-log syncs "
        f"({_fmt(m['fsyncs_per_tree_log_sync'], '.2f')} fsyncs per log sync), "
        f"{commits['count']} full transaction commits ({_fmt(m['commits_per_fsync'])} per fsync"
        + (f"; {who}" if who else "")
        + ")"
    ]
    if m["fsyncs_served_by_others"]:
        lines.append(
            f"     {m['fsyncs_served_by_others']} fsyncs synced neither the log nor a commit themselves "
            "(served by another fsync's log sync or commit)"
        )
    t = commits["time"]
    if t and t["count"]:
        lines.append(
            f"     transaction commits: {_fmt(m['commits_per_s'], '.2f')}/s, avg {_us(t['avg_ns'])}, "
            f"max {_us(t['max_ns'])} (the kernel's commit timer, per commit)"
        )
    lines += _wait_lines(m)
    oe, r = a["ordered_extents"], a["reservations"]
    if oe is None or r is None:  # a kernel without those programs (5.10)
        unknown = ", ".join(part.replace("_", " ") for part in ("ordered_extents", "reservations") if a[part] is None)
        return lines + [f"     {unknown} unknown on this kernel"]
    life = oe["life"]
    lines.append(
        f"     {oe['added']} ordered extents ({_kib(oe['avg_bytes'] or 0)} avg"
        + (f", added -> removed avg {_us(life['avg_ns'])}" if life else "")
        + "); "
        + ("reservation tickets unknown on this kernel" if r["tickets"] is None else f"{r['tickets']} reservation")
        + ("" if r["tickets"] is None else " tickets")
        + (
            f" ({_us(r['ticket_wait_ns'])} waited, max {_us(r['ticket_wait']['max_ns'])})"
            if r["tickets"] and r["ticket_wait"]
            else ""
        )
    )
    return lines
