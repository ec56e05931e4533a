"""Block devices as sysfs shows them: the /sys/block/<dev>/stat counters (an oracle for what the
BPF probes count), queue settings, and the kernel's dev_t encoding used in tracepoints."""

import os
import stat
import time
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import Any, TypeVar

from .mounts import mounts

_T = TypeVar("_T")

SYS_BLOCK = Path("/sys/block")
CLASS_BLOCK = Path("/sys/class/block")  # disks and partitions alike

# Documentation/block/stat.rst, in order.
STAT_FIELDS = (
    "read_ios",
    "read_merges",
    "read_sectors",
    "read_ticks_ms",
    "write_ios",
    "write_merges",
    "write_sectors",
    "write_ticks_ms",
    "in_flight",
    "io_ticks_ms",
    "time_in_queue_ms",
    "discard_ios",
    "discard_merges",
    "discard_sectors",
    "discard_ticks_ms",
    "flush_ios",
    "flush_ticks_ms",
)


def kdev(major: int, minor: int) -> int:
    """The kernel's internal dev_t (MKDEV), as tracepoints and super_block.s_dev carry it."""
    return (major << 20) | minor


def kdev_str(dev: int) -> str:
    return f"{dev >> 20}:{dev & 0xFFFFF}"


def name_of_kdev(dev: int) -> str:
    """A block device's name (vda, loop0) from its kernel dev_t, as sysfs has it now; major:minor
    when no such device is there."""
    node = Path(f"/sys/dev/block/{kdev_str(dev)}")
    return node.resolve().name if node.exists() else kdev_str(dev)


def whole_disk(name: str) -> str:
    """The disk a partition belongs to ('sda' for 'sda1'): block tracepoints and flush counters
    are per disk, so a partition's I/O is counted on its disk (with its sibling partitions')."""
    node = CLASS_BLOCK / name
    return node.resolve().parent.name if (node / "partition").exists() else name


def kdev_of_block(name: str) -> int:
    major, minor = (CLASS_BLOCK / name / "dev").read_text().split(":")
    return kdev(int(major), int(minor))


def read_stat(name: str) -> dict[str, int]:
    values = [int(v) for v in (CLASS_BLOCK / name / "stat").read_text().split()]
    return dict(zip(STAT_FIELDS, values))


def wait_idle(names: Iterable[str], timeout_s: float = 2.0) -> None:
    """Waits (at most timeout_s) until the devices `names` have no request in flight (the stat's
    in_flight column: issued to the driver, not completed)."""
    deadline = time.monotonic() + timeout_s
    while any(read_stat(n)["in_flight"] for n in names) and time.monotonic() < deadline:
        time.sleep(0.001)


def read_settled(
    names: Collection[str], take: Callable[[], _T], timeout_s: float = 5.0
) -> tuple[_T, dict[str, dict[str, int]], bool]:
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


def stat_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after if k != "in_flight"}


def scheduler(name: str) -> tuple[str | None, list[str]]:
    """(active, available) I/O schedulers of a block device, from the bracketed sysfs list."""
    words = (SYS_BLOCK / name / "queue" / "scheduler").read_text().split()
    active = next((w[1:-1] for w in words if w.startswith("[")), None)
    return active, [w.strip("[]") for w in words]


def queue_info(name: str) -> dict[str, Any]:
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
    return {
        "write_cache": read("write_cache"),
        "fua": read("fua") == "1",
        "scheduler": active,
        "rotational": read("rotational") == "1",
    }


# Where a loop device's I/O lands.


def disks_below(name: str) -> list[str]:
    """The disks carrying block device `name`: itself, its whole disk for a partition, or the disks
    under a device-mapper/md device (bio-based: requests are only seen on the disks below)."""
    disk = whole_disk(name)
    slaves = SYS_BLOCK / disk / "slaves"
    below = sorted(os.listdir(slaves)) if slaves.is_dir() else []
    if not below:
        return [disk]
    return [d for s in below for d in disks_below(s)]


def block_dev_of_file(path: str) -> str | None:
    """The block device the filesystem holding `path` lives on, or None (tmpfs, network, ...)."""
    st = os.stat(path)
    node = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    if node.exists():
        return node.resolve().name
    # btrfs (and overlay) files carry an anonymous st_dev: the mount's source names the device.
    real = os.path.realpath(path)
    best = None
    for m in mounts():
        t = m["target"].rstrip("/") + "/"
        if real.startswith(t) and (best is None or len(t) > len(best["target"].rstrip("/") + "/")):
            best = m
    if best and best["source"].startswith("/dev/") and os.path.exists(best["source"]):
        return os.path.basename(os.path.realpath(best["source"]))
    return None


def backing_of(name: str) -> dict[str, Any] | None:
    """{"file", "direct_io", "disks": [names]} for loop device `name`; None for any other device."""
    loop = SYS_BLOCK / name / "loop"
    try:
        path = (loop / "backing_file").read_text().strip()
    except OSError:
        return None
    try:
        dio = (loop / "dio").read_text().strip() == "1"
    except OSError:
        dio = False
    try:
        dev = block_dev_of_file(path.removesuffix(" (deleted)"))
    except OSError:
        dev = None
    return {"file": path, "direct_io": dio, "disks": disks_below(dev) if dev else []}


def _read(path):
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def test_bed(name: str) -> dict[str, Any]:
    """What stands behind a block device, as far as it changes what a measurement means:
    {"kind": "loop" | "zram" | "null_blk" | "disk", ...}. For a loop device: its backing file, whether it
    passes I/O through (direct I/O: reads and flushes reach the backing disk) or goes through
    the host's page cache (buffered), and that disk's write cache and rotation. A device-mapper
    device over one disk is that disk's test bed, with "mapper": its own name."""
    slaves = SYS_BLOCK / name / "slaves"
    under = sorted(os.listdir(slaves)) if slaves.is_dir() else []
    if len(under) == 1:
        return {**test_bed(under[0]), "mapper": name}
    below = backing_of(name)
    if below:
        disk = below["disks"][0] if below["disks"] else None
        out = {"kind": "loop", "backing_file": below["file"], "direct_io": below["direct_io"], "backing_disk": disk}
        if disk:
            q = queue_info(disk)
            out.update(backing_write_cache=q["write_cache"], backing_rotational=q["rotational"])
        return out
    if name.startswith("zram"):
        return {"kind": "zram"}
    if _driver_of(name) == "nullb":
        return {"kind": "null_blk"}
    return {"kind": "disk"}


def _driver_of(name: str) -> str | None:
    """The block driver that registered the device's major number (/proc/devices), e.g. "nullb":
    a null_blk device made through configfs has the name its maker gave it."""
    try:
        major = (SYS_BLOCK / name / "dev").read_text().split(":")[0]
        with open("/proc/devices") as f:
            block = f.read().partition("Block devices:")[2]
    except OSError:
        return None
    return next((w[1] for w in (line.split() for line in block.splitlines()) if len(w) == 2 and w[0] == major), None)


def space(mountpoint: str) -> dict[str, int]:
    """{size_bytes, used_bytes} of the filesystem at `mountpoint`, as df counts them (statvfs:
    blocks in all, less the free ones, in fragment-size units)."""
    st = os.statvfs(mountpoint)
    return {"size_bytes": st.f_blocks * st.f_frsize, "used_bytes": (st.f_blocks - st.f_bfree) * st.f_frsize}


def majmin_of(path: str) -> str | None:
    """ "major:minor" of a block device path, or None if it is not one."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}" if stat.S_ISBLK(st.st_mode) else None
