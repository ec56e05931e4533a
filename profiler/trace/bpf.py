"""Loads fsprof's CO-RE objects (BpfObject): open, leave out what this kernel lacks or refuses,
load, attach, read maps; detach and free. Every failure becomes an FsprofError with one sentence.

Over 500 lines: loading is one sequence (open, leave out what fails, load, attach, detach) over
one object's state; the libbpf bindings (libbpf.py) and the core-BTF cache (core_btf.py) are apart.
"""

import ctypes
import errno
import functools
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..errors import FsprofError
from .. import signals
from ..machine import tracefs
from . import btf_layout, kernel_flags, maps, tp_fields
from .core_btf import VMLINUX_BTF, core_btf
from .libbpf import (
    Map,
    RingBuffer,
    SharedMap,
    _errno_text,
    _log,
    _log_lines,
    check_privileges,
    libbpf,
    online_cpus,
    perf_event_open_sampling,
    prog_run_stats,
)


def _objects_dir():
    """Where the BPF objects are: FSPROF_BPF_DIR (another build of them, e.g. one a test altered),
    else those an installed wheel ships beside this module (setup.py copies them there), else the
    source tree's build/ that `make build` fills."""
    if os.environ.get("FSPROF_BPF_DIR"):
        return Path(os.environ["FSPROF_BPF_DIR"])
    shipped = Path(__file__).resolve().parent / "bpf_objects"
    return shipped if shipped.is_dir() else Path(__file__).resolve().parents[2] / "build"


BUILD_DIR = _objects_dir()
BPF_MAP_TYPE_TASK_STORAGE = 29


@functools.cache
def legacy_kernel() -> bool:
    """Whether this kernel predates task storage (5.11), as Debian 11's 5.10 does: it then takes
    the objects built with FSPROF_LEGACY (build/legacy/; bpf/fsprof.h says what differs)."""
    return libbpf().libbpf_probe_bpf_map_type(BPF_MAP_TYPE_TASK_STORAGE, None) != 1


def object_path(name: str) -> Path:
    """build/<name>.bpf.o, or its legacy build on a kernel before task storage."""
    return (BUILD_DIR / "legacy" if legacy_kernel() else BUILD_DIR) / f"{name}.bpf.o"


# Programs of the legacy objects left out on 5.10 ("object:program"): the XFS work items' types are
# in module xfs, which has no BTF there.
_XFS_WORK_510 = "XFS's work item types are in module xfs, which has no BTF on this kernel (module BTF came in 5.11)"
LEGACY_LEFT_OUT = {
    "xfs:on_work_start": _XFS_WORK_510,
    "xfs:on_work_end": _XFS_WORK_510,
}
# Figures the legacy objects cannot give though their programs load (Collector.unavailable).
LEGACY_FIGURES_LOST = [
    {
        "figures": "io-wq workers' off-CPU time and block requests per io_uring request",
        "probe": "syscalls:on_sched_switch",
        "why": "on 5.10 an io_uring request is followed by its ring and user_data (its completion "
        "tracepoint has no request), which an io-wq worker's work item does not give",
    }
]

LOG_DIR = Path(os.environ.get("FSPROF_LOG_DIR", "/var/tmp/fsprof/logs"))

_c = ctypes


class _MapCreateOpts(_c.Structure):
    """struct bpf_map_create_opts (libbpf 1.x)."""

    _fields_ = [
        ("sz", _c.c_size_t),
        ("btf_fd", _c.c_uint32),
        ("btf_key_type_id", _c.c_uint32),
        ("btf_value_type_id", _c.c_uint32),
        ("btf_vmlinux_value_type_id", _c.c_uint32),
        ("inner_map_fd", _c.c_uint32),
        ("map_flags", _c.c_uint32),
        ("map_extra", _c.c_uint64),
        ("numa_node", _c.c_uint32),
        ("map_ifindex", _c.c_uint32),
    ]


def create_maps(name: str, map_names: Iterable[str], path: str | Path | None = None) -> dict[str, SharedMap]:
    """Makes the maps `map_names` as build/<name>.bpf.o (or `path`) defines them (type, key and
    value sizes, entries, flags) without loading the object: {map name: SharedMap}. Made first,
    they let every object that shares them load at the same time as the others."""
    check_privileges()
    lib = libbpf()
    path = Path(path) if path else object_path(name)
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
            fd = lib.bpf_map_create(
                lib.bpf_map__type(handle),
                map_name.encode(),
                lib.bpf_map__key_size(handle),
                lib.bpf_map__value_size(handle),
                lib.bpf_map__max_entries(handle),
                _c.byref(opts),
            )
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


