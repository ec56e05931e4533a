"""`fsprof record`: attach to a live system (a process tree, a cgroup, or every process on one
mount) for a duration or until Ctrl-C, with the same attribution as `fsprof run`. Nothing is
mounted, written or changed: only BPF programs are attached, and detached on exit."""

import dataclasses
import os
import platform
import signal
import sys
import time
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .. import __version__, behind, filesystems
from ..machine import blockdev
from ..trace import maps
from ..trace.maps import EXEMPLARS
from .collect import DEFAULT_STACK_SAMPLE, DEFAULT_TAIL_NS, Collector
from ..machine.conditions import sysctls_in_force
from ..errors import FsprofError
from ..machine.mounts import mount_of, mounts
from .. import rundir, units
from ..rundir import SCHEMA

TRACED_FS = filesystems.NAMES


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecordOptions:
    """What `fsprof record` is asked; profiler/commands/record.py builds it. One of pid, cgroup
    and mount names the target."""

    pid: int | None = None
    cgroup: str | None = None  # absolute, or relative to the cgroup v2 root
    mount: str | None = None
    duration: str | None = None  # as the user wrote it (30s, 2m); None: until Ctrl-C or the process exits
    sample_hz: int
    stack_sample: int = DEFAULT_STACK_SAMPLE
    tail_threshold_ns: int = DEFAULT_TAIL_NS
    exemplars: int = EXEMPLARS  # the slowest calls kept whole per op
    output: str | None = None


def parse_duration(text: str, option: str = "--duration") -> float:
    """Seconds of a duration the user gave as `option`; one sentence if it is not one."""
    try:
        return units.parse_duration(text)
    except ValueError as e:
        raise FsprofError(f"{option} {e}", exit_code=2)


def cgroup2_root() -> Path:
    """Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or .../unified on hybrid systems)."""
    found = [m["target"] for m in mounts() if m["fstype"] == "cgroup2"]
    return Path(found[0] if found else "/sys/fs/cgroup")


def _block_of(mount):
    """(name, kdev) of the whole disk under a mount's source, or None (no block device)."""
    src = mount["source"]
    if not src.startswith("/dev/") or not os.path.exists(src):
        return None
    name = blockdev.whole_disk(os.path.basename(os.path.realpath(src)))
    try:
        return name, blockdev.kdev_of_block(name)
    except OSError:
        return None


def _sb_dev(mount):
    major, minor = mount["majmin"].split(":")
    return blockdev.kdev(int(major), int(minor))


def check_target(
    pid: int | None = None, cgroup: str | None = None, mount: str | None = None
) -> tuple[str, int | Path | dict[str, str], list[dict[str, str]]]:
    """What the user named, checked before anything is loaded or written: (kind, value, mount)."""
    named = [x for x in (pid, cgroup, mount) if x is not None]
    if len(named) != 1:
        raise FsprofError("name exactly one of --pid, --cgroup or --mount", exit_code=2)
    fs_mounts = [m for m in mounts() if m["fstype"] in TRACED_FS]
    if pid is not None:
        if not _alive(pid):
            raise FsprofError(f"there is no process {pid}", exit_code=2)
        return "pid", pid, fs_mounts
    if cgroup is not None:
        path = Path(cgroup)
        if not path.is_absolute():
            path = cgroup2_root() / path
        if not (path / "cgroup.procs").exists():
            raise FsprofError(f"{cgroup} is not a cgroup v2 directory (no cgroup.procs in {path})", exit_code=2)
        return "cgroup", path, fs_mounts
    assert mount is not None  # the one named, pid and cgroup being None
    found = mount_of(mount)
    if found is None:
        raise FsprofError(f"{mount} is not a mount point", exit_code=2)
    if found["fstype"] not in TRACED_FS:
        raise FsprofError(f"{mount} is {found['fstype']}; fsprof profiles {', '.join(TRACED_FS)}", exit_code=2)
    return "mount", found, [found]


def apply_target(collector: Collector, kind: str, value: Any) -> str:
    """Points the collector at the target; returns its description."""
    if kind == "pid":
        collector.trace_pid(value)
        for child in descendants(value):  # those started later join in the kernel, at fork
            collector.trace_pid(child)
        return f"pid {value} (its threads and children)"
    if kind == "cgroup":
        collector.trace_cgroup(str(value))
        return f"cgroup {value}"
    collector.trace_all(_sb_dev(value))
    return f"every process, operations on {value['target']}"


