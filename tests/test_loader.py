"""The loader against real programs: every attach type, every map kind, the ring buffer, and the
errors a user can meet (verifier rejection, missing tracepoint)."""

import ctypes as c
import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import kernel_programs
from profiler.trace import maps, syscalls
from profiler.trace.bpf import BUILD_DIR, BpfObject
from profiler.errors import FsprofError

pytestmark = pytest.mark.root

HIT_PROGS = {"tp_switch": 0, "raw_tp_switch": 1, "tp_btf_switch": 2}


def spin(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.001)


def test_tracepoint_raw_tp_and_tp_btf_programs_fire():
    with BpfObject("probe", only=set(HIT_PROGS)) as obj:
        obj.attach_all()
        spin(0.2)
        hits = obj.map("hits", c.c_uint32, c.c_uint64)
        counts = {p: sum(hits.lookup(c.c_uint32(i))) for p, i in HIT_PROGS.items()}
    assert all(n > 0 for n in counts.values()), counts


def test_verifier_statistics_are_the_kernels_own():
    """verifier_stats (bench/bench_startup.py) reads the verifier's log-level-4 statistics; the
    instructions it processed are what the kernel also keeps in the program's fdinfo."""
    from profiler.trace.libbpf import libbpf

    with BpfObject("syscalls", verifier_stats=True) as obj:
        assert set(obj.verification) == set(obj.programs)
        for pname, (handle, _) in obj.programs.items():
            fd = libbpf().bpf_program__fd(handle)
            fdinfo = dict(line.split(":", 1) for line in Path(f"/proc/self/fdinfo/{fd}").read_text().splitlines())
            stats = obj.verification[pname]
            assert stats["insns"] == int(fdinfo["verified_insns"]), (pname, stats)
            assert stats["usec"] is not None and stats["peak_states"] is not None, (pname, stats)


def kallsyms():
    syms = []
    for line in Path("/proc/kallsyms").read_text().splitlines():
        addr, _, name = line.split()[:3]
        syms.append((int(addr, 16), name))
    syms.sort()
    return syms


def test_perf_event_sampling_with_kernel_stacks():
    with BpfObject("probe", only={"on_sample"}) as obj:
        obj.attach_perf_sampling("on_sample", freq_hz=999)
        # Make the kernel busy in a known place: many small syscalls.
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            os.stat("/")
        sampled = obj.map("sampled_stacks", c.c_uint32, c.c_uint64)
        stacks = obj.map("stacks", c.c_uint32, c.c_uint64 * 127)
        ids = sampled.keys()
        assert ids, "no kernel stacks sampled"
        syms = kallsyms()
        lo, hi = syms[0][0], syms[-1][0]
        frames = [addr for sid in ids for addr in (stacks.lookup(sid) or []) if addr]
    assert frames and all(lo <= a for a in frames)
    # Sampled addresses must fall in kernel text named by /proc/kallsyms.
    assert sum(lo <= a <= hi + (1 << 24) for a in frames) == len(frames)


def test_ring_buffer_delivers_our_own_syscalls():
    seen = []
    with BpfObject("probe", only={"ring_sys_enter"}) as obj:
        obj.map("ring_tgid", c.c_uint32, c.c_uint32).update(c.c_uint32(0), c.c_uint32(os.getpid()))
        obj.attach("ring_sys_enter")
        ring = obj.ring_buffer("events", seen.append)
        try:
            fd = os.open("/dev/null", os.O_WRONLY)
            os.close(fd)
            for _ in range(5):
                ring.poll(50)
        finally:
            ring.close()
    nrs = {int.from_bytes(rec[4:8], "little") for rec in seen}
    assert syscalls.table()["openat"][0] in nrs and syscalls.table()["close"][0] in nrs


def test_hash_map_update_lookup_clear_and_size_check():
    with BpfObject("syscalls") as obj:
        tgids = obj.map("traced_tgids", c.c_uint32, c.c_uint8)
        for pid in (11, 22, 33):
            tgids.update(c.c_uint32(pid), c.c_uint8(1))
        assert sorted(k.value for k in tgids.keys()) == [11, 22, 33]
        assert tgids.lookup(c.c_uint32(22)) == 1
        tgids.clear()
        assert tgids.keys() == []
        with pytest.raises(FsprofError, match="op_hist's Python mirror differs.*bytes in Python"):
            obj.map("op_hist", maps.OpKey, maps.BlkVal)

        class SwappedKey(c.Structure):  # the size of struct op_key, two fields swapped
            _fields_ = [("dev", c.c_uint32), ("phase", c.c_uint16), ("nr", c.c_uint16)]

        with pytest.raises(FsprofError, match=r"key \(struct op_key\)\.nr: Python has phase there"):
            obj.map("op_hist", SwappedKey, maps.Hist)


