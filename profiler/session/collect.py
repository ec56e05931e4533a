"""Collection: loads fsprof's BPF objects once, points them at the processes and devices under
test, and turns their in-kernel aggregates into plain data. Nothing here sees a per-I/O event."""

import ctypes as c
import os
import time
from collections.abc import Callable, Collection, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from .. import behind, filesystems, signals
from ..trace import maps, syscalls
from ..trace.bpf import LEGACY_FIGURES_LOST, BpfObject, close_all, create_maps, detach_all, legacy_kernel
from ..errors import FsprofError

if TYPE_CHECKING:
    from types import ModuleType

    from ..trace.libbpf import Map, SharedMap

DEFAULT_SAMPLE_HZ = 999
# --stack-sample's default: the tail exactly, the body 1 call in 8 (docs/tail.md, "The default").
# 1 walks every call's stacks: the lab mode.
DEFAULT_STACK_SAMPLE = 8
# Stack sampling (--stack-sample N): every call of an op is walked until this many of its blocked
# intervals have been (every window of a worker until it has had this many windows).
STACK_FIRST = 64
# --tail-threshold: a syscall's blocked interval this long or longer is the tail, whose stacks are
# taken whatever the stack sampling (bpf/fsprof.h struct stack_sampling).
DEFAULT_TAIL_NS = 1_000_000


# Maps of bpf/shared_maps.h: made once from syscalls.bpf.o's definitions (bpf.create_maps) and
# given to every object, which then all read and write the same maps.
SHARED_MAPS = (
    ("phase_state", c.c_uint32, maps.PhaseState),
    ("drops", c.c_uint32, c.c_uint64),
    ("stack_sampling", c.c_uint32, maps.StackSampling),
    ("stacks", c.c_uint32, maps.Stack),
    ("stacks_spill", c.c_uint32, maps.Stack),
    ("worker_windows", c.c_uint32, maps.WorkerWindow),
    ("worker_last", c.c_uint32, maps.WorkLast),
    ("workers_open", c.c_uint32, c.c_int64),
    ("worker_offcpu", maps.WorkerKey, maps.OffVal),
    ("worker_runs", maps.WorkerRunKey, maps.WorkerRun),
    ("pauses", c.c_uint32, maps.PausePending),
    ("pauses_open", c.c_uint32, c.c_int64),
    ("pause_slept", maps.ThrottleKey, maps.PauseVal),
    ("unplaced_calls", c.c_uint32, c.c_uint32),
    ("op_rqs", maps.OpKey, maps.RqClasses),
    ("uring_rqs", maps.OpKey, maps.RqClasses),
    ("rq_owners", c.c_uint64, maps.RqOwner),
    ("call_rqs", c.c_uint32, maps.CallRqs),
    ("uring_reqs", c.c_uint64, maps.UringReq),
    ("rq_ring", c.c_uint32, maps.RqSeen),
    ("rq_ring_head", c.c_uint32, c.c_uint64),
)


