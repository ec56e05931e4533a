"""Python mirrors of the structs in bpf/fsprof.h. The loader checks each against the object's BTF
field by field at open (btf_layout.py), so a change on one side without the other fails at once."""

import ctypes as c
from typing import Any

from . import tp_fields

HIST_SLOTS = 40
FINE_SUB_BITS = 4
FINE_SLOTS = (40 - FINE_SUB_BITS + 1) << FINE_SUB_BITS
MAX_STACK_DEPTH = 64
MAX_PHASES = 32

# enum dev_source
(
    DEV_SRC_NONE,
    DEV_SRC_FD,
    DEV_SRC_RET_FD,
    DEV_SRC_DIRFD,
    DEV_SRC_CWD,
    DEV_SRC_GLOBAL,
    DEV_SRC_MARKER,
    DEV_SRC_RET_FD_AT,
    DEV_SRC_AIO_SUBMIT,
    DEV_SRC_AIO_REAP,
) = range(10)
# enum filter_mode
FILTER_PID, FILTER_CGROUP, FILTER_ALL = range(3)
# enum drop_reason, in order
DROP_REASONS = (
    "inflight_full",
    "ops_full",
    "offcpu_full",
    "offcpu_stack",
    "samples_full",
    "sample_stack",
    "open_slots_overflow",
    "block_full",
    "waker_stack",
    "worker_full",
    "fs_full",
    "rq_full",
    "writeback_full",
    "exemplar_busy",
    "worker_switches",
    "aio_iocbs",
)
# Requests followed from submission and found again at their end (syscalls.bpf.c enum
# async_count), by kind: with the entries still in flight in the kind's map (uring_reqs,
# aio_reqs), the requests lost in flight, reported as these drop reasons.
ASYNC_COUNTS = ("uring_followed", "uring_ended", "aio_followed", "aio_ended")
ASYNC_LOST = {"uring": "uring_reqs_lost", "aio": "aio_iocbs_lost"}


def async_lost(now: dict[str, int], base: dict[str, int]) -> dict[str, int]:
    """{drop reason: requests lost in flight} since base, from two readings of {"<kind>_followed",
    "<kind>_ended", "<kind>_in_flight"}: followed, less ended, less those still in flight (never
    below 0: a submission between the counters' and the map's reading)."""
    delta = {k: now[k] - base.get(k, 0) for k in now}
    return {
        reason: max(0, delta[f"{kind}_followed"] - delta[f"{kind}_ended"] - delta[f"{kind}_in_flight"])
        for kind, reason in ASYNC_LOST.items()
    }


# Drop reasons whose event was recorded, only less exactly: not lost, and never counted as lost.
# open_slots_overflow: an open blocked at more distinct stacks than its in-flight record keeps; the
# extra interval went under the filesystem known at the open's entry (the same one unless the
# path crosses a mount). exemplar_busy: a call counted like any other, but not weighed as one of
# its op's slowest while another CPU updated that op's exemplar set.
KEPT_APPROXIMATELY = {
    "open_slots_overflow": "open intervals kept under the filesystem known at entry",
    "exemplar_busy": "calls not weighed as exemplars (another CPU was updating the set)",
}


# io_uring opcodes that fsprof follows (bpf/syscalls.bpf.c uring_on_file, uring_by_path), by number
# (include/uapi/linux/io_uring.h enum io_uring_op: append-only user ABI, the same on every kernel).
URING_OPS = {
    1: "readv",
    2: "writev",
    3: "fsync",
    4: "read_fixed",
    5: "write_fixed",
    8: "sync_file_range",
    17: "fallocate",
    18: "openat",
    21: "statx",
    22: "read",
    23: "write",
    24: "fadvise",
    28: "openat2",
    35: "renameat",
    36: "unlinkat",
    37: "mkdirat",
    38: "symlinkat",
    39: "linkat",
    49: "read_multishot",
    55: "ftruncate",
    60: "readv_fixed",
    61: "writev_fixed",
}


