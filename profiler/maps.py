"""Python mirrors of the structs in bpf/fsprof.h. The loader checks each size against the map's
BTF-declared size at open, so a change on one side without the other fails at once."""

import ctypes as c

HIST_SLOTS = 40

# enum dev_source
DEV_SRC_NONE, DEV_SRC_FD, DEV_SRC_RET_FD, DEV_SRC_DIRFD, DEV_SRC_CWD, DEV_SRC_GLOBAL = range(6)

# enum blk_class, in order
BLK_CLASSES = ("flush", "fua_write", "write", "read", "discard", "other")


class Hist(c.Structure):
    _fields_ = [("count", c.c_uint64), ("total_ns", c.c_uint64), ("max_ns", c.c_uint64),
                ("slots", c.c_uint64 * HIST_SLOTS)]


class OpKey(c.Structure):
    _fields_ = [("dev", c.c_uint32), ("nr", c.c_uint32)]


class BlkKey(c.Structure):
    _fields_ = [("dev", c.c_uint32), ("cls", c.c_uint32)]


class BlkVal(c.Structure):
    _fields_ = [("count", c.c_uint64), ("bytes", c.c_uint64)]


def sum_hists(per_cpu):
    """One histogram (as plain data) from the per-CPU copies of a struct hist."""
    return {
        "count": sum(h.count for h in per_cpu),
        "total_ns": sum(h.total_ns for h in per_cpu),
        "max_ns": max(h.max_ns for h in per_cpu),
        "log2_ns": [sum(h.slots[i] for h in per_cpu) for i in range(HIST_SLOTS)],
    }
