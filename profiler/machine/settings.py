"""The system settings fsprof changes for a run (sysctls, I/O scheduler, write cache), each recorded
in the undo journal before it is changed; and dropping caches."""

import os

from profiler.errors import FsprofError
from profiler.machine.blockdev import scheduler
from profiler.machine.undo import (
    Changes,
    read_sysctl,
    read_write_cache,
    same_sysctl,
    sysctl_path,
    write_cache_path,
    write_scheduler,
    write_sysctl,
    write_write_cache,
)

# Each pair keeps exactly one member non-zero and writing one zeroes the other; vm.dirty_bytes cannot be
# written back to 0, so a pair is restored by writing whichever member was non-zero before.
_SYSCTL_PARTNERS = {
    "vm.dirty_bytes": "vm.dirty_ratio",
    "vm.dirty_ratio": "vm.dirty_bytes",
    "vm.dirty_background_bytes": "vm.dirty_background_ratio",
    "vm.dirty_background_ratio": "vm.dirty_background_bytes",
}


def set_sysctl(changes: Changes, name: str, value: str | int) -> None:
    """Set /proc/sys/<name> (e.g. "vm.dirty_bytes") after recording how to restore it."""
    value = str(value)
    try:
        old = read_sysctl(name)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        raise FsprofError(f"unknown sysctl '{name}' (there is no file {sysctl_path(name)})") from None
    if same_sysctl(old, value):
        return
    fields = {"name": name, "old": old, "new": value}
    partner = _SYSCTL_PARTNERS.get(name)
    if partner and same_sysctl(old, "0"):
        fields.update(restore_name=partner, restore_value=read_sysctl(partner))
    changes.record("sysctl", **fields)
    try:
        write_sysctl(name, value)
    except OSError as e:
        raise FsprofError(f"the kernel rejected {name} = {value}: {e.strerror}") from None


def set_scheduler(changes: Changes, blockdev_name: str, sched: str) -> None:
    """Set the I/O scheduler of a block device ("loop3" or "/dev/loop3") after recording the old one."""
    device = os.path.basename(blockdev_name)
    try:
        current, available = scheduler(device)
    except FileNotFoundError:
        raise FsprofError(
            f"block device '{device}' has no I/O scheduler setting (no /sys/block/{device}/queue/scheduler)"
        ) from None
    if sched not in available:
        raise FsprofError(f"I/O scheduler '{sched}' is not available for {device}; choose from {', '.join(available)}")
    if sched == current:
        return
    changes.record("scheduler", device=device, old=current, new=sched)
    write_scheduler(device, sched)


WRITE_CACHE_MODES = ("write back", "write through")


def set_write_cache(changes: Changes, blockdev_name: str, mode: str) -> None:
    """Set a block device's write cache mode ("write back" or "write through") after recording the
    old one. "write through" tells the block layer the device has no volatile cache: it then drops
    every cache flush and FUA before they are queued (what `fsprof verify` tests barriers against)."""
    device = os.path.basename(blockdev_name)
    if mode not in WRITE_CACHE_MODES:
        raise FsprofError(f"write cache mode '{mode}' is not one of {', '.join(WRITE_CACHE_MODES)}")
    try:
        current = read_write_cache(device)
    except FileNotFoundError:
        raise FsprofError(f"block device '{device}' has no write cache setting ({write_cache_path(device)})") from None
    if current == mode:
        return
    changes.record("write_cache", device=device, old=current, new=mode)
    try:
        write_write_cache(device, mode)
    except OSError as e:
        raise FsprofError(f"the kernel rejected write cache '{mode}' for {device}: {e.strerror}") from None


def drop_caches() -> None:
    """Write back dirty data, then drop page cache, dentries and inodes, for a cold-cache start."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")
