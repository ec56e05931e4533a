"""`fsprof doctor`: what this kernel and machine support, found by trying, and what fsprof can do.

Each check is (name, needed?, function returning (ok, detail)). fsprof can run when every needed
check passes; optional ones say which extra it enables or why it is off.
"""

from __future__ import annotations

import ctypes as c
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..machine import blockdev, tracefs
from .. import filesystems
from ..trace.bpf import BpfObject
from ..trace.libbpf import perf_event_open_sampling
from ..errors import FsprofError
from ..session.collect import Collector

if TYPE_CHECKING:
    import argparse

# Tracepoint groups fsprof uses, and the events each needs for the core run (empty: optional group).
TRACEPOINT_GROUPS = {
    "raw_syscalls": ["sys_enter", "sys_exit"],
    "sched": ["sched_switch", "sched_waking", "sched_process_fork", "sched_process_exit"],
    "block": ["block_rq_issue", "block_rq_complete"],
    "writeback": [],
    **{group: [] for fs in filesystems.TABLE.values() for group in fs.tracepoints},
}
PROBE_HITS = {"tp_switch": 0, "raw_tp_switch": 1, "tp_btf_switch": 2, "on_sample": 3}


def check_root() -> tuple[bool, str]:
    return os.geteuid() == 0, "running as root" if os.geteuid() == 0 else "not root: run fsprof as root"


def check_btf() -> tuple[bool, str]:
    ok = Path("/sys/kernel/btf/vmlinux").exists()
    return ok, "/sys/kernel/btf/vmlinux present" if ok else "no /sys/kernel/btf/vmlinux: CO-RE needs a BTF kernel"


def check_tracefs() -> tuple[bool, str]:
    try:
        tracefs.ensure_mounted()
    except FsprofError as e:
        return False, str(e)
    return True, f"mounted at {tracefs.TRACEFS}"


def tracepoint_check(group: str, needed_events: list[str]) -> Callable[[], tuple[bool, str]]:
    def check():
        events = tracefs.events_in(group)
        missing = [e for e in needed_events if e not in events]
        if not events:
            return False, "absent on this kernel"
        if missing:
            return False, f"{len(events)} events, but missing {', '.join(missing)}"
        return True, f"{len(events)} events"

    return check


def _probe_attach_types():
    """Load the probe object, attach each program and see that it really ran."""
    with BpfObject("probe", only=set(PROBE_HITS)) as obj:
        for prog in PROBE_HITS:
            if prog == "on_sample":
                obj.attach_perf_sampling(prog, freq_hz=999)
            else:
                obj.attach(prog)
        end = time.monotonic() + 0.3
        while time.monotonic() < end:  # on-CPU work for the sampler, context switches for the rest
            time.sleep(0.001)
        hits = obj.map("hits", c.c_uint32, c.c_uint64)
        return {prog: sum(hits.lookup(c.c_uint32(i))) for prog, i in PROBE_HITS.items()}


_attach_results: dict[str, int | str] = {}


def attach_check(prog: str, what: str) -> Callable[[], tuple[bool, str]]:
    def check():
        if not _attach_results:
            try:
                _attach_results.update(_probe_attach_types())
            except FsprofError as e:
                _attach_results.update({p: str(e) for p in PROBE_HITS})
        n = _attach_results[prog]
        if isinstance(n, str):
            return False, n
        return n > 0, f"{what}: attached, fired {n} times" if n else f"{what}: attached but never fired"

    return check


# What check_fsprof_programs found, for capability_lines: (object, loaded, total) and the figures left out.
_program_counts: list[tuple[str, int, int]] = []
_left_out: list[dict[str, str]] = []


def check_fsprof_programs() -> tuple[bool, str]:
    """The programs a run loads, loaded for real: this is where a verifier would refuse them."""
    with Collector() as collector:
        for obj in collector.objects:
            left_out = collector.left_out(obj.name)
            _program_counts.append((obj.name, len(obj.programs), len(obj.programs) + len(left_out)))
        _left_out.extend(collector.unavailable)
    loaded, total = sum(n for _, n, _ in _program_counts), sum(t for _, _, t in _program_counts)
    return True, f"{loaded} of {total} programs load" + (
        f"; {total - loaded} left out (below)" if loaded < total else ""
    )


def capability_lines() -> list[str]:
    """What fsprof gives on this kernel: programs per object, then each figure left out and why."""
    if not _program_counts:
        return []
    lines = ["fsprof on this kernel:"]
    lines += [
        f"    {name:<10} {loaded:>3} of {total:<3} programs" + ("" if loaded == total else "   (some figures left out)")
        for name, loaded, total in _program_counts
    ]
    lines += [f"    left out  {u['figures']} ({u['probe']}: {u['why']})" for u in _left_out]
    if not _left_out:
        lines.append("    every figure is available")
    return lines


