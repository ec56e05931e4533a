"""Scratch filesystems for profiling runs, and the crash-safe undo journal of every system change.

Every change fsprof makes to the machine (image file, loop device, mount, sysctl, I/O scheduler) is
written to a state file and fsynced before the change where the undo can check ownership, or right
after an exclusive creation otherwise, so that a SIGKILL at any moment leaves enough to undo. The state
file is flock'ed by its owner for its whole life: a lock that can be taken means the owner is dead.
Each undo step first checks that the thing is still ours (after a reboot /dev/loop3 or a sysctl may
belong to someone else), and a failed step never stops the others.
"""

import contextlib
import dataclasses
import errno
import fcntl
import json
import logging
import os
import shutil
import re
import secrets
import shlex
import signal
import stat
import subprocess
import tempfile
import time

from profiler.machine.blockdev import kdev, kdev_of_block, scheduler, whole_disk
from profiler import filesystems
from profiler.errors import FsprofError
from profiler.machine.mounts import mounts
from profiler.signals import deferred

STATE_DIR = "/var/tmp/fsprof/state"
SCRATCH_DIR = "/var/tmp/fsprof/scratch"
GIB = 1 << 30

log = logging.getLogger("fsprof")

_STATE_SUFFIX = ".jsonl"
_PACKAGES = {"mount": "mount", "umount": "mount", **{f"mkfs.{fs.name}": fs.package for fs in filesystems.TABLE.values()}}
# Each pair keeps exactly one member non-zero and writing one zeroes the other; vm.dirty_bytes cannot be
# written back to 0, so a pair is restored by writing whichever member was non-zero before.
_SYSCTL_PARTNERS = {
    "vm.dirty_bytes": "vm.dirty_ratio",
    "vm.dirty_ratio": "vm.dirty_bytes",
    "vm.dirty_background_bytes": "vm.dirty_background_ratio",
    "vm.dirty_background_ratio": "vm.dirty_background_bytes",
}


def state_dir_default():
    """The state directory: FSPROF_STATE_DIR if set (read at call time, so tests can set it), else STATE_DIR."""
    return os.environ.get("FSPROF_STATE_DIR") or STATE_DIR


# ---------------------------------------------------------------------------------------------------
# The undo journal


class Changes:
    """Journal of system changes, undone in reverse order on exit (also after an exception)."""

    def __init__(self, state_dir=None):
        self.state_dir = state_dir or state_dir_default()
        self.path = None
        self.records = []
        self.warnings = []
        self._fd = None

    def __enter__(self):
        self.path, self._fd = _create_locked_state_file(self.state_dir)
        return self

    def __exit__(self, *exc_info):
        self.close()
        return False

    def record(self, kind, **fields):
        """Append one change and make it durable before the caller makes the change."""
        if self._fd is None:
            raise RuntimeError("Changes.record() outside 'with Changes()'")
        rec = {"kind": kind, **fields}
        self.records.append(rec)  # first: an exception from a signal handler mid-write still undoes it
        os.write(self._fd, (json.dumps(rec) + "\n").encode())
        os.fsync(self._fd)

    def undo(self):
        """Undo every record, newest first; returns sentences of what was done. Failed steps stay recorded."""
        with deferred():
            done, warnings, self.records = _undo_records(self.records)
        self.warnings += warnings
        return done

    def close(self):
        """Undo, then drop the state file; if some step failed, keep those records for `fsprof cleanup`."""
        if self._fd is None:
            return
        with deferred():
            self.undo()
            _finish_state_file(self.path, self._fd, self.records, self.warnings)
            self._fd = None


def _create_locked_state_file(state_dir):
    """Create and flock a new state file; retry if a concurrent cleanup_stale deleted it before our lock."""
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    while True:
        path = os.path.join(state_dir, f"{os.getpid()}-{secrets.token_hex(4)}{_STATE_SUFFIX}")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        if _still_linked(path, fd):
            _fsync_dir(state_dir)
            return path, fd
        os.close(fd)