def compile_bpf(tmp_path, name, source):
    src = tmp_path / f"{name}.bpf.c"
    src.write_text(
        '#include "vmlinux.h"\n#include <bpf/bpf_helpers.h>\nchar LICENSE[] SEC("license") = "GPL";\n' + source
    )
    obj = tmp_path / f"{name}.bpf.o"
    subprocess.run(
        ["clang", "-target", "bpf", "-g", "-O2", f"-I{BUILD_DIR}", "-c", str(src), "-o", str(obj)], check=True
    )
    return obj


def test_verifier_rejection_is_one_sentence_with_the_log_saved(tmp_path, monkeypatch):
    monkeypatch.setattr("profiler.trace.bpf.LOG_DIR", tmp_path / "logs")
    obj = compile_bpf(
        tmp_path,
        "bad",
        """
SEC("tracepoint/sched/sched_switch")
int bad(void *ctx) { return *(volatile int *)0; }  /* a NULL dereference the verifier refuses */
""",
    )
    with pytest.raises(FsprofError) as err:
        BpfObject("bad", path=obj)
    msg = str(err.value)
    assert "verifier rejected" in msg and "\n" not in msg
    log = next((tmp_path / "logs").iterdir()).read_text()
    assert "BEGIN PROG LOAD LOG" in log
    # libbpf's debug messages are dropped while loads succeed; a failed load is redone with them.
    assert "libbpf: elf: section" in log


def test_missing_tracepoint_is_skipped_and_said(tmp_path):
    obj = compile_bpf(
        tmp_path,
        "partial",
        """
SEC("tracepoint/nosuchgroup/nosuchevent")
int absent(void *ctx) { return 0; }
SEC("tracepoint/sched/sched_switch")
int present(void *ctx) { return 0; }
""",
    )
    with BpfObject("partial", path=obj) as loaded:
        loaded.attach_all()
        assert list(loaded.programs) == ["present"]
        assert "nosuchgroup:nosuchevent does not exist" in loaded.skipped["absent"]
        with pytest.raises(FsprofError, match="not loaded"):
            loaded.attach("absent")


def test_close_detaches_every_link():
    def tracing_progs():
        out = subprocess.run(["bpftool", "prog", "show"], capture_output=True, text=True).stdout
        return out.count("name on_sys_enter")

    before = tracing_progs()
    obj = BpfObject("syscalls")
    obj.attach_all()
    assert tracing_progs() == before + 1
    obj.close()
    # The links are gone when close() returns; a tp_btf program itself is freed after an RCU grace
    # period, which close() does not wait for (a classic tracepoint's detach did, 38 ms each).
    deadline = time.monotonic() + 5
    while tracing_progs() != before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert tracing_progs() == before


def own_fdinfo(kind):
    """The fdinfo of each BPF object of `kind` ("prog", "map") this process holds, {field: value}."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") != f"anon_inode:bpf-{kind}":
                continue
            lines = Path(f"/proc/self/fdinfo/{fd}").read_text().splitlines()
        except OSError:
            continue
        out.append({k.strip(): v.strip() for k, v in (line.split(":", 1) for line in lines)})
    return out


def own_programs():
    """{prog_id: prog_tag} of the BPF programs this process holds. The tag is the kernel's hash of
    the program as loaded, map references left out."""
    return {int(p["prog_id"]): p["prog_tag"] for p in own_fdinfo("prog")}


def test_minimised_kernel_btf_relocates_as_the_kernel_btf(tmp_path):
    """Objects in build/ relocate against `bpftool gen min_core_btf`'s cut of the kernel BTF
    (core_btf.core_btf); a copy elsewhere relocates against the kernel's own. Same programs, same tags."""
    from profiler.trace.core_btf import core_btf

    assert core_btf(BUILD_DIR) is not None
    copy = tmp_path / "syscalls.bpf.o"
    copy.write_bytes((BUILD_DIR / "syscalls.bpf.o").read_bytes())
    before = set(own_programs())
    with BpfObject("syscalls") as minimised:
        with_min = {i: t for i, t in own_programs().items() if i not in before}
        with BpfObject("syscalls", path=copy) as full:
            with_full = {i: t for i, t in own_programs().items() if i not in before and i not in with_min}
            assert len(minimised.programs) == len(full.programs) == len(with_min) > 5
    assert sorted(with_min.values()) == sorted(with_full.values())


