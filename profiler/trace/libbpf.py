"""The ctypes bindings to the system libbpf.so.1 and the kernel interfaces beside them: the library
and its messages, capabilities, maps, program statistics, ring buffers, perf events.

ctypes, not bcc: bcc cannot compile on kernels without headers; a CO-RE object built once runs
anywhere with BTF. Every failure becomes an FsprofError with one sentence.
"""

import ctypes
import errno
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import FsprofError
from . import btf_layout

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
_LIBBPF_DEBUG = 2  # enum libbpf_print_level


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
        "libbpf_probe_bpf_map_type": (_c.c_int, [_c.c_int, _vp]),
        "ring_buffer__new": (_vp, [_c.c_int, _RING_FN, _vp, _vp]),
        "ring_buffer__poll": (_c.c_int, [_vp, _c.c_int]),
        "ring_buffer__free": (None, [_vp]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    btf_layout.declare(lib)


def libbpf() -> ctypes.CDLL:
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


def missing_capabilities() -> list[str]:
    text = Path("/proc/self/status").read_text()
    eff = int(next(line.split()[1] for line in text.splitlines() if line.startswith("CapEff:")), 16)
    return [name for name, bit in NEEDED_CAPS.items() if not eff >> bit & 1]


def check_privileges() -> None:
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

    def __init__(self, name, handle, key_type, value_type, btf=None):
        """btf: the object's (btf_layout.Btf), to check the mirrors field by field; else by size."""
        lib = libbpf()
        self.name = name
        self.fd = lib.bpf_map__fd(handle)
        self.percpu = lib.bpf_map__type(handle) in _PERCPU_TYPES
        self.max_entries = lib.bpf_map__max_entries(handle)
        self.key_type, self.value_type = key_type, value_type
        for what, ctype, size, type_id in (
            ("key", key_type, lib.bpf_map__key_size(handle), lib.bpf_map__btf_key_type_id(handle)),
            ("value", value_type, lib.bpf_map__value_size(handle), lib.bpf_map__btf_value_type_id(handle)),
        ):
            if btf is not None and type_id:
                wrong = btf.mismatch(ctype, type_id, what)
            else:
                wrong = None if _c.sizeof(ctype) == size else f"{what}: {_c.sizeof(ctype)} bytes in Python, {size} in C"
            if wrong:
                raise FsprofError(
                    f"map {name}'s Python mirror differs from bpf/'s struct ({wrong}); "
                    "update it in profiler/trace/maps.py or profiler/behind/"
                )
        self.ncpus = lib.libbpf_num_possible_cpus() if self.percpu else 1
        # Per-CPU values come back as one 8-byte-aligned slot per possible CPU.
        self._slot = (_c.sizeof(value_type) + 7) & ~7

    def keys(self) -> list[Any]:
        lib, key = libbpf(), None
        nxt = self.key_type()
        keys = []
        while lib.bpf_map_get_next_key(self.fd, None if key is None else _c.byref(key), _c.byref(nxt)) == 0:
            keys.append(nxt)
            key, nxt = nxt, self.key_type()
        return keys

    def lookup(self, key: Any) -> Any:
        """The value, or for per-CPU maps a list of values (one per CPU); None when absent."""
        buf = _c.create_string_buffer(self._slot * self.ncpus)
        if libbpf().bpf_map_lookup_elem(self.fd, _c.byref(key), buf) != 0:
            return None
        vals = [self.value_type.from_buffer_copy(buf, i * self._slot) for i in range(self.ncpus)]
        if issubclass(self.value_type, _c._SimpleCData):
            vals = [v.value for v in vals]
        return vals if self.percpu else vals[0]

    def items(self) -> Iterator[tuple[Any, Any]]:
        for key in self.keys():
            val = self.lookup(key)
            if val is not None:
                yield key, val

    def update(self, key: Any, value: Any, flags: int = BPF_ANY) -> None:
        if self.percpu:
            raise FsprofError(f"map {self.name}: per-CPU maps are written by the kernel only")
        if libbpf().bpf_map_update_elem(self.fd, _c.byref(key), _c.byref(value), flags) != 0:
            raise FsprofError(f"could not write to BPF map {self.name} ({_errno_text(_c.get_errno())})")

    def delete(self, key: Any) -> bool:
        return libbpf().bpf_map_delete_elem(self.fd, _c.byref(key)) == 0

    def clear(self) -> None:
        for key in self.keys():
            self.delete(key)

    # Kernels before 5.14 have no lookup-and-delete on hash maps (ENOTSUPP, 524): there a value is
    # read, then deleted, and an update landing between the two is lost.
    _no_lookup_and_delete = False

    def _take(self, key, buf):
        lib = libbpf()
        if not Map._no_lookup_and_delete:
            if lib.bpf_map_lookup_and_delete_elem(self.fd, _c.byref(key), buf) == 0:
                return 0
            if _c.get_errno() not in (errno.EOPNOTSUPP, 524):  # 524: the kernel's ENOTSUPP
                return -1
            Map._no_lookup_and_delete = True
        if lib.bpf_map_lookup_elem(self.fd, _c.byref(key), buf) != 0:
            return -1
        lib.bpf_map_delete_elem(self.fd, _c.byref(key))
        return 0

    def drain(self) -> Iterator[tuple[Any, Any]]:
        """Every (key, value), each removed in the same step as it is read (hash maps, 5.14+):
        an update racing with the drain lands either in what is returned or in the map, never
        nowhere. Values as lookup() returns them."""
        buf = _c.create_string_buffer(self._slot * self.ncpus)
        for key in self.keys():
            if self._take(key, buf) != 0:
                continue  # gone since keys() listed it
            vals = [self.value_type.from_buffer_copy(buf, i * self._slot) for i in range(self.ncpus)]
            if issubclass(self.value_type, _c._SimpleCData):
                vals = [v.value for v in vals]
            yield key, (vals if self.percpu else vals[0])


class _ProgInfo(_c.Structure):
    """struct bpf_prog_info (uapi/linux/bpf.h) up to the run statistics: the kernel fills as many
    bytes as it is given."""

    _fields_ = [
        ("type", _c.c_uint32),
        ("id", _c.c_uint32),
        ("tag", _c.c_uint8 * 8),
        ("jited_prog_len", _c.c_uint32),
        ("xlated_prog_len", _c.c_uint32),
        ("jited_prog_insns", _c.c_uint64),
        ("xlated_prog_insns", _c.c_uint64),
        ("load_time", _c.c_uint64),
        ("created_by_uid", _c.c_uint32),
        ("nr_map_ids", _c.c_uint32),
        ("map_ids", _c.c_uint64),
        ("name", _c.c_char * 16),
        ("ifindex", _c.c_uint32),
        ("gpl_compatible", _c.c_uint32),
        ("netns_dev", _c.c_uint64),
        ("netns_ino", _c.c_uint64),
        ("nr_jited_ksyms", _c.c_uint32),
        ("nr_jited_func_lens", _c.c_uint32),
        ("jited_ksyms", _c.c_uint64),
        ("jited_func_lens", _c.c_uint64),
        ("btf_id", _c.c_uint32),
        ("func_info_rec_size", _c.c_uint32),
        ("func_info", _c.c_uint64),
        ("nr_func_info", _c.c_uint32),
        ("nr_line_info", _c.c_uint32),
        ("line_info", _c.c_uint64),
        ("jited_line_info", _c.c_uint64),
        ("nr_jited_line_info", _c.c_uint32),
        ("line_info_rec_size", _c.c_uint32),
        ("jited_line_info_rec_size", _c.c_uint32),
        ("nr_prog_tags", _c.c_uint32),
        ("prog_tags", _c.c_uint64),
        ("run_time_ns", _c.c_uint64),
        ("run_cnt", _c.c_uint64),
        ("recursion_misses", _c.c_uint64),
    ]


def prog_run_stats(fd: int) -> tuple[int, int, int]:
    """(run_cnt, run_time_ns, recursion_misses) of a loaded program. The kernel counts runs and
    time only while kernel.bpf_stats_enabled=1; recursion misses always."""
    info = _ProgInfo()
    size = _c.c_uint32(_c.sizeof(info))
    if libbpf().bpf_obj_get_info_by_fd(fd, _c.byref(info), _c.byref(size)) != 0:
        return 0, 0, 0
    return info.run_cnt, info.run_time_ns, info.recursion_misses


class SharedMap:
    """A map made before any object is loaded (bpf.create_maps), for several objects to share: pass
    {name: SharedMap} as BpfObject's `share`. close() drops this fd; the objects keep their own."""

    def __init__(self, name, fd):
        self.name, self.fd = name, fd

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


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

    def poll(self, timeout_ms: int = 100) -> int:
        n = libbpf().ring_buffer__poll(self._rb, timeout_ms)
        if n < 0 and -n != errno.EINTR:
            raise FsprofError(f"ring buffer poll failed ({_errno_text(n)})")
        return max(n, 0)

    def close(self) -> None:
        if self._rb:
            libbpf().ring_buffer__free(self._rb)
            self._rb = None


class PerfEventAttr(_c.Structure):
    """struct perf_event_attr up to config3 (PERF_ATTR_SIZE_VER8)."""

    _fields_ = [
        ("type", _c.c_uint32),
        ("size", _c.c_uint32),
        ("config", _c.c_uint64),
        ("sample_period_or_freq", _c.c_uint64),
        ("sample_type", _c.c_uint64),
        ("read_format", _c.c_uint64),
        ("flags", _c.c_uint64),
        ("wakeup_events", _c.c_uint32),
        ("bp_type", _c.c_uint32),
        ("config1", _c.c_uint64),
        ("config2", _c.c_uint64),
        ("branch_sample_type", _c.c_uint64),
        ("sample_regs_user", _c.c_uint64),
        ("sample_stack_user", _c.c_uint32),
        ("clockid", _c.c_int32),
        ("sample_regs_intr", _c.c_uint64),
        ("aux_watermark", _c.c_uint32),
        ("sample_max_stack", _c.c_uint16),
        ("reserved_2", _c.c_uint16),
        ("aux_sample_size", _c.c_uint32),
        ("reserved_3", _c.c_uint32),
        ("sig_data", _c.c_uint64),
        ("config3", _c.c_uint64),
    ]


PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK = 1, 0
_PERF_FLAG_FREQ = 1 << 10
_NR_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}


def perf_event_open_sampling(cpu: int, freq_hz: int) -> int:
    """A cpu-clock sampling event on one CPU (all tasks), as perf record -F uses."""
    attr = PerfEventAttr(
        type=PERF_TYPE_SOFTWARE,
        size=_c.sizeof(PerfEventAttr),
        config=PERF_COUNT_SW_CPU_CLOCK,
        sample_period_or_freq=freq_hz,
        flags=_PERF_FLAG_FREQ,
    )
    nr = _NR_PERF_EVENT_OPEN[os.uname().machine]
    fd = _libc.syscall(nr, _c.byref(attr), -1, cpu, -1, 0)
    if fd < 0:
        err = _c.get_errno()
        raise FsprofError(f"perf_event_open for CPU sampling failed on CPU {cpu} ({_errno_text(err)})")
    return fd


def online_cpus() -> list[int]:
    text = Path("/sys/devices/system/cpu/online").read_text().strip()
    cpus: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus
