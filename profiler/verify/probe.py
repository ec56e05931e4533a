"""`fsprof verify`'s machinery: the filesystem under test as the kernel names it (superblock dev,
block devices, bdi, btrfs fsid), the tracer (bpf/verify.bpf.c, loaded for one verify only), and
the short probe workloads whose effects the checks in profiler/verify/checks.py judge.

Every probe writes only inside one temporary directory it creates under the mount point and
removes at the end (Workdir). Each phase resets the in-kernel counters before it starts and reads
them when it ends, so that a phase's counts are its own.

Over 500 lines: each probe workload sits beside the tracer state it reads, and the checks that
judge them are in checks.py.
"""

import ctypes
import dataclasses
import os
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import filesystems
from ..machine import blockdev, mounts, undo
from ..machine.conditions import kernel_hz
from ..errors import FsprofError
from ..behind import Target
from ..behind.writeback import reason_names, target_bdis
from ..trace.bpf import BpfObject

KIB, MIB = 1 << 10, 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")
TRACEFS = Path("/sys/kernel/tracing")
SYS_FS_BTRFS = Path("/sys/fs/btrfs")

# enum vcounter of bpf/verify.bpf.c, in order; the two arrays at the end have their own slots.
COUNTERS = (
    "bio_write",
    "bio_flush",
    "bio_empty_flush",
    "bio_fua",
    "rq_flush",
    "rq_fua",
    "rq_data",
    "rq_sched",
    "rq_insert",
    "gds",
    "bdp",
    "bdp_paused",
    "atime_dirty_sync",
    "atime_dirty_time",
    "xfs_update_time",
    "btrfs_delayed_inode",
    "jbd2_start",
    "jbd2_commits",
    "jbd2_blocks",
    "jbd2_logged",
    "fc_start",
    "fc_ok",
    "fc_other",
    "fc_blocks",
    "da_write_begin",
    "write_begin",
    "journalled_write_end",
    "xlog_sync",
    "xlog_bytes",
    "btrfs_commits",
    "oe",
    "oe_bytes",
    "oe_disk_bytes",
    "sync_fs",
)
N_WB_REASONS, N_COMPRESS = 16, 8
N_COUNTERS = len(COUNTERS) + N_WB_REASONS + N_COMPRESS
STATS = ("dirty_thresh", "bg_thresh", "dirty_limit", "bdp_limit", "iclog_size", "iclog_bufs", "log_write")
# ino roles (bpf/verify.bpf.c ROLE_*)
ROLE_DATA, ROLE_ATIME, ROLE_EXPIRE, ROLE_KEEP = 1, 2, 3, 4
# vdevs bits
VDEV_FS, VDEV_DISK = 1, 2
# enum vevent_kind
EV_JBD2_COMMIT, EV_BTRFS_COMMIT, EV_WB_PERIODIC, EV_INODE_WRITEBACK, EV_SYNC_FS = 1, 2, 3, 4, 5
EVENT = struct.Struct("<QII4Q")
# btrfs's on-disk compression types (enum btrfs_compression_type): part of the disk format, stable.
COMPRESS_TYPES = ("none", "zlib", "lzo", "zstd")

# What each probe phase writes, for the sentence said before anything is written.
FSYNC_WRITES, FSYNC_CHUNK = 20, 64 * KIB
DIRTY_BYTES, DIRTY_SECONDS = 4 * MIB, 2.0
ATIME_BYTES = 4 * KIB
KEEPALIVE_EVERY_S = 0.2


class Cfg(ctypes.Structure):
    _fields_ = [
        ("tgid", ctypes.c_uint32),
        ("sb_dev", ctypes.c_uint32),
        ("journal_dev", ctypes.c_uint32),
        ("has_fsid", ctypes.c_uint32),
        ("fsid", ctypes.c_uint8 * 16),
        ("bdi", ctypes.c_char * 32),
    ]


class VStat(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("count", "min", "max", "last", "sum")]


# ---------------------------------------------------------------------------------------------
# The filesystem under test


