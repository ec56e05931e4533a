"""ext4 and its jbd2 journal behind the wait (bpf/ext4.bpf.c): every jbd2 commit timed per commit
phase with the kernel's run statistics, the commit thread's own time split by cause, fast commits,
checkpoints, and delayed allocation charged to the thread that forced it. docs/behind-ext4.md
says what each figure means and how it is checked.

Over 500 lines, as each behind module: the probe, summaries, report lines and evidence change
together with bpf/ext4.bpf.c.
"""

from __future__ import annotations

import ctypes as c
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from .. import filesystems, units
from ..causes import check as known_cause
from .scope import in_scope, wide
from ..machine.conditions import kernel_hz
from ..trace import hist, maps, syscalls

if TYPE_CHECKING:
    from . import Context, Target
    from ..trace.bpf import BpfObject

NAME = "ext4"
OBJECT = "ext4"
# What each program feeds: the figures a kernel that refuses the program (or lacks its tracepoint)
# goes without (said in result.json "unavailable" and the report).
FIGURES = {
    "on_mark_inode_dirty": "calls by absolute path placed on ext4",
    "on_jbd2_start_commit": "jbd2 commits (count, phases, the commit thread's own time)",
    "on_jbd2_commit_locking": "jbd2 commit phase times (locking)",
    "on_jbd2_commit_flushing": "jbd2 commit phase times (flushing data)",
    "on_jbd2_commit_logging": "jbd2 commit phase times (logging)",
    "on_bio_queue": "jbd2 journal writes by commit",
    "on_jbd2_write_superblock": "jbd2 journal superblock writes",
    "on_jbd2_run_stats": "jbd2 blocks logged and handles per commit",
    "on_jbd2_end_commit": "jbd2 commits (count, commit time)",
    "on_jbd2_checkpoint": "jbd2 checkpoints",
    "on_jbd2_checkpoint_stats": "jbd2 checkpoint figures",
    "on_fc_commit_start": "ext4 fast commits",
    "on_fc_commit_stop": "ext4 fast commit outcomes",
    "on_da_write_begin": "ext4 delayed-allocation writes",
    "on_write_begin": "ext4 writes without delayed allocation",
    "on_da_reserve_space": "ext4 delayed-allocation reservations",
    "on_da_release_space": "ext4 delayed-allocation releases",
    "on_da_update_reserve_space": "ext4 delayed-allocation allocations at writeback",
    "on_da_write_pages_extent": "ext4 delayed-allocation extents written",
    "on_request_blocks": "ext4 block allocation requests",
    "on_allocate_blocks": "ext4 blocks allocated",
    "on_mballoc_alloc": "ext4 multiblock allocator figures",
    "on_remove_space": "ext4 extent removal time (block freeing inside unlink and truncate)",
    "on_remove_space_done": "ext4 extent removal time (block freeing inside unlink and truncate)",
    "on_evict_inode": "ext4 page cache freeing time of unlinked inodes",
    "on_truncate_enter": "ext4 page cache freeing time of unlinked inodes",
    "on_free_inode": "ext4 page cache freeing time of unlinked inodes",
    "on_free_blocks": "ext4 blocks freed, by who freed them",
}

# enum commit_phase of bpf/ext4.bpf.c, in order.
COMMIT_PHASES = ("start", "locking", "flushing", "logging", "end")
N_CPH = len(COMMIT_PHASES)
# The kernel's EXT4_FC_STATUS_* (fs/ext4/fast_commit.h, the same values in this kernel's BTF).
FC_STATUS = ("ok", "ineligible", "skipped", "failed")
# enum da_event of bpf/ext4.bpf.c, in order.
DA_EVENTS = (
    "da_write_begin",
    "nodelalloc_write_begin",
    "reserve",
    "release",
    "claim",
    "map_extent",
    "request",
    "alloc_delalloc",
    "alloc_other",
    "mballoc",
    "free",
)
# enum span_event of bpf/ext4.bpf.c: (what, on CPU throughout or switched out), and the CPU cause
# a span on CPU throughout is.
SPAN_EVENTS = (
    ("extent_removal", "on_cpu"),
    ("extent_removal", "switched"),
    ("page_cache_freeing", "on_cpu"),
    ("page_cache_freeing", "switched"),
)
SPAN_KINDS = ("on_cpu", "switched")
SPAN_CAUSES = {"extent_removal": known_cause("block freeing"), "page_cache_freeing": known_cause("page cache freeing")}
WHO_SYSCALL, WHO_USER, WHO_KTHREAD = range(3)
# The jbd2 commit thread's and a fast commit's worker kinds (profiler/trace/maps.py WORKER_KINDS).
JBD2_WORKER = maps.WORKER_KINDS[1]
FC_WORKER = maps.WORKER_KINDS[2]
FSYNC_OPS = ("fsync", "fdatasync")
EXT_FILESYSTEMS = filesystems.served_by(NAME)  # ext2, ext3, ext4: the ext4 driver and jbd2
COMMIT_WAIT_CAUSE = known_cause("journal commit wait")