# An io_uring request's exemplars are kept under this bit and its opcode (bpf/fsprof.h).
URING_EXEMPLAR_NR = 0x8000


# libaio iocbs share the io_uring requests' maps under this bit and their IOCB_CMD_* (bpf/syscalls.bpf.c
# AIO_NR; include/uapi/linux/aio_abi.h, a user ABI).
AIO_NR = 0x4000
AIO_OPS = {0: "pread", 1: "pwrite", 2: "fsync", 3: "fdsync", 5: "poll", 6: "noop", 7: "preadv", 8: "pwritev"}


def uring_op_name(opcode: int) -> str:
    """An io_uring request's name as fsprof shows it: "io_uring write" (opcode 23); a libaio iocb's
    (AIO_NR | IOCB_CMD_*): "libaio pwrite"."""
    if opcode & AIO_NR:
        cmd = opcode & ~AIO_NR
        return f"libaio {AIO_OPS.get(cmd, f'cmd{cmd}')}"
    return f"io_uring {URING_OPS.get(opcode, f'op{opcode}')}"


# The kinds of asynchronous request, by the prefix of their names: io_uring's and libaio's.
ASYNC_KINDS = (("io_uring ", "io_uring request"), ("libaio ", "libaio iocb"))


def async_kinds(ops: Any) -> list[str]:
    """The kinds ("io_uring request", "libaio iocb") that some of these request names are of."""
    ops = list(ops)
    return [kind for prefix, kind in ASYNC_KINDS if any(op.startswith(prefix) for op in ops)]


# Those whose result is a byte count (the reads and writes).
URING_MOVES_BYTES = {uring_op_name(n) for n in (1, 2, 4, 5, 22, 23, 49, 60, 61)} | {
    uring_op_name(AIO_NR | n) for n in (0, 1, 7, 8)
}


# A program the kernel did not run because it fired while that program already ran on the CPU (an
# interrupt's wakeup inside on_waking): its bpf_prog_info recursion_misses, as the drop reason
# "<object>:<program> skipped". Its event is lost like any other drop.
SKIPPED = " skipped"


def skipped_reason(program: str) -> str:
    """The drop reason of a program's recursion misses ("syscalls:on_waking" -> "... skipped")."""
    return program + SKIPPED


def lost_events(drops: dict[str, int]) -> dict[str, int]:
    """{reason: count} of the events not recorded, nonzero ones (drops less KEPT_APPROXIMATELY)."""
    return {k: v for k, v in drops.items() if v and k not in KEPT_APPROXIMATELY}


def approximated_events(drops: dict[str, int]) -> dict[str, int]:
    """{what: count} of the events recorded less exactly, nonzero ones (KEPT_APPROXIMATELY's)."""
    return {KEPT_APPROXIMATELY[k]: v for k, v in drops.items() if v and k in KEPT_APPROXIMATELY}


COMM_LEN = 16
# enum worker_kind (index = value)
WORKER_KINDS = (
    None,
    "jbd2 commit",
    "ext4 fast commit",
    "xfs cil push",
    "xfs log worker",
    "btrfs commit",
    "btrfs log sync",
    "xfs inodegc",
    "flusher writeback",
)

# enum blk_class, in order (flush first: the report's "cache flushes")
BLK_CLASSES = (
    "flush",
    "preflush_write",
    "fua_write",
    "meta_write",
    "sync_write",
    "async_write",
    "read",
    "discard",
    "other",
)
BLK_WRITE_CLASSES = ("preflush_write", "fua_write", "meta_write", "sync_write", "async_write")
BLK_SIZE_SLOTS = 24


class Hist(c.Structure):
    _fields_ = [
        ("count", c.c_uint64),
        ("total_ns", c.c_uint64),
        ("max_ns", c.c_uint64),
        ("ret_sum", c.c_uint64),
        ("slots", c.c_uint64 * FINE_SLOTS),
    ]


class OpKey(c.Structure):
    _fields_ = [("dev", c.c_uint32), ("nr", c.c_uint16), ("phase", c.c_uint16)]