@dataclasses.dataclass
class FsTarget:
    mountpoint: str
    fs: str  # ext2, ext3, ext4, xfs, btrfs
    source: str  # the mount's source device
    options: str  # the mount table's options (mount and superblock, comma-joined)
    sb_dev: int  # kernel dev_t of the superblock
    devices: list  # [(name, kdev)] the block devices the filesystem submits bios to
    disks: list  # [(name, kdev)] the disks whose requests carry them
    bdi: str  # the bdi the filesystem writes back through
    fsid: bytes = b""  # btrfs only
    uuid: str = ""  # btrfs only: /sys/fs/btrfs/<uuid>

    @property
    def ext(self) -> bool:
        return self.fs in filesystems.served_by("ext4")

    def option_words(self) -> dict[str, str | bool]:
        """{name: value or True} of the mount table's options."""
        words = {}
        for opt in self.options.split(","):
            name, eq, value = opt.partition("=")
            words[name] = value if eq else True
        return words


def usage(sentence: str) -> FsprofError:
    return FsprofError(sentence, exit_code=2)


def describe_mount(path: str) -> FsTarget:
    """The mounted filesystem at `path`, or a usage error (exit 2) saying why it cannot be verified."""
    if not os.path.exists(path):
        raise usage(f"{path} does not exist")
    m = mounts.mount_of(path)
    if m is None:
        raise usage(
            f"{path} is not a mount point; give the directory a filesystem is mounted on (`findmnt -T {path}` names it)"
        )
    if m["fstype"] not in filesystems.NAMES:
        raise usage(f"{path} is a {m['fstype']} filesystem; fsprof verify checks ext2, ext3, ext4, XFS and btrfs")
    if "ro" in m["options"].split(","):
        raise usage(
            f"{path} is mounted read-only, and verify must write a few MiB in a temporary "
            "directory there to see what the kernel does"
        )
    major, minor = (int(x) for x in m["majmin"].split(":"))
    target = FsTarget(
        mountpoint=m["target"],
        fs=m["fstype"],
        source=m["source"],
        options=m["options"],
        sb_dev=blockdev.kdev(major, minor),
        devices=[],
        disks=[],
        bdi="",
    )
    if target.fs == "btrfs":
        target.uuid, names = _btrfs_devices(m["source"])
        target.fsid = bytes.fromhex(target.uuid.replace("-", ""))
    else:
        names = [_block_name(m["majmin"])]
    target.devices = [(n, _kdev_of(n)) for n in names if n]
    if not target.devices:
        raise usage(f"{path}: cannot find the block device of {m['source']} in /sys")
    target.disks = _disks_of(name for name, _ in target.devices)
    target.bdi = _bdi_of(target)
    return target


def _block_name(majmin):
    node = Path(f"/sys/dev/block/{majmin}")
    return node.resolve().name if node.exists() else None


def _kdev_of(name):
    major, minor = (Path("/sys/class/block") / name / "dev").read_text().split(":")
    return blockdev.kdev(int(major), int(minor))


def _btrfs_devices(source):
    """(uuid, [device names]) of the btrfs filesystem whose devices include the mount's source."""
    name = os.path.basename(os.path.realpath(source))
    for fs_dir in sorted(SYS_FS_BTRFS.glob("*/devices")):
        if (fs_dir / name).exists():
            return fs_dir.parent.name, sorted(p.name for p in fs_dir.iterdir())
    raise usage(f"cannot find the btrfs filesystem of {source} in {SYS_FS_BTRFS}")


def _disks_of(names):
    """The disks carrying these devices: a partition's disk, a device-mapper device's disks."""
    disks = []
    for name in names:
        for disk in blockdev.disks_below(name):
            if disk not in [d for d, _ in disks]:
                disks.append((disk, _kdev_of(disk)))
    return disks


def _bdi_of(target):
    found = target_bdis(Target(target.fs, target.sb_dev, dict((k, n) for n, k in target.devices), target.mountpoint))
    return found[0][0] if found else ""


def queue_setting(name: str, what: str) -> str | None:
    """/sys/block/<disk>/queue/<what> of the disk carrying block device `name`, or None."""
    try:
        return (blockdev.SYS_BLOCK / blockdev.whole_disk(name) / "queue" / what).read_text().strip()
    except OSError:
        return None


def wb_reason_names() -> dict[int, str]:
    return reason_names()


# ---------------------------------------------------------------------------------------------
# The tracer


