"""Behind the wait: the work that ends a traced thread's waits (journal commits, log forces,
transaction commits, block requests, writeback), one module per subsystem.

Each module has the same parts, so that collection, assembly and the report treat them alike:

    NAME                       its key in result.json: filesystems[i]["behind"][NAME]
    OBJECT                     the BPF object it loads (bpf/<OBJECT>.bpf.c)
    class Probe(obj)           reads that object's maps:
        set_targets(targets)       the filesystems and devices under test (a list of Target)
        reset()                    forget everything aggregated so far
        snapshot() -> dict         what was aggregated since reset(), as plain JSON-able data
    summarize(raw, ctx) -> dict   one snapshot -> the section stored in result.json (ctx: Context)
    report_lines(section, fs) -> [str]   the terminal view of that section (fs: the result entry)

Every object includes bpf/shared_maps.h; the collector makes those maps (phase, drops, stacks,
worker windows) one across objects. A module whose tracepoints this kernel lacks still loads: its
programs are skipped and the run says so.
"""

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from . import block, btrfs, ext4, writeback, xfs

# Report order: the filesystem's journal/log first, then the block requests behind it, then writeback.
MODULES = (ext4, xfs, btrfs, block, writeback)


@dataclass
class Target:
    """One filesystem under test, as the probes need to recognise it in tracepoint fields."""

    fs: str  # ext4, xfs, btrfs, ...
    sb_dev: int  # kernel dev_t of the superblock (st_dev of its files)
    block_devs: dict  # {kernel dev_t: name} of the block devices it sits on
    mountpoint: str = ""


@dataclass
class Context:
    """What a module's summarize() may use besides its own snapshot."""

    fs: str
    sb_dev: int
    block_devs: dict  # {kernel dev_t: name}
    phase_names: list  # index -> name
    elapsed_s: float
    syscalls: dict  # the entry's "syscalls" (per op: count, total_ns, percentiles)
    phases: dict  # the entry's "phases" (per phase: syscalls, attribution, ...)
    workers: dict = field(default_factory=dict)  # {worker kind: {phase name: breakdown}} (assemble)
    stacks: dict = field(default_factory=dict)  # {stack id: [function, ...]} of every stack id in the snapshot

    def phase_name(self, index: int) -> str:
        return self.phase_names[index] if index < len(self.phase_names) else f"phase-{index}"


def cpu_spans(raw: dict[str, Any], devs: set[int]) -> dict[tuple[int, str], dict[str, int]]:
    """{(phase index, syscall): {cause: ns}} of on-CPU time measured by bracketing tracepoints
    (a module's optional cpu_spans(), e.g. ext4's extent removals) on devices `devs`."""
    out: dict[tuple[int, str], dict[str, int]] = {}
    for module in MODULES:
        fn = getattr(module, "cpu_spans", None)
        if fn and raw.get(module.NAME):
            for key, causes in fn(raw[module.NAME], devs).items():
                mine = out.setdefault(key, {})
                for cause, ns in causes.items():
                    mine[cause] = mine.get(cause, 0) + ns
    return out


def stack_ids(snapshot: dict[str, Any]) -> Iterator[int]:
    """Stack ids a probe's snapshot refers to: the int value of any key "stack" or "*_stack"."""

    def walk(x):
        if isinstance(x, dict):
            for k, v in x.items():
                if isinstance(v, int) and isinstance(k, str) and (k == "stack" or k.endswith("_stack")):
                    yield v
                else:
                    yield from walk(v)
        elif isinstance(x, list):
            for v in x:
                yield from walk(v)

    return walk(snapshot)
