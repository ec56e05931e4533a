"""The crash-safe undo journal of every system change fsprof makes, and the steps that undo them.

Every change fsprof makes to the machine (image file, loop device, mount, sysctl, I/O scheduler) is
written to a state file and fsynced before the change where the undo can check ownership, or right
after an exclusive creation otherwise, so that a SIGKILL at any moment leaves enough to undo. The state
file is flock'ed by its owner for its whole life: a lock that can be taken means the owner is dead.
Each undo step first checks that the thing is still ours (after a reboot /dev/loop3 or a sysctl may
belong to someone else), and a failed step never stops the others.
"""

import contextlib
import fcntl
import json
import logging
import os
import secrets
import shutil
import signal
import stat
import tempfile
import time
from typing import Any

from profiler.machine.blockdev import majmin_of, scheduler
from profiler.machine.mounts import mounts
from profiler.machine.tools import run_tool
from profiler.signals import deferred

STATE_DIR = "/var/tmp/fsprof/state"

log = logging.getLogger("fsprof")

_STATE_SUFFIX = ".jsonl"


def state_dir_default() -> str:
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

    def record(self, kind: str, **fields: Any) -> None:
        """Append one change and make it durable before the caller makes the change."""
        if self._fd is None:
            raise RuntimeError("Changes.record() outside 'with Changes()'")
        rec = {"kind": kind, **fields}
        self.records.append(rec)  # first: an exception from a signal handler mid-write still undoes it
        os.write(self._fd, (json.dumps(rec) + "\n").encode())
        os.fsync(self._fd)

    def undo(self) -> list[str]:
        """Undo every record, newest first; returns sentences of what was done. Failed steps stay recorded."""
        with deferred():
            done, warnings, self.records = _undo_records(self.records)
        self.warnings += warnings
        return done

    def close(self) -> None:
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
            _warn(
                warnings,
                f"{len(remaining)} change(s) could not be undone and stay recorded in {path}; "
                "run `fsprof cleanup` once the cause is gone",
            )
        else:
            os.unlink(path)
    finally:
        os.close(fd)


def cleanup_stale(state_dir: str | None = None) -> list[str]:
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
        run_tool(["losetup", "-d", f"/dev/{name}"], "detaching a loop device", check=True)
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
    mounted = [m for m in mounts() if m["target"] == target]
    if not mounted:
        return None
    top = mounted[-1]
    if top["majmin"] not in devnums and majmin_of(top["source"]) not in devnums:
        raise _NotOurs(f"not unmounting {target}: it is now mounted from {top['source']}, not fsprof's {rec['source']}")
    run_tool(["umount", target], "unmounting a scratch filesystem", check=True)
    return f"unmounted {target}"


def _start_time(pid):
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), or None if
    it is gone: with the pid it names one process, even after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rpartition(")")[2].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def record_process(changes: Changes, pid: int) -> None:
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


ZRAM_CONTROL = "/sys/class/zram-control"


def boot_id() -> str:
    with open("/proc/sys/kernel/random/boot_id") as f:
        return f.read().strip()


def _undo_dm(rec):
    """Remove a dm-delay device fsprof made, by its name (fsprof-<pid>-<label>-<i>)."""
    name = rec["name"]
    proc = run_tool(["dmsetup", "table", name], "reading a dm device's table")
    if proc.returncode != 0:
        return None  # never made, or gone
    if not name.startswith("fsprof-") or rec.get("boot_id") != boot_id():
        raise _NotOurs(f"not removing device-mapper device {name}: fsprof made its namesake before the last reboot")
    if " delay " not in f" {proc.stdout} ":
        raise _NotOurs(f"not removing device-mapper device {name}: it is no longer a delay target")
    run_tool(["dmsetup", "remove", "--noudevsync", name], "removing a dm device", check=True)
    return f"removed device-mapper device {name}"


CONFIGFS = "/sys/kernel/config"
NULL_BLK_GROUPS = f"{CONFIGFS}/nullb"


def null_blk_disk(group: str) -> str | None:
    """The block device a powered null_blk configfs group made: named after the group since
    Linux 6.0, nullb<index> before; None while it is off."""
    name = os.path.basename(group)
    if os.path.isdir(f"/sys/block/{name}"):
        return name
    try:
        with open(f"{group}/index") as f:
            indexed = f"nullb{int(f.read())}"
    except (OSError, ValueError):
        return None
    return indexed if os.path.isdir(f"/sys/block/{indexed}") else None


def _undo_null_blk(rec):
    """Power off and remove a null_blk device fsprof made, by its configfs group
    (fsprof-<pid>-<i>): its RAM goes with it."""
    group = rec["group"]
    if not os.path.isdir(group):
        return None
    if not os.path.basename(group).startswith("fsprof-") or rec.get("boot_id") != boot_id():
        raise _NotOurs(f"not removing null_blk device {group}: fsprof made its namesake before the last reboot")
    disk = null_blk_disk(group)
    if disk and (os.listdir(f"/sys/block/{disk}/holders") or any(m["source"] == f"/dev/{disk}" for m in mounts())):
        raise _NotOurs(f"not removing /dev/{disk}: it is in use")
    with open(f"{group}/power", "w") as f:
        f.write("0")
    os.rmdir(group)
    return f"removed null_blk device {disk or os.path.basename(group)}"


def _undo_configfs(rec):
    """Unmount the configfs that fsprof mounted to make null_blk devices, once nothing is left in
    it that fsprof did not make."""
    target = rec["target"]
    if not any(m["target"] == target and m["fstype"] == "configfs" for m in mounts()):
        return None
    if os.path.isdir(NULL_BLK_GROUPS) and os.listdir(NULL_BLK_GROUPS) != ["features"]:
        raise _NotOurs(f"not unmounting {target}: it holds null_blk devices fsprof did not make")
    run_tool(["umount", target], "unmounting configfs", check=True)
    return f"unmounted {target}"