def _still_linked(path, fd):
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _finish_state_file(path, fd, remaining, warnings):
    """Unlink the state file (still under our lock), or rewrite it with the records that failed to undo."""
    try:
        if remaining:
            os.ftruncate(fd, 0)
            os.write(fd, "".join(json.dumps(r) + "\n" for r in remaining).encode())
            os.fsync(fd)
            _warn(warnings, f"{len(remaining)} change(s) could not be undone and stay recorded in {path}; "
                            "run `fsprof cleanup` once the cause is gone")
        else:
            os.unlink(path)
    finally:
        os.close(fd)


def cleanup_stale(state_dir=None):
    """Undo the changes of every fsprof that died without undoing them; returns sentences of what was done."""
    state_dir = state_dir or state_dir_default()
    try:
        # Newest first, as within a journal: a run's per-filesystem journals before its own.
        names = sorted(os.listdir(state_dir), key=lambda n: _mtime(os.path.join(state_dir, n)), reverse=True)
    except FileNotFoundError:
        return []
    done = []
    with deferred():
        for name in names:
            if name.endswith(_STATE_SUFFIX):
                done += _cleanup_one(os.path.join(state_dir, name))
    return done


def _mtime(path):
    try:
        return os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return 0


def _cleanup_one(path):
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return []
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)  # its owner is alive
        return []
    if not _still_linked(path, fd):
        os.close(fd)  # another cleanup got there first
        return []
    owner = os.path.basename(path).split("-")[0]
    done, warnings, remaining = _undo_records(_read_records(fd))
    _finish_state_file(path, fd, remaining, warnings)
    return [f"{sentence} (left by fsprof process {owner})" for sentence in done]


def _read_records(fd):
    """Records of a state file; a line cut short by a crash mid-write is skipped."""
    with os.fdopen(os.dup(fd), "rb") as f:
        lines = f.read().decode(errors="replace").splitlines()
    records = []
    for line in lines:
        with contextlib.suppress(ValueError):
            rec = json.loads(line)
            if isinstance(rec, dict):
                records.append(rec)
    return records


# ---------------------------------------------------------------------------------------------------
# Undo steps. Each returns a sentence of what it did, None if there was nothing left to do, raises
# _NotOurs when the thing now belongs to someone else (warn and forget), or anything else on failure
# (warn and keep the record for a later cleanup).


class _NotOurs(Exception):
    pass


def _warn(warnings, sentence):
    log.warning("fsprof: warning: %s", sentence)
    warnings.append(sentence)


def _undo_records(records):
    """Undo newest first; returns (sentences done, warnings, records that failed, in original order)."""
    done, warnings, failed = [], [], []
    for rec in reversed(records):
        step = _UNDO_STEPS.get(rec.get("kind"))
        try:
            if step is None:
                raise _NotOurs(f"unknown change {rec!r} left as it is")
            sentence = step(rec)
        except _NotOurs as e:
            _warn(warnings, str(e))
        except Exception as e:  # noqa: BLE001 - one failed step must not stop the others
            reason = e.strerror if isinstance(e, OSError) and e.strerror else e
            _warn(warnings, f"could not undo {rec.get('kind')} {_describe(rec)}: {reason}")
            failed.insert(0, rec)
        else:
            if sentence:
                done.append(sentence)
    return done, warnings, failed


def _describe(rec):
    return next((str(rec[k]) for k in ("path", "target", "backing_file", "name", "device") if k in rec), "")


def _undo_image(rec):
    path, scratch = os.path.realpath(rec["path"]), os.path.realpath(rec["scratch_dir"])
    if not path.startswith(scratch.rstrip("/") + "/"):
        raise _NotOurs(f"not deleting {path}: it is outside the scratch directory {scratch}")
    if not os.path.lexists(path):
        return None
    if not stat.S_ISREG(os.lstat(path).st_mode):
        raise _NotOurs(f"not deleting {path}: it is no longer a regular file")
    os.unlink(path)
    return f"deleted scratch image {path}"


