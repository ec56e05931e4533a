"""Scratch filesystems for profiling runs: loop images, a zram device or a device the user named,
mkfs'd and mounted, each step recorded in the caller's undo journal (undo.py undoes them)."""

import contextlib
import dataclasses
import errno
import itertools
import os
import shlex
import stat
from collections.abc import Sequence

from profiler.machine.blockdev import disks_below, kdev, kdev_of_block, majmin_of, scheduler, whole_disk
from profiler.machine.device_model import DeviceModel
from profiler import filesystems
from profiler.errors import FsprofError
from profiler.machine.mounts import mounts
from profiler.machine.tools import first_line, run_tool
from profiler.machine.undo import CONFIGFS, NULL_BLK_GROUPS, ZRAM_CONTROL, Changes, boot_id, null_blk_disk
from profiler.signals import deferred


SCRATCH_DIR = "/var/tmp/fsprof/scratch"
GIB = 1 << 30
# The scratch image when neither --image-size nor a spec sets one. Sparse: it costs disk only as it
# is written. bench/bench_image_size.py (docs/test-bed.md): on 1-2 GiB btrfs waited for space
# (untar of 20,000 files: 6,086 reservation tickets, 39% of its time, at 1 GiB; 1,652 at 2 GiB),
# from 4 GiB not (21), at 16 GiB 1; ext4 and XFS never did. 16 GiB also holds the whole kernel
# tree (untar) at 10% full.
DEFAULT_IMAGE = 16 * GIB

LOOP_IO = ("direct", "buffered")


@dataclasses.dataclass
class FsConfig:
    fs: str
    # The user's; __post_init__ puts fsprof's defaults for the filesystem first (filesystems.py), so
    # every scratch filesystem, a test's or a benchmark's too, is made alike.
    mkfs_options: Sequence[str] = ()
    mount_options: str = ""
    size_bytes: int = DEFAULT_IMAGE
    devices: int = 1
    label: str | None = None
    # How a loop device reaches its image: "direct" (O_DIRECT: writes, reads and flushes reach the
    # backing disk, as on a real one) or "buffered" (through the host's page cache: a flush writes
    # the host's cache, reads may never reach a disk). docs/test-bed.md.
    loop_io: str = "direct"
    # An emulated slow device: dm-delay between the filesystem and its loop device(s).
    device_model: DeviceModel | None = None

    def __post_init__(self):
        filesystems.row(self.fs)
        if self.loop_io not in LOOP_IO:
            raise FsprofError(f"loop I/O '{self.loop_io}' is not one of {', '.join(LOOP_IO)}")
        self.mkfs_options = (*filesystems.mkfs_defaults(self.fs), *self.mkfs_options)
        self.label = self.label or self.fs
        if self.devices < 1:
            raise FsprofError(f"a filesystem needs at least one device, not {self.devices}")
        if self.devices > 1 and not filesystems.TABLE[self.fs].multi_device:
            raise FsprofError(
                f"{self.fs} cannot span {self.devices} devices; only "
                f"{', '.join(filesystems.MULTI_DEVICE)} can use several"
            )
        if self.size_bytes <= 0:
            raise FsprofError(f"the scratch image size must be positive, not {self.size_bytes}")
        if "/" in self.label or self.label in (".", ".."):
            raise FsprofError(f"the label '{self.label}' cannot be used as a directory name")


@dataclasses.dataclass
class ScratchFs:
    config: FsConfig
    mountpoint: str
    devices: list  # /dev/loopN (or the user's device)
    images: list  # backing image paths, empty for a user's device
    dev: int  # kernel dev_t (major<<20|minor) of the mounted superblock; anonymous for btrfs
    block_devs: list  # (name, kernel dev_t) of the underlying block devices

    def request_devices(self) -> list[str]:
        """The block devices that queue requests, so have an I/O scheduler to set: not a
        device-mapper one (bio-based: its scheduler is only "none")."""
        return [name for name, _ in self.block_devs if scheduler(name)[1] != ["none"]]