class Tracer:
    """bpf/verify.bpf.o, pointed at one filesystem and the probe (this process)."""

    def __init__(self, target: FsTarget) -> None:
        self.target = target
        self.obj = BpfObject("verify")
        try:
            m = self.obj.map
            self.cfg = m("vcfg", ctypes.c_uint32, Cfg)
            self.devs = m("vdevs", ctypes.c_uint32, ctypes.c_uint8)
            self.inos = m("vinos", ctypes.c_uint64, ctypes.c_uint8)
            self.counts = m("vcounts", ctypes.c_uint32, ctypes.c_uint64)
            self.stats_map = m("vstats", ctypes.c_uint32, VStat)
            self.iclog_map = m("iclogs", ctypes.c_uint64, ctypes.c_uint64)
            self.elevator_map = m("elevator", ctypes.c_uint32, ctypes.c_char * 32)
            self._check_counters()
            self._events: list[dict[str, int]] = []
            self.ring = self.obj.ring_buffer("vevents", self._on_event)
            self._configure()
            self.obj.attach_all()
        except BaseException:
            self.close()
            raise

    @property
    def skipped(self) -> dict[str, str]:
        """{program: why} of the programs whose tracepoint this kernel lacks."""
        return self.obj.skipped

    def _check_counters(self):
        # The last counter exists and the one after it does not: COUNTERS matches enum vcounter.
        if (
            self.counts.lookup(ctypes.c_uint32(N_COUNTERS - 1)) is None
            or self.counts.lookup(ctypes.c_uint32(N_COUNTERS)) is not None
        ):
            raise FsprofError("profiler/verify/probe.py COUNTERS is out of date with bpf/verify.bpf.c")

    def _configure(self):
        t = self.target
        c = Cfg(tgid=os.getpid(), sb_dev=t.sb_dev, journal_dev=t.sb_dev if t.ext else 0, bdi=t.bdi.encode()[:31])
        if t.fsid:
            c.has_fsid = 1
            c.fsid[:] = list(t.fsid)
        self.cfg.update(ctypes.c_uint32(0), c)
        for _, kdev in t.devices:
            self.devs.update(ctypes.c_uint32(kdev), ctypes.c_uint8(VDEV_FS))
        for _, kdev in t.disks:
            bits = VDEV_DISK | (VDEV_FS if kdev in [k for _, k in t.devices] else 0)
            self.devs.update(ctypes.c_uint32(kdev), ctypes.c_uint8(bits))

    def watch_inode(self, ino: int, role: int) -> None:
        self.inos.update(ctypes.c_uint64(ino), ctypes.c_uint8(role))

    def _on_event(self, data):
        ns, kind, pid, a, b, c, d = EVENT.unpack_from(data)
        self._events.append({"ns": ns, "kind": kind, "pid": pid, "a": a, "b": b, "c": c, "d": d})

    def reset(self) -> None:
        """Forget everything counted so far (the ring's records included)."""
        self.poll()
        self._events = []
        for i in range(N_COUNTERS):
            self.counts.update(ctypes.c_uint32(i), ctypes.c_uint64(0))
        for i in range(len(STATS)):
            self.stats_map.update(ctypes.c_uint32(i), VStat())
        self.iclog_map.clear()
        self.elevator_map.update(ctypes.c_uint32(0), (ctypes.c_char * 32)())

    def poll(self) -> list[dict[str, int]]:
        while self.ring.poll(0):
            pass
        return list(self._events)

    def counters(self) -> dict[str, Any]:
        values = [self.counts.lookup(ctypes.c_uint32(i)) or 0 for i in range(N_COUNTERS)]
        out: dict[str, Any] = dict(zip(COUNTERS, values))
        base = len(COUNTERS)
        out["wb_reasons"] = {i: n for i, n in enumerate(values[base : base + N_WB_REASONS]) if n}
        out["compress"] = {i: n for i, n in enumerate(values[base + N_WB_REASONS :]) if n}
        return out

    def stats(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for i, name in enumerate(STATS):
            s = self.stats_map.lookup(ctypes.c_uint32(i))
            if s is not None and s.count:
                out[name] = {f: getattr(s, f) for f in ("count", "min", "max", "last", "sum")}
        return out

    def iclogs(self) -> dict[int, int]:
        return {k.value: v for k, v in self.iclog_map.items()}

    def elevator(self) -> str:
        raw = self.elevator_map.lookup(ctypes.c_uint32(0))
        return bytes(raw).split(b"\0")[0].decode(errors="replace") if raw is not None else ""

    def close(self) -> None:
        ring = getattr(self, "ring", None)
        if ring is not None:
            ring.close()
        self.obj.close()


def delta(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """Counters after - before (the nested dicts included)."""
    out: dict[str, Any] = {}
    for k, v in after.items():
        if isinstance(v, dict):
            b = before.get(k, {})
            out[k] = {i: n - b.get(i, 0) for i, n in v.items() if n - b.get(i, 0)}
        else:
            out[k] = v - before.get(k, 0)
    return out


# ---------------------------------------------------------------------------------------------
# The probe workloads


_libc = ctypes.CDLL(None, use_errno=True)


def syncfs(path: str) -> None:
    """syncfs(2) of the filesystem holding `path` (Python's os has no syncfs)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if _libc.syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), path)
    finally:
        os.close(fd)


def compressible(size: int) -> bytes:
    """Data every btrfs compressor shrinks (text, repeated), so compress= shows in the extents."""
    line = b"fsprof verify: a line of text that compresses well.\n"
    return (line * (size // len(line) + 1))[:size]


class Workdir:
    """The one directory verify writes in: created under the mount point, journaled (so that a
    run killed by SIGKILL has it removed by the next fsprof), removed on close."""

    def __init__(self, mountpoint: str) -> None:
        self._changes = undo.Changes()
        self._changes.__enter__()
        try:
            self.path = undo.make_probe_dir(self._changes, mountpoint)
        except OSError as e:
            self._changes.__exit__(None, None, None)
            raise FsprofError(f"cannot create a temporary directory in {mountpoint}: {e.strerror}") from None
        self.written = 0

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def close(self) -> None:
        self._changes.__exit__(None, None, None)  # undoes the journaled directory: rmtree

    def __enter__(self) -> "Workdir":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _window(tracer, fn):
    """Reset, run fn(), and return (its value, counters, stats, start ns, end ns)."""
    tracer.reset()
    start = time.monotonic_ns()
    value = fn()
    end = time.monotonic_ns()
    return value, tracer.counters(), tracer.stats(), start, end


def fsync_phase(tracer: Tracer, work: Workdir) -> dict[str, Any]:
    """FSYNC_WRITES appends of FSYNC_CHUNK compressible bytes, each fsynced: what the fs asks of the
    device per fsync (flushes, FUA), its journal, log or ordered extents, delayed allocation, and
    the requests' path through the I/O scheduler."""
    path = work.file("fsync")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fsync(fd)
        ino = os.fstat(fd).st_ino
        tracer.watch_inode(ino, ROLE_DATA)
        syncfs(work.path)  # the directory entry and anything before us are not ours to count
        data = compressible(FSYNC_CHUNK)

        def run():
            for i in range(FSYNC_WRITES):
                os.pwrite(fd, data, i * FSYNC_CHUNK)
                os.fsync(fd)
            return FSYNC_WRITES

        fsyncs, counts, stats, start, end = _window(tracer, run)
    finally:
        os.close(fd)
    work.written += FSYNC_WRITES * FSYNC_CHUNK
    return {
        "fsyncs": fsyncs,
        "bytes_per_fsync": FSYNC_CHUNK,
        "ino": ino,
        "counts": counts,
        "stats": stats,
        "iclogs": tracer.iclogs(),
        "elevator": tracer.elevator(),
        "block_size": os.statvfs(path).f_bsize,
        "start_ns": start,
        "end_ns": end,
    }


def dirty_phase(tracer: Tracer, work: Workdir) -> dict[str, Any]:
    """Buffered writes without fsync, up to DIRTY_BYTES or DIRTY_SECONDS: balance_dirty_pages runs
    in this process and says which dirty limit and background threshold the kernel uses."""
    path = work.file("dirty")
    chunk = b"\0" * (64 * KIB)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:

        def run():
            written, deadline = 0, time.monotonic() + DIRTY_SECONDS
            while written < DIRTY_BYTES and time.monotonic() < deadline:
                written += os.write(fd, chunk)
            return written

        written, counts, stats, start, end = _window(tracer, run)
    finally:
        os.close(fd)
    work.written += written
    mem = read_meminfo()
    syncfs(work.path)  # leave nothing of ours dirty for the phases after
    return {"bytes": written, "counts": counts, "stats": stats, "meminfo": mem, "start_ns": start, "end_ns": end}


def read_meminfo() -> dict[str, int]:
    """/proc/meminfo in bytes: MemFree is the kernel's own free figure (si_meminfo), which
    /proc/vmstat's nr_free_pages lags behind."""
    out: dict[str, int] = {}
    with open("/proc/meminfo") as f:
        for line in f:
            name, _, rest = line.partition(":")
            words = rest.split()
            if words and words[0].isdigit():
                out[name] = int(words[0]) * (1024 if words[1:] == ["kB"] else 1)
    return out


def atime_phase(tracer: Tracer, work: Workdir) -> dict[str, Any]:
    """Two reads of a file, each followed by syncfs. Read A: its atime is older than its mtime
    (relatime and strictatime update it). Read B, just after A: its atime is newer than mtime and
    ctime and less than a day old (only strictatime updates it). Whether the inode is dirtied, and
    what the syncfs after each read writes, is what the atime setting did."""
    path = work.file("atime")
    with open(path, "wb") as f:
        f.write(b"a" * ATIME_BYTES)
        os.fsync(f.fileno())
        ino = os.fstat(f.fileno()).st_ino
    work.written += ATIME_BYTES
    now = time.time()
    os.utime(path, (now - 100, now - 50))  # atime before mtime; ctime is now
    syncfs(work.path)
    tracer.watch_inode(ino, ROLE_ATIME)
    time.sleep(0.02)  # the coarse clock moves on: a read now has a new time to write
    out: dict[str, Any] = {"ino": ino}
    for name in ("a", "b"):
        before = os.stat(path).st_atime_ns
        _, counts, _, start, end = _window(tracer, lambda: _read_all(path))
        mid = tracer.counters()
        sync_start = time.monotonic_ns()
        syncfs(work.path)
        sync_end = time.monotonic_ns()
        synced = delta(tracer.counters(), mid)
        out[name] = {
            "read": counts,
            "sync": synced,
            "atime_changed": os.stat(path).st_atime_ns != before,
            "start_ns": start,
            "end_ns": end,
            "sync_start_ns": sync_start,
            "sync_end_ns": sync_end,
        }
        time.sleep(0.02)
    return out


def _read_all(path):
    with open(path, "rb") as f:
        while f.read(1 << 16):
            pass


def timing_phase(
    tracer: Tracer, work: Workdir, horizon_s: float, enough: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """Wait up to horizon_s while the filesystem is kept busy: every KEEPALIVE_EVERY_S an empty
    file is created (a journal handle or btrfs transaction: one is always open; rewriting a page
    alone opens no btrfs transaction) and a page is rewritten (the bdi always has dirty data),
    and one file is dirtied once at the start and left alone. The commit timer, the flusher's
    periodic runs and the age at which it writes dirty inodes show in the events. enough(so_far),
    given the phase's data so far, ends the wait early once every timing check is decided."""
    keep, expire = work.file("keepalive"), work.file("expire")
    fds = [os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600) for p in (keep, expire)]
    try:
        tracer.watch_inode(os.fstat(fds[0]).st_ino, ROLE_KEEP)
        tracer.watch_inode(os.fstat(fds[1]).st_ino, ROLE_EXPIRE)
        syncfs(work.path)
        tracer.reset()
        page = b"k" * PAGE
        start = time.monotonic_ns()
        os.pwrite(fds[1], page, 0)
        dirtied = time.monotonic_ns()
        so_far = {"start_ns": start, "dirtied_ns": dirtied, "hz": kernel_hz(), "expire_ino": os.fstat(fds[1]).st_ino}
        writes = 0
        deadline = time.monotonic() + horizon_s
        while time.monotonic() < deadline:
            os.close(os.open(work.file(f"keep-{writes}"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            os.pwrite(fds[0], page, 0)
            writes += 1
            time.sleep(KEEPALIVE_EVERY_S)
            if enough({**so_far, "events": tracer.poll(), "end_ns": time.monotonic_ns()}):
                break
        end = time.monotonic_ns()
        events = tracer.poll()
        counts = tracer.counters()
    finally:
        for fd in fds:
            os.close(fd)
    work.written += 2 * PAGE
    return {**so_far, "events": events, "counts": counts, "end_ns": end, "keepalive_writes": writes}