# SEC() prefixes that name a tracepoint, and how to find the tracepoint's name in them.
_TP_SECTION = re.compile(r"^(?:tracepoint|tp)/(?P<cat>[^/]+)/(?P<name>[^/]+)$")
_RAW_SECTION = re.compile(r"^(?:raw_tp|raw_tracepoint|tp_btf)/(?P<name>[^/]+)$")


def tracepoint_of(section: str) -> tuple[str | None, str] | None:
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
_event_groups: dict[str, frozenset[str]] = {}
_event_groups_lock = threading.Lock()  # objects load side by side


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


def _module_without_btf(name):
    """The loadable module whose tracepoint group holds event `name`, where this kernel has no BTF
    for that module (no /sys/kernel/btf/<module>), else None. A group named as a module that is
    built in (no /sys/module/<group>/initstate) is vmlinux's, whose BTF has its types."""
    with _event_groups_lock:
        groups = [g for g, names in _event_groups.items() if name in names]
    for group in groups:
        if os.path.exists(f"/sys/module/{group}/initstate") and not os.path.exists(f"/sys/kernel/btf/{group}"):
            return group
    return None


class _OpenOpts(_c.Structure):
    """struct bpf_object_open_opts (libbpf 1.x), up to kernel_log_level."""

    _fields_ = [
        ("sz", _c.c_size_t),
        ("object_name", _c.c_char_p),
        ("relaxed_maps", _c.c_bool),
        ("pin_root_path", _c.c_char_p),
        ("_removed_attach_prog_fd", _c.c_uint32),
        ("kconfig", _c.c_char_p),
        ("btf_custom_path", _c.c_char_p),
        ("kernel_log_buf", _c.c_char_p),
        ("kernel_log_size", _c.c_size_t),
        ("kernel_log_level", _c.c_uint32),
    ]


# libbpf names the program it could not load (verifier, CO-RE relocation, attach target) in a
# line "libbpf: prog 'NAME': ...". The verifier's own reason is the log's last line before its
# statistics; libbpf 1.1 rewrites a failed CO-RE relocation there as "failed to resolve CO-RE
# relocation <type.field>".
_PROG_LINE = re.compile(r"prog '(?P<prog>[^']+)': (?P<what>.*)")
_VERIFIER_STATS = re.compile(r"^(processed \d+ insns|verification time|stack depth|-- END PROG LOAD LOG)")
# How many programs of one object may fail before its load is given up as hopeless.
_MAX_LEFT_OUT = 64


def failed_program(lines: Iterable[str]) -> tuple[str | None, str | None]:
    """(program, reason) of the program libbpf's messages say failed to load, or (None, None)."""
    log: list[str]
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
# "processed N insns ... peak_states M") after a successful load; and a line each time it reaches a
# call of a global function ("Func#3 ('aio_follow') is global and assumed valid."), in a loop once
# a turn: a log that fills fails the load (ENOSPC), hence its size.
_BPF_LOG_STATS = 4
_STATS_LOG_SIZE = 1 << 20
_STATS_FIELDS = {
    "usec": re.compile(r"verification time (\d+) usec"),
    "insns": re.compile(r"processed (\d+) insns"),
    "peak_states": re.compile(r"peak_states (\d+)"),
}