def _undo_directory(rec):
    path = rec["path"]
    if not os.path.isdir(path):
        return None
    os.rmdir(path)  # fails while mounted on or not empty: the record stays for a later cleanup
    return f"removed directory {path}"


def _undo_loop(rec):
    """Detach every loop device serving our image; recorded before losetup, so the device is looked up."""
    done = []
    for name in _loops_backed_by(rec["backing_file"]):
        _run(["losetup", "-d", f"/dev/{name}"], "detaching a loop device", check=True)
        # A busy loop device is only marked to detach itself on last close: say so rather than claim done.
        if name in _loops_backed_by(rec["backing_file"]):
            raise _NotOurs(f"/dev/{name} is still in use; the kernel will detach it when it is closed")
        done.append(f"/dev/{name}")
    return f"detached {', '.join(done)} (backed by {rec['backing_file']})" if done else None


def _loops_backed_by(image):
    names = []
    for name in sorted(os.listdir("/sys/block")):
        try:
            with open(f"/sys/block/{name}/loop/backing_file") as f:
                backing = f.read().strip()
        except OSError:
            continue  # not a loop device, or not attached
        if backing.removesuffix(" (deleted)") == image:
            names.append(name)
    return names


def _undo_mount(rec):
    target, devnums = rec["target"], set(rec["devnums"])
    mounted = [m for m in _mountinfo() if m["target"] == target]
    if not mounted:
        return None
    top = mounted[-1]
    if top["majmin"] not in devnums and _majmin_of(top["source"]) not in devnums:
        raise _NotOurs(f"not unmounting {target}: it is now mounted from {top['source']}, not fsprof's "
                       f"{rec['source']}")
    _run(["umount", target], "unmounting a scratch filesystem", check=True)
    return f"unmounted {target}"


def _undo_sysctl(rec):
    name, old, new = rec["name"], rec["old"], rec["new"]
    try:
        current = _read_sysctl(name)
    except FileNotFoundError:
        raise _NotOurs(f"not restoring {name}: this kernel has no such setting") from None
    if _same(current, old):
        return None
    if not _same(current, new):
        raise _NotOurs(f"not restoring {name}: it is now {current!r}, not the {new!r} fsprof set, so "
                       f"someone changed it since")
    _write_sysctl(rec.get("restore_name", name), rec.get("restore_value", old))
    return f"restored {name} to {old!r} (was {new!r})"


def _restore_queue_setting(rec, what, read, write):
    """Put a block queue setting fsprof changed back, unless someone changed it since."""
    device, old, new = rec["device"], rec["old"], rec["new"]
    try:
        current = read(device)
    except FileNotFoundError:
        return None  # the device is gone, and its setting with it
    if current == old:
        return None
    if current != new:
        raise _NotOurs(f"not restoring the {what} of {device}: it is now \"{current}\", not the \"{new}\" "
                       f"fsprof set, so someone changed it since")
    write(device, old)
    return f"restored the {what} of {device} to \"{old}\" (was \"{new}\")"


def _undo_scheduler(rec):
    return _restore_queue_setting(rec, "I/O scheduler", lambda d: scheduler(d)[0], _write_scheduler)


def _start_time(pid):
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), or None if
    it is gone: with the pid it names one process, even after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rpartition(")")[2].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def record_process(changes, pid):
    """Record a workload process group fsprof started: undo kills it, so that a run killed with
    SIGKILL leaves no workload holding the scratch mount busy."""
    changes.record("process", pid=pid, start_time=_start_time(pid))


def _undo_process(rec):
    pid = rec["pid"]
    if _start_time(pid) is None:
        return None
    if _start_time(pid) != rec["start_time"]:
        raise _NotOurs(f"not killing pid {pid}: it is another process now")
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    # Wait for it to die, so that the umount that follows in the undo finds the mount idle.
    for _ in range(500):
        if _start_time(pid) is None or _process_state(pid) == "Z":
            break
        time.sleep(0.01)
    return f"killed workload process group {pid}"


