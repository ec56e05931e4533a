"""Block devices as sysfs shows them: the /sys/block/<dev>/stat counters (an oracle for what the
BPF probes count), queue settings, and the kernel's dev_t encoding used in tracepoints."""

import time
from pathlib import Path

SYS_BLOCK = Path("/sys/block")
CLASS_BLOCK = Path("/sys/class/block")  # disks and partitions alike

# Documentation/block/stat.rst, in order.
STAT_FIELDS = ("read_ios", "read_merges", "read_sectors", "read_ticks_ms",
               "write_ios", "write_merges", "write_sectors", "write_ticks_ms",
               "in_flight", "io_ticks_ms", "time_in_queue_ms",
               "discard_ios", "discard_merges", "discard_sectors", "discard_ticks_ms",
               "flush_ios", "flush_ticks_ms")


def kdev(major, minor):
    """The kernel's internal dev_t (MKDEV), as tracepoints and super_block.s_dev carry it."""
    return (major << 20) | minor


def kdev_str(dev):
    return f"{dev >> 20}:{dev & 0xfffff}"


def whole_disk(name):
    """The disk a partition belongs to ('sda' for 'sda1'): block tracepoints and flush counters
    are per disk, so a partition's I/O is counted on its disk (with its sibling partitions')."""
    node = CLASS_BLOCK / name
    return node.resolve().parent.name if (node / "partition").exists() else name


def kdev_of_block(name):
    major, minor = (CLASS_BLOCK / name / "dev").read_text().split(":")
    return kdev(int(major), int(minor))


def read_stat(name):
    values = [int(v) for v in (CLASS_BLOCK / name / "stat").read_text().split()]
    return dict(zip(STAT_FIELDS, values))


def wait_idle(names, timeout_s=2.0):
    """Waits (at most timeout_s) until the devices `names` have no request in flight (the stat's
    in_flight column: issued to the driver, not completed)."""
    deadline = time.monotonic() + timeout_s
    while any(read_stat(n)["in_flight"] for n in names) and time.monotonic() < deadline:
        time.sleep(0.001)


def read_settled(names, take, timeout_s=5.0):
    """Calls take() while the devices `names` are quiet; returns (take()'s result, their stats,
    settled). Quiet: nothing in flight, and the stats read just before take() equal those read
    just after, so take() saw exactly the requests the stats count. A filesystem keeps writing
    after its workload ends (a btrfs commit's metadata, XFS's log), and a request completed
    between a snapshot and the stat read would count on one side only. Tries again until
    timeout_s; then `settled` is False and the last attempt is returned."""
    deadline = time.monotonic() + timeout_s
    while True:
        wait_idle(names, max(0.0, deadline - time.monotonic()))
        before = {n: read_stat(n) for n in names}
        result = take()
        after = {n: read_stat(n) for n in names}
        settled = after == before and not any(s["in_flight"] for s in after.values())
        if settled or time.monotonic() >= deadline:
            return result, after, settled


def stat_delta(before, after):
    return {k: after[k] - before[k] for k in after if k != "in_flight"}


def scheduler(name):
    """(active, available) I/O schedulers of a block device, from the bracketed sysfs list."""
    words = (SYS_BLOCK / name / "queue" / "scheduler").read_text().split()
    active = next((w[1:-1] for w in words if w.startswith("[")), None)
    return active, [w.strip("[]") for w in words]


def queue_info(name):
    """What the block layer does with flushes depends on these: no volatile cache, no flushes."""
    q = SYS_BLOCK / name / "queue"

    def read(f):
        try:
            return (q / f).read_text().strip()
        except OSError:
            return None

    try:
        active = scheduler(name)[0] or "none"
    except OSError:
        active = None
    return {"write_cache": read("write_cache"), "fua": read("fua") == "1", "scheduler": active,
            "rotational": read("rotational") == "1"}