class OffKey(c.Structure):
    _fields_ = [
        ("op", OpKey),
        ("stackid", c.c_int32),
        ("runnable", c.c_uint16),
        ("tail", c.c_uint16),
        ("waker_stack", c.c_int32),
        ("waker_comm", c.c_char * COMM_LEN),
    ]


class WorkerKey(c.Structure):
    _fields_ = [
        ("dev", c.c_uint32),
        ("kind", c.c_uint16),
        ("phase", c.c_uint16),
        ("stackid", c.c_int32),
        ("runnable", c.c_uint32),
    ]


class RqTimes(c.Structure):
    """struct rq_times: the summed times of block requests that have ended."""

    _fields_ = [("device_ns", c.c_uint64), ("life_ns", c.c_uint64), ("timed", c.c_uint32), ("pad", c.c_uint32)]


class WorkerWindow(c.Structure):
    _fields_ = [
        ("start_ns", c.c_uint64),
        ("out_ns", c.c_uint64),
        ("dev", c.c_uint32),
        ("kind", c.c_uint16),
        ("phase", c.c_uint16),
        ("out_stack", c.c_int32),
        ("out_runnable", c.c_uint16),
        ("no_stacks", c.c_uint16),
        ("blocked_ns", c.c_uint64),
        ("id", c.c_uint32),
        ("requests", c.c_uint16 * len(BLK_CLASSES)),
        ("rq_times", RqTimes),
        ("switches", c.c_uint64),
        ("offcpu_ns", c.c_uint64),
        ("switches_seen", c.c_uint32),
        ("gen", c.c_uint32),
    ]


class WorkSeen(c.Structure):
    """A worker window as the thread it woke saw it (bpf/fsprof.h struct work_seen)."""

    _fields_ = [
        ("start_ns", c.c_uint64),
        ("end_ns", c.c_uint64),
        ("blocked_ns", c.c_uint64),
        ("id", c.c_uint32),
        ("kind", c.c_uint16),
        ("requests", c.c_uint16 * len(BLK_CLASSES)),
        ("rq_times", RqTimes),
    ]


class WorkLast(c.Structure):
    """worker_last's value (bpf/fsprof.h struct work_last)."""

    _fields_ = [("seen", WorkSeen), ("nvcsw", c.c_uint64)]


class OffVal(c.Structure):
    _fields_ = [("count", c.c_uint64), ("total_ns", c.c_uint64)]


class UringOffKey(c.Structure):
    """An io-wq worker's off-CPU interval inside an io_uring request (bpf/syscalls.bpf.c)."""

    _fields_ = [("op", OpKey), ("stackid", c.c_int32), ("runnable", c.c_uint32)]


class UringOut(c.Structure):
    _fields_ = [
        ("out_ns", c.c_uint64),
        ("req", c.c_uint64),
        ("woken_ns", c.c_uint64),
        ("key", UringOffKey),
        ("waker_stack", c.c_int32),
        ("pad", c.c_uint32),
        ("waker_comm", c.c_char * COMM_LEN),
        ("work", WorkSeen),
    ]


class SampleKey(c.Structure):
    _fields_ = [("op", OpKey), ("stackid", c.c_int32), ("pad", c.c_uint32)]


class RqClasses(c.Structure):
    """struct rq_classes: block requests by enum blk_class."""

    _fields_ = [
        ("count", c.c_uint64 * len(BLK_CLASSES)),
        ("bytes", c.c_uint64 * len(BLK_CLASSES)),
        ("timed", c.c_uint64 * len(BLK_CLASSES)),
        ("device_ns", c.c_uint64 * len(BLK_CLASSES)),
        ("life_ns", c.c_uint64 * len(BLK_CLASSES)),
    ]


class RqOwner(c.Structure):
    """struct rq_owner: who made a block request (read by block.bpf.c only)."""

    _fields_ = [
        ("key", OpKey),
        ("tid", c.c_uint32),
        ("kind", c.c_uint16),
        ("cls", c.c_uint16),
        ("window_ns", c.c_uint64),
        ("dev", c.c_uint32),
        ("pad", c.c_uint32),
    ]