def verifier_statistics(log: str) -> dict[str, int | None]:
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
        self.path = Path(path) if path else object_path(name)
        if not self.path.exists():
            raise FsprofError(f"{self.path} is not built; run `make build`")
        if not VMLINUX_BTF.exists():
            raise FsprofError(
                "this kernel has no BTF (/sys/kernel/btf/vmlinux); fsprof's CO-RE programs need CONFIG_DEBUG_INFO_BTF=y"
            )
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
                raise FsprofError(
                    f"the kernel refused to load {self.name}.bpf.o although fsprof runs as root "
                    f"({_errno_text(err)}): kernel lockdown or policy forbids this program type; "
                    f"libbpf's log is in {log_file}"
                )
            if prog is None or prog in refused or len(refused) >= _MAX_LEFT_OUT:
                raise FsprofError(
                    f"libbpf could not load {self.name}.bpf.o ({_errno_text(err)}); the log is in {log_file}"
                )
            refused[prog] = reason or _errno_text(err)
            if prog in required or not set(self.programs) - set(refused):
                who = (
                    "the BPF verifier rejected" if reason and reason.startswith("verifier") else "libbpf could not load"
                )
                policy = (
                    " (we are root, so kernel lockdown or policy forbids this program type)"
                    if abs(err) == errno.EPERM
                    else ""
                )
                raise FsprofError(
                    f"{who} program {prog} of {self.name}.bpf.o ({_errno_text(err)}){policy}: "
                    f"{refused[prog]}; the log is in {log_file}"
                )
        for prog, reason in refused.items():
            self.skipped[prog] = f"left out: {reason}"
        self.verification = {
            p: verifier_statistics(b.value.decode(errors="replace"))
            for p, b in self._stats_bufs.items()
            if p in self.programs
        }
        self._fill_kernel_flags()

    def _fill_kernel_flags(self):
        """bpf/compat.h's kernel_flags map, and the legacy objects' tp_fields (classic record
        offsets), in the objects that have them (before any attach)."""
        lib = libbpf()
        if lib.bpf_object__find_map_by_name(self._obj, b"tp_fields"):
            found = (_c.c_uint16 * len(tp_fields.FIELDS))(*tp_fields.offsets())
            self.map("tp_fields", _c.c_uint32, maps.TpFields).update(_c.c_uint32(0), maps.TpFields(off=found))
        if not lib.bpf_object__find_map_by_name(self._obj, b"kernel_flags"):
            return
        flags = self.map("kernel_flags", _c.c_uint32, maps.KernelFlags)
        flags.update(_c.c_uint32(0), maps.KernelFlags(**kernel_flags.values()))

    def _open_and_load(self, only, share, refused):
        """Opens the object with `refused` programs (and those this kernel lacks) not loaded, then
        loads it: 0, or libbpf's error (the object is then closed again)."""
        lib = libbpf()
        _log_lines().clear()
        # The cut of the kernel BTF covers the objects of BUILD_DIR; one elsewhere (a test's copy)
        # relocates against the kernel's own.
        custom = core_btf(self.path.parent) if self.path.parent == object_path(self.name).parent else None
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
            elif legacy_kernel() and f"{self.name}:{pname}" in LEGACY_LEFT_OUT:
                reason = LEGACY_LEFT_OUT[f"{self.name}:{pname}"]
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
        if section.startswith("tp_btf/"):
            module = _module_without_btf(name)
            if module:
                return (
                    f"module {module} has no BTF on this kernel (module BTF came in 5.11), which tp_btf programs need"
                )
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

    def map(self, name: str, key_type: type[Any], value_type: type[Any]) -> Map:
        if name not in self._maps:
            btf = libbpf().bpf_object__btf(self._obj)
            self._maps[name] = Map(
                name, self._map_handle(name), key_type, value_type, btf_layout.Btf(libbpf(), btf) if btf else None
            )
        return self._maps[name]

    def ring_buffer(self, name: str, callback: Callable[[bytes], object]) -> RingBuffer:
        """A reader of ring buffer map `name`; the caller polls and closes it."""
        return RingBuffer(libbpf().bpf_map__fd(self._map_handle(name)), name, callback)

    def _prog(self, pname):
        if pname not in self.programs:
            why = self.skipped.get(pname, "it does not exist")
            raise FsprofError(f"program {pname} of {self.name}.bpf.o is not loaded: {why}")
        return self.programs[pname][0]

    def run_stats(self) -> dict[str, tuple[int, int, int]]:
        """{program: (run_cnt, run_time_ns, recursion_misses)} of this object's loaded programs."""
        return {p: prog_run_stats(libbpf().bpf_program__fd(handle)) for p, (handle, _) in self.programs.items()}

    def attach(self, pname: str) -> None:
        """Attach a tracepoint, raw_tp or tp_btf program as its SEC() says."""
        link = libbpf().bpf_program__attach(self._prog(pname))
        if not link:
            err = _c.get_errno()
            raise FsprofError(f"could not attach {pname} ({self.programs[pname][1]}): {_errno_text(err)}")
        # A classic tracepoint's link waits for grace periods when destroyed (above destroy_links).
        (self.slow_links if _TP_SECTION.match(self.programs[pname][1]) else self.links).append(link)

    def attach_all(self) -> None:
        """Attach every loaded program that libbpf can attach by its section (not perf_event ones)."""
        for pname, (_, section) in self.programs.items():
            if section != "perf_event":
                self.attach(pname)

    def attach_perf_sampling(self, pname: str, freq_hz: int = 99) -> None:
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

    def close(self) -> None:
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


def destroy_links(links: Iterable[int], slow_links: Iterable[int] = ()) -> None:
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


def detach_all(objects: Iterable[BpfObject]) -> None:
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


def close_all(objects: Iterable[BpfObject]) -> None:
    """detach_all, then free the objects in the order given."""
    objects = list(objects)
    with signals.deferred():
        detach_all(objects)
        for obj in objects:
            obj._free()