def _process_state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0]
    except OSError:
        return None


_ZRAM_CONTROL = "/sys/class/zram-control"


def _boot_id():
    with open("/proc/sys/kernel/random/boot_id") as f:
        return f.read().strip()


def _undo_zram(rec):
    """Reset and remove a zram device fsprof added, if it is still the one we sized."""
    name = rec["name"]
    sysdir = f"/sys/block/{name}"
    if not os.path.isdir(sysdir):
        return None
    if rec.get("boot_id") != _boot_id():  # the journal outlived a reboot: zramN is someone else's now
        raise _NotOurs(f"not removing /dev/{name}: fsprof made its namesake before the last reboot")
    with open(f"{sysdir}/disksize") as f:
        if int(f.read()) not in (0, rec["disksize"]):
            raise _NotOurs(f"not removing /dev/{name}: its size is no longer the {rec['disksize']} bytes fsprof gave it")
    if os.listdir(f"{sysdir}/holders") or any(m["source"] == f"/dev/{name}" for m in _mountinfo()):
        raise _NotOurs(f"not removing /dev/{name}: it is in use")
    with open(f"{sysdir}/reset", "w") as f:
        f.write("1")
    with open(f"{_ZRAM_CONTROL}/hot_remove", "w") as f:
        f.write(name.removeprefix("zram"))
    return f"removed /dev/{name}"


_UNDO_STEPS = {
    "zram": _undo_zram,
    "process": _undo_process,
    "image": _undo_image,
    "directory": _undo_directory,
    "mountpoint": _undo_directory,
    "loop": _undo_loop,
    "mount": _undo_mount,
    "sysctl": _undo_sysctl,
    "scheduler": _undo_scheduler,
}


# ---------------------------------------------------------------------------------------------------
# System settings


def _sysctl_path(name):
    return "/proc/sys/" + name.replace(".", "/")


def _read_sysctl(name):
    with open(_sysctl_path(name)) as f:
        return f.read().strip()


def _write_sysctl(name, value):
    with open(_sysctl_path(name), "w") as f:
        f.write(str(value))


def _same(a, b):
    """Sysctl values compare by their words: the kernel prints tabs where one writes spaces."""
    return str(a).split() == str(b).split()


def set_sysctl(changes, name, value):
    """Set /proc/sys/<name> (e.g. "vm.dirty_bytes") after recording how to restore it."""
    value = str(value)
    try:
        old = _read_sysctl(name)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        raise FsprofError(f"unknown sysctl '{name}' (there is no file {_sysctl_path(name)})") from None
    if _same(old, value):
        return
    fields = {"name": name, "old": old, "new": value}
    partner = _SYSCTL_PARTNERS.get(name)
    if partner and _same(old, "0"):
        fields.update(restore_name=partner, restore_value=_read_sysctl(partner))
    changes.record("sysctl", **fields)
    try:
        _write_sysctl(name, value)
    except OSError as e:
        raise FsprofError(f"the kernel rejected {name} = {value}: {e.strerror}") from None


def _write_scheduler(device, sched):
    with open(f"/sys/block/{device}/queue/scheduler", "w") as f:
        f.write(sched)


def set_scheduler(changes, blockdev_name, sched):
    """Set the I/O scheduler of a block device ("loop3" or "/dev/loop3") after recording the old one."""
    device = os.path.basename(blockdev_name)
    try:
        current, available = scheduler(device)
    except FileNotFoundError:
        raise FsprofError(f"block device '{device}' has no I/O scheduler setting "
                          f"(no /sys/block/{device}/queue/scheduler)") from None
    if sched not in available:
        raise FsprofError(f"I/O scheduler '{sched}' is not available for {device}; "
                          f"choose from {', '.join(available)}")
    if sched == current:
        return
    changes.record("scheduler", device=device, old=current, new=sched)
    _write_scheduler(device, sched)


WRITE_CACHE_MODES = ("write back", "write through")


def _write_cache_path(device):
    return f"/sys/block/{device}/queue/write_cache"


