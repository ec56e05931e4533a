"""Collection: loads fsprof's BPF objects once, points them at the processes and devices under
test, and turns their in-kernel aggregates into plain data. Nothing here sees a per-I/O event."""

import ctypes as c

from . import maps, syscalls
from .bpf import BpfObject
from .blockdev import kdev_str


class Collector:
    def __init__(self):
        self.objects = []
        try:
            self.sys = self._load("syscalls")
            self.blk = self._load("block")
            self.tgids = self.sys.map("traced_tgids", c.c_uint32, c.c_uint8)
            self.op_hist = self.sys.map("op_hist", maps.OpKey, maps.Hist)
            self.devs = self.blk.map("traced_devs", c.c_uint32, c.c_uint8)
            self.blk_counts = self.blk.map("blk_counts", maps.BlkKey, maps.BlkVal)
            src = self.sys.map("syscall_dev_source", c.c_uint32, c.c_uint8)
            for nr, source in syscalls.table().values():
                src.update(c.c_uint32(nr), c.c_uint8(source))
            for obj in self.objects:
                obj.attach_all()
        except BaseException:
            self.close()
            raise

    def _load(self, name):
        obj = BpfObject(name)
        self.objects.append(obj)
        return obj

    @property
    def skipped(self):
        return {f"{o.name}:{p}": why for o in self.objects for p, why in o.skipped.items()}

    def trace_pid(self, pid):
        self.tgids.update(c.c_uint32(pid), c.c_uint8(1))

    def trace_devices(self, kdevs):
        self.devs.clear()
        for dev in kdevs:
            self.devs.update(c.c_uint32(dev), c.c_uint8(1))

    def reset(self):
        self.op_hist.clear()
        self.blk_counts.clear()

    def snapshot(self, sb_dev, block_devs):
        """Syscalls on the filesystem with superblock `sb_dev`, and requests to `block_devs`
        ({kdev: name}), as plain data. Syscalls of the traced processes whose filesystem could not
        be told (an absolute path, sync, io_uring_enter, a failed open) are kept apart as
        "unresolved", so that nothing traced silently disappears."""
        ops, unresolved = {}, {}
        for key, per_cpu in self.op_hist.items():
            if key.dev in (sb_dev, 0):
                (ops if key.dev else unresolved)[syscalls.name_of(key.nr)] = maps.sum_hists(per_cpu)
        block = {name: {cls: {"count": 0, "bytes": 0} for cls in maps.BLK_CLASSES}
                 for name in block_devs.values()}
        for key, per_cpu in self.blk_counts.items():
            if key.dev in block_devs:
                entry = block[block_devs[key.dev]][maps.BLK_CLASSES[key.cls]]
                entry["count"] += sum(v.count for v in per_cpu)
                entry["bytes"] += sum(v.bytes for v in per_cpu)
        return {"superblock_dev": kdev_str(sb_dev), "syscalls": ops, "unresolved_syscalls": unresolved,
                "block": block}

    def close(self):
        for obj in self.objects:
            obj.close()
        self.objects = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