def test_collector_loads_side_by_side_and_leaves_no_program_behind():
    from profiler.session.collect import Collector

    before = set(own_programs())
    with Collector() as collector:
        loaded = set(own_programs()) - before
        assert len(loaded) == sum(len(o.programs) for o in collector.objects)
        names = [o.name for o in collector.objects]
        assert names[0] == "syscalls" and len(set(names)) == len(names)
    # The links are gone when the Collector closes; a tp_btf program is freed a grace period later.
    deadline = time.monotonic() + 5
    while (left := loaded & kernel_program_ids()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left


PERCPU_MAP_TYPES = {5: "percpu_hash", 6: "percpu_array", 10: "lru_percpu_hash"}


def test_no_map_grows_with_the_cpu_count():
    """Per-CPU maps cost their whole size once per possible CPU: a per-CPU hash of histograms was
    5 MB a CPU. What is left per CPU must stay small (drop counters, a few phases)."""
    from profiler.session.collect import Collector

    with Collector():
        maps = own_fdinfo("map")
    per_cpu = {
        (m["map_id"], PERCPU_MAP_TYPES[int(m["map_type"])]): int(m["max_entries"]) * ((int(m["value_size"]) + 7) & ~7)
        for m in maps
        if int(m["map_type"]) in PERCPU_MAP_TYPES
    }
    assert len(maps) > 40
    assert sum(per_cpu.values()) <= 16 * 1024, per_cpu


MAP_MEMORY_BUDGET = 64 << 20  # issue 32's target for the continuous soak (docs/benchmarks.md)


def test_map_memory_stays_within_its_budget():
    """Every map is preallocated (allocating under sched_switch's run-queue lock fails), so what
    the maps are sized for is what a recording holds from its first second: all filesystems'
    objects together must stay within the budget. Several objects share a map (one fd each), so
    each map is counted once, by id."""
    from profiler.session.collect import Collector

    with Collector():
        memlock = {m["map_id"]: int(m["memlock"]) for m in own_fdinfo("map")}
    assert len(memlock) > 40
    assert sum(memlock.values()) <= MAP_MEMORY_BUDGET, sorted(memlock.values(), reverse=True)[:10]


def kernel_program_ids():
    return {p["id"] for p in kernel_programs()}


def test_kernel_function_addresses_are_kallsyms_own_and_kept_for_the_next_start(tmp_path, monkeypatch):
    """bpf/xfs.bpf.c's work functions, found with bytes.find, against a plain parse of
    /proc/kallsyms; the next start reads them from the per-boot cache instead."""
    from profiler import filesystems
    from profiler.behind import xfs
    from profiler.trace import kernel_flags, symbols

    filesystems.load_modules(["xfs"])  # where xfs is a module, its symbols are listed once loaded
    monkeypatch.setattr(kernel_flags, "CACHE_DIR", tmp_path)
    wanted = {"xlog_cil_push_work", "xfs_log_worker", "xfs_inodegc_worker"}
    listed = {}
    for line in Path("/proc/kallsyms").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] in wanted and parts[1] in "tT":
            listed.setdefault(parts[2], int(parts[0], 16))
    assert len(listed) == 3 and all(listed.values())
    assert xfs.kernel_functions() == listed
    cached = list(tmp_path.glob("ksyms-*.json"))
    assert len(cached) == 1
    cached[0].write_text('{"xfs_log_worker": 1}')  # what the next start returns is the cache's
    assert xfs.kernel_functions() == {"xfs_log_worker": 1}
    assert symbols._find_text(["xfs_log_worker", "no_such_function_anywhere"]) == {
        "xfs_log_worker": listed["xfs_log_worker"]
    }