# Without these syscalls.bpf.o measures nothing: a run is refused when one cannot load. Any other
# program that this kernel refuses is left out, and the run says which figures it loses.
CORE_PROGRAMS = ("on_sys_enter", "on_sys_exit", "on_switch", "on_fork", "on_exit")
# What each optional program of syscalls.bpf.o feeds (behind modules have their own FIGURES).
FIGURES = {
    "on_waking": "who ended each wait (waker stacks), and the wait/run-queue split of off-CPU time",
    "on_sample": "on-CPU time by cause (delayed allocation vs filesystem CPU); on-CPU flame graphs",
    "on_getrq": "block requests per op (made in its own calls) and per filesystem worker window",
    "on_bio_backmerge": "the bytes of bios merged into the requests counted per op and per worker window",
    "on_bio_frontmerge": "the bytes of bios merged into the requests counted per op and per worker window",
    "on_uring_submit_req": "io_uring requests: count and submission-to-completion time per opcode",
    "on_uring_submit_sqe": "io_uring requests: count and submission-to-completion time per opcode",
    "on_uring_complete": "io_uring requests: count and submission-to-completion time per opcode",
    "on_uring_cqring_wait": "io_uring_enter split into submitting and waiting for completions",
}
# Programs of which a kernel has one or the other (a tracepoint renamed): the one it lacks is no
# figure lost while its alternative loaded. io_uring_submit_sqe became io_uring_submit_req in 6.4.
# On 5.10 the programs on module tracepoints have classic tracepoint twins, tp_<event> for
# on_<event> (compat.h's tp_record; bpf/ext4.bpf.c, xfs.bpf.c, btrfs.bpf.c).
ALTERNATIVES = {
    "syscalls:on_uring_submit_req": "syscalls:on_uring_submit_sqe",
    "syscalls:on_uring_submit_sqe": "syscalls:on_uring_submit_req",
    **{
        f"ext4:on_{event}": f"ext4:tp_{event}"
        for event in (
            "jbd2_start_commit",
            "jbd2_commit_locking",
            "jbd2_commit_flushing",
            "jbd2_commit_logging",
            "jbd2_end_commit",
            "jbd2_write_superblock",
            "jbd2_run_stats",
            "jbd2_checkpoint",
            "jbd2_checkpoint_stats",
        )
    },
    "ext4:on_mark_inode_dirty": "ext4:tp_ext4_mark_inode_dirty",
    **{
        f"ext4:on_{short}": f"ext4:tp_ext4_{short}"
        for short in (
            "da_write_begin",
            "write_begin",
            "da_reserve_space",
            "da_release_space",
            "da_update_reserve_space",
            "da_write_pages_extent",
            "request_blocks",
            "allocate_blocks",
            "mballoc_alloc",
            "free_blocks",
            "evict_inode",
            "truncate_enter",
            "free_inode",
        )
    },
    **{
        f"btrfs:on_{short}": f"btrfs:tp_btrfs_{event}"
        for short, event in (
            ("sync_file", "sync_file"),
            ("transaction_commit", "transaction_commit"),
            ("oe_add", "ordered_extent_add"),
            ("oe_start", "ordered_extent_start"),
            ("oe_remove", "ordered_extent_remove"),
            ("flush_space", "flush_space"),
            ("trigger_flush", "trigger_flush"),
            ("space_reservation", "space_reservation"),
        )
    },
    "ext4:on_fc_commit_start": "ext4:tp_ext4_fc_commit_start",
    "ext4:on_fc_commit_stop": "ext4:tp_ext4_fc_commit_stop",
    "ext4:on_remove_space": "ext4:tp_ext4_ext_remove_space",
    "ext4:on_remove_space_done": "ext4:tp_ext4_ext_remove_space_done",
    "xfs:on_log_force": "xfs:tp_xfs_log_force",
    **{
        f"xfs:on_{short}": f"xfs:tp_xfs_{event}"
        for short, event in (
            ("log_reserve", "log_reserve"),
            ("log_regrant", "log_regrant"),
            ("log_reserve_exit", "log_reserve_exit"),
            ("log_regrant_exit", "log_regrant_exit"),
            ("grant_sleep", "log_grant_sleep"),
            ("grant_wake", "log_grant_wake"),
            ("grant_wake_up", "log_grant_wake_up"),
            ("cil_wait", "log_cil_wait"),
        )
    },
    **{
        f"xfs:on_{e}": f"xfs:tp_xfs_{e}"
        for e in ("iomap_alloc", "map_blocks_alloc", "map_blocks_found", "delalloc_enospc")
    },
    **{
        f"xfs:place_xfs_{e}": f"xfs:tp_place_xfs_{e}"
        for e in ("lookup", "getattr", "setattr", "create", "remove", "rename", "link")
    },
}


def _requests(rqs: "Map", name_of: Any) -> list[dict[str, Any]]:
    """[{dev, op, phase, requests}] of a per-op block requests map (op_rqs, uring_rqs)."""
    return [
        {"dev": k.dev, "op": name_of(k.nr), "phase": k.phase, "requests": maps.requests_of(v)} for k, v in rqs.items()
    ]