class Jbd2Key(c.Structure):
    _fields_ = [("dev", c.c_uint32), ("phase", c.c_uint16), ("pad", c.c_uint16)]


class Jbd2Val(c.Structure):
    _fields_ = [
        ("commits", c.c_uint64),
        ("timed", c.c_uint64),
        ("sync_commits", c.c_uint64),
        ("phase_ns", c.c_uint64 * N_CPH),
        ("phase_max_ns", c.c_uint64 * N_CPH),
        ("kernel_ns", c.c_uint64),
        ("commit_blocks", c.c_uint64),
        ("commit_block_ns", c.c_uint64),
        ("commit_block_offcpu_ns", c.c_uint64),
        ("rs_wait", c.c_uint64),
        ("rs_request_delay", c.c_uint64),
        ("rs_running", c.c_uint64),
        ("rs_locked", c.c_uint64),
        ("rs_flushing", c.c_uint64),
        ("rs_logging", c.c_uint64),
        ("handles", c.c_uint64),
        ("blocks", c.c_uint64),
        ("blocks_logged", c.c_uint64),
        ("intervals", c.c_uint64),
        ("interval_ns", c.c_uint64),
        ("interval_max_ns", c.c_uint64),
        ("checkpoints", c.c_uint64),
        ("checkpoint_errors", c.c_uint64),
        ("chp_transactions", c.c_uint64),
        ("chp_time_j", c.c_uint64),
        ("chp_written", c.c_uint64),
        ("chp_dropped", c.c_uint64),
        ("chp_forced", c.c_uint64),
        ("commit", maps.Hist),
    ]


class JournalState(c.Structure):
    _fields_ = [
        ("last_start_ns", c.c_uint64),
        ("ewma_ns", c.c_uint64),
        ("ewma_commits", c.c_uint64),
        ("fc_ewma_ns", c.c_uint64),
        ("fc_ewma_commits", c.c_uint64),
    ]


class CommitKey(c.Structure):
    _fields_ = [("dev", c.c_uint32), ("tid", c.c_uint32)]


class FcKey(c.Structure):
    _fields_ = [("dev", c.c_uint32), ("phase", c.c_uint16), ("status", c.c_uint16)]


class FcVal(c.Structure):
    _fields_ = [("count", c.c_uint64), ("total_ns", c.c_uint64), ("max_ns", c.c_uint64), ("blocks", c.c_uint64)]


class DaKey(c.Structure):
    _fields_ = [
        ("dev", c.c_uint32),
        ("phase", c.c_uint16),
        ("event", c.c_uint16),
        ("who", c.c_uint16),
        ("nr", c.c_uint16),
        ("pad", c.c_uint32),
        ("comm", c.c_char * maps.COMM_LEN),
    ]


class DaVal(c.Structure):
    _fields_ = [("count", c.c_uint64), ("blocks", c.c_uint64)]


class SpanVal(c.Structure):
    _fields_ = [("count", c.c_uint64), ("ns", c.c_uint64)]


RUN_STATS_J = ("rs_wait", "rs_request_delay", "rs_running", "rs_locked", "rs_flushing", "rs_logging")
CHECKPOINT_FIELDS = (
    "checkpoints",
    "checkpoint_errors",
    "chp_transactions",
    "chp_time_j",
    "chp_written",
    "chp_dropped",
    "chp_forced",
)
COUNT_FIELDS = (
    "commits",
    "timed",
    "sync_commits",
    "kernel_ns",
    "commit_blocks",
    "commit_block_ns",
    "commit_block_offcpu_ns",
    *RUN_STATS_J,
    "handles",
    "blocks",
    "blocks_logged",
    "intervals",
    "interval_ns",
    *CHECKPOINT_FIELDS,
)