def kernel_devt(devnum: int) -> int:
    """Python's st_dev/st_rdev to the kernel's internal dev_t encoding, as tracepoints report it."""
    return kdev(os.major(devnum), os.minor(devnum))


def provision(changes: Changes, config: FsConfig, scratch_dir: str | os.PathLike[str] = SCRATCH_DIR) -> ScratchFs:
    """Make loop-backed image(s), mkfs them and mount at <scratch_dir>/<label>/mnt, recording each step."""
    filesystems.load_modules([config.fs], loop=True)  # modules on distribution kernels
    base = _make_label_dir(changes, scratch_dir, config.label)
    model = config.device_model
    if model and model.cache_mib:  # a RAM device with a volatile write cache instead of a loop
        images = []
        devices = [_null_blk(changes, model, config.size_bytes) for _ in range(config.devices)]
    else:
        images = [_create_image(changes, scratch_dir, base, i, config.size_bytes) for i in range(config.devices)]
        devices = [_attach_loop(changes, image, config.loop_io == "direct") for image in images]
    if model and model.delays:
        devices = [
            _delay_over(changes, config.device_model, loop, f"fsprof-{os.getpid()}-{config.label}-{i}")
            for i, loop in enumerate(devices)
        ]
    _mkfs(config, devices, image_size=config.size_bytes)
    return _mount(changes, config, devices, images, base, stacked=bool(model and model.delays))


def provision_zram(changes: Changes, config: FsConfig, scratch_dir: str | os.PathLike[str] = SCRATCH_DIR) -> ScratchFs:
    """A fresh RAM-backed zram device (the "fast device" baseline), mkfs'd and mounted like a loop image."""
    if config.devices != 1:
        raise FsprofError(
            f"a zram device gives exactly one device, but the {config.label} setup asks for {config.devices}"
        )
    if not os.path.isdir(ZRAM_CONTROL):
        raise FsprofError(
            'zram is not available (no /sys/class/zram-control): load it with `modprobe zram`, or use device = "loop"'
        )
    base = _make_label_dir(changes, scratch_dir, config.label)
    with deferred():  # hot_add creates the device: record it before a signal can intervene
        with open(f"{ZRAM_CONTROL}/hot_add") as f:
            name = f"zram{int(f.read())}"
        # A SIGKILL between hot_add and this record leaks one empty zram device (no journal can
        # name it before the kernel does); `zramctl` shows it, `echo N > hot_remove` removes it.
        changes.record("zram", name=name, disksize=config.size_bytes, boot_id=boot_id())
    with open(f"/sys/block/{name}/disksize", "w") as f:
        f.write(str(config.size_bytes))
    _mkfs(config, [f"/dev/{name}"])
    return _mount(changes, config, [f"/dev/{name}"], [], base)


def provision_device(
    changes: Changes,
    config: FsConfig,
    device: str,
    erase: bool = False,
    force: bool = False,
    scratch_dir: str | os.PathLike[str] = SCRATCH_DIR,
) -> ScratchFs:
    """mkfs and mount a device the user named; refuses unless erasing was asked for and is safe."""
    _check_device(device, erase, force)
    if config.devices != 1:
        raise FsprofError(
            f"a named device gives exactly one device, but the {config.label} setup asks for {config.devices}"
        )
    base = _make_label_dir(changes, scratch_dir, config.label)
    device = os.path.realpath(device)
    _mkfs(config, [device])
    return _mount(changes, config, [device], [], base)


def make_scratch_dir(changes: Changes, path: str | os.PathLike[str]) -> str:
    """A run's own scratch directory (its parent is created as needed and stays), journaled so a
    dead run's empty directory goes too."""
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
    except OSError as e:
        raise FsprofError(f"cannot create the scratch directory {path}: {e.strerror}") from None
    return _make_dir(changes, "directory", os.path.realpath(path))