def create_shared_maps() -> dict[str, "SharedMap"]:
    """{name: SharedMap} of bpf/shared_maps.h, made before any object loads; the caller closes them
    once every object holds its own fd."""
    return create_maps("syscalls", [name for name, _, _ in SHARED_MAPS])


def behind_modules(fs: Iterable[str]) -> list["ModuleType"]:
    """The behind-the-wait modules with a BPF object that a Collector for filesystems `fs` loads
    beside syscalls.bpf.o: every filesystem-independent one, and those of `fs`."""
    fs_objects = {f.behind for f in filesystems.TABLE.values()}
    wanted = set(filesystems.behind_objects(fs))
    return [m for m in behind.MODULES if m.OBJECT and (m.OBJECT not in fs_objects or m.OBJECT in wanted)]


def op_records(hist_map: "Map", name_of: Callable[[int], str], moves_bytes: Collection[str]) -> list[dict[str, Any]]:
    """[{dev, op, phase, count, total_ns, ...}] of an op histogram map (op_hist, uring_hist), with
    the bytes (the positive results' sum) of the ops that move them."""
    out = []
    for k, v in hist_map.items():
        op, h = name_of(k.nr), maps.hist_data(v)
        ret_sum = h.pop("ret_sum")
        if op in moves_bytes:
            h["bytes"] = ret_sum
        out.append({"dev": k.dev, "op": op, "phase": k.phase, **h})
    return out