class Probe:
    def __init__(self, obj: BpfObject) -> None:
        self.obj = obj
        self.devs = obj.map("ext4_devs", c.c_uint32, c.c_uint8)
        self.commits = obj.map("jbd2_commits", Jbd2Key, Jbd2Val)
        self.journals = obj.map("journals", c.c_uint32, JournalState)
        self.fc = obj.map("fc_commits", FcKey, FcVal)
        self.da = obj.map("da_events", DaKey, DaVal)
        self.spans = obj.map("freeing_spans", DaKey, SpanVal)
        # Work in progress, by (dev, transaction) or thread: only forgotten at reset.
        self.inflight = [
            obj.map("commits_inflight", CommitKey, c.c_uint8 * 48),
            obj.map("committing", c.c_uint32, CommitKey),
            obj.map("commit_block_wait", c.c_uint32, c.c_uint8 * 24),
            obj.map("fc_inflight", c.c_uint32, c.c_uint8 * 16),
            obj.map("removing", c.c_uint32, c.c_uint8 * 24),
            obj.map("evicting", c.c_uint32, c.c_uint8 * 24),
        ]
        self.hz = kernel_hz()  # jbd2's run statistics are in jiffies

    def set_targets(self, targets: list[Target]) -> None:
        """Watch ext4's superblocks and the block devices they (and their journals) sit on."""
        self.devs.clear()
        for t in targets:
            if t.fs not in EXT_FILESYSTEMS:
                continue
            for kdev in {t.sb_dev, *t.block_devs}:
                self.devs.update(c.c_uint32(kdev), c.c_uint8(1))

    def reset(self) -> None:
        # A commit in progress at reset is still counted when it ends (as info counts it), but
        # not timed: its start belongs to what ran before.
        for m in (self.commits, self.journals, self.fc, self.da, self.spans, *self.inflight):
            m.clear()

    def snapshot(self) -> dict[str, Any]:
        """{"hz", "commits": [...], "journals": [...], "fast_commits": [...], "delalloc": [...]}:
        per (device, phase) rows, as plain data."""
        return {
            "hz": self.hz,
            "commits": [commit_row(k, v) for k, v in self.commits.items()],
            "journals": [
                {
                    "dev": k.value,
                    "ewma_ns": v.ewma_ns,
                    "ewma_commits": v.ewma_commits,
                    "fc_ewma_ns": v.fc_ewma_ns,
                    "fc_ewma_commits": v.fc_ewma_commits,
                }
                for k, v in self.journals.items()
            ],
            "fast_commits": [
                {
                    "dev": k.dev,
                    "phase": k.phase,
                    "status": name_at(FC_STATUS, k.status),
                    "count": v.count,
                    "total_ns": v.total_ns,
                    "max_ns": v.max_ns,
                    "blocks": v.blocks,
                }
                for k, v in self.fc.items()
            ],
            "delalloc": [da_row(k, v) for k, v in self.da.items()],
            "freeing_spans": [
                {
                    **da_row(k, DaVal(count=v.count)),
                    "what": SPAN_EVENTS[k.event][0],
                    "kind": SPAN_EVENTS[k.event][1],
                    "ns": v.ns,
                }
                for k, v in self.spans.items()
                if k.event < len(SPAN_EVENTS)
            ],
        }


def name_at(names: Sequence[str], i: int) -> str:
    return names[i] if i < len(names) else str(i)


def commit_row(k: Jbd2Key, v: Jbd2Val) -> dict[str, Any]:
    row = {
        "dev": k.dev,
        "phase": k.phase,
        **{f: getattr(v, f) for f in COUNT_FIELDS},
        "interval_max_ns": v.interval_max_ns,
        "phase_ns": dict(zip(COMMIT_PHASES, v.phase_ns)),
        "phase_max_ns": dict(zip(COMMIT_PHASES, v.phase_max_ns)),
        "commit_hist": maps.snapshot_hist(v.commit),
    }
    return row


def da_row(k: DaKey, v: DaVal) -> dict[str, Any]:
    return {
        "dev": k.dev,
        "phase": k.phase,
        "event": name_at(DA_EVENTS, k.event),
        "who": k.who,
        "syscall": syscalls.name_of(k.nr) if k.who == WHO_SYSCALL else None,
        "comm": k.comm.decode(errors="replace"),
        "count": v.count,
        "blocks": v.blocks,
    }


# ---- summarize: one snapshot -> the section in result.json ----

# [[worker]] causes of profiler/analysis/rules/ext4.toml that summarize() refines or relies on.
JOURNAL_BLOCK_WAIT = "journal block writes"
COMMIT_BLOCK = "commit block (cache flush + FUA)"
LOG_WRITES = "log block writes"
CPU = "CPU"


# ext4's superblock at byte 1024; s_feature_compat at its 0x5C; EXT4_FEATURE_COMPAT_FAST_COMMIT.
_SB_COMPAT_AT, _COMPAT_FAST_COMMIT = 1024 + 0x5C, 0x400


def has_fast_commit(device: str) -> bool:
    """Whether the ext4 on block device `device` (a name in /dev) was made with fast commits:
    5.10 fires its fast-commit tracepoints at every fsync of any ext4, the others only there."""
    try:
        with open(f"/dev/{device}", "rb") as f:
            f.seek(_SB_COMPAT_AT)
            compat = int.from_bytes(f.read(4), "little")
    except OSError:
        return True  # cannot tell: keep what the tracepoints said
    return bool(compat & _COMPAT_FAST_COMMIT)