class WorkerRunKey(c.Structure):
    _fields_ = [("dev", c.c_uint32), ("kind", c.c_uint16), ("phase", c.c_uint16)]


class WorkerRun(c.Structure):
    _fields_ = [
        ("windows", c.c_uint64),
        ("wall_ns", c.c_uint64),
        ("rqs", RqClasses),
        ("unseen_windows", c.c_uint64),
        ("unseen_ns", c.c_uint64),
    ]


def requests_of(rqs: RqClasses) -> dict[str, dict[str, int]]:
    """{class: {count, bytes, timed, device_ns, life_ns}} of the classes with requests: timed of
    them ended with their owner known, device_ns and life_ns their summed times (struct rq_times)."""
    return {
        cls: {"count": n, "bytes": b, "timed": t, "device_ns": d, "life_ns": life}
        for cls, n, b, t, d, life in zip(BLK_CLASSES, rqs.count, rqs.bytes, rqs.timed, rqs.device_ns, rqs.life_ns)
        if n
    }


class Filter(c.Structure):
    _fields_ = [("mode", c.c_uint32), ("dev", c.c_uint32)]


class StackSampling(c.Structure):
    _fields_ = [
        ("every", c.c_uint32),
        ("first", c.c_uint32),
        ("tail_ns", c.c_uint64),
        ("exemplars", c.c_uint32),
        ("pad", c.c_uint32),
    ]


class ThrottleKey(c.Structure):
    """A dirty-throttling key: bdi id, phase, who (writeback.bpf.c's enum wb_who), syscall."""

    _fields_ = [("bdi", c.c_uint16), ("phase", c.c_uint16), ("who", c.c_uint16), ("nr", c.c_uint16)]


class PausePending(c.Structure):
    _fields_ = [("start_ns", c.c_uint64), ("key", ThrottleKey), ("switched_out", c.c_uint32)]


class PauseVal(c.Structure):
    _fields_ = [("unmatched", c.c_uint64), ("slept", Hist)]


STACK_NOT_WALKED = -100000  # the stack id of an interval whose call stack sampling passed over (bpf/fsprof.h)


class KernelFlags(c.Structure):
    """struct kernel_flags (bpf/compat.h); filled by the loader from profiler/trace/kernel_flags.py."""

    _fields_ = [
        ("rqf_flush_seq", c.c_uint32),
        ("rqf_use_sched", c.c_uint32),
        ("i_dirty_sync", c.c_uint32),
        ("i_dirty_datasync", c.c_uint32),
        ("i_dirty_time", c.c_uint32),
        ("hz", c.c_uint32),
        ("global_wb_domain", c.c_uint64),
    ]


class TpFields(c.Structure):
    """struct tp_fields (bpf/fsprof.h): classic record offsets, filled by the loader (tp_fields.py)."""

    _fields_ = [("off", c.c_uint16 * len(tp_fields.FIELDS))]


class PhaseState(c.Structure):
    _fields_ = [("current", c.c_uint32), ("pad", c.c_uint32), ("start_ns", c.c_uint64 * MAX_PHASES)]


class BlkKey(c.Structure):
    _fields_ = [("dev", c.c_uint32), ("cls", c.c_uint16), ("phase", c.c_uint16)]


# struct blk_val's counters, in order (behind/block.py reads them by these names).
BLK_COUNTERS = (
    "count",
    "bytes",
    "completed",
    "unissued",
    "merged",
    "requeued",
    "lost",
    "submitted",
    "fua",
    "preflush",
    "meta",
    "flush_asked",
    "wait_ns",
    "life_ns",
    "unissued_life_ns",
)


class BlkVal(c.Structure):
    _fields_ = [
        *((name, c.c_uint64) for name in BLK_COUNTERS),
        ("size_log2", c.c_uint64 * BLK_SIZE_SLOTS),
        ("queue", Hist),
        ("device", Hist),
    ]


