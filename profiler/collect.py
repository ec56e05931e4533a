"""Collection: loads fsprof's BPF objects once, points them at the processes and devices under
test, and turns their in-kernel aggregates into plain data. Nothing here sees a per-I/O event."""

import ctypes as c
import os
import time

from . import maps, syscalls
from .bpf import BpfObject
from .errors import FsprofError

DEFAULT_SAMPLE_HZ = 999


class Collector:
    def __init__(self, sample_hz=DEFAULT_SAMPLE_HZ):
        self.objects = []
        try:
            self.sys = self._load("syscalls")
            self.blk = self._load("block", share={"phase_state": self.sys.map("phase_state", c.c_uint32, maps.PhaseState),
                                                  "drops": self.sys.map("drops", c.c_uint32, c.c_uint64)})
            m = self.sys.map
            self.filter = m("filter_cfg", c.c_uint32, maps.Filter)
            self.tgids = m("traced_tgids", c.c_uint32, c.c_uint8)
            self.phase = m("phase_state", c.c_uint32, maps.PhaseState)
            self.drops = m("drops", c.c_uint32, c.c_uint64)
            self.op_hist = m("op_hist", maps.OpKey, maps.Hist)
            self.offcpu = m("offcpu", maps.OffKey, maps.OffVal)
            self.samples = m("samples", maps.SampleKey, c.c_uint64)
            self.stacks = m("stacks", c.c_uint32, maps.Stack)
            self.devs = self.blk.map("traced_devs", c.c_uint32, c.c_uint8)
            self.blk_counts = self.blk.map("blk_counts", maps.BlkKey, maps.BlkVal)
            src = m("syscall_dev_source", c.c_uint32, c.c_uint8)
            for nr, source in syscalls.table().values():
                src.update(c.c_uint32(nr), c.c_uint8(source))
            self.sample_hz = sample_hz
            for obj in self.objects:
                obj.attach_all()
            if sample_hz:
                self.sys.attach_perf_sampling("on_sample", freq_hz=sample_hz)
        except BaseException:
            self.close()
            raise

    def _load(self, name, share=None):
        obj = BpfObject(name, share=share)
        self.objects.append(obj)
        return obj

    @property
    def skipped(self):
        return {f"{o.name}:{p}": why for o in self.objects for p, why in o.skipped.items()}

    # Who is traced.
    def _set_filter(self, mode, dev=0):
        self.filter.update(c.c_uint32(0), maps.Filter(mode=mode, dev=dev))

    def trace_pid(self, pid, dev=0):
        """Trace process `pid` and its children (threads included), optionally only on superblock dev."""
        self._set_filter(maps.FILTER_PID, dev)
        self.tgids.update(c.c_uint32(pid), c.c_uint8(1))

    def trace_cgroup(self, path, dev=0):
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

    def trace_all(self, dev):
        """Every process, operations on superblock `dev` only (`fsprof record --mount`)."""
        self._set_filter(maps.FILTER_ALL, dev)

    def trace_devices(self, kdevs):
        self.devs.clear()
        for dev in kdevs:
            self.devs.update(c.c_uint32(dev), c.c_uint8(1))

    def reset(self):
        for m in (self.op_hist, self.offcpu, self.samples, self.blk_counts, self.stacks, self.tgids):
            m.clear()
        self.phase.update(c.c_uint32(0), maps.PhaseState())
        # Per-CPU arrays cannot be cleared; drops are reported as the change since reset.
        self._drops_at_reset = self._read_drops()

    def _read_drops(self):
        return [sum(self.drops.lookup(c.c_uint32(i)) or [0]) for i in range(len(maps.DROP_REASONS))]

    def snapshot(self, block_devs):
        """Everything the probes aggregated since reset(), as plain data keyed by superblock dev
        and phase index; block requests of `block_devs` ({kdev: name}). Stacks are raw addresses."""
        now = time.monotonic_ns()
        ops = [{"dev": k.dev, "op": syscalls.name_of(k.nr), "phase": k.phase, **maps.sum_hists(v)}
               for k, v in self.op_hist.items()]
        offcpu = [{"dev": k.op.dev, "op": syscalls.name_of(k.op.nr), "phase": k.op.phase, "stack": k.stackid,
                   "runnable": bool(k.runnable), "count": sum(x.count for x in v),
                   "total_ns": sum(x.total_ns for x in v)} for k, v in self.offcpu.items()]
        samples = [{"dev": k.op.dev, "op": syscalls.name_of(k.op.nr), "phase": k.op.phase, "stack": k.stackid,
                    "count": sum(v)} for k, v in self.samples.items()]
        wanted = {r["stack"] for r in offcpu + samples if r["stack"] >= 0}
        stacks = {}
        for sid in wanted:
            addrs = self.stacks.lookup(c.c_uint32(sid))
            if addrs is not None:
                stacks[sid] = [a for a in addrs if a]
        block = {}
        for k, v in self.blk_counts.items():
            if k.dev in block_devs:
                entry = block.setdefault(block_devs[k.dev], {}).setdefault(k.phase, {})
                cls = entry.setdefault(maps.BLK_CLASSES[k.cls], {"count": 0, "bytes": 0})
                cls["count"] += sum(x.count for x in v)
                cls["bytes"] += sum(x.bytes for x in v)
        ps = self.phase.lookup(c.c_uint32(0))
        drops = [n - base for n, base in zip(self._read_drops(), getattr(self, "_drops_at_reset", None) or
                                             [0] * len(maps.DROP_REASONS))]
        return {"ops": ops, "offcpu": offcpu, "samples": samples, "stacks": stacks, "block": block,
                "phase_start_ns": list(ps.start_ns), "snapshot_ns": now, "sample_hz": self.sample_hz,
                "drops": dict(zip(maps.DROP_REASONS, drops))}

    def close(self):
        for obj in reversed(self.objects):
            obj.close()
        self.objects = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
