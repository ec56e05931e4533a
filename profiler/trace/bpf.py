"""The one place fsprof talks to libbpf: load CO-RE objects, attach programs, read maps, poll rings.

ctypes over the system libbpf.so.1 (bcc cannot compile on kernels without headers; a CO-RE object
built once runs anywhere with BTF). Every failure becomes an FsprofError with one sentence.
"""

import ctypes
import errno
import hashlib
import os
import platform
import re
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..errors import FsprofError
from .. import signals
from ..machine import tracefs
from . import kernel_flags, maps


def _objects_dir():
    """Where the BPF objects are: FSPROF_BPF_DIR (another build of them, e.g. one a test altered),
    else those an installed wheel ships beside this module (setup.py copies them there), else the
    source tree's build/ that `make build` fills."""
    if os.environ.get("FSPROF_BPF_DIR"):
        return Path(os.environ["FSPROF_BPF_DIR"])
    shipped = Path(__file__).resolve().parent / "bpf_objects"
    return shipped if shipped.is_dir() else Path(__file__).resolve().parents[2] / "build"


BUILD_DIR = _objects_dir()
LOG_DIR = Path(os.environ.get("FSPROF_LOG_DIR", "/var/tmp/fsprof/logs"))
CORE_BTF_DIR = Path(os.environ.get("FSPROF_CORE_BTF_DIR", "/var/tmp/fsprof/cache/core-btf"))
VMLINUX_BTF = Path("/sys/kernel/btf/vmlinux")

_c = ctypes
_vp = _c.c_void_p

# libbpf's print callback receives a va_list; on x86_64 and arm64 it is passed as a pointer,
# which libc's vsnprintf formats for us.
_PRINT_FN = _c.CFUNCTYPE(_c.c_int, _c.c_int, _c.c_char_p, _vp)
_RING_FN = _c.CFUNCTYPE(_c.c_int, _vp, _vp, _c.c_size_t)

_lib = None
# The C library is already in the process (Python links it): no ldconfig search at import.
_libc = _c.CDLL(None, use_errno=True)
_libc.vsnprintf.argtypes = [_c.c_char_p, _c.c_size_t, _c.c_char_p, _vp]
_libc.syscall.restype = _c.c_long
# What libbpf printed during the current load, per thread (objects may load side by side; libbpf
# prints from the thread that called it); saved to a file when a load fails. Its debug messages
# (about 4,700 per start, each a call into Python under the GIL: 20-30 ms of every start) are
# kept only when `_log.debug` is set: a failed load is done again with them before its log is saved.
_log = threading.local()
_LIBBPF_DEBUG = 2   # enum libbpf_print_level


def _log_lines():
    if not hasattr(_log, "lines"):
        _log.lines = []
    return _log.lines


# va_list is 24 bytes on x86_64 and 32 on arm64, passed by pointer; copying it is what va_copy does.
_VA_LIST_SIZE = 32


@_PRINT_FN
def _collect_print(level, fmt, args):
    if level == _LIBBPF_DEBUG and not getattr(_log, "debug", False):
        return 0
    # A verifier log arrives as one message of up to megabytes: format it whole (its last line is
    # the reason), from a copy of the va_list when the first try is too short.
    saved = _c.create_string_buffer(_c.string_at(args, _VA_LIST_SIZE), _VA_LIST_SIZE)
    buf = _c.create_string_buffer(4096)
    need = _libc.vsnprintf(buf, len(buf), fmt, args)
    if need >= len(buf):
        buf = _c.create_string_buffer(need + 1)
        _libc.vsnprintf(buf, len(buf), fmt, _c.cast(saved, _vp))
    _log_lines().append(buf.value.decode(errors="replace"))
    return 0