def _read_write_cache(device):
    with open(_write_cache_path(device)) as f:
        return f.read().strip()


def _write_write_cache(device, mode):
    with open(_write_cache_path(device), "w") as f:
        f.write(mode)


def set_write_cache(changes, blockdev_name, mode):
    """Set a block device's write cache mode ("write back" or "write through") after recording the
    old one. "write through" tells the block layer the device has no volatile cache: it then drops
    every cache flush and FUA before they are queued (what `fsprof verify` tests barriers against)."""
    device = os.path.basename(blockdev_name)
    if mode not in WRITE_CACHE_MODES:
        raise FsprofError(f"write cache mode '{mode}' is not one of {', '.join(WRITE_CACHE_MODES)}")
    try:
        current = _read_write_cache(device)
    except FileNotFoundError:
        raise FsprofError(f"block device '{device}' has no write cache setting ({_write_cache_path(device)})") from None
    if current == mode:
        return
    changes.record("write_cache", device=device, old=current, new=mode)
    try:
        _write_write_cache(device, mode)
    except OSError as e:
        raise FsprofError(f"the kernel rejected write cache '{mode}' for {device}: {e.strerror}") from None


def _undo_write_cache(rec):
    return _restore_queue_setting(rec, "write cache", _read_write_cache, _write_write_cache)


_UNDO_STEPS["write_cache"] = _undo_write_cache


def drop_caches():
    """Write back dirty data, then drop page cache, dentries and inodes, for a cold-cache start."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")


# ---------------------------------------------------------------------------------------------------
# Provisioning


LOOP_IO = ("direct", "buffered")


@dataclasses.dataclass
class FsConfig:
    fs: str
    mkfs_options: tuple = ()
    mount_options: str = ""
    size_bytes: int = GIB
    devices: int = 1
    label: str = None
    # How a loop device reaches its image: "direct" (O_DIRECT: writes, reads and flushes reach the
    # backing disk, as on a real one) or "buffered" (through the host's page cache: a flush writes
    # the host's cache, reads may never reach a disk). docs/test-bed.md.
    loop_io: str = "direct"

    def __post_init__(self):
        filesystems.row(self.fs)
        if self.loop_io not in LOOP_IO:
            raise FsprofError(f"loop I/O '{self.loop_io}' is not one of {', '.join(LOOP_IO)}")
        self.mkfs_options = tuple(self.mkfs_options)
        self.label = self.label or self.fs
        if self.devices < 1:
            raise FsprofError(f"a filesystem needs at least one device, not {self.devices}")
        if self.devices > 1 and not filesystems.TABLE[self.fs].multi_device:
            raise FsprofError(f"{self.fs} cannot span {self.devices} devices; only "
                              f"{', '.join(filesystems.MULTI_DEVICE)} can use several")
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


def kernel_devt(devnum):
    """Python's st_dev/st_rdev to the kernel's internal dev_t encoding, as tracepoints report it."""
    return kdev(os.major(devnum), os.minor(devnum))


def provision(changes, config, scratch_dir=SCRATCH_DIR):
    """Make loop-backed image(s), mkfs them and mount at <scratch_dir>/<label>/mnt, recording each step."""
    filesystems.load_modules([config.fs], loop=True)  # modules on distribution kernels
    base = _make_label_dir(changes, scratch_dir, config.label)
    images = [_create_image(changes, scratch_dir, base, i, config.size_bytes) for i in range(config.devices)]
    devices = [_attach_loop(changes, image, config.loop_io == "direct") for image in images]
    _mkfs(config, devices)
    return _mount(changes, config, devices, images, base)


def provision_zram(changes, config, scratch_dir=SCRATCH_DIR):
    """A fresh RAM-backed zram device (the "fast device" baseline), mkfs'd and mounted like a loop image."""
    if config.devices != 1:
        raise FsprofError(f"a zram device gives exactly one device, but the {config.label} setup asks for {config.devices}")
    if not os.path.isdir(_ZRAM_CONTROL):
        raise FsprofError("zram is not available (no /sys/class/zram-control): load it with "
                          "`modprobe zram`, or use device = \"loop\"")
    base = _make_label_dir(changes, scratch_dir, config.label)
    with deferred():  # hot_add creates the device: record it before a signal can intervene
        with open(f"{_ZRAM_CONTROL}/hot_add") as f:
            name = f"zram{int(f.read())}"
        # A SIGKILL between hot_add and this record leaks one empty zram device (no journal can
        # name it before the kernel does); `zramctl` shows it, `echo N > hot_remove` removes it.
        changes.record("zram", name=name, disksize=config.size_bytes, boot_id=_boot_id())
    with open(f"/sys/block/{name}/disksize", "w") as f:
        f.write(str(config.size_bytes))
    _mkfs(config, [f"/dev/{name}"])
    return _mount(changes, config, [f"/dev/{name}"], [], base)


