"""The kernel threads of a filesystem under test and their CPU time over a run, from
/proc/<pid>/schedstat (ns on CPU, ns waiting on a run queue, timeslices): the whole of their
background work (XFS's AIL pusher, btrfs's transaction and cleaner threads, jbd2), measured
whether or not any event links it to an operation. Which threads are a filesystem's is in
filesystems.py (`kthreads`). Kworkers are shared by every filesystem: their work for one is
measured inside worker windows instead (docs/compare.md, "Work done elsewhere")."""

import fnmatch
from collections.abc import Collection
from pathlib import Path

from .. import filesystems
from .mounts import mounts

COMM_LEN = 15  # TASK_COMM_LEN - 1: /proc shows a thread's name cut to this


def _kernel_threads():
    """{pid: comm} of every kernel thread (a child of kthreadd, pid 2)."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = stat[stat.rindex(")") + 2 :].split()[1]
        if ppid == "2":
            out[int(d.name)] = comm
    return out


def _matches(comm, pattern):
    """Whether a thread name (cut to 15 characters by the kernel) is `pattern`'s."""
    if fnmatch.fnmatchcase(comm, pattern):
        return True
    return len(comm) == COMM_LEN and fnmatch.fnmatchcase(comm, pattern[:COMM_LEN]) and "*" not in pattern[:COMM_LEN]


def find(fs: str, device_names: Collection[str]) -> dict[int, str]:
    """{pid: name} of filesystem `fs`'s own kernel threads for the block devices `device_names`.
    A pattern without the device (btrfs names its threads alike for every filesystem) counts only
    while this is the one filesystem of its type mounted."""
    patterns = filesystems.TABLE[fs].kthreads if fs in filesystems.TABLE else ()
    alone = len({m["majmin"] for m in mounts() if m["fstype"] == fs}) <= 1  # superblocks, not bind mounts
    wanted = [p.format(dev=d) for p in patterns if "{dev}" in p for d in device_names]
    wanted += [p for p in patterns if "{dev}" not in p and alone]
    return {pid: comm for pid, comm in _kernel_threads().items() if any(_matches(comm, p) for p in wanted)}


def read(threads: dict[int, str]) -> dict[int, tuple[str, int, int, int]]:
    """{pid: (name, on-CPU ns, run-queue ns, timeslices)} of those still there."""
    out = {}
    for pid, comm in threads.items():
        try:
            cpu, wait, slices = (int(x) for x in Path(f"/proc/{pid}/schedstat").read_text().split()[:3])
        except (OSError, ValueError):
            continue
        out[pid] = (comm, cpu, wait, slices)
    return out


def delta(
    before: dict[int, tuple[str, int, int, int]], after: dict[int, tuple[str, int, int, int]]
) -> dict[str, dict[str, int]]:
    """{name: {"cpu_ns", "runqueue_ns", "timeslices"}} over the interval, threads of one name summed."""
    out: dict[str, dict[str, int]] = {}
    for pid, (comm, cpu, wait, slices) in after.items():
        if pid not in before:
            continue
        _, cpu0, wait0, slices0 = before[pid]
        e = out.setdefault(comm, {"cpu_ns": 0, "runqueue_ns": 0, "timeslices": 0})
        e["cpu_ns"] += cpu - cpu0
        e["runqueue_ns"] += wait - wait0
        e["timeslices"] += slices - slices0
    return dict(sorted(out.items()))


USER_HZ = 100  # /proc/stat's unit (USER_HZ, 100 on every Linux architecture fsprof runs on)


def steal_ns() -> int:
    """CPU time the hypervisor gave to something else while this machine's vCPUs had work, over
    all CPUs since boot (/proc/stat's steal). A kernel with paravirtual steal accounting leaves it
    out of the threads' CPU time above, while a thread's wall time on CPU keeps it."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return int(fields[8]) * (1_000_000_000 // USER_HZ) if len(fields) > 8 else 0