def _make_label_dir(changes, scratch_dir, label):
    if not os.path.isdir(scratch_dir):
        try:
            os.makedirs(scratch_dir, mode=0o700, exist_ok=True)
        except OSError as e:
            raise FsprofError(f"cannot create the scratch directory {scratch_dir}: {e.strerror}") from None
    return _make_dir(changes, "directory", os.path.join(os.path.realpath(scratch_dir), label))


def _make_dir(changes, kind, path):
    """mkdir, recorded after the fact (recording first could remove someone else's directory);
    an empty directory left by a crash is reused, a non-empty or mounted one is someone's work."""
    try:
        os.mkdir(path, 0o700)
    except NotADirectoryError:
        raise FsprofError(f"cannot create {path}: a part of that path is not a directory") from None
    except FileExistsError:
        if not os.path.isdir(path) or os.listdir(path) or os.path.ismount(path):
            raise FsprofError(
                f"scratch directory {path} is already in use; another fsprof run may own it "
                "(`fsprof cleanup` removes what dead runs left)"
            ) from None
        return path
    changes.record(kind, path=path)
    return path


def _create_image(changes, scratch_dir, base, index, size):
    path = os.path.join(base, f"disk{index}.img")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        changes.record("image", path=path, scratch_dir=os.path.realpath(scratch_dir))
        os.ftruncate(fd, size)  # sparse: blocks are allocated only as the filesystem writes them
    finally:
        os.close(fd)
    return path


def _attach_loop(changes, image, direct_io=False):
    # Recorded before attaching: the undo finds the device by its backing file, so even a kill between
    # the attach and losetup printing the name cannot leak a loop device. Direct I/O is asked for;
    # the kernel keeps it off where the backing filesystem cannot do it (blockdev.test_bed() reads
    # back what it did, and the run says so).
    changes.record("loop", backing_file=image)
    argv = ["losetup", "--find", "--show"] + (["--direct-io=on"] if direct_io else []) + [image]
    proc = run_tool(argv, "attaching a loop device")
    if proc.returncode != 0:
        raise FsprofError(f"losetup could not attach {image}: {first_line(proc)}")
    return proc.stdout.strip()


def _delay_over(changes, model, loop, name):
    """A dm-delay device over a loop device, as /dev/dm-N. Recorded before it is made: the undo
    finds it by its name, which carries this process's id."""
    with open(f"/sys/block/{os.path.basename(loop)}/size") as f:
        sectors = int(f.read())  # 512-byte units, as dm tables count
    changes.record("dm", name=name, boot_id=boot_id())
    # No udev to wait for in a VM guest (or a container): the node comes from devtmpfs.
    run_tool(
        ["dmsetup", "create", "--noudevsync", name, "--table", model.table(loop, sectors)],
        "making a dm-delay device",
        check=True,
    )
    proc = run_tool(
        ["dmsetup", "info", "-c", "--noheadings", "-o", "blkdevname", name], "naming a dm device", check=True
    )
    return f"/dev/{proc.stdout.strip()}"


_NULL_BLK_SEQ = itertools.count()


def _null_blk(changes, model, size_bytes):
    """A RAM-backed null_blk device with a volatile write cache of the model's size, made through
    configfs, as /dev/<name>. Its memory is taken only as it is written. Recorded before it is made:
    the undo finds it by its group, whose name carries this process's id."""
    if not os.path.isdir(NULL_BLK_GROUPS):
        # No configfs mounted (a VM guest's minimal init): mount it, and unmount it at the end.
        changes.record("configfs", target=CONFIGFS)
        run_tool(["mount", "-t", "configfs", "configfs", CONFIGFS], "mounting configfs", check=True)
    group = f"{NULL_BLK_GROUPS}/fsprof-{os.getpid()}-{next(_NULL_BLK_SEQ)}"
    changes.record("null_blk", group=group, boot_id=boot_id())
    os.mkdir(group)
    # size and cache_size in MiB; power=1 makes the disk, with what was set before it.
    settings = (("size", max(1, size_bytes >> 20)), ("memory_backed", 1), ("cache_size", model.cache_mib), ("power", 1))
    for attr, value in settings:
        try:
            with open(f"{group}/{attr}", "w") as f:
                f.write(str(value))
        except OSError as e:
            raise FsprofError(f"could not make a null_blk device ({attr}={value}): {e.strerror}") from None
    disk = null_blk_disk(group)
    if disk is None:
        raise FsprofError(f"the null_blk device of {group} did not appear in /sys/block")
    return f"/dev/{disk}"


