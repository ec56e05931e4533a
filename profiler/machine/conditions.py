"""Conditions that decide whether two runs are comparable, read from the machine as it is."""

from pathlib import Path

# Writeback sysctls change what fsync and write cost: recorded in every result, set or not.
WRITEBACK_SYSCTLS = ("vm.dirty_bytes", "vm.dirty_ratio", "vm.dirty_background_bytes", "vm.dirty_background_ratio",
                     "vm.dirty_expire_centisecs", "vm.dirty_writeback_centisecs")


def sysctls_in_force(names=WRITEBACK_SYSCTLS):
    values = {}
    for name in names:
        try:
            values[name] = Path("/proc/sys", *name.split(".")).read_text().strip()
        except OSError:
            continue  # not on this kernel: left out rather than guessed
    return values