def descendants(pid: int) -> list[int]:
    """Processes below `pid` now, from /proc's parent links."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                ppid = int(Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def wait(pid: int | None, deadline: float) -> str:
    """Until the duration is over, the traced process `pid` (None: none) is gone, or Ctrl-C / SIGTERM."""
    try:
        while (left := deadline - time.monotonic()) > 0:
            if pid is not None and not _alive(pid):
                return "the process exited"
            time.sleep(min(0.1, left))  # a whole 0.1 s step past the deadline made --duration longer
        return "the duration ended"
    except KeyboardInterrupt:
        return "interrupted"
    except SystemExit as e:
        if e.code in (128 + signal.SIGTERM, 128 + signal.SIGHUP):
            return "terminated"
        raise


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie child of ours would look alive; /proc says otherwise.
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _target(m):
    block = _block_of(m)
    return behind.Target(m["fstype"], _sb_dev(m), {block[1]: block[0]} if block else {}, m["target"])


def zero_block_classes(entry: dict[str, Any], names: Iterable[str]) -> None:
    """Every block class of devices `names` in entry["block"], 0 where none was issued: a class
    the device never saw is a figure of 0, not an unknown."""
    for name in names:
        dev_counts = entry["block"].setdefault(name, {})
        for cls in maps.BLK_CLASSES:
            dev_counts.setdefault(cls, {"count": 0, "bytes": 0})


def record(options: RecordOptions) -> tuple[dict[str, Any], Path]:
    duration = parse_duration(options.duration) if options.duration else float("inf")
    kind, value, scope = check_target(options.pid, options.cgroup, options.mount)
    out_dir = rundir.make_out_dir(options.output)
    # Only the filesystems mounted in scope: recording loads no module the machine does not use.
    with Collector(
        sample_hz=options.sample_hz,
        fs=sorted({m["fstype"] for m in scope}),
        stack_sample=options.stack_sample,
        tail_ns=options.tail_threshold_ns,
        exemplars=options.exemplars,
    ) as collector:
        collector.reset()
        what = apply_target(collector, kind, value)
        targets = [_target(m) for m in scope]
        block_devs = {kdev: name for t in targets for kdev, name in t.block_devs.items()}
        collector.set_targets(targets)
        before = {name: blockdev.read_stat(name) for name in block_devs.values()}
        start_ns = time.monotonic_ns()
        started = datetime.now(timezone.utc).isoformat(timespec="seconds")
        in_force = sysctls_in_force()
        print(f"fsprof: recording {what}; Ctrl-C to stop", file=sys.stderr, flush=True)
        ended_by = wait(options.pid, time.monotonic() + duration)
        end_ns = time.monotonic_ns()
        collector.stop()
        raw = collector.snapshot()
        after = {name: blockdev.read_stat(name) for name in block_devs.values()}
        raw["phase_start_ns"][0] = start_ns
        skipped, unavailable = collector.skipped, collector.unavailable
    from ..analysis.assemble import assemble  # loaded once the recording is over: attached sooner

    seen = {r["dev"] for r in raw["ops"] if r["dev"]}
    entries = []
    for m in scope:
        dev = _sb_dev(m)
        if dev not in seen:
            continue
        seen.discard(dev)  # a filesystem mounted twice is reported once
        block = _block_of(m)
        names = [block[0]] if block else []
        raw_m = {**raw, "block": {n: v for n, v in raw["block"].items() if n in names}}
        entry = {
            "label": m["target"],
            "fs": m["fstype"],
            "mkfs_options": [],
            "mount_options": m["options"],
            "mount_options_in_force": m["options"],
            "caches_dropped": False,
            "device": {
                "name": names[0] if names else m["source"],
                "dev": m["majmin"],
                "all": names,
                **(
                    blockdev.queue_info(names[0])
                    if names
                    else {"write_cache": "n/a", "fua": False, "scheduler": "n/a", "rotational": False}
                ),
                **({"test_bed": blockdev.test_bed(names[0])} if names else {}),
            },
            "superblock_dev": m["majmin"],
            "elapsed_s": (end_ns - start_ns) / 1e9,
            "workload": {"recorded": what},
            **assemble(raw_m, _target(m), ["record"], end_ns),
            "kernel_counters": {n: blockdev.stat_delta(before[n], after[n]) for n in names},
        }
        zero_block_classes(entry, names)
        entries.append(entry)
    result = {
        "schema": SCHEMA,
        "fsprof_version": __version__,
        "kernel": platform.release(),
        "started": started,
        "workload": {"name": "record", "target": what, "ended_by": ended_by, "duration_s": (end_ns - start_ns) / 1e9},
        "sysctls": {},
        "sysctls_in_force": in_force,
        "filesystems": entries,
        "probes_skipped": skipped,
        "unavailable": unavailable,
    }
    rundir.write_result(out_dir, result)
    from ..views.flamegraph import write_default_set  # loaded once the recording is over

    write_default_set(out_dir, result)
    return result, out_dir