def _mkfs(config, devices, image_size=None):
    """mkfs on the devices; its failure is one sentence, which names the scratch image's size when
    fsprof chose the device (a filesystem has a minimum size: XFS 300 MiB, btrfs 109 MiB)."""
    tool = f"mkfs.{config.fs}"
    force = filesystems.TABLE[config.fs].mkfs_force
    proc = run_tool([tool, force, "-q", *config.mkfs_options, *devices], f"making {config.fs}")
    if proc.returncode == 0:
        return
    opts = f" with the options '{shlex.join(config.mkfs_options)}'" if config.mkfs_options else ""
    size = f" (the scratch image is {_mib(image_size)}: --image-size sets it)" if image_size else ""
    raise FsprofError(f"{tool} failed on {', '.join(devices)}{opts}: {first_line(proc)}{size}")


def _mib(n):
    return f"{n / (1 << 20):,.0f} MiB" if n >= 1 << 20 else f"{n:,} bytes"


def _mount(changes, config, devices, images, base, stacked=False):
    """Mount the filesystem made on `devices`. stacked: they are fsprof's own dm devices over its
    loop devices, whose requests are then traced too (the dm device makes none)."""
    target = _make_dir(changes, "mountpoint", os.path.join(base, "mnt"))
    devnums = [majmin_of(d) for d in devices]
    changes.record("mount", target=target, source=devices[0], devnums=devnums)
    argv = ["mount", "-t", config.fs] + (["-o", config.mount_options] if config.mount_options else [])
    with _KernelLog() as klog:
        proc = run_tool([*argv, devices[0], target], "mounting a scratch filesystem")
        if proc.returncode != 0:
            # ext2/ext3 are served by the ext4 driver, which names itself in its messages
            drivers = {config.fs, filesystems.TABLE[config.fs].module}
            drivers.update(os.path.basename(d) for d in devices)
            reason = klog.last_line_mentioning(drivers) or first_line(proc)
            what = f"with options '{config.mount_options}'" if config.mount_options else f"on {devices[0]}"
            raise FsprofError(f"mount of {config.fs} {what} failed: {reason}")
    return ScratchFs(
        config=config,
        mountpoint=target,
        devices=list(devices),
        images=list(images),
        dev=_superblock_dev(target),
        # The whole disks; for fsprof's own dm devices also the loop devices below (bio-based, a
        # dm device's requests are the disks' below; its own dev_t is the one a journal names).
        block_devs=[
            (disk, kdev_of_block(disk))
            for disk in dict.fromkeys(
                name
                for d in devices
                for name in (whole_disk(os.path.basename(d)), *(disks_below(os.path.basename(d)) if stacked else ()))
            )
        ],
    )


class _KernelLog:
    """Kernel log lines written while inside: why a mount failed is told there, not by mount(8)."""

    def __enter__(self):
        try:
            self._fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            os.lseek(self._fd, 0, os.SEEK_END)
        except OSError:
            self._fd = None  # no kernel log: mount's own message will do
        return self

    def __exit__(self, *exc_info):
        if self._fd is not None:
            os.close(self._fd)

    def last_line_mentioning(self, words):
        found = None
        for line in self._lines():
            if any(w.lower() in line.lower() for w in words):
                found = line
        return found

    def _lines(self):
        while self._fd is not None:
            try:
                record = os.read(self._fd, 8192).decode(errors="replace")
            except BlockingIOError:
                return
            except BrokenPipeError:
                continue  # records were overwritten before we read them; go on with the next
            # "prio,seq,time,flags;message\n KEY=value..." - keep only the message
            yield record.partition(";")[2].split("\n")[0].strip()