def optional_program_check(prog: str) -> Callable[[], tuple[bool, str]]:
    """kprobe and fentry are tried for real: load, attach, and report the kernel's answer."""

    def check():
        try:
            with BpfObject("probe", only={prog}) as obj:
                obj.attach(prog)
        except FsprofError as e:
            return False, f"not available ({e})"
        return True, "available"

    return check


def check_perf_sampling() -> tuple[bool, str]:
    try:
        os.close(perf_event_open_sampling(0, 99))
    except FsprofError as e:
        return False, str(e)
    return True, "cpu-clock sampling opens"


def check_loop() -> tuple[bool, str]:
    try:
        filesystems.load_modules([], loop=True)  # a module on distribution kernels
    except FsprofError:
        pass
    ok = Path("/dev/loop-control").exists() and shutil.which("losetup") is not None
    return (
        ok,
        "/dev/loop-control and losetup present" if ok else "no loop devices: fsprof needs them for scratch filesystems",
    )


def tool_check(tool: str, package: str) -> Callable[[], tuple[bool, str]]:
    def check():
        path = shutil.which(tool)
        return bool(path), path or f"missing (Debian package {package})"

    return check


def check_delayacct() -> tuple[bool, str]:
    p = Path("/proc/sys/kernel/task_delayacct")
    if not p.exists():
        return False, "no task delay accounting in this kernel"
    on = p.read_text().strip() == "1"
    return True, "enabled" if on else "built in, off (sysctl kernel.task_delayacct=1 turns it on)"


def device_lines() -> list[str]:
    lines = []
    for d in sorted(blockdev.SYS_BLOCK.iterdir()):
        if d.name.startswith("loop") and not (d / "loop").exists():
            continue  # an unattached loop device says nothing
        q = blockdev.queue_info(d.name)
        lines.append(
            f"    {d.name:<10} write cache {q['write_cache']}, FUA {'yes' if q['fua'] else 'no'}, "
            f"scheduler {q['scheduler'] or 'n/a'}{', rotational' if q['rotational'] else ''}"
        )
    return lines


def checks() -> list[tuple[str, bool, Callable[[], tuple[bool, str]]]]:
    out = [("root", True, check_root), ("BTF", True, check_btf), ("tracefs", True, check_tracefs)]
    for group, events in TRACEPOINT_GROUPS.items():
        out.append((f"tracepoints {group}", bool(events), tracepoint_check(group, events)))
    out += [
        ("fsprof's programs", True, check_fsprof_programs),
        # Every program but global_dirty_state's (writeback.bpf.c, verify.bpf.c) is tp_btf: a
        # classic tracepoint's detach waits for an RCU grace period (docs/kernel-notes.md).
        ("attach tp_btf", True, attach_check("tp_btf_switch", "BTF tracepoint")),
        ("attach raw_tp", True, attach_check("raw_tp_switch", "raw tracepoint")),
        ("attach tracepoint", True, attach_check("tp_switch", "classic tracepoint")),
        ("perf_event sampling", False, check_perf_sampling),
        ("attach perf_event", False, attach_check("on_sample", "perf_event program with stacks")),
        ("kprobes", False, optional_program_check("kprobe_fsync")),
        ("fentry/fexit", False, optional_program_check("fentry_fsync")),
        ("loop devices", True, check_loop),
        # ext4 is needed (every test and the default run use it); the others only for their runs.
        *(
            (
                f"mkfs.{fs}",
                fs == "ext4",
                tool_check(
                    f"mkfs.{fs}", filesystems.TABLE[fs].package + ("" if fs == "ext4" else f"; needed for {fs} runs")
                ),
            )
            for fs in filesystems.DRIVERS
        ),
        ("bpftrace", False, tool_check("bpftrace", "bpftrace")),
        ("task delay accounting", False, check_delayacct),
    ]
    return out


def doctor() -> int:
    missing = []
    root_ok = os.geteuid() == 0
    for name, needed, check in checks():
        if not root_ok and name not in ("root", "BTF", "loop devices") and not name.startswith("mkfs"):
            ok, detail = False, "not checked: needs root"
        else:
            try:
                ok, detail = check()
            except FsprofError as e:
                ok, detail = False, str(e)
        mark = "ok  " if ok else ("MISSING" if needed else "no  ")
        print(f"{mark:<8} {name:<22} {detail}")
        if needed and not ok:
            missing.append(name)
    for line in capability_lines():
        print(line)
    print("devices:")
    for line in device_lines():
        print(line)
    if missing:
        print(f"fsprof cannot run here: missing {', '.join(missing)}")
        return 1
    print("fsprof can run here")
    return 0


NEEDS_ROOT = False  # without root it says which checks need it


def add_arguments(p: argparse.ArgumentParser) -> None:
    pass


def main(args: argparse.Namespace) -> int:
    return doctor()
