"""Kernel addresses to function names, from /proc/kallsyms (read once per process)."""

import bisect
import hashlib
import re
from collections.abc import Collection
from functools import lru_cache
from pathlib import Path

from . import kernel_flags


# Compiler clones (foo.isra.0, foo.constprop.0, foo.part.0, foo.cold) are the same function to a
# reader and to the cause rules.
_CLONE_SUFFIX = re.compile(r"(\.(isra|constprop|part|cold|llvm)(\.\d+)?)+$")
_END_MARKERS = {"_etext", "_einittext"}
UNKNOWN = "[unknown]"
# A stack taken by one of fsprof's own tracepoint programs starts with the program (JIT code,
# unnamed unless bpf_jit_kallsyms) and the tracepoint's run function: the tracer, not the traced.
_TRACER_FRAME = re.compile(r"^(\[unknown\]|bpf_trace_run\d+|__bpf_trace_\w+|bpf_prog_\w+)$")


@lru_cache(maxsize=1)
def _table():
    addrs, names = [], []
    for line in Path("/proc/kallsyms").read_text().splitlines():
        parts = line.split()
        if len(parts) < 3 or parts[1] not in "tTwW":  # text symbols only
            continue
        addr = int(parts[0], 16)
        if addr and parts[2] in _END_MARKERS:  # past the image's text: an address here has no name
            addrs.append(addr)
            names.append(UNKNOWN)
        elif addr:
            addrs.append(addr)
            names.append(_CLONE_SUFFIX.sub("", parts[2]))
    order = sorted(range(len(addrs)), key=addrs.__getitem__)
    return [addrs[i] for i in order], [names[i] for i in order]


def available() -> bool:
    addrs, _ = _table()
    return bool(addrs)


def name(addr: int) -> str:
    addrs, names = _table()
    i = bisect.bisect_right(addrs, addr) - 1
    return names[i] if i >= 0 else f"0x{addr:x}"


def symbolize(stacks: dict[int, list[int]]) -> dict[int, list[str]]:
    """{stack id: [addr, ...]} -> {stack id: [function, ...]}, innermost frame first."""
    return {sid: strip_tracer([name(a) for a in addrs]) for sid, addrs in stacks.items()}


def strip_tracer(frames: list[str]) -> list[str]:
    i = 0
    while i < len(frames) - 1 and _TRACER_FRAME.match(frames[i]):
        i += 1
    return frames[i:]


def text_addresses(names: Collection[str], module: str) -> dict[str, int]:
    """{name: address} of the functions `names` of kernel module `module` (or of the kernel, where
    it is built in), from /proc/kallsyms. Reading /proc/kallsyms costs about 50 ms of kernel CPU
    and splitting its 5 MB into lines 50 more, at every start: what was found is kept (as the
    kernel flags are, kernel_flags.cached) for this boot and this load of the module (its text
    address and build), and found with bytes.find when it is not."""
    sections = Path("/sys/module") / module / "sections" / ".text"
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        loaded = sections.read_text().strip() if sections.exists() else "built-in"
        build = (Path("/sys/module") / module / "srcversion").read_text().strip() if sections.exists() else ""
    except OSError:
        return _find_text(names)
    key = hashlib.sha1("\n".join([boot, module, loaded, build, *sorted(names)]).encode()).hexdigest()[:20]
    # A symbol not found may be one a later load has: only a complete answer is kept.
    return kernel_flags.cached(
        f"ksyms-{key}.json", lambda: _find_text(names), keep=lambda found: set(found) == set(names)
    )


def _find_text(names):
    try:
        data = Path("/proc/kallsyms").read_bytes()
    except OSError:
        return {}
    found = {}
    for name in names:
        needle, pos = f" {name}".encode(), 0
        while (pos := data.find(needle, pos)) >= 0:
            end = pos + len(needle)
            start = data.rfind(b"\n", 0, pos) + 1
            pos = end
            if data[end : end + 1] not in (b"\n", b"\t"):  # a longer name; "\t[module]" follows a module's
                continue
            fields = data[start:end].split()
            if len(fields) == 3 and fields[1] in (b"t", b"T") and int(fields[0], 16):
                found[name] = int(fields[0], 16)
                break
    return found