def provision_device(changes, config, device, erase=False, force=False, scratch_dir=SCRATCH_DIR):
    """mkfs and mount a device the user named; refuses unless erasing was asked for and is safe."""
    _check_device(device, erase, force)
    if config.devices != 1:
        raise FsprofError(f"a named device gives exactly one device, but the {config.label} setup asks "
                          f"for {config.devices}")
    base = _make_label_dir(changes, scratch_dir, config.label)
    device = os.path.realpath(device)
    _mkfs(config, [device])
    return _mount(changes, config, [device], [], base)


def make_scratch_dir(changes, path):
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
            raise FsprofError(f"scratch directory {path} is already in use; another fsprof run may own it "
                              "(`fsprof cleanup` removes what dead runs left)") from None
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
    proc = _run(argv, "attaching a loop device")
    if proc.returncode != 0:
        raise FsprofError(f"losetup could not attach {image}: {_first_line(proc)}")
    return proc.stdout.strip()


def _mkfs(config, devices):
    tool = f"mkfs.{config.fs}"
    force = filesystems.TABLE[config.fs].mkfs_force
    proc = _run([tool, force, "-q", *config.mkfs_options, *devices], f"making {config.fs}")
    if proc.returncode == 0:
        return
    opts = f" with the options '{shlex.join(config.mkfs_options)}'" if config.mkfs_options else ""
    raise FsprofError(f"{tool} failed on {', '.join(devices)}{opts}: {_first_line(proc)}")