def summarize(raw: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """{"journal": {"all": FIGURES, "phases": {name: FIGURES}}, "fast_commits": {...},
    "delalloc": {...}}; docs/behind-ext4.md describes every figure."""
    if not raw:
        return {}
    mine = {ctx.sb_dev, *ctx.block_devs}
    commits = [r for r in raw.get("commits", []) if r["dev"] in mine]
    fcs = [r for r in raw.get("fast_commits", []) if r["dev"] in mine]
    if fcs and not any(has_fast_commit(name) for name in ctx.block_devs.values()):
        fcs = []  # 5.10 fires ext4_fc_commit_* ("ineligible") on filesystems without fast commits
    das = [r for r in raw.get("delalloc", []) if r["dev"] in mine]
    spans = [r for r in raw.get("freeing_spans", []) if r["dev"] in mine]
    if not (commits or fcs or das or spans):
        return {}
    journals = [r for r in raw.get("journals", []) if r["dev"] in mine]
    devs = sorted({r["dev"] for r in commits})
    section: dict[str, Any] = {
        "device": ", ".join(ctx.block_devs.get(d, f"{d >> 20}:{d & 0xFFFFF}") for d in devs),
        "hz": raw.get("hz"),
    }

    def fast_ok(scope):
        return [r for r in fcs if r["status"] == "ok" and (scope is None or ctx.phase_name(r["phase"]) == scope)]

    section["journal"] = by_scope(
        ctx, commits, lambda rows, scope: journal_figures(rows, scope, ctx, raw.get("hz"), fast_ok(scope))
    )
    if journals:
        # The kernel's running average, weighted to the newest commits: over the whole trace only.
        busiest = max(journals, key=lambda j: j["ewma_commits"])
        section["journal"]["all"]["ewma_commit_ns"] = busiest["ewma_ns"] if busiest["ewma_commits"] else None
    if fcs:
        section["fast_commits"] = by_scope(ctx, fcs, lambda rows, scope: fast_commit_figures(rows, scope, ctx))
        fc_journal = max(journals, key=lambda j: j["fc_ewma_commits"], default=None)
        section["fast_commits"]["all"]["ewma_commit_ns"] = (
            fc_journal["fc_ewma_ns"] if fc_journal and fc_journal["fc_ewma_commits"] else None
        )
    if das:
        section["delalloc"] = by_scope(ctx, das, lambda rows, scope: delalloc_figures(rows))
    if spans or any(r["event"] == "free" for r in das):
        section["block_freeing"] = by_scope(ctx, spans + [r for r in das if r["event"] == "free"], freeing_figures)
    return section


def freeing_figures(rows: list[dict[str, Any]], scope: str | None = None) -> dict[str, Any]:
    """Blocks freed by who freed them; extent removals and page cache freeing spans by who did
    them: on CPU throughout (count, ns) or switched out at least once (count, wall ns)."""
    out: dict[str, Any] = {"blocks_freed": {}, "extent_removal": {}, "page_cache_freeing": {}}
    for r in rows:
        who = who_label(r)
        if r["event"] == "free":
            out["blocks_freed"][who] = out["blocks_freed"].get(who, 0) + r["blocks"]
        elif "what" in r:
            e = out[r["what"]].setdefault(who, {k: {"count": 0, "ns": 0} for k in SPAN_KINDS})
            e[r["kind"]]["count"] += r["count"]
            e[r["kind"]]["ns"] += r["ns"]
    return out


def cpu_spans(raw: dict[str, Any], devs: set[int]) -> dict[tuple[int, str], dict[str, int]]:
    """{(phase index, syscall): {cause: ns}}: on-CPU time of syscalls measured exactly by
    bracketing tracepoints (extent removals, page cache freeing), for the attribution to take
    out of the sampled split. A cause whose spans in those calls ever switched out is left to
    the samples: its on-CPU time is more than the spans that stayed on CPU."""
    on: dict[tuple[int, str], dict[str, int]]
    switched: set[tuple[tuple[int, str], str]]
    on, switched = {}, set()
    for r in raw.get("freeing_spans", []):
        if r["dev"] in devs and r["who"] == WHO_SYSCALL:
            key, cause = (r["phase"], r["syscall"]), SPAN_CAUSES[r["what"]]
            if r["kind"] == "on_cpu":
                d = on.setdefault(key, {})
                d[cause] = d.get(cause, 0) + r["ns"]
            elif r["count"]:
                switched.add((key, cause))
    return {key: {c: ns for c, ns in d.items() if (key, c) not in switched} for key, d in on.items()}


def by_scope(
    ctx: Context, rows: list[dict[str, Any]], figures: Callable[[list[dict[str, Any]], str | None], dict[str, Any]]
) -> dict[str, Any]:
    """{"all": figures(every row), "phases": {phase name: figures(its rows)}}"""
    out: dict[str, Any] = {"all": figures(rows, None), "phases": {}}
    for index in sorted({r["phase"] for r in rows}):
        name = ctx.phase_name(index)
        out["phases"][name] = figures([r for r in rows if r["phase"] == index], name)
    return out


def ratio(a: float, b: float | None) -> float | None:
    return a / b if b else None


def scope_elapsed(ctx: Context, scope: str | None) -> float:
    return ctx.elapsed_s if scope is None else ctx.phases.get(scope, {}).get("elapsed_s", 0.0)


def scope_syscalls(ctx: Context, scope: str | None) -> dict[str, dict[str, Any]]:
    return ctx.syscalls if scope is None else ctx.phases.get(scope, {}).get("syscalls", {})


def scope_attribution(ctx: Context, scope: str | None) -> dict[str, list[dict[str, Any]]]:
    """{op: breakdown} of the scope (all phases summed for the whole trace)."""
    phases = ctx.phases.values() if scope is None else [ctx.phases.get(scope, {})]
    out: dict[str, list[dict[str, Any]]] = {}
    for p in phases:
        for op, b in p.get("attribution", {}).items():
            out.setdefault(op, []).append(b)
    return out


def worker_breakdown(ctx: Context, kind: str, scope: str | None) -> dict[str, Any] | None:
    w = ctx.workers.get(kind, {})
    return w.get("all") if scope is None else w.get("phases", {}).get(scope)


def sum_rows(rows: Iterable[dict[str, Any]], field: str) -> int:
    return sum(r[field] for r in rows)


def merged_commit_hist(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return (
        hist.merge([r["commit_hist"] for r in rows])
        if rows
        else hist.summarize({"count": 0, "total_ns": 0, "max_ns": 0, "fine": {}})
    )


def journal_figures(
    rows: list[dict[str, Any]], scope: str | None, ctx: Context, hz: int | None, fast_ok: Sequence[dict[str, Any]] = ()
) -> dict[str, Any]:
    commits, timed = sum_rows(rows, "commits"), sum_rows(rows, "timed")
    commit = merged_commit_hist(rows)
    elapsed = scope_elapsed(ctx, scope)
    out: dict[str, Any] = {
        "commits": commits,  # what /proc/fs/jbd2/<dev>-8/info counts
        "timed_commits": timed,  # seen whole, start to end: the times below
        "sync_commits": sum_rows(rows, "sync_commits"),
        "commits_per_s": ratio(commits, elapsed),
        "commit_ns": commit,
        "phases": commit_phases(rows, timed),
        "kernel_commit_ns": {
            "total_ns": sum_rows(rows, "kernel_ns"),
            "avg_ns": ratio(sum_rows(rows, "kernel_ns"), timed),
        },
        "totals": {f: sum_rows(rows, f) for f in ("handles", "blocks", "blocks_logged")},
        "per_commit": {f: ratio(sum_rows(rows, f), commits) for f in ("handles", "blocks", "blocks_logged")},
        "run_stats": run_stats(rows, commits, hz),
        "interval": {
            "count": sum_rows(rows, "intervals"),
            "avg_ns": ratio(sum_rows(rows, "interval_ns"), sum_rows(rows, "intervals")),
            "max_ns": max((r["interval_max_ns"] for r in rows), default=0),
        },
        "checkpoint": {f: sum_rows(rows, f) for f in CHECKPOINT_FIELDS},
        "commit_block": {
            "count": sum_rows(rows, "commit_blocks"),
            "total_ns": sum_rows(rows, "commit_block_ns"),
            "offcpu_ns": sum_rows(rows, "commit_block_offcpu_ns"),
            "avg_ns": ratio(sum_rows(rows, "commit_block_ns"), sum_rows(rows, "commit_blocks")),
        },
        "thread": commit_thread(ctx, scope, commit["total_ns"], timed, sum_rows(rows, "commit_block_offcpu_ns")),
    }
    out.update(
        many_to_one(ctx, scope, commits, commit["total_ns"], sum_rows(fast_ok, "count"), sum_rows(fast_ok, "total_ns"))
    )
    return out


def commit_phases(rows: list[dict[str, Any]], timed: int) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name in COMMIT_PHASES:
        total = sum(r["phase_ns"][name] for r in rows)
        out[name] = {
            "total_ns": total,
            "avg_ns": ratio(total, timed),
            "max_ns": max((r["phase_max_ns"][name] for r in rows), default=0),
        }
    return out


def run_stats(rows: list[dict[str, Any]], commits: int, hz: int | None) -> dict[str, dict[str, Any]]:
    """jbd2_run_stats sums in jiffies and, as info prints them, the average per commit in ms."""
    names = {
        "rs_wait": "wait",
        "rs_request_delay": "request_delay",
        "rs_running": "running",
        "rs_locked": "locked",
        "rs_flushing": "flushing",
        "rs_logging": "logging",
    }
    jiffies = {names[f]: sum_rows(rows, f) for f in RUN_STATS_J}
    avg_ms = {k: (1000.0 * v / hz / commits if hz and commits else None) for k, v in jiffies.items()}
    return {"jiffies": jiffies, "avg_ms": avg_ms}


def commit_thread(
    ctx: Context, scope: str | None, window_ns: int, timed: int, commit_block_offcpu: int
) -> dict[str, Any]:
    """The commit thread's time inside its commits: off-CPU by cause ([[worker]] rules), the
    journal block waits split into the commit block's and the other log blocks', and CPU."""
    b = worker_breakdown(ctx, JBD2_WORKER, scope) or {
        "offcpu_ns": 0,
        "offcpu_intervals": 0,
        "causes": {},
        "other_wait_frames": {},
    }
    causes = dict(b["causes"])
    block_wait = causes.pop(JOURNAL_BLOCK_WAIT, 0)
    commit_block = min(commit_block_offcpu, block_wait)
    if commit_block:
        causes[COMMIT_BLOCK] = commit_block
    if block_wait - commit_block:
        causes[LOG_WRITES] = block_wait - commit_block
    # A window whose switches were not all seen has time neither off-CPU nor known to be CPU.
    unseen = b.get("unseen_ns", 0)
    cpu = max(window_ns - b["offcpu_ns"] - unseen, 0)
    if cpu:
        causes[CPU] = cpu
    causes = dict(sorted(causes.items(), key=lambda kv: -kv[1]))
    return {
        "window_ns": window_ns,
        "offcpu_ns": b["offcpu_ns"],
        "cpu_ns": cpu,
        "unseen_ns": unseen,
        "causes": causes,
        "avg_ns": {k: v / timed for k, v in causes.items()} if timed else {},
        "other_wait_frames": b.get("other_wait_frames", {}),
    }


def many_to_one(
    ctx: Context, scope: str | None, commits: int, commit_ns: int, fast: int, fast_ns: int
) -> dict[str, Any]:
    """One commit serves many fsyncs. The waiter's view: each fsync's own time waiting for a
    commit (its "journal commit wait" cause, fast commits included), per fsync. The event's view:
    commits (jbd2 and fast ones done fast; a fast commit that fell back is the jbd2 commit it
    waited for) and their time, each counted once, per fsync. The ratio of the two times is how
    many fsyncs waited at once."""
    ops = scope_syscalls(ctx, scope)
    fsyncs = sum(ops.get(op, {}).get("count", 0) for op in FSYNC_OPS)
    attribution = scope_attribution(ctx, scope)
    waited = sum(b["causes"].get(COMMIT_WAIT_CAUSE, 0) for op in FSYNC_OPS for b in attribution.get(op, []))
    served_by, served_ns = commits + fast, commit_ns + fast_ns
    return {
        "fsyncs": fsyncs,
        "fsyncs_per_commit": ratio(fsyncs, served_by),
        "commits_per_fsync": ratio(served_by, fsyncs),
        "waiter_view": {"fsyncs": fsyncs, "commit_wait_ns": waited, "commit_wait_per_fsync_ns": ratio(waited, fsyncs)},
        "event_view": {
            "commits": commits,
            "fast_commits": fast,
            "commit_ns": served_ns,
            "commit_ns_per_fsync": ratio(served_ns, fsyncs),
            "fsyncs_served_per_commit": ratio(fsyncs, served_by),
        },
        "waiters_per_commit_time": ratio(waited, served_ns),
    }


def fast_commit_figures(rows: list[dict[str, Any]], scope: str | None, ctx: Context) -> dict[str, Any]:
    by_status: dict[str, dict[str, Any]] = {}
    for r in rows:
        e = by_status.setdefault(r["status"], {"count": 0, "total_ns": 0, "max_ns": 0, "blocks": 0})
        for f in ("count", "total_ns", "blocks"):
            e[f] += r[f]
        e["max_ns"] = max(e["max_ns"], r["max_ns"])
    for e in by_status.values():
        e["avg_ns"] = ratio(e["total_ns"], e["count"])
    ok = by_status.get("ok", {})
    window = sum(e["total_ns"] for e in by_status.values())
    b = worker_breakdown(ctx, FC_WORKER, scope) or {"offcpu_ns": 0, "causes": {}, "other_wait_frames": {}}
    causes = dict(b["causes"])
    if window - b["offcpu_ns"] > 0:
        causes[CPU] = window - b["offcpu_ns"]
    calls = sum(e["count"] for e in by_status.values())
    return {
        "calls": calls,
        "fast": ok.get("count", 0),
        "fell_back_to_full": sum(by_status.get(s, {}).get("count", 0) for s in ("ineligible", "failed")),
        "skipped": by_status.get("skipped", {}).get("count", 0),
        "blocks_per_fast_commit": ratio(ok.get("blocks", 0), ok.get("count", 0)),
        "by_status": by_status,
        "thread": {
            "window_ns": window,
            "offcpu_ns": b["offcpu_ns"],
            "causes": dict(sorted(causes.items(), key=lambda kv: -kv[1])),
            "other_wait_frames": b.get("other_wait_frames", {}),
        },
    }


def who_label(r: dict[str, Any]) -> str:
    """Who ran a delalloc event, grouped as a reader wants it."""
    if r["who"] == WHO_SYSCALL:
        return r["syscall"]
    if r["who"] == WHO_USER:
        return "user (outside a syscall)"
    comm = r["comm"]
    if comm.startswith("kworker/u"):
        return "flusher (kworker/u*)"  # bdi writeback runs on an unbound workqueue
    if comm.startswith("kworker/"):
        return "kworker"
    if comm.startswith("jbd2/"):
        return "jbd2"
    return comm


def traced_or_kernel(r: dict[str, Any]) -> str:
    return "kernel threads" if r["who"] == WHO_KTHREAD else "user threads"


def delalloc_figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def event(name):
        mine = [r for r in rows if r["event"] == name]
        by, side = {}, {}
        for r in mine:
            by[who_label(r)] = by.get(who_label(r), 0) + r["blocks"]
            side[traced_or_kernel(r)] = side.get(traced_or_kernel(r), 0) + r["blocks"]
        return {
            "count": sum_rows(mine, "count"),
            "blocks": sum_rows(mine, "blocks"),
            "by": dict(sorted(by.items(), key=lambda kv: -kv[1])),
            "side": side,
        }

    events = {name: event(name) for name in DA_EVENTS}
    da, noda = events["da_write_begin"]["count"], events["nodelalloc_write_begin"]["count"]
    events["mballoc"]["groups_scanned"] = events["mballoc"].pop("blocks")
    return {
        "enabled": (da > 0) if (da or noda) else None,
        "write_begin": {"delalloc": da, "nodelalloc": noda},
        "reserved": events["reserve"],
        "released": events["release"],
        "claimed": events["claim"],
        "mapped_at_writeback": events["map_extent"],
        "allocated": {"delalloc": events["alloc_delalloc"], "other": events["alloc_other"]},
        "requests": events["request"],
        "mballoc": events["mballoc"],
    }


# ---- report ----

us = partial(units.fmt_time, ms_from=10 * units.MS)


def num(x: float | None, fmt: str = "{:.2f}") -> str:
    return "n/a" if x is None else fmt.format(x)


def report_lines(section: dict[str, Any], fs: dict[str, Any]) -> list[str]:
    """What a storage engineer reads under the fsync attribution."""
    lines = []
    journal = section.get("journal", {}).get("all")
    if journal and (journal["commits"] or journal["event_view"].get("fast_commits")):
        lines.extend(journal_lines(journal, section.get("device", "")))
        phases = section["journal"]["phases"]
        if len([p for p in phases.values() if p["commits"]]) > 1:
            for name, p in phases.items():
                if p["commits"]:
                    lines.append(
                        f"       phase {name}: {p['commits']} commits, avg {us(p['commit_ns']['avg_ns'])}, "
                        f"{num(p['fsyncs_per_commit'])} fsyncs per commit, "
                        f"{num(p['per_commit']['blocks_logged'], '{:.1f}')} blocks logged per commit"
                    )
    fc = section.get("fast_commits", {}).get("all")
    if fc:
        lines.extend(fast_commit_lines(fc))
    da = section.get("delalloc", {}).get("all")
    if da:
        lines.extend(delalloc_lines(da))
    freeing = section.get("block_freeing", {}).get("all")
    if freeing:
        lines.extend(freeing_lines(freeing))
    return lines


def freeing_lines(f: dict[str, Any]) -> list[str]:
    """Blocks freed, and the spans timed inside the calls that freed them."""

    def spans(what):
        return "; ".join(
            f"{who} {v['on_cpu']['count']} on CPU throughout ({us(v['on_cpu']['ns'])})"
            + (
                f", {v['switched']['count']} switched out ({us(v['switched']['ns'])} wall)"
                if v["switched"]["count"]
                else ""
            )
            for who, v in f[what].items()
        )

    by = ", ".join(f"{who} {n}" for who, n in sorted(f["blocks_freed"].items(), key=lambda kv: -kv[1]))
    lines = [f"     blocks freed: {by or 'none'}"]
    if f["extent_removal"]:
        lines.append(f"     extent removal (block freeing): {spans('extent_removal')}")
    if f["page_cache_freeing"]:
        lines.append(f"     page cache freeing of unlinked inodes: {spans('page_cache_freeing')}")
    return lines


def journal_lines(j: dict[str, Any], device: str) -> list[str]:
    t = j["commit_ns"]
    rate = f" ({j['commits_per_s']:.0f}/s)" if j["commits_per_s"] else ""
    parts = " + ".join(f"{name} {us(p['avg_ns'] or 0)}" for name, p in j["phases"].items())
    fast = j["event_view"].get("fast_commits", 0)
    also = f" + {fast} fast commits" if fast else ""
    lines = [
        f"   behind journal commit wait (jbd2 on {device}): {j['commits']} commits{rate}{also}, "
        f"{num(j['fsyncs_per_commit'])} fsyncs per commit"
    ]
    if not j["timed_commits"]:
        return lines + many_to_one_lines(j)
    lines.append(f"     avg commit {us(t['avg_ns'])} = {parts}; p99 {us(t['p99_ns'])}, max {us(t['max_ns'])}")
    thread = j["thread"]
    if thread["avg_ns"]:
        # Causes of at least 1% of the commit, the largest first.
        top = [(c, ns) for c, ns in thread["avg_ns"].items() if ns >= 0.01 * (t["avg_ns"] or 1)][:5]
        lines.append("     commit thread per commit: " + ", ".join(f"{cause} {us(ns)}" for cause, ns in top))
    pc = j["per_commit"]
    lines.append(
        f"     per commit: {num(pc['blocks_logged'], '{:.1f}')} blocks logged, {num(pc['blocks'], '{:.1f}')} blocks, "
        f"{num(pc['handles'], '{:.1f}')} handles; interval between commits avg "
        f"{us(j['interval']['avg_ns'] or 0)}"
    )
    return lines + many_to_one_lines(j)


def many_to_one_lines(j: dict[str, Any]) -> list[str]:
    w, e = j["waiter_view"], j["event_view"]
    if not w["fsyncs"]:
        return []
    return [
        f"     waiter's view: {us(w['commit_wait_per_fsync_ns'])} of commit wait per fsync; event's view: "
        f"{us(e['commit_ns_per_fsync'])} of commit per fsync, {num(e['fsyncs_served_per_commit'])} fsyncs "
        f"served per commit"
    ]


def fast_commit_lines(fc: dict[str, Any]) -> list[str]:
    ok = fc["by_status"].get("ok", {})
    line = (
        f"     fast commits: {fc['fast']} of {fc['calls']} fsync commits"
        + (
            f" (avg {us(ok['avg_ns'])}, {num(fc['blocks_per_fast_commit'], '{:.1f}')} blocks each)"
            if fc["fast"]
            else ""
        )
        + f", {fc['fell_back_to_full']} fell back to a full commit, {fc['skipped']} skipped (already committed)"
    )
    top = list(fc["thread"]["causes"].items())[:3]
    total = fc["thread"]["window_ns"] or 1
    lines = [line]
    if top:
        lines.append("       fast commit time: " + ", ".join(f"{c} {100 * ns / total:.0f}%" for c, ns in top))
    return lines


def delalloc_lines(da: dict[str, Any]) -> list[str]:
    if da["enabled"] is None:
        return []
    if not da["enabled"]:
        return [
            f"     delayed allocation off: {da['write_begin']['nodelalloc']} buffered writes allocated at write time "
            f"({da['allocated']['other']['blocks']} blocks)"
        ]
    alloc = da["allocated"]["delalloc"]
    by = ", ".join(f"{who} {n}" for who, n in list(alloc["by"].items())[:3])
    return [
        f"     delayed allocation on: {da['reserved']['blocks']} blocks reserved at write time, "
        f"{alloc['blocks']} allocated at writeback" + (f" (by {by})" if by else "")
    ]


def thread_causes(section: dict[str, Any]) -> dict[str, dict[str, int]]:
    """{worker kind: {cause: ns}}: the commit thread's whole window by cause (CPU included, the
    commit block split out), for `fsprof compare` to follow a journal commit wait into."""
    thread = section.get("journal", {}).get("all", {}).get("thread")
    return {"jbd2 commit": thread["causes"]} if thread and thread.get("causes") else {}


def evidence(section: dict[str, Any], fs: dict[str, Any], op: str) -> dict[str, float]:
    """Counts that explain a journal commit wait, for `fsprof compare`: run-wide (or phase-wide), or
    per commit."""
    j = in_scope(section.get("journal"), fs)
    if not j or not fs.get("elapsed_s"):
        return {}
    out = {f"jbd2 commits per second ({wide(fs)})": j.get("commits", 0) / fs["elapsed_s"]}
    if j.get("per_commit", {}).get("blocks_logged") is not None:  # None: no commit in the run
        out["blocks logged per jbd2 commit"] = j["per_commit"]["blocks_logged"]
    block = j.get("commit_block", {})
    if block.get("count"):
        out["jbd2 commit block (flush + FUA) time per commit, us"] = block["avg_ns"] / 1e3
    return out
