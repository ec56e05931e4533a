"""Block requests to the devices under test (bpf/block.bpf.c): counts and bytes per class and
phase, from block_rq_issue."""

import ctypes as c

from .. import maps

NAME = "block"
OBJECT = "block"


class Probe:
    def __init__(self, obj):
        self.obj = obj
        self.devs = obj.map("traced_devs", c.c_uint32, c.c_uint8)
        self.counts = obj.map("blk_counts", maps.BlkKey, maps.BlkVal)
        self.names = {}

    def set_targets(self, targets):
        self.devs.clear()
        self.names = {kdev: name for t in targets for kdev, name in t.block_devs.items()}
        for kdev in self.names:
            self.devs.update(c.c_uint32(kdev), c.c_uint8(1))

    def reset(self):
        self.counts.clear()

    def snapshot(self):
        """{"counts": {device name: {phase index: {class: {count, bytes}}}}}"""
        counts = {}
        for k, v in self.counts.items():
            if k.dev in self.names:
                entry = counts.setdefault(self.names[k.dev], {}).setdefault(k.phase, {})
                cls = entry.setdefault(maps.BLK_CLASSES[k.cls], {"count": 0, "bytes": 0})
                cls["count"] += sum(x.count for x in v)
                cls["bytes"] += sum(x.bytes for x in v)
        return {"counts": counts}


def summarize(raw, ctx):
    # The counts are in the entry's "block" fields (assemble); request timing comes with issue 5.
    return {}


def report_lines(section, fs):
    return []
