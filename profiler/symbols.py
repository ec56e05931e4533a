"""Kernel addresses to function names, from /proc/kallsyms (read once per process)."""

import bisect
import re
from functools import lru_cache
from pathlib import Path


# Compiler clones (foo.isra.0, foo.constprop.0, foo.part.0, foo.cold) are the same function to a
# reader and to the cause rules.
_CLONE_SUFFIX = re.compile(r"(\.(isra|constprop|part|cold|llvm)(\.\d+)?)+$")


@lru_cache(maxsize=1)
def _table():
    addrs, names = [], []
    for line in Path("/proc/kallsyms").read_text().splitlines():
        parts = line.split()
        if len(parts) < 3 or parts[1] not in "tTwW":  # text symbols only
            continue
        addr = int(parts[0], 16)
        if addr:
            addrs.append(addr)
            names.append(_CLONE_SUFFIX.sub("", parts[2]))
    order = sorted(range(len(addrs)), key=addrs.__getitem__)
    return [addrs[i] for i in order], [names[i] for i in order]


def available():
    addrs, _ = _table()
    return bool(addrs)


def name(addr):
    addrs, names = _table()
    i = bisect.bisect_right(addrs, addr) - 1
    return names[i] if i >= 0 else f"0x{addr:x}"


def symbolize(stacks):
    """{stack id: [addr, ...]} -> {stack id: [function, ...]}, innermost frame first."""
    return {sid: [name(a) for a in addrs] for sid, addrs in stacks.items()}
