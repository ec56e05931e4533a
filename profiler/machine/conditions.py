"""Conditions that decide whether two runs are comparable, read from the machine as it is."""

import gzip
import os
import re
from collections.abc import Iterable
from pathlib import Path

from .tracefs import TRACEFS

# Writeback sysctls change what fsync and write cost: recorded in every result, set or not.
WRITEBACK_SYSCTLS = (
    "vm.dirty_bytes",
    "vm.dirty_ratio",
    "vm.dirty_background_bytes",
    "vm.dirty_background_ratio",
    "vm.dirty_expire_centisecs",
    "vm.dirty_writeback_centisecs",
)


def sysctls_in_force(names: Iterable[str] = WRITEBACK_SYSCTLS) -> dict[str, str]:
    values = {}
    for name in names:
        try:
            values[name] = Path("/proc/sys", *name.split(".")).read_text().strip()
        except OSError:
            continue  # not on this kernel: left out rather than guessed
    return values


def kernel_hz() -> int | None:
    """CONFIG_HZ of the running kernel (jiffies per second), or None: from writeback_single_inode's
    format, which prints an inode's age as (jiffies - dirtied_when) / HZ, else the kernel config."""
    try:
        m = re.search(
            r"jiffies - REC->dirtied_when\) / (\d+)",
            (TRACEFS / "events/writeback/writeback_single_inode/format").read_text(),
        )
        if m:
            return int(m.group(1))
    except OSError:
        pass
    for path, opener in (("/proc/config.gz", gzip.open), (f"/boot/config-{os.uname().release}", open)):
        try:
            with opener(path, "rt") as f:
                for line in f:
                    m = re.match(r"CONFIG_HZ=(\d+)$", line.strip())
                    if m:
                        return int(m.group(1))
        except OSError:
            continue
    return None