Stack = c.c_uint64 * MAX_STACK_DEPTH
SPILL_STACK_BIT = 1 << 30  # a stack id of the spill map (bpf/shared_maps.h get_stack)
TAIL_STACK_BIT = 1 << 29  # a stack id of tail_stacks: a sleeper's stack taken at its switch-in (fsprof.h)


EXEMPLAR_WAITS, EXEMPLARS = 4, 16  # bpf/fsprof.h; EXEMPLARS: at most, --exemplars K keeps fewer


class ExemplarWait(c.Structure):
    _fields_ = [
        ("start_ns", c.c_uint64),
        ("ns", c.c_uint64),
        ("stack", c.c_int32),
        ("waker_stack", c.c_int32),
        ("waker_comm", c.c_char * COMM_LEN),
        ("work", WorkSeen),
    ]


class OwnRqs(c.Structure):
    """struct own_rqs: a call's own block requests by class, and the times of those that ended."""

    _fields_ = [("requests", c.c_uint16 * len(BLK_CLASSES)), ("pad", c.c_uint16 * 3), ("times", RqTimes)]


class CallRqs(c.Structure):
    _fields_ = [("call_ns", c.c_uint64), ("own", OwnRqs)]


class UringReq(c.Structure):
    """struct uring_req: an io_uring request in flight (bpf/fsprof.h)."""

    _fields_ = [
        ("start_ns", c.c_uint64),
        ("dev", c.c_uint32),
        ("phase", c.c_uint16),
        ("opcode", c.c_uint8),
        ("place", c.c_uint8),
        ("tid", c.c_uint32),
        ("waits", c.c_uint32),
        ("blocked_ns", c.c_uint64),
        ("runq_ns", c.c_uint64),
        ("wait", ExemplarWait),
        ("own", OwnRqs),
    ]


class AioKey(c.Structure):
    """struct aio_key: a libaio iocb in flight, by its user pointer and process (syscalls.bpf.c)."""

    _fields_ = [("iocb", c.c_uint64), ("tgid", c.c_uint32), ("pad", c.c_uint32)]


class AioReq(c.Structure):
    _fields_ = [("start_ns", c.c_uint64), ("dev", c.c_uint32), ("phase", c.c_uint16), ("opcode", c.c_uint16)]


class RqSeen(c.Structure):
    """struct rq_seen: one ended block request, as the device ring keeps it (bpf/shared_maps.h)."""

    _fields_ = [
        ("end_ns", c.c_uint64),
        ("life_ns", c.c_uint32),
        ("device_ns", c.c_uint32),
        ("dev", c.c_uint32),
        ("tid", c.c_uint32),
        ("cls", c.c_uint16),
        ("pad", c.c_uint16 * 3),
    ]


EXEMPLAR_RQS = 8  # bpf/fsprof.h: a kept call's device requests


class Exemplar(c.Structure):
    _fields_ = [
        ("start_ns", c.c_uint64),
        ("end_ns", c.c_uint64),
        ("runq_ns", c.c_uint64),
        ("blocked_ns", c.c_uint64),
        ("ret", c.c_int64),
        ("tid", c.c_uint32),
        ("waits", c.c_uint32),
        ("wait", ExemplarWait * EXEMPLAR_WAITS),
        ("own", OwnRqs),
        ("device_rqs", c.c_uint32),
        ("device_more", c.c_uint32),
        ("device", RqSeen * EXEMPLAR_RQS),
    ]


class ExemplarSet(c.Structure):
    _fields_ = [("floor_ns", c.c_uint64), ("busy", c.c_uint32), ("pad", c.c_uint32), ("call", Exemplar * EXEMPLARS)]