def _undo_zram(rec):
    """Reset and remove a zram device fsprof added, if it is still the one we sized."""
    name = rec["name"]
    sysdir = f"/sys/block/{name}"
    if not os.path.isdir(sysdir):
        return None
    if rec.get("boot_id") != boot_id():  # the journal outlived a reboot: zramN is someone else's now
        raise _NotOurs(f"not removing /dev/{name}: fsprof made its namesake before the last reboot")
    with open(f"{sysdir}/disksize") as f:
        if int(f.read()) not in (0, rec["disksize"]):
            raise _NotOurs(
                f"not removing /dev/{name}: its size is no longer the {rec['disksize']} bytes fsprof gave it"
            )
    if os.listdir(f"{sysdir}/holders") or any(m["source"] == f"/dev/{name}" for m in mounts()):
        raise _NotOurs(f"not removing /dev/{name}: it is in use")
    with open(f"{sysdir}/reset", "w") as f:
        f.write("1")
    with open(f"{ZRAM_CONTROL}/hot_remove", "w") as f:
        f.write(name.removeprefix("zram"))
    return f"removed /dev/{name}"


# ---------------------------------------------------------------------------------------------------
# Undo steps of the system settings that settings.py sets, with their read/write helpers: settings
# imports these, never the reverse, and `fsprof cleanup` finds every step without importing settings.


def sysctl_path(name: str) -> str:
    return "/proc/sys/" + name.replace(".", "/")


def read_sysctl(name: str) -> str:
    with open(sysctl_path(name)) as f:
        return f.read().strip()


def write_sysctl(name: str, value: str | int) -> None:
    with open(sysctl_path(name), "w") as f:
        f.write(str(value))


def same_sysctl(a: str | int, b: str | int) -> bool:
    """Sysctl values compare by their words: the kernel prints tabs where one writes spaces."""
    return str(a).split() == str(b).split()


def _undo_sysctl(rec):
    name, old, new = rec["name"], rec["old"], rec["new"]
    try:
        current = read_sysctl(name)
    except FileNotFoundError:
        raise _NotOurs(f"not restoring {name}: this kernel has no such setting") from None
    if same_sysctl(current, old):
        return None
    if not same_sysctl(current, new):
        raise _NotOurs(
            f"not restoring {name}: it is now {current!r}, not the {new!r} fsprof set, so someone changed it since"
        )
    write_sysctl(rec.get("restore_name", name), rec.get("restore_value", old))
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
        raise _NotOurs(
            f'not restoring the {what} of {device}: it is now "{current}", not the "{new}" '
            f"fsprof set, so someone changed it since"
        )
    write(device, old)
    return f'restored the {what} of {device} to "{old}" (was "{new}")'


def write_scheduler(device: str, sched: str) -> None:
    with open(f"/sys/block/{device}/queue/scheduler", "w") as f:
        f.write(sched)


def _undo_scheduler(rec):
    return _restore_queue_setting(rec, "I/O scheduler", lambda d: scheduler(d)[0], write_scheduler)


def write_cache_path(device: str) -> str:
    return f"/sys/block/{device}/queue/write_cache"


def read_write_cache(device: str) -> str:
    with open(write_cache_path(device)) as f:
        return f.read().strip()


def write_write_cache(device: str, mode: str) -> None:
    with open(write_cache_path(device), "w") as f:
        f.write(mode)


def _undo_write_cache(rec):
    return _restore_queue_setting(rec, "write cache", read_write_cache, write_write_cache)


# ---------------------------------------------------------------------------------------------------
# A probe directory inside a filesystem someone else owns (`fsprof verify --mount DIR`): the one
# place verify writes. Journaled right after mkdtemp with its inode, so that a dead run's directory
# is removed with what is in it, and a directory of the same name that is not ours is left alone.

PROBE_DIR_PREFIX = ".fsprof-verify-"


def make_probe_dir(changes: Changes, parent: str | os.PathLike[str]) -> str:
    path = tempfile.mkdtemp(prefix=PROBE_DIR_PREFIX, dir=parent)
    st = os.lstat(path)
    changes.record("probe_dir", path=path, dev=st.st_dev, ino=st.st_ino)
    return path


def _undo_probe_dir(rec):
    path = rec["path"]
    if not os.path.lexists(path):
        return None
    st = os.lstat(path)
    if (
        not os.path.basename(path).startswith(PROBE_DIR_PREFIX)
        or not stat.S_ISDIR(st.st_mode)
        or (st.st_dev, st.st_ino) != (rec["dev"], rec["ino"])
    ):
        raise _NotOurs(f"not removing {path}: it is no longer the directory verify made")
    shutil.rmtree(path)  # never follows a symlink out of the directory
    return f"removed verify's probe directory {path}"


# ---------------------------------------------------------------------------------------------------
# The step that undoes each kind of record


_UNDO_STEPS = {
    "zram": _undo_zram,
    "process": _undo_process,
    "image": _undo_image,
    "directory": _undo_directory,
    "mountpoint": _undo_directory,
    "loop": _undo_loop,
    "dm": _undo_dm,
    "null_blk": _undo_null_blk,
    "configfs": _undo_configfs,
    "mount": _undo_mount,
    "sysctl": _undo_sysctl,
    "scheduler": _undo_scheduler,
    "write_cache": _undo_write_cache,
    "probe_dir": _undo_probe_dir,
}