class Collector:
    def __init__(
        self,
        sample_hz=DEFAULT_SAMPLE_HZ,
        fs=filesystems.NAMES,
        stack_sample=DEFAULT_STACK_SAMPLE,
        tail_ns=DEFAULT_TAIL_NS,
        exemplars=maps.EXEMPLARS,
    ):
        """Loads syscalls.bpf.o and the behind-the-wait objects filesystems `fs` need (after
        loading their kernel modules: their tracepoints and types exist only then). With
        stack_sample N > 1, off-CPU and waker stacks are walked in 1 of N calls of an op (windows
        of a worker) once STACK_FIRST of its waits (windows) have been (analysis/attribution.
        split_unwalked divides the rest), except in the tail: a syscall's blocked interval of
        tail_ns or longer has its own stacks and waker in every call. exemplars: how many of each
        op's slowest calls are kept whole (1..maps.EXEMPLARS)."""
        self.objects, self.probes = [], {}
        self.stack_sample, self.tail_ns, self.exemplars_kept = stack_sample, tail_ns, exemplars
        try:
            filesystems.load_modules(fs)
            self._load_all(fs)
            m = self.sys.map
            shared = {name: m(name, k, v) for name, k, v in SHARED_MAPS}
            self.filter = m("filter_cfg", c.c_uint32, maps.Filter)
            shared["stack_sampling"].update(
                c.c_uint32(0),
                maps.StackSampling(every=stack_sample, first=STACK_FIRST, tail_ns=tail_ns, exemplars=exemplars),
            )
            self.tgids = m("traced_tgids", c.c_uint32, c.c_uint8)
            self.phase = shared["phase_state"]
            self.drops = shared["drops"]
            self.stacks, self.stacks_spill = shared["stacks"], shared["stacks_spill"]
            self.worker_windows = shared["worker_windows"]
            self.workers_open = shared["workers_open"]
            self.worker_offcpu = shared["worker_offcpu"]
            self.worker_runs = shared["worker_runs"]
            self.op_rqs = shared["op_rqs"]
            self.uring_rqs = shared["uring_rqs"]
            self.uring_reqs = shared["uring_reqs"]
            self.aio_reqs = m("aio_reqs", maps.AioKey, maps.AioReq)
            self.async_counts = m("async_counts", c.c_uint32, c.c_uint64)
            self.waits_walked = m("waits_walked", maps.OpKey, c.c_uint64)
            self.op_hist = m("op_hist", maps.OpKey, maps.Hist)
            self.uring_hist = m("uring_hist", maps.OpKey, maps.Hist)
            self.uring_enter_wait = m("uring_enter_wait", maps.OpKey, maps.Hist)
            self.uring_offcpu = m("uring_offcpu", maps.UringOffKey, maps.OffVal)
            self.uring_workers_out = m("uring_workers_out", c.c_uint32, maps.UringOut)
            self.offcpu = m("offcpu", maps.OffKey, maps.OffVal)
            self.tail_stacks = m("tail_stacks", c.c_uint32, maps.StackIps)
            self.exemplars = m("exemplars", maps.OpKey, maps.ExemplarSet)
            self.samples = m("samples", maps.SampleKey, c.c_uint64)
            src = m("syscall_dev_source", c.c_uint32, c.c_uint8)
            for nr, source in syscalls.table().values():
                src.update(c.c_uint32(nr), c.c_uint8(source))
            # No on-CPU sampler (left out on this kernel): on-CPU time stays one unsplit "CPU".
            self.sample_hz = sample_hz if "on_sample" in self.sys.programs else 0
            for obj in self.objects:
                obj.attach_all()
            if self.sample_hz:
                self.sys.attach_perf_sampling("on_sample", freq_hz=self.sample_hz)
        except BaseException:
            self.close()
            raise

    def _load_all(self, fs):
        """syscalls.bpf.o and every behind-the-wait object with its Probe, loaded side by side. The
        maps they share are made first, so that no object waits for another; a load is mostly the
        kernel creating maps and verifying programs and libbpf relocating against the kernel's BTF,
        all outside the GIL, so two cores load in about half the time of one. Objects keep the
        order syscalls, then behind.MODULES; the first failure in that order is raised once every
        load has finished, and whatever loaded is closed with the rest by __init__."""
        modules = behind_modules(fs)
        names = ["syscalls"] + [m.OBJECT for m in modules]
        shared = create_shared_maps()
        loaded = {}

        def load(name):
            loaded[name] = obj = BpfObject(name, share=shared, required=CORE_PROGRAMS if name == "syscalls" else None)
            return obj

        try:
            # Signals wait for the loads (the threads inherit the mask): none is left running.
            with signals.deferred(), ThreadPoolExecutor(len(names), thread_name_prefix="fsprof-load") as pool:
                sys_future = pool.submit(load, "syscalls")
                futures = [pool.submit(lambda m: m.Probe(load(m.OBJECT)), m) for m in modules]
            self.sys = sys_future.result()
            for module, future in zip(modules, futures):
                self.probes[module.NAME] = future.result()
        finally:
            self.objects.extend(loaded[n] for n in names if n in loaded)
            for m in shared.values():
                m.close()  # each object holds its own fd of the shared maps

    @property
    def skipped(self) -> dict[str, str]:
        return {f"{o.name}:{p}": why for o in self.objects for p, why in o.skipped.items()}

    def left_out(self, object_name: str) -> list[str]:
        """Programs of an object this kernel lacks or refused (not one whose alternative loaded)."""
        loaded = {f"{o.name}:{p}" for o in self.objects for p in o.programs}
        return sorted(
            p
            for o in self.objects
            if o.name == object_name
            for p, why in o.skipped.items()
            if why != "not requested" and ALTERNATIVES.get(f"{o.name}:{p}") not in loaded
        )

    @property
    def unavailable(self) -> list[dict[str, str]]:
        """[{figures, probe, why}]: what this kernel cannot give, one entry per program left out
        (its tracepoint absent, or refused by the kernel), in result.json and the report."""
        tables = {m.OBJECT: getattr(m, "FIGURES", {}) for m in behind.MODULES}
        tables["syscalls"] = FIGURES
        out = []
        for o in self.objects:
            left_out = set(self.left_out(o.name))
            for prog, why in o.skipped.items():
                if prog not in left_out:
                    continue
                figures = tables.get(o.name, {}).get(prog, f"{o.name} figures fed by {prog}")
                out.append({"figures": figures, "probe": f"{o.name}:{prog}", "why": why})
        if legacy_kernel():
            out += LEGACY_FIGURES_LOST
        return out

    # Who is traced.
    def _set_filter(self, mode, dev=0):
        self.filter.update(c.c_uint32(0), maps.Filter(mode=mode, dev=dev))

    def trace_pid(self, pid: int, dev: int = 0) -> None:
        """Trace process `pid` and its children (threads included), optionally only on superblock dev."""
        self._set_filter(maps.FILTER_PID, dev)
        self.tgids.update(c.c_uint32(pid), c.c_uint8(1))

    def trace_cgroup(self, path: str, dev: int = 0) -> None:
        """Trace every task in the cgroup v2 directory `path` and its descendants."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as e:
            raise FsprofError(f"cannot open cgroup {path}: {e.strerror}")
        try:
            self.sys.map("traced_cgroup", c.c_uint32, c.c_uint32).update(c.c_uint32(0), c.c_uint32(fd))
        finally:
            os.close(fd)
        self._set_filter(maps.FILTER_CGROUP, dev)

    def trace_all(self, dev: int) -> None:
        """Every process, operations on superblock `dev` only (`fsprof record --mount`)."""
        self._set_filter(maps.FILTER_ALL, dev)

    def set_targets(self, targets: list[behind.Target]) -> None:
        """The filesystems under test (a list of behind.Target): what the behind-the-wait probes watch."""
        for probe in self.probes.values():
            probe.set_targets(targets)

    def reset(self) -> None:
        # The open-window count to 0, then a new generation, then the windows cleared: a window is
        # uncounted only in the generation it was counted in, so the count never falls below the
        # windows open (whose switches would then go untimed); one that ends across the reset
        # leaves it above, which costs only lookups (bpf/shared_maps.h workers_open).
        self.workers_open.update(c.c_uint32(0), c.c_int64(0))
        gen = self.workers_open.lookup(c.c_uint32(1))
        self.workers_open.update(c.c_uint32(1), c.c_int64((gen or 0) + 1))
        for m in (
            self.op_hist,
            self.uring_hist,
            self.uring_enter_wait,
            self.uring_offcpu,
            self.uring_workers_out,
            self.offcpu,
            self.samples,
            self.stacks,
            self.stacks_spill,
            self.tail_stacks,
            self.exemplars,
            self.tgids,
            self.worker_offcpu,
            self.worker_windows,
            self.worker_runs,
            self.op_rqs,
            self.uring_rqs,
            self.waits_walked,
        ):
            m.clear()
        for probe in self.probes.values():
            probe.reset()
        self.phase.update(c.c_uint32(0), maps.PhaseState())
        # Per-CPU arrays cannot be cleared; drops are reported as the change since reset.
        self._drops_at_reset = self._read_drops()
        self._misses_at_reset = self._read_misses()
        self._async_at_reset = self._read_async()

    def _read_misses(self):
        return {prog: misses for prog, (_, _, misses) in self.run_stats().items()}

    def _stack(self, sid):
        """The addresses of a stack id: the main map's, the spill map's (bpf/shared_maps.h), or a
        tail stack's (syscalls.bpf.c task_stack_id)."""
        if sid & maps.TAIL_STACK_BIT:
            found = self.tail_stacks.lookup(c.c_uint32(sid & ~maps.TAIL_STACK_BIT))
            return found.ips if found is not None else None
        if sid & maps.SPILL_STACK_BIT:
            return self.stacks_spill.lookup(c.c_uint32(sid & ~maps.SPILL_STACK_BIT))
        return self.stacks.lookup(c.c_uint32(sid))

    def _read_async(self):
        """The requests and iocbs followed and ended so far (maps.ASYNC_COUNTS), and in flight."""
        out = {name: sum(self.async_counts.lookup(c.c_uint32(i)) or [0]) for i, name in enumerate(maps.ASYNC_COUNTS)}
        out["uring_in_flight"], out["aio_in_flight"] = len(self.uring_reqs.keys()), len(self.aio_reqs.keys())
        return out

    def _read_drops(self):
        return [sum(self.drops.lookup(c.c_uint32(i)) or [0]) for i in range(len(maps.DROP_REASONS))]

    def snapshot(self, drain: bool = False) -> dict[str, Any]:
        """Everything the probes aggregated since reset(), as plain data keyed by superblock dev
        and phase index. Stacks are raw addresses; "behind" holds each behind-the-wait probe's own.
        With drain, the stack-keyed aggregates (off-CPU intervals, on-CPU samples, workers' off-CPU
        time), the only ones whose keys grow with what runs, are emptied as they are read (Map.drain),
        and so are the workers' runs, whose on-CPU time is their wall time minus that off-CPU time:
        each snapshot then holds what happened since the one before, and nothing is lost between
        them (fsprof record --continuous). Syscall histograms, block and behind counters stay
        cumulative: their keys are bounded by the filesystems and syscalls traced."""
        now = time.monotonic_ns()
        read = (lambda m: m.drain()) if drain else (lambda m: m.items())
        ops = op_records(self.op_hist, syscalls.name_of, syscalls.MOVES_BYTES)
        # io_uring requests, as ops: their opcode for a syscall number.
        uring = op_records(self.uring_hist, maps.uring_op_name, maps.URING_MOVES_BYTES)
        # The part of io_uring_enter calls spent waiting for completions.
        uring_enter_wait = op_records(self.uring_enter_wait, syscalls.name_of, ())
        offcpu = [
            {
                "dev": k.op.dev,
                "op": syscalls.name_of(k.op.nr),
                "phase": k.op.phase,
                "stack": k.stackid,
                "runnable": bool(k.runnable),
                "tail": bool(k.tail),
                "waker_stack": k.waker_stack,
                "waker_comm": k.waker_comm.decode(errors="replace"),
                "count": v.count,
                "total_ns": v.total_ns,
            }
            for k, v in read(self.offcpu)
        ]
        # io-wq workers' off-CPU time inside io_uring requests, shaped as a worker's records.
        uring_offcpu = [
            {
                "dev": k.op.dev,
                "op": maps.uring_op_name(k.op.nr),
                "phase": k.op.phase,
                "stack": k.stackid,
                "runnable": bool(k.runnable),
                "count": v.count,
                "total_ns": v.total_ns,
            }
            for k, v in read(self.uring_offcpu)
        ]
        samples = [
            {"dev": k.op.dev, "op": syscalls.name_of(k.op.nr), "phase": k.op.phase, "stack": k.stackid, "count": v}
            for k, v in read(self.samples)
        ]
        workers = [
            {
                "dev": k.dev,
                "kind": maps.WORKER_KINDS[k.kind] if k.kind < len(maps.WORKER_KINDS) else str(k.kind),
                "phase": k.phase,
                "stack": k.stackid,
                "runnable": bool(k.runnable),
                "count": v.count,
                "total_ns": v.total_ns,
            }
            for k, v in read(self.worker_offcpu)
        ]
        op_requests = _requests(self.op_rqs, syscalls.name_of)
        # The block requests io_uring requests made (issued inline, or run by an io-wq worker).
        uring_requests = _requests(self.uring_rqs, maps.uring_op_name)
        worker_runs = [
            {
                "dev": k.dev,
                "phase": k.phase,
                "windows": v.windows,
                "wall_ns": v.wall_ns,
                "unseen_windows": v.unseen_windows,
                "unseen_ns": v.unseen_ns,
                "kind": maps.WORKER_KINDS[k.kind] if k.kind < len(maps.WORKER_KINDS) else str(k.kind),
                "requests": maps.requests_of(v.rqs),
            }
            for k, v in read(self.worker_runs)
        ]
        exemplars = [
            {
                "dev": k.dev,
                "op": maps.uring_op_name(k.nr & ~maps.URING_EXEMPLAR_NR)
                if k.nr & maps.URING_EXEMPLAR_NR
                else syscalls.name_of(k.nr),
                "phase": k.phase,
                "calls": maps.exemplars_of(v),
            }
            for k, v in read(self.exemplars)
        ]
        behind_raw = {name: probe.snapshot() for name, probe in self.probes.items()}
        for module in behind.MODULES:  # a summary tells unknown figures from zeros by these
            if module.NAME in behind_raw:
                behind_raw[module.NAME]["left_out"] = self.left_out(module.OBJECT)
        wanted = {r["stack"] for r in offcpu + samples + workers + uring_offcpu} | {r["waker_stack"] for r in offcpu}
        wanted |= {
            s for x in exemplars for call in x["calls"] for w in call["longest"] for s in (w["stack"], w["waker_stack"])
        }
        wanted |= set(behind.stack_ids(behind_raw))
        stacks = {}
        for sid in wanted:
            addrs = self._stack(sid) if sid >= 0 else None
            if addrs is not None:
                stacks[sid] = [a for a in addrs if a]
        ps = self.phase.lookup(c.c_uint32(0))
        drops = [
            n - base
            for n, base in zip(
                self._read_drops(), getattr(self, "_drops_at_reset", None) or [0] * len(maps.DROP_REASONS)
            )
        ]
        return {
            "ops": ops,
            "uring": uring,
            "uring_enter_wait": uring_enter_wait,
            "uring_offcpu": uring_offcpu,
            "offcpu": offcpu,
            "exemplars": exemplars,
            "exemplars_kept": self.exemplars_kept,
            "samples": samples,
            "workers": workers,
            "stacks": stacks,
            "op_requests": op_requests,
            "uring_requests": uring_requests,
            "worker_runs": worker_runs,
            "requests_per_op": "on_getrq" in self.sys.programs,
            "uring_enter_split": "on_uring_cqring_wait" in self.sys.programs,
            "block": behind_raw.get("block", {}).get("counts", {}),
            "behind": behind_raw,
            "phase_start_ns": list(ps.start_ns),
            "snapshot_ns": now,
            "sample_hz": self.sample_hz,
            "stack_sampling": (
                {"every": self.stack_sample, "first": STACK_FIRST, "tail_threshold_ns": self.tail_ns}
                if self.stack_sample > 1
                else None
            ),
            "drops": dict(zip(maps.DROP_REASONS, drops))
            | maps.async_lost(self._read_async(), getattr(self, "_async_at_reset", {}))
            | self._skipped_since_reset(),
        }

    def _skipped_since_reset(self):
        """{"<object>:<program> skipped": n} of the programs the kernel skipped since reset (maps.SKIPPED)."""
        base = getattr(self, "_misses_at_reset", {})
        return {
            maps.skipped_reason(prog): n - base.get(prog, 0)
            for prog, n in self._read_misses().items()
            if n > base.get(prog, 0)
        }

    def forget_stacks(self) -> None:
        """Empties the stack maps (their ids are meaningful only to snapshots already taken): a
        continuous recording's stacks stay bounded by what one stretch of windows sees."""
        self.stacks.clear()
        self.stacks_spill.clear()
        self.tail_stacks.clear()

    def run_stats(self) -> dict[str, tuple[int, int, int]]:
        """{object:program: (run_cnt, run_time_ns, recursion_misses)} of every loaded program."""
        return {f"{o.name}:{p}": v for o in self.objects for p, v in o.run_stats().items()}

    def stop(self) -> None:
        """Detach every program, keeping the maps to read: a snapshot taken after it is of a
        recording that has ended, and the classic tracepoint's slow detach (bpf.destroy_links)
        has begun while the snapshot is taken."""
        detach_all(self.objects)

    def close(self) -> None:
        """Detach everything; the one classic tracepoint's link, whose detach waits in the kernel,
        goes on a thread of its own that the process waits for before exiting (bpf.destroy_links)."""
        close_all(reversed(self.objects))
        self.objects = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
