"""Flag values the running kernel keeps in #defines or anonymous enums, which CO-RE cannot relocate.

bpf/compat.h asks CO-RE first (a named enum, as on 6.18); where the kernel has none, BPF reads
these from its `kernel_flags` map, which the loader fills from here. Each value is found in what
the kernel itself publishes: its BTF's enumerators (6.12 has the request flags in an anonymous
enum), the print format of a tracepoint that prints the flags (inode state, #defines on 6.1 and
6.12), and for the request flags of 6.1 (#defines printed nowhere) the values of its blk-mq.h.
A value not found is 0: the figure that needs it is then not split by it. Also what no BTF holds
and libbpf would otherwise look up at every load (a __kconfig or __ksym): CONFIG_HZ, and the
address of global_wb_domain (balance_dirty_pages' limit on 6.1 and 6.12) from /proc/kallsyms.
"""

import hashlib
import json
import os
import platform
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ..machine import conditions, tracefs

_T = TypeVar("_T")

CACHE_DIR = Path(os.environ.get("FSPROF_CORE_BTF_DIR", "/var/tmp/fsprof/cache/core-btf"))
FIELDS = (
    "rqf_flush_seq",
    "rqf_use_sched",
    "i_dirty_sync",
    "i_dirty_datasync",
    "i_dirty_time",
    "hz",
    "global_wb_domain",
)
# include/linux/blk-mq.h of 6.1: RQF_FLUSH_SEQ (1 << 4); RQF_ELV (1 << 22), renamed RQF_USE_SCHED in 6.5.
# include/linux/blkdev.h of 5.10: RQF_FLUSH_SEQ (1 << 4), and no flag for "went through a scheduler".
_RQF_OLD = {"6.1.": {"rqf_flush_seq": 1 << 4, "rqf_use_sched": 1 << 22}, "5.10.": {"rqf_flush_seq": 1 << 4}}
_ENUMERATORS = {"rqf_flush_seq": "__RQF_FLUSH_SEQ", "rqf_use_sched": "__RQF_USE_SCHED"}  # bit numbers
_INODE_FLAGS = {"i_dirty_sync": "I_DIRTY_SYNC", "i_dirty_datasync": "I_DIRTY_DATASYNC", "i_dirty_time": "I_DIRTY_TIME"}
_EXPR = re.compile(r"^[0-9xXa-fA-F()<|\s]+$")


def _btf_enumerators(names):
    """{enumerator: value} of `names` in the kernel's BTF (bpftool's raw dump), {} without bpftool."""
    try:
        proc = subprocess.run(
            ["bpftool", "btf", "dump", "file", "/sys/kernel/btf/vmlinux"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    found = {}
    for m in re.finditer(r"^\s+'(\w+)' val=(-?\d+)$", proc.stdout, re.M):
        if m[1] in names:
            found[m[1]] = int(m[2])
    return found


def _from_print_format(flag):
    """The value of inode state flag `flag` as writeback_mark_inode_dirty prints it, or None."""
    path = tracefs.TRACEFS / "events" / "writeback" / "writeback_mark_inode_dirty" / "format"
    try:
        text = path.read_text()
    except OSError:
        return None
    m = re.search(r"\{\s*([^{},]+?)\s*,\s*\"" + flag + r"\"\s*\}", text)
    if not m or not _EXPR.match(m[1].replace("<<", "<")):
        return None  # an enum the kernel names instead of a number: CO-RE finds those
    try:
        return int(eval(m[1], {"__builtins__": {}}))  # numbers, parentheses, shifts, ors (checked above)
    except Exception:
        return None


def _find():
    wanted = set(_ENUMERATORS.values()) | set(_INODE_FLAGS.values())
    enums = _btf_enumerators(wanted)
    out = {}
    for field, name in _ENUMERATORS.items():
        if name in enums:
            out[field] = 1 << enums[name]
        else:
            old = next((v for k, v in _RQF_OLD.items() if platform.release().startswith(k)), {})
            out[field] = old.get(field, 0)
    for field, name in _INODE_FLAGS.items():
        out[field] = enums[name] if name in enums else (_from_print_format(name) or 0)
    out["hz"] = conditions.kernel_hz() or 0
    out["global_wb_domain"] = _kallsyms_address("global_wb_domain")
    return out


def _kallsyms_address(symbol):
    """A kernel data symbol's address from /proc/kallsyms (listed with CONFIG_KALLSYMS_ALL; shown
    as 0 under kptr_restrict), or 0."""
    try:
        with open("/proc/kallsyms") as f:
            for line in f:
                if line.endswith(f" {symbol}\n"):
                    return int(line.split(None, 1)[0], 16)
    except (OSError, ValueError):
        pass
    return 0


def values() -> dict[str, int]:
    """{field: flag mask} for the running kernel, found once per boot and kept in CACHE_DIR."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = "unknown"
    # Named by FIELDS too: a cache an older fsprof wrote this boot, with fewer fields, is not read.
    fields = hashlib.sha1(",".join(FIELDS).encode()).hexdigest()[:8]
    return cached(f"kernel-flags-{fields}-{boot}.json", _find)


def cached(name: str, find: Callable[[], _T], keep: Callable[[_T], bool] = lambda found: True) -> _T:
    """What CACHE_DIR/name holds, else find()'s result, kept there when keep(result) says so.
    Written whole or not at all (several fsprof processes may start at once)."""
    cache = CACHE_DIR / name
    try:
        return json.loads(cache.read_text())
    except (OSError, ValueError):
        pass
    found = find()
    if keep(found):
        try:
            CACHE_DIR.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(found))
            os.replace(tmp, cache)
        except OSError:
            pass
    return found