def _mount(changes, config, devices, images, base):
    target = _make_dir(changes, "mountpoint", os.path.join(base, "mnt"))
    devnums = [_majmin_of(d) for d in devices]
    changes.record("mount", target=target, source=devices[0], devnums=devnums)
    argv = ["mount", "-t", config.fs] + (["-o", config.mount_options] if config.mount_options else [])
    with _KernelLog() as klog:
        proc = _run([*argv, devices[0], target], "mounting a scratch filesystem")
        if proc.returncode != 0:
            # ext2/ext3 are served by the ext4 driver, which names itself in its messages
            drivers = {config.fs, filesystems.TABLE[config.fs].module}
            drivers.update(os.path.basename(d) for d in devices)
            reason = klog.last_line_mentioning(drivers) or _first_line(proc)
            what = f"with options '{config.mount_options}'" if config.mount_options else f"on {devices[0]}"
            raise FsprofError(f"mount of {config.fs} {what} failed: {reason}")
    return ScratchFs(
        config=config,
        mountpoint=target,
        devices=list(devices),
        images=list(images),
        dev=_superblock_dev(target),
        block_devs=[(disk, kdev_of_block(disk)) for disk in
                    dict.fromkeys(whole_disk(os.path.basename(d)) for d in devices)],
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
    for m in _mountinfo():
        if m["majmin"] in related or _majmin_of(m["source"]) in related:
            return m["target"]
    with open("/proc/swaps") as f:
        for line in f.readlines()[1:]:
            if _majmin_of(line.split()[0]) in related:
                return "swap"
    return None


def _check_not_claimed(device):
    """O_EXCL on a block device fails with EBUSY while a filesystem, RAID or mapper holds it, which
    catches what mountinfo cannot show (e.g. a second device of a mounted multi-device btrfs)."""
    try:
        os.close(os.open(device, os.O_RDONLY | os.O_EXCL | os.O_CLOEXEC))
    except OSError as e:
        if e.errno == errno.EBUSY:
            raise FsprofError(f"{device} is in use by the kernel (a mounted filesystem, RAID or mapper "
                              "holds it), and fsprof never mkfs's or unmounts a mounted device") from None
        raise FsprofError(f"cannot open {device}: {e.strerror}") from None


def _signature(device):
    """What blkid finds on the device ("an ext4 filesystem", "a dos partition table"), or None."""
    proc = _run(["blkid", "-p", "-o", "export", device], "checking the device for data")
    if proc.returncode == 2:
        return None  # blkid: nothing found
    fields = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    if "PTTYPE" in fields:
        return f"a partition table ({fields['PTTYPE']})"
    if "TYPE" in fields:
        return f"an existing filesystem or volume ({fields['TYPE']})"
    return f"data blkid cannot name ({_first_line(proc) or 'exit status ' + str(proc.returncode)})"


# ---------------------------------------------------------------------------------------------------
# Helpers


def _superblock_dev(target):
    """The kernel dev_t of the superblock mounted at target, as inode->i_sb->s_dev holds it. Not
    stat's st_dev: btrfs reports a per-subvolume anonymous device there."""
    majmin = next(m["majmin"] for m in reversed(_mountinfo()) if m["target"] == target)
    major, minor = majmin.split(":")
    return kdev(int(major), int(minor))


def _mountinfo():
    """Mounts of our namespace: dicts with majmin (the superblock's), target and source."""
    return mounts()


def _majmin_of(path):
    """"major:minor" of a block device path, or None if it is not one."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}" if stat.S_ISBLK(st.st_mode) else None


def _run(argv, purpose, check=False):
    """Run a tool with its output captured; a missing tool is a one-sentence error."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        package = _PACKAGES.get(argv[0], "util-linux")
        raise FsprofError(f"{argv[0]} is not installed ({purpose} needs it; it comes with {package})") from None
    if check and proc.returncode != 0:
        raise FsprofError(f"{shlex.join(argv)} failed: {_first_line(proc)}")
    return proc


def _first_line(proc):
    """The tool's first meaningful line of stderr (else stdout), without "ERROR:" prefixes."""
    for line in (proc.stderr + "\n" + proc.stdout).splitlines():
        line = re.sub(r"^((error|ERROR):\s*)+", "", line.strip()).rstrip(".")
        if line:
            return line
    return f"exit status {proc.returncode}"


# ---------------------------------------------------------------------------------------------------
# A probe directory inside a filesystem someone else owns (`fsprof verify --mount DIR`): the one
# place verify writes. Journaled right after mkdtemp with its inode, so that a dead run's directory
# is removed with what is in it, and a directory of the same name that is not ours is left alone.

PROBE_DIR_PREFIX = ".fsprof-verify-"


def make_probe_dir(changes, parent):
    path = tempfile.mkdtemp(prefix=PROBE_DIR_PREFIX, dir=parent)
    st = os.lstat(path)
    changes.record("probe_dir", path=path, dev=st.st_dev, ino=st.st_ino)
    return path


def _undo_probe_dir(rec):
    path = rec["path"]
    if not os.path.lexists(path):
        return None
    st = os.lstat(path)
    if not os.path.basename(path).startswith(PROBE_DIR_PREFIX) or not stat.S_ISDIR(st.st_mode) or \
            (st.st_dev, st.st_ino) != (rec["dev"], rec["ino"]):
        raise _NotOurs(f"not removing {path}: it is no longer the directory verify made")
    shutil.rmtree(path)  # never follows a symlink out of the directory
    return f"removed verify's probe directory {path}"


_UNDO_STEPS["probe_dir"] = _undo_probe_dir