def _signatures(lib):
    sigs = {
        "libbpf_set_print": (_vp, [_PRINT_FN]),
        "bpf_object__open_file": (_vp, [_c.c_char_p, _vp]),
        "bpf_object__load": (_c.c_int, [_vp]),
        "bpf_object__close": (None, [_vp]),
        "bpf_object__next_program": (_vp, [_vp, _vp]),
        "bpf_object__find_map_by_name": (_vp, [_vp, _c.c_char_p]),
        "bpf_program__name": (_c.c_char_p, [_vp]),
        "bpf_program__section_name": (_c.c_char_p, [_vp]),
        "bpf_program__set_autoload": (_c.c_int, [_vp, _c.c_bool]),
        "bpf_program__set_log_level": (_c.c_int, [_vp, _c.c_uint32]),
        "bpf_program__set_log_buf": (_c.c_int, [_vp, _c.c_char_p, _c.c_size_t]),
        "bpf_program__attach": (_vp, [_vp]),
        "bpf_program__attach_perf_event": (_vp, [_vp, _c.c_int]),
        "bpf_link__destroy": (_c.c_int, [_vp]),
        "bpf_map__fd": (_c.c_int, [_vp]),
        "bpf_map__max_entries": (_c.c_uint32, [_vp]),
        "bpf_map__map_flags": (_c.c_uint32, [_vp]),
        "bpf_map_create": (_c.c_int, [_c.c_int, _c.c_char_p, _c.c_uint32, _c.c_uint32, _c.c_uint32, _vp]),
        "bpf_map__reuse_fd": (_c.c_int, [_vp, _c.c_int]),
        "bpf_map__key_size": (_c.c_uint32, [_vp]),
        "bpf_map__value_size": (_c.c_uint32, [_vp]),
        "bpf_map__type": (_c.c_int, [_vp]),
        "bpf_map_lookup_elem": (_c.c_int, [_c.c_int, _vp, _vp]),
        "bpf_map_update_elem": (_c.c_int, [_c.c_int, _vp, _vp, _c.c_uint64]),
        "bpf_map_delete_elem": (_c.c_int, [_c.c_int, _vp]),
        "bpf_map_get_next_key": (_c.c_int, [_c.c_int, _vp, _vp]),
        "bpf_map_lookup_and_delete_elem": (_c.c_int, [_c.c_int, _vp, _vp]),
        "bpf_program__fd": (_c.c_int, [_vp]),
        "bpf_obj_get_info_by_fd": (_c.c_int, [_c.c_int, _vp, _c.POINTER(_c.c_uint32)]),
        "libbpf_num_possible_cpus": (_c.c_int, []),
        "ring_buffer__new": (_vp, [_c.c_int, _RING_FN, _vp, _vp]),
        "ring_buffer__poll": (_c.c_int, [_vp, _c.c_int]),
        "ring_buffer__free": (None, [_vp]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args


def libbpf():
    """The loaded libbpf, with signatures declared and its messages captured."""
    global _lib
    if _lib is None:
        try:
            lib = _c.CDLL("libbpf.so.1", use_errno=True)
        except OSError:
            raise FsprofError("libbpf.so.1 is not installed; run `make setup` (Debian package libbpf1)")
        _signatures(lib)
        lib.libbpf_set_print(_collect_print)
        _lib = lib
    return _lib


def _errno_text(err):
    err = abs(err)
    return f"{errno.errorcode.get(err, err)}: {os.strerror(err)}"


# Capabilities fsprof uses (bit numbers from linux/capability.h).
NEEDED_CAPS = {"CAP_SYS_ADMIN": 21, "CAP_PERFMON": 38, "CAP_BPF": 39}


def missing_capabilities():
    text = Path("/proc/self/status").read_text()
    eff = int(next(line.split()[1] for line in text.splitlines() if line.startswith("CapEff:")), 16)
    return [name for name, bit in NEEDED_CAPS.items() if not eff >> bit & 1]


def check_privileges():
    if os.geteuid() != 0:
        raise FsprofError("fsprof must run as root: it loads BPF programs, opens perf events and mounts filesystems")
    missing = missing_capabilities()
    if missing:
        raise FsprofError(f"fsprof runs as root but lacks {', '.join(missing)}: run it with full root capabilities")


# BPF map types whose values are per CPU (BPF_MAP_TYPE_PERCPU_HASH, _PERCPU_ARRAY, _LRU_PERCPU_HASH).
_PERCPU_TYPES = {5, 6, 10}
BPF_NOEXIST, BPF_ANY = 1, 0


class Map:
    """A BPF map with ctypes key and value types mirroring the C structs."""

    def __init__(self, name, handle, key_type, value_type):
        lib = libbpf()
        self.name = name
        self.fd = lib.bpf_map__fd(handle)
        self.percpu = lib.bpf_map__type(handle) in _PERCPU_TYPES
        self.key_type, self.value_type = key_type, value_type
        for what, ctype, size in (("key", key_type, lib.bpf_map__key_size(handle)),
                                  ("value", value_type, lib.bpf_map__value_size(handle))):
            if _c.sizeof(ctype) != size:
                raise FsprofError(f"map {name}: the Python {what} type is {_c.sizeof(ctype)} bytes but the "
                                  f"BPF object says {size}; profiler/trace/maps.py is out of date with bpf/")
        self.ncpus = lib.libbpf_num_possible_cpus() if self.percpu else 1
        # Per-CPU values come back as one 8-byte-aligned slot per possible CPU.
        self._slot = (_c.sizeof(value_type) + 7) & ~7

    def keys(self):
        lib, key = libbpf(), None
        nxt = self.key_type()
        keys = []
        while lib.bpf_map_get_next_key(self.fd, None if key is None else _c.byref(key), _c.byref(nxt)) == 0:
            keys.append(nxt)
            key, nxt = nxt, self.key_type()
        return keys

    def lookup(self, key):
        """The value, or for per-CPU maps a list of values (one per CPU); None when absent."""
        buf = _c.create_string_buffer(self._slot * self.ncpus)
        if libbpf().bpf_map_lookup_elem(self.fd, _c.byref(key), buf) != 0:
            return None
        vals = [self.value_type.from_buffer_copy(buf, i * self._slot) for i in range(self.ncpus)]
        if issubclass(self.value_type, _c._SimpleCData):
            vals = [v.value for v in vals]
        return vals if self.percpu else vals[0]

    def items(self):
        for key in self.keys():
            val = self.lookup(key)
            if val is not None:
                yield key, val

    def update(self, key, value, flags=BPF_ANY):
        if self.percpu:
            raise FsprofError(f"map {self.name}: per-CPU maps are written by the kernel only")
        if libbpf().bpf_map_update_elem(self.fd, _c.byref(key), _c.byref(value), flags) != 0:
            raise FsprofError(f"could not write to BPF map {self.name} ({_errno_text(_c.get_errno())})")

    def delete(self, key):
        return libbpf().bpf_map_delete_elem(self.fd, _c.byref(key)) == 0

    def clear(self):
        for key in self.keys():
            self.delete(key)

    def drain(self):
        """Every (key, value), each removed in the same step as it is read (hash maps, 5.14+):
        an update racing with the drain lands either in what is returned or in the map, never
        nowhere. Values as lookup() returns them."""
        buf = _c.create_string_buffer(self._slot * self.ncpus)
        for key in self.keys():
            if libbpf().bpf_map_lookup_and_delete_elem(self.fd, _c.byref(key), buf) != 0:
                continue  # gone since keys() listed it
            vals = [self.value_type.from_buffer_copy(buf, i * self._slot) for i in range(self.ncpus)]
            if issubclass(self.value_type, _c._SimpleCData):
                vals = [v.value for v in vals]
            yield key, (vals if self.percpu else vals[0])


class _ProgInfo(_c.Structure):
    """struct bpf_prog_info (uapi/linux/bpf.h) up to the run statistics: the kernel fills as many
    bytes as it is given."""
    _fields_ = [("type", _c.c_uint32), ("id", _c.c_uint32), ("tag", _c.c_uint8 * 8),
                ("jited_prog_len", _c.c_uint32), ("xlated_prog_len", _c.c_uint32),
                ("jited_prog_insns", _c.c_uint64), ("xlated_prog_insns", _c.c_uint64),
                ("load_time", _c.c_uint64), ("created_by_uid", _c.c_uint32), ("nr_map_ids", _c.c_uint32),
                ("map_ids", _c.c_uint64), ("name", _c.c_char * 16), ("ifindex", _c.c_uint32),
                ("gpl_compatible", _c.c_uint32), ("netns_dev", _c.c_uint64), ("netns_ino", _c.c_uint64),
                ("nr_jited_ksyms", _c.c_uint32), ("nr_jited_func_lens", _c.c_uint32),
                ("jited_ksyms", _c.c_uint64), ("jited_func_lens", _c.c_uint64), ("btf_id", _c.c_uint32),
                ("func_info_rec_size", _c.c_uint32), ("func_info", _c.c_uint64), ("nr_func_info", _c.c_uint32),
                ("nr_line_info", _c.c_uint32), ("line_info", _c.c_uint64), ("jited_line_info", _c.c_uint64),
                ("nr_jited_line_info", _c.c_uint32), ("line_info_rec_size", _c.c_uint32),
                ("jited_line_info_rec_size", _c.c_uint32), ("nr_prog_tags", _c.c_uint32),
                ("prog_tags", _c.c_uint64), ("run_time_ns", _c.c_uint64), ("run_cnt", _c.c_uint64),
                ("recursion_misses", _c.c_uint64)]


def prog_run_stats(fd):
    """(run_cnt, run_time_ns, recursion_misses) of a loaded program. The kernel counts runs and
    time only while kernel.bpf_stats_enabled=1; recursion misses always."""
    info = _ProgInfo()
    size = _c.c_uint32(_c.sizeof(info))
    if libbpf().bpf_obj_get_info_by_fd(fd, _c.byref(info), _c.byref(size)) != 0:
        return 0, 0, 0
    return info.run_cnt, info.run_time_ns, info.recursion_misses


class _MapCreateOpts(_c.Structure):
    """struct bpf_map_create_opts (libbpf 1.x)."""
    _fields_ = [("sz", _c.c_size_t), ("btf_fd", _c.c_uint32), ("btf_key_type_id", _c.c_uint32),
                ("btf_value_type_id", _c.c_uint32), ("btf_vmlinux_value_type_id", _c.c_uint32),
                ("inner_map_fd", _c.c_uint32), ("map_flags", _c.c_uint32), ("map_extra", _c.c_uint64),
                ("numa_node", _c.c_uint32), ("map_ifindex", _c.c_uint32)]


class SharedMap:
    """A map made before any object is loaded (create_maps), for several objects to share: pass
    {name: SharedMap} as BpfObject's `share`. close() drops this fd; the objects keep their own."""

    def __init__(self, name, fd):
        self.name, self.fd = name, fd

    def close(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def create_maps(name, map_names, path=None):
    """Makes the maps `map_names` as build/<name>.bpf.o (or `path`) defines them (type, key and
    value sizes, entries, flags) without loading the object: {map name: SharedMap}. Made first,
    they let every object that shares them load at the same time as the others."""
    check_privileges()
    lib = libbpf()
    path = Path(path) if path else BUILD_DIR / f"{name}.bpf.o"
    if not path.exists():
        raise FsprofError(f"{path} is not built; run `make build`")
    obj = lib.bpf_object__open_file(str(path).encode(), None)
    if not obj:
        raise FsprofError(f"libbpf could not open {path} ({_errno_text(_c.get_errno())})")
    made = {}
    try:
        for map_name in map_names:
            handle = lib.bpf_object__find_map_by_name(obj, map_name.encode())
            if not handle:
                raise FsprofError(f"{name}.bpf.o has no map named {map_name}")
            opts = _MapCreateOpts(sz=_c.sizeof(_MapCreateOpts), map_flags=lib.bpf_map__map_flags(handle))
            fd = lib.bpf_map_create(lib.bpf_map__type(handle), map_name.encode(), lib.bpf_map__key_size(handle),
                                    lib.bpf_map__value_size(handle), lib.bpf_map__max_entries(handle),
                                    _c.byref(opts))
            if fd < 0:
                raise FsprofError(f"could not create BPF map {map_name} of {name}.bpf.o ({_errno_text(fd)})")
            made[map_name] = SharedMap(map_name, fd)
    except BaseException:
        for m in made.values():
            m.close()
        raise
    finally:
        lib.bpf_object__close(obj)
    return made


class RingBuffer:
    """Polls a BPF ring buffer map; callback(bytes) gets each record (for rare events only)."""

    def __init__(self, map_fd, name, callback):
        def on_sample(_ctx, data, size):
            callback(_c.string_at(data, size))
            return 0

        self._cb = _RING_FN(on_sample)  # keep a reference: libbpf holds the raw pointer
        self._rb = libbpf().ring_buffer__new(map_fd, self._cb, None, None)
        if not self._rb:
            raise FsprofError(f"could not open ring buffer {name} ({_errno_text(_c.get_errno())})")

    def poll(self, timeout_ms=100):
        n = libbpf().ring_buffer__poll(self._rb, timeout_ms)
        if n < 0 and -n != errno.EINTR:
            raise FsprofError(f"ring buffer poll failed ({_errno_text(n)})")
        return max(n, 0)

    def close(self):
        if self._rb:
            libbpf().ring_buffer__free(self._rb)
            self._rb = None


class PerfEventAttr(_c.Structure):
    """struct perf_event_attr up to config3 (PERF_ATTR_SIZE_VER8)."""
    _fields_ = [
        ("type", _c.c_uint32), ("size", _c.c_uint32), ("config", _c.c_uint64),
        ("sample_period_or_freq", _c.c_uint64), ("sample_type", _c.c_uint64),
        ("read_format", _c.c_uint64), ("flags", _c.c_uint64),
        ("wakeup_events", _c.c_uint32), ("bp_type", _c.c_uint32),
        ("config1", _c.c_uint64), ("config2", _c.c_uint64),
        ("branch_sample_type", _c.c_uint64), ("sample_regs_user", _c.c_uint64),
        ("sample_stack_user", _c.c_uint32), ("clockid", _c.c_int32),
        ("sample_regs_intr", _c.c_uint64), ("aux_watermark", _c.c_uint32),
        ("sample_max_stack", _c.c_uint16), ("reserved_2", _c.c_uint16),
        ("aux_sample_size", _c.c_uint32), ("reserved_3", _c.c_uint32),
        ("sig_data", _c.c_uint64), ("config3", _c.c_uint64),
    ]


PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK = 1, 0
_PERF_FLAG_FREQ = 1 << 10
_NR_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}


def perf_event_open_sampling(cpu, freq_hz):
    """A cpu-clock sampling event on one CPU (all tasks), as perf record -F uses."""
    attr = PerfEventAttr(type=PERF_TYPE_SOFTWARE, size=_c.sizeof(PerfEventAttr),
                         config=PERF_COUNT_SW_CPU_CLOCK, sample_period_or_freq=freq_hz,
                         flags=_PERF_FLAG_FREQ)
    nr = _NR_PERF_EVENT_OPEN[os.uname().machine]
    fd = _libc.syscall(nr, _c.byref(attr), -1, cpu, -1, 0)
    if fd < 0:
        err = _c.get_errno()
        raise FsprofError(f"perf_event_open for CPU sampling failed on CPU {cpu} ({_errno_text(err)})")
    return fd


def online_cpus():
    text = Path("/sys/devices/system/cpu/online").read_text().strip()
    cpus = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


# SEC() prefixes that name a tracepoint, and how to find the tracepoint's name in them.
_TP_SECTION = re.compile(r"^(?:tracepoint|tp)/(?P<cat>[^/]+)/(?P<name>[^/]+)$")
_RAW_SECTION = re.compile(r"^(?:raw_tp|raw_tracepoint|tp_btf)/(?P<name>[^/]+)$")


def tracepoint_of(section):
    """(category or None, name) of the tracepoint a program attaches to, or None if not a tracepoint."""
    m = _TP_SECTION.match(section)
    if m:
        return m["cat"], m["name"]
    m = _RAW_SECTION.match(section)
    if m:
        return None, m["name"]
    return None


# {tracepoint group: its event names}, listed once per process: asking tracefs per program (any
# group, for raw_tp and tp_btf) stat()ed every group each time, 14 ms of each Collector's start,
# and listing the groups again at each of 99 programs cost 10 ms more. An event not in the index
# (a module loaded since) is asked of tracefs itself, so the index can only save time, never skip
# a program wrongly.
_event_groups = {}
_event_groups_lock = threading.Lock()   # objects load side by side


def _has_event(name, category=None):
    events = tracefs.TRACEFS / "events"
    try:
        with _event_groups_lock:
            if not _event_groups:
                for group in os.listdir(events):
                    path = events / group
                    _event_groups[group] = frozenset(os.listdir(path)) if path.is_dir() else frozenset()
    except OSError:
        return tracefs.has_event(name, category)
    if category:
        found = name in _event_groups.get(category, ())
    else:
        found = any(name in names for names in _event_groups.values())
    return found or tracefs.has_event(name, category)


class _OpenOpts(_c.Structure):
    """struct bpf_object_open_opts (libbpf 1.x), up to kernel_log_level."""
    _fields_ = [("sz", _c.c_size_t), ("object_name", _c.c_char_p), ("relaxed_maps", _c.c_bool),
                ("pin_root_path", _c.c_char_p), ("_removed_attach_prog_fd", _c.c_uint32),
                ("kconfig", _c.c_char_p), ("btf_custom_path", _c.c_char_p), ("kernel_log_buf", _c.c_char_p),
                ("kernel_log_size", _c.c_size_t), ("kernel_log_level", _c.c_uint32)]


# CO-RE relocation against the whole kernel BTF (about 130,000 types) makes libbpf search it for
# every type each object relocates: 10 to 20 ms of CPU per object, for every object, every run.
# `bpftool gen min_core_btf` cuts the kernel BTF down to the types and members fsprof's objects
# use, with the kernel's own offsets, so relocations come out the same. It is made once per boot
# (the running kernel's BTF cannot change before a reboot) and per build of the objects, and kept
# in CORE_BTF_DIR. Without bpftool, or if it fails, objects relocate against the kernel's BTF.
_core_btf = {}
_core_btf_lock = threading.Lock()


def module_btf():
    """Names of the kernel modules with BTF of their own (/sys/kernel/btf/<module>). Where there
    are any (distribution kernels build ext4, jbd2, xfs and btrfs as modules), objects relocate
    against the kernel's BTF: given a custom BTF, libbpf consults no module's."""
    try:
        return sorted(n for n in os.listdir(VMLINUX_BTF.parent) if n != "vmlinux")
    except OSError:
        return []


def _core_btf_key(objects):
    with open("/proc/sys/kernel/random/boot_id") as f:
        parts = [f.read().strip(), platform.release(), platform.version()]
    for obj in objects:
        st = obj.stat()
        parts.append(f"{obj.name}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:20]


def core_btf(path):
    """The minimised kernel BTF for an object of BUILD_DIR (made on first use), or None."""
    path = Path(path)
    if path.parent != BUILD_DIR or module_btf():
        return None
    with _core_btf_lock:  # objects load side by side: one makes it, the others wait for it
        objects = sorted(BUILD_DIR.glob("*.bpf.o"))
        try:
            key = _core_btf_key(objects)
        except OSError:
            return None
        if key not in _core_btf:
            _core_btf[key] = _make_core_btf(key, objects)
        return _core_btf[key]


def _make_core_btf(key, objects):
    out = CORE_BTF_DIR / f"core-{key}.btf"
    if out.exists():
        return out
    try:
        CORE_BTF_DIR.mkdir(parents=True, exist_ok=True)
        tmp = CORE_BTF_DIR / f".core-{key}.{os.getpid()}.tmp"
        proc = subprocess.run(["bpftool", "gen", "min_core_btf", str(VMLINUX_BTF), str(tmp), *map(str, objects)],
                              capture_output=True, timeout=60)
        if proc.returncode != 0 or not tmp.exists():
            tmp.unlink(missing_ok=True)
            return None
        os.replace(tmp, out)  # whole or absent, even with several fsprof runs starting at once
    except (OSError, subprocess.SubprocessError):
        return None
    for old in CORE_BTF_DIR.glob("core-*.btf"):  # other boots' and builds', a day old
        try:
            if old != out and time.time() - old.stat().st_mtime > 86400:
                old.unlink()
        except OSError:
            pass
    return out


# libbpf names the program it could not load (verifier, CO-RE relocation, attach target) in a
# line "libbpf: prog 'NAME': ...". The verifier's own reason is the log's last line before its
# statistics; libbpf 1.1 rewrites a failed CO-RE relocation there as "failed to resolve CO-RE
# relocation <type.field>".
_PROG_LINE = re.compile(r"prog '(?P<prog>[^']+)': (?P<what>.*)")
_VERIFIER_STATS = re.compile(r"^(processed \d+ insns|verification time|stack depth|-- END PROG LOAD LOG)")
# How many programs of one object may fail before its load is given up as hopeless.
_MAX_LEFT_OUT = 64


def failed_program(lines):
    """(program, reason) of the program libbpf's messages say failed to load, or (None, None)."""
    prog, reason, in_log, log = None, None, False, []
    for line in lines:
        m = _PROG_LINE.search(line)
        if "-- BEGIN PROG LOAD LOG --" in line:
            in_log, log = True, []
            prog = m["prog"] if m else prog
            line = line.split("-- BEGIN PROG LOAD LOG --", 1)[1]
        if in_log:
            for part in line.splitlines():
                if "-- END PROG LOAD LOG --" in part:
                    in_log = False
                    break
                if part.strip() and not _VERIFIER_STATS.match(part.strip()):
                    log.append(part.strip())
            if not in_log and log:
                core = [x for x in log if x.startswith("failed to resolve CO-RE relocation")]
                reason = "verifier: " + (core[-1] if core else log[-1])
            continue
        if m and prog is None and ("failed" in m["what"] or "missing" in m["what"] or "no matching" in m["what"]):
            prog, reason = m["prog"], m["what"].strip()
    return prog, reason


# The verifier's log level that prints only its statistics ("verification time 1234 usec",
# "processed N insns ... peak_states M") after a successful load.
_BPF_LOG_STATS = 4
_STATS_LOG_SIZE = 4096
_STATS_FIELDS = {"usec": re.compile(r"verification time (\d+) usec"),
                 "insns": re.compile(r"processed (\d+) insns"),
                 "peak_states": re.compile(r"peak_states (\d+)")}


def verifier_statistics(log):
    """{usec, insns, peak_states} from a verifier log at _BPF_LOG_STATS (a field it lacks: None)."""
    found = {k: rx.search(log) for k, rx in _STATS_FIELDS.items()}
    return {k: int(m[1]) if m else None for k, m in found.items()}


class BpfObject:
    """One loaded bpf/*.bpf.o: its programs, maps and links; close() detaches everything.

    Programs whose tracepoint this kernel lacks are not loaded. A program the kernel or libbpf
    refuses (an older verifier, a type or field this kernel does not have) is left out and the
    object loaded again without it, unless it is one of `required`. `skipped` says which program
    was left out and why; the full libbpf log of each refusal is kept in LOG_DIR.
    """

    def __init__(self, name, only=None, path=None, share=None, required=None, verifier_stats=False):
        """Open and load build/<name>.bpf.o (or `path`). `only`, if given, names the programs to load;
        `share` ({map name: Map of another object, or SharedMap}) makes those maps the same map;
        `required` names programs without which the object is useless (their failure is an error,
        as is the failure of every program). With verifier_stats (the start-up bench), the kernel
        reports what verifying each program cost: `verification` {program: {usec, insns,
        peak_states}}."""
        check_privileges()
        tracefs.ensure_mounted()
        self.name = name
        self.path = Path(path) if path else BUILD_DIR / f"{name}.bpf.o"
        if not self.path.exists():
            raise FsprofError(f"{self.path} is not built; run `make build`")
        if not VMLINUX_BTF.exists():
            raise FsprofError("this kernel has no BTF (/sys/kernel/btf/vmlinux); fsprof's CO-RE programs need CONFIG_DEBUG_INFO_BTF=y")
        self.links, self.slow_links, self.skipped = [], [], {}
        self._maps, self._obj = {}, None
        self._verifier_stats = verifier_stats
        required = set(required or ())
        refused = {}
        _log.debug = False
        while True:
            err = self._open_and_load(only, share, refused)
            if not err:
                break
            if not _log.debug:  # the same load again, with libbpf's debug messages for the log
                _log.debug = True
                err = self._open_and_load(only, share, refused)
                if not err:
                    break
            lines = list(_log_lines())
            log_file = self._save_log(lines)
            prog, reason = failed_program(lines)
            if abs(err) == errno.EPERM and not prog:
                # We are root (checked above), so EPERM is policy: lockdown, or a locked-down program type.
                raise FsprofError(f"the kernel refused to load {self.name}.bpf.o although fsprof runs as root "
                                  f"({_errno_text(err)}): kernel lockdown or policy forbids this program type; "
                                  f"libbpf's log is in {log_file}")
            if prog is None or prog in refused or len(refused) >= _MAX_LEFT_OUT:
                raise FsprofError(f"libbpf could not load {self.name}.bpf.o ({_errno_text(err)}); the log is in {log_file}")
            refused[prog] = reason or _errno_text(err)
            if prog in required or not set(self.programs) - set(refused):
                who = "the BPF verifier rejected" if reason and reason.startswith("verifier") else "libbpf could not load"
                policy = (" (we are root, so kernel lockdown or policy forbids this program type)"
                          if abs(err) == errno.EPERM else "")
                raise FsprofError(f"{who} program {prog} of {self.name}.bpf.o ({_errno_text(err)}){policy}: "
                                  f"{refused[prog]}; the log is in {log_file}")
        for prog, reason in refused.items():
            self.skipped[prog] = f"left out: {reason}"
        self.verification = {p: verifier_statistics(b.value.decode(errors="replace"))
                             for p, b in self._stats_bufs.items() if p in self.programs}
        self._fill_kernel_flags()

    def _fill_kernel_flags(self):
        """bpf/compat.h's kernel_flags map, in the objects that have one (before any attach)."""
        if not libbpf().bpf_object__find_map_by_name(self._obj, b"kernel_flags"):
            return
        flags = self.map("kernel_flags", _c.c_uint32, maps.KernelFlags)
        flags.update(_c.c_uint32(0), maps.KernelFlags(**kernel_flags.values()))

    def _open_and_load(self, only, share, refused):
        """Opens the object with `refused` programs (and those this kernel lacks) not loaded, then
        loads it: 0, or libbpf's error (the object is then closed again)."""
        lib = libbpf()
        _log_lines().clear()
        custom = core_btf(self.path)
        self._open_opts = _OpenOpts(sz=_c.sizeof(_OpenOpts), btf_custom_path=str(custom).encode() if custom else None)
        self._obj = lib.bpf_object__open_file(str(self.path).encode(), _c.byref(self._open_opts))
        if not self._obj:
            raise FsprofError(f"libbpf could not open {self.path} ({_errno_text(_c.get_errno())})")
        self.programs, self.skipped, self._stats_bufs = {}, {}, {}
        prog = lib.bpf_object__next_program(self._obj, None)
        while prog:
            pname = lib.bpf_program__name(prog).decode()
            section = lib.bpf_program__section_name(prog).decode()
            if only is not None and pname not in only:
                reason = "not requested"
            else:
                reason = self._missing_reason(section)
            if reason or pname in refused:
                lib.bpf_program__set_autoload(prog, False)
                if reason:
                    self.skipped[pname] = reason
            else:
                self.programs[pname] = (prog, section)
                if self._verifier_stats:
                    self._stats_bufs[pname] = buf = _c.create_string_buffer(_STATS_LOG_SIZE)
                    lib.bpf_program__set_log_buf(prog, buf, len(buf))
                    lib.bpf_program__set_log_level(prog, _BPF_LOG_STATS)
            prog = lib.bpf_object__next_program(self._obj, prog)
        for map_name, other in (share or {}).items():
            err = lib.bpf_map__reuse_fd(self._map_handle(map_name), other.fd)
            if err:
                self._free()
                raise FsprofError(f"could not share map {map_name} with {self.name}.bpf.o ({_errno_text(err)})")
        err = lib.bpf_object__load(self._obj)
        if err:
            self._free()
        return err

    @staticmethod
    def _missing_reason(section):
        tp = tracepoint_of(section)
        if tp is None:
            return None
        cat, name = tp
        if not _has_event(name, cat):
            where = f"{cat}:{name}" if cat else name
            return f"tracepoint {where} does not exist on this kernel"
        return None

    def _save_log(self, lines):
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        log_file = LOG_DIR / f"{self.name}-load-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
        with open(log_file, "a") as f:
            f.write("\n".join(lines) + "\n")
        return log_file

    def _map_handle(self, name):
        handle = libbpf().bpf_object__find_map_by_name(self._obj, name.encode())
        if not handle:
            raise FsprofError(f"{self.name}.bpf.o has no map named {name}")
        return handle

    def map(self, name, key_type, value_type):
        if name not in self._maps:
            self._maps[name] = Map(name, self._map_handle(name), key_type, value_type)
        return self._maps[name]

    def ring_buffer(self, name, callback):
        """A reader of ring buffer map `name`; the caller polls and closes it."""
        return RingBuffer(libbpf().bpf_map__fd(self._map_handle(name)), name, callback)

    def _prog(self, pname):
        if pname not in self.programs:
            why = self.skipped.get(pname, "it does not exist")
            raise FsprofError(f"program {pname} of {self.name}.bpf.o is not loaded: {why}")
        return self.programs[pname][0]

    def run_stats(self):
        """{program: (run_cnt, run_time_ns, recursion_misses)} of this object's loaded programs."""
        return {p: prog_run_stats(libbpf().bpf_program__fd(handle)) for p, (handle, _) in self.programs.items()}

    def attach(self, pname):
        """Attach a tracepoint, raw_tp or tp_btf program as its SEC() says."""
        link = libbpf().bpf_program__attach(self._prog(pname))
        if not link:
            err = _c.get_errno()
            raise FsprofError(f"could not attach {pname} ({self.programs[pname][1]}): {_errno_text(err)}")
        # A classic tracepoint's link waits for grace periods when destroyed (above destroy_links).
        (self.slow_links if _TP_SECTION.match(self.programs[pname][1]) else self.links).append(link)

    def attach_all(self):
        """Attach every loaded program that libbpf can attach by its section (not perf_event ones)."""
        for pname, (_, section) in self.programs.items():
            if section != "perf_event":
                self.attach(pname)

    def attach_perf_sampling(self, pname, freq_hz=99):
        """Attach a perf_event program to cpu-clock sampling on every online CPU."""
        prog = self._prog(pname)
        for cpu in online_cpus():
            fd = perf_event_open_sampling(cpu, freq_hz)
            link = libbpf().bpf_program__attach_perf_event(prog, fd)
            if not link:
                err = _c.get_errno()
                os.close(fd)
                raise FsprofError(f"could not attach {pname} to CPU {cpu}: {_errno_text(err)}")
            self.links.append(link)  # the link owns the perf event fd and closes it on destroy

    def close(self):
        """Detach and free; safe to call twice, and a signal cannot cut it in half."""
        close_all([self])

    def _free(self):
        """Frees the object once its links are gone (maps and programs go with their last fd)."""
        obj, self._obj = self._obj, None
        if obj:
            libbpf().bpf_object__close(obj)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        # A last resort: an object dropped without close() must not leave links attached.
        if getattr(self, "_obj", None):
            self.close()


# Detaching a classic tracepoint program waits in the kernel twice: for an RCU tasks-trace grace
# period (perf_event_detach_bpf_prog), and, when the tracepoint's last perf user goes, in
# perf_trace_event_unreg -> tracepoint_synchronize_unregister, which holds the global event_mutex:
# 60-110 ms for one link here (63 of them, side by side, took 2.4 s). raw_tp, tp_btf and perf
# event links detach without waiting; their programs are freed a grace period later, which
# nothing waits for. All of fsprof's programs but global_dirty_state's are tp_btf now
# (docs/kernel-notes.md): the classic links are destroyed on a thread of their own that close()
# does not wait for, so that the result is written meanwhile; the process waits for that thread
# before it exits (not a daemon).
_MAX_DETACH_THREADS = 4


def destroy_links(links, slow_links=()):
    """bpf_link__destroy every link: `links` before returning, `slow_links` (classic tracepoints)
    on a thread of their own."""
    lib = libbpf()
    slow = list(slow_links)
    if slow:
        def destroy_slow():
            for link in slow:
                lib.bpf_link__destroy(link)
        try:
            threading.Thread(target=destroy_slow, name="fsprof-detach-classic").start()
        except RuntimeError:  # no thread could be started (interpreter shutdown): here and now
            destroy_slow()
    links = list(links)
    if len(links) < 8:
        for link in links:
            lib.bpf_link__destroy(link)
        return
    done = 0
    try:
        with ThreadPoolExecutor(max_workers=_MAX_DETACH_THREADS, thread_name_prefix="fsprof-detach") as pool:
            for link in links:
                pool.submit(lib.bpf_link__destroy, link)
                done += 1
    except RuntimeError:  # as above
        for link in links[done:]:
            lib.bpf_link__destroy(link)


def detach_all(objects):
    """Detach every link of these objects together (a classic tracepoint's on a thread of its own:
    destroy_links); their maps stay readable until the objects are freed. A signal cannot cut it
    in half (the detach threads inherit the blocked signals)."""
    with signals.deferred():
        links, slow = [], []
        for obj in objects:
            links.extend(obj.links)
            slow.extend(obj.slow_links)
            obj.links, obj.slow_links = [], []
        destroy_links(links, slow)


def close_all(objects):
    """detach_all, then free the objects in the order given."""
    objects = list(objects)
    with signals.deferred():
        detach_all(objects)
        for obj in objects:
            obj._free()