def work_of(seen: Any) -> dict[str, Any] | None:
    """The worker window a wait's waker was in (struct work_seen), or None."""
    if not seen.kind or seen.kind >= len(WORKER_KINDS):
        return None
    return {
        "worker": WORKER_KINDS[seen.kind],
        "id": seen.id,
        "start_ns": seen.start_ns,
        "end_ns": seen.end_ns or None,  # still open when it woke the waiter
        "blocked_ns": seen.blocked_ns,
        "requests": {cls: n for cls, n in zip(BLK_CLASSES, seen.requests) if n},
        # Of its requests that had ended when it woke the waiter: how many, and their summed times.
        "request_times": {
            "timed": seen.rq_times.timed,
            "device_ns": seen.rq_times.device_ns,
            "life_ns": seen.rq_times.life_ns,
        },
    }


def exemplars_of(kept: Any) -> list[dict[str, Any]]:
    """The calls of one op's exemplar set (struct exemplar_set), slowest first."""
    calls = [e for e in kept.call if e.end_ns > e.start_ns]
    calls.sort(key=lambda e: e.end_ns - e.start_ns, reverse=True)
    return [
        {
            "tid": e.tid,
            "start_ns": e.start_ns,
            "ns": e.end_ns - e.start_ns,
            "ret": e.ret,
            "runq_ns": e.runq_ns,
            "blocked_ns": e.blocked_ns,
            "waits": e.waits,
            "longest": sorted(
                (
                    {
                        "start_ns": w.start_ns,
                        "ns": w.ns,
                        "stack": w.stack,
                        "waker_stack": w.waker_stack,
                        "waker_comm": w.waker_comm.decode(errors="replace"),
                        "work": work_of(w.work),
                    }
                    for w in list(e.wait)[: min(e.waits, EXEMPLAR_WAITS)]
                    if w.ns  # an io_uring request keeps only its longest wait: the others are empty
                ),
                key=lambda w: -w["ns"],
            ),
            "own_requests": own_requests_of(e.own),
            # The requests that ended on the traced devices while it ran, newest first (the last
            # EXEMPLAR_RQS; "device_more": there were more).
            "device_requests": [device_request_of(s) for s in list(e.device)[: min(e.device_rqs, EXEMPLAR_RQS)]],
            "device_more": bool(e.device_more),
        }
        for e in calls
    ]


U32_MAX = 0xFFFFFFFF


def device_request_of(s: Any) -> dict[str, Any]:
    """One struct rq_seen: {dev, class, end_ns, life_ns, device_ns, tid}; a time of U32_MAX is
    that long or longer, device_ns 0 a request not issued itself (an empty cache flush)."""
    return {
        "dev": s.dev,
        "class": BLK_CLASSES[s.cls] if s.cls < len(BLK_CLASSES) else str(s.cls),
        "end_ns": s.end_ns,
        "life_ns": s.life_ns,
        "device_ns": s.device_ns,
        "tid": s.tid,
    }


def own_requests_of(own: Any) -> dict[str, Any] | None:
    """A call's own block requests (struct own_rqs): {"requests": {class: n}, "timed",
    "device_ns", "life_ns"}; None when it made none."""
    requests = {cls: n for cls, n in zip(BLK_CLASSES, own.requests) if n}
    if not requests:
        return None
    return {
        "requests": requests,
        "timed": own.times.timed,
        "device_ns": own.times.device_ns,
        "life_ns": own.times.life_ns,
    }


class StackIps(c.Structure):
    _fields_ = [("ips", Stack)]


def hist_data(h: Hist) -> dict[str, Any]:
    """One struct hist as plain data: the fine slots as a sparse {slot: count} map (see
    profiler/trace/hist.py for what a slot means). Every histogram map is shared by all CPUs."""
    return {
        "count": h.count,
        "total_ns": h.total_ns,
        "max_ns": h.max_ns,
        "ret_sum": h.ret_sum,
        "fine": {i: n for i, n in enumerate(h.slots) if n},
    }


def snapshot_hist(h: Hist) -> dict[str, Any]:
    """A struct hist as a probe's snapshot holds it: its fine slots keyed by strings, as in JSON
    (collect.py walks snapshots for stack ids by key name)."""
    return {
        "count": h.count,
        "total_ns": h.total_ns,
        "max_ns": h.max_ns,
        "fine": {str(i): n for i, n in enumerate(h.slots) if n},
    }