def _check_device(device, erase, force):
    """The only guard between fsprof and a user's data: refuse anything mounted, claimed or unconfirmed."""
    try:
        st = os.stat(device)
    except FileNotFoundError:
        raise FsprofError(f"device {device} does not exist") from None
    if not stat.S_ISBLK(st.st_mode):
        raise FsprofError(f"{device} is not a block device")
    if not erase:
        raise FsprofError(f"profiling on {device} erases everything on it; pass --erase-device to allow that")
    where = _mounted_at(st.st_rdev)
    if where:
        raise FsprofError(f"{device} is mounted at {where}, and fsprof never mkfs's or unmounts a mounted device")
    _check_not_claimed(device)
    signature = _signature(device)
    if signature and not force:
        raise FsprofError(f"{device} holds {signature}; pass --force-erase to overwrite it")


def _related_majmins(rdev):
    """The device, its partitions and its holders (dm, md...), as "major:minor"."""
    sysdir = f"/sys/dev/block/{os.major(rdev)}:{os.minor(rdev)}"
    related = {f"{os.major(rdev)}:{os.minor(rdev)}"}
    for sub in ("", "holders/"):
        with contextlib.suppress(OSError):
            for name in os.listdir(f"{sysdir}/{sub}"):
                with contextlib.suppress(OSError), open(f"{sysdir}/{sub}{name}/dev") as f:
                    related.add(f.read().strip())
    return related


def _mounted_at(rdev):
    related = _related_majmins(rdev)
    for m in mounts():
        if m["majmin"] in related or majmin_of(m["source"]) in related:
            return m["target"]
    with open("/proc/swaps") as f:
        for line in f.readlines()[1:]:
            if majmin_of(line.split()[0]) in related:
                return "swap"
    return None


def _check_not_claimed(device):
    """O_EXCL on a block device fails with EBUSY while a filesystem, RAID or mapper holds it, which
    catches what mountinfo cannot show (e.g. a second device of a mounted multi-device btrfs)."""
    try:
        os.close(os.open(device, os.O_RDONLY | os.O_EXCL | os.O_CLOEXEC))
    except OSError as e:
        if e.errno == errno.EBUSY:
            raise FsprofError(
                f"{device} is in use by the kernel (a mounted filesystem, RAID or mapper "
                "holds it), and fsprof never mkfs's or unmounts a mounted device"
            ) from None
        raise FsprofError(f"cannot open {device}: {e.strerror}") from None


def _signature(device):
    """What blkid finds on the device ("an ext4 filesystem", "a dos partition table"), or None."""
    proc = run_tool(["blkid", "-p", "-o", "export", device], "checking the device for data")
    if proc.returncode == 2:
        return None  # blkid: nothing found
    fields = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    if "PTTYPE" in fields:
        return f"a partition table ({fields['PTTYPE']})"
    if "TYPE" in fields:
        return f"an existing filesystem or volume ({fields['TYPE']})"
    return f"data blkid cannot name ({first_line(proc) or 'exit status ' + str(proc.returncode)})"


# ---------------------------------------------------------------------------------------------------
# Helpers


def _superblock_dev(target):
    """The kernel dev_t of the superblock mounted at target, as inode->i_sb->s_dev holds it. Not
    stat's st_dev: btrfs reports a per-subvolume anonymous device there."""
    majmin = next(m["majmin"] for m in reversed(mounts()) if m["target"] == target)
    major, minor = majmin.split(":")
    return kdev(int(major), int(minor))
