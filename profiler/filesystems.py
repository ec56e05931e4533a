"""The filesystems fsprof profiles: one row each. Every other list of filesystems derives from
this table (scratch's mkfs and mount, spec and --fs checks, the rule tables, the BPF objects
loaded, doctor's checks, the ext family that behind/ext4.py and verify/ serve).

A row names the kernel module that provides the filesystem (built in on some kernels, a module on
distribution kernels, where it must be loaded before its tracepoints and BTF types exist), the
behind-the-wait plug-in that watches its journal or log, its cause rules, and how to make it.
Adding a filesystem: a row here, its plug-in (behind/<name>.py + bpf/<name>.bpf.c), its rules
(analysis/rules/<name>.toml) and its page (docs/behind-<name>.md); docs/architecture.md walks
through f2fs.
"""

import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .errors import FsprofError


@dataclass(frozen=True)
class Filesystem:
    name: str
    module: str  # `modprobe` name, and the driver its kernel messages name; ext4 also mounts ext2 and ext3
    behind: str  # behind/<behind>.py and bpf/<behind>.bpf.c: its journal or log
    rules: str  # analysis/rules/<rules>.toml: its cause rules, beside common.toml
    tracepoints: tuple  # tracefs event groups its behind object uses (`fsprof doctor` lists them)
    package: str  # the Debian package with mkfs.<name>
    mkfs_force: str  # mkfs's flag to write over an existing signature
    mkfs_defaults: tuple = ()  # mkfs arguments fsprof adds before the user's
    multi_device: bool = False  # one filesystem over several devices (`--devices N`)
    kthreads: tuple = ()  # its own kernel threads' names ({dev}: a block device's name; machine/kthreads.py)


# Scratch ext3/ext4 are made with inode tables and journal initialised up front: otherwise the
# ext4lazyinit thread zeroes them after mount, with cache flushes of its own, during the workload.
_EAGER_INIT = ("-E", "lazy_itable_init=0,lazy_journal_init=0")

_EXT: dict = dict(
    module="ext4",
    behind="ext4",
    rules="ext4",
    tracepoints=("ext4", "jbd2"),
    package="e2fsprogs",
    mkfs_force="-F",
    kthreads=("jbd2/{dev}-*",),
)
TABLE = {
    fs.name: fs
    for fs in (
        Filesystem("ext2", **_EXT),
        Filesystem("ext3", **_EXT, mkfs_defaults=_EAGER_INIT),
        Filesystem("ext4", **_EXT, mkfs_defaults=_EAGER_INIT),
        Filesystem("xfs", "xfs", "xfs", "xfs", ("xfs",), "xfsprogs", "-f", kthreads=("xfsaild/{dev}",)),
        Filesystem(
            "btrfs",
            "btrfs",
            "btrfs",
            "btrfs",
            ("btrfs",),
            "btrfs-progs",
            "-f",
            multi_device=True,
            kthreads=("btrfs-transaction", "btrfs-cleaner"),
        ),
    )
}
NAMES = tuple(TABLE)
# The filesystems whose own driver they are (ext2 and ext3 are served by ext4's): one mkfs tool each.
DRIVERS = tuple(fs.name for fs in TABLE.values() if fs.name == fs.module)
MULTI_DEVICE = tuple(fs.name for fs in TABLE.values() if fs.multi_device)


def row(name: str) -> Filesystem:
    """The row of filesystem `name`; one sentence if fsprof does not know it."""
    if name not in TABLE:
        raise FsprofError(f"unknown filesystem '{name}'; fsprof supports {', '.join(NAMES)}")
    return TABLE[name]


def served_by(behind: str) -> tuple[str, ...]:
    """The filesystems one behind-the-wait plug-in watches (e.g. ext4: ext2, ext3, ext4)."""
    return tuple(fs.name for fs in TABLE.values() if fs.behind == behind)


def mkfs_defaults(name: str) -> list[str]:
    """fsprof's own mkfs arguments for filesystem `name` (a list, for the user's to follow)."""
    return list(TABLE[name].mkfs_defaults) if name in TABLE else []


# Scratch filesystems sit on loop devices; /dev/loop-control exists only once loop is loaded.
LOOP_MODULE = "loop"


def in_kernel(name: str) -> bool:
    """Whether the running kernel can mount filesystem type `name` now (/proc/filesystems)."""
    try:
        lines = Path("/proc/filesystems").read_text().splitlines()
    except OSError:
        return False
    return any(line.split()[-1] == name for line in lines if line.split())


def module_loaded(module: str) -> bool:
    return Path("/sys/module", module).exists()


def modprobe(module: str, why: str) -> None:
    """Loads a kernel module unless it is loaded or built in; one sentence if that fails."""
    if module_loaded(module):
        return
    try:
        proc = subprocess.run(["modprobe", module], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise FsprofError(f"{why} needs the kernel module {module}, and modprobe is not installed (package kmod)")
    except subprocess.TimeoutExpired:
        raise FsprofError(f"`modprobe {module}` did not finish in 60 s")
    if proc.returncode != 0 and not module_loaded(module):
        detail = (proc.stderr.strip().splitlines() or ["no reason given"])[-1]
        raise FsprofError(f"{why} needs the kernel module {module}, which could not be loaded: {detail}")


def load_modules(names: Iterable[str], loop: bool = False) -> None:
    """Makes filesystems `names` (and, with loop, loop devices) available before fsprof loads the
    BPF objects that use their tracepoints and types."""
    for name in names:
        if not in_kernel(name):
            modprobe(row(name).module, f"filesystem {name}")
    if loop and not Path("/dev/loop-control").exists():
        modprobe(LOOP_MODULE, "a scratch filesystem (loop device)")


def behind_objects(names: Iterable[str]) -> list[str]:
    """The behind-the-wait objects filesystems `names` need, in table order."""
    wanted = {TABLE[n].behind for n in names if n in TABLE}
    return [b for b in dict.fromkeys(fs.behind for fs in TABLE.values()) if b in wanted]
