"""Writeback and dirty throttling behind the wait (bpf/writeback.bpf.c, profiler/behind/writeback.py)
on real loop-backed filesystems, checked against independent kernel counters: /proc/vmstat's dirty
thresholds, the bdi's own BdiWritten counter (debugfs), a bpftrace one-liner on the same
tracepoint, the workload's own fsync count, the attribution's "dirty throttling" cause, the
vm.dirty_writeback_centisecs setting and this kernel's BTF."""

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import assert_invariants, run_fsprof, bpftrace_output, bpftrace_start
from profiler.machine import scratch, settings, undo
from profiler.behind import Target, writeback
from profiler.session.collect import Collector
from profiler.session.run import measure
from profiler.machine.workload import COMMAND, WorkloadSpec

pytestmark = [pytest.mark.slow, pytest.mark.root]

DIRTY_BYTES = 1 << 20  # 256 pages: dd below dirties 16384
DIRTY_BACKGROUND_BYTES = 1 << 19
DD = ["dd", "if=/dev/zero", "of=big.dat", "bs=64k", "count=1024", "status=none"]
PAGE = os.sysconf("SC_PAGE_SIZE")


def fsprof_result(tmp_path, *args, name="run"):
    out = tmp_path / name
    proc = run_fsprof("run", "--scratch-dir", str(tmp_path / "scratch"), "-o", str(out), *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads((out / "result.json").read_text())


def section(fs, phase=None):
    s = fs["behind"]["writeback"]
    return s["phases"][phase] if phase else s["all"]


def vmstat_file(path):
    return {k: int(v) for k, v in (line.split() for line in Path(path).read_text().splitlines())}


# ---- bpftrace: the same tracepoint counted by another tracer ----


def start_bpftrace(script):
    return bpftrace_start('BEGIN { printf("ready\\n"); } ' + script)


def stop_bpftrace(proc):
    out = bpftrace_output(proc)
    return {m[1]: int(m[2]) for m in re.finditer(r"^@(\w+): (\d+)$", out, re.M)}


# ---- known cause: a tiny vm.dirty_bytes ----


@pytest.mark.skipif(shutil.which("bpftrace") is None, reason="bpftrace (the oracle) is not installed")
def test_tiny_dirty_bytes_makes_balance_dirty_pages_the_write_cost(tmp_path):
    vmstat = tmp_path / "vmstat"
    # The workload reads the thresholds itself, while the sysctls are in force.
    script = f"{' '.join(DD)}; grep -E '^nr_dirty(_background)?_threshold ' /proc/vmstat > {vmstat}"
    with undo.Changes() as changes, Collector(stack_sample=1) as collector:  # every stack walked: counts told by stacks
        sfs = scratch.provision(changes, scratch.FsConfig("ext4"), tmp_path / "scratch")
        settings.set_sysctl(changes, "vm.dirty_bytes", DIRTY_BYTES)
        settings.set_sysctl(changes, "vm.dirty_background_bytes", DIRTY_BACKGROUND_BYTES)
        bdi = writeback.target_bdis(target_of(sfs))[0][0]
        oracle = start_bpftrace(
            f'tracepoint:writeback:balance_dirty_pages /args->bdi == "{bdi}"/ '
            f"{{ @checks = count(); if (args->pause > 0) {{ @sleeps = count(); }} }}"
        )
        try:
            fs = measure(
                collector, sfs, WorkloadSpec(COMMAND, command=["sh", "-c", script]), tmp_path / "out", drop_caches=False
            )
        finally:
            theirs = stop_bpftrace(oracle)
    assert_invariants({"filesystems": [fs]})
    t, gds = section(fs)["throttle"], section(fs)["dirty_state"]
    # The same events another tracer counted over a slightly longer window: exactly.
    assert t["checks"] == theirs["checks"] and t["announced"] == theirs["sleeps"], (t, theirs)
    assert t["pauses"] + t["pauses_not_seen_sleeping"] == t["announced"]
    assert t["pauses"] >= 10
    # Throttling is the write side's main cost, and the attribution (switch-out stacks in
    # balance_dirty_pages) agrees with the tracepoint-timed sleeps: they also hold the
    # wakeup-to-CPU delay, which the attribution calls cpu contention.
    write = fs["attribution"]["write"]
    assert t["write_syscalls"]["count"] == write["count"] == 1024
    assert t["share_of_write_time"] > 0.5, t
    cpu_wait = write["causes"].get("cpu contention", 0)
    assert 0.9 * t["attributed_ns"] <= t["in_write_ns"] <= 1.1 * (t["attributed_ns"] + cpu_wait), (t, write["causes"])
    # The configured limit, in pages, as the kernel computes it and as /proc/vmstat shows it.
    seen = vmstat_file(vmstat)
    assert gds["last"]["dirty_thresh"] == math.ceil(DIRTY_BYTES / PAGE) == seen["nr_dirty_threshold"]
    assert (
        gds["last"]["background_thresh"]
        == math.ceil(DIRTY_BACKGROUND_BYTES / PAGE)
        == seen["nr_dirty_background_threshold"]
    )
    assert gds["min"]["dirty_thresh"] == gds["max"]["dirty_thresh"]  # set before the run, all along
    assert t["limit"]["min"] >= gds["last"]["dirty_thresh"]  # the hard limit is never below it
    # With the limit so low, the flusher writes in the background, woken by the throttled writer.
    work = section(fs)["writeback"][bdi]
    assert work["background"]["pages"] > 0.9 * 16384, work
    assert section(fs)["flusher"]["background_kicks"] > 0


def test_default_dirty_limits_do_not_throttle(tmp_path):
    fs = fsprof_result(tmp_path, "--fs", "ext4", "--", *DD)["filesystems"][0]
    t = section(fs)["throttle"]
    assert not t or t["pauses"] == 0, t
    assert fs["attribution"]["write"]["causes"].get("dirty throttling", 0) == 0


def target_of(sfs):
    return Target(sfs.config.fs, sfs.dev, {kdev: name for name, kdev in sfs.block_devs}, str(sfs.mountpoint))


# ---- pages written: the bdi's own counter ----


@pytest.fixture
def debugfs(tmp_path):
    """debugfs (the bdi's stats file), mounted here for the test unless it already is."""
    if Path("/sys/kernel/debug/bdi").is_dir():
        yield Path("/sys/kernel/debug")
        return
    where = tmp_path / "debugfs"
    where.mkdir()
    if subprocess.run(["mount", "-t", "debugfs", "debugfs", str(where)], capture_output=True).returncode:
        pytest.skip("debugfs cannot be mounted")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


def bdi_written_script(debugfs, out_dir):
    """A shell workload: every bdi's BdiWritten (kB) before and after writing 32 MiB and syncfs, in
    files named by the superblock's major:minor (the result's superblock_dev)."""
    snap = (
        f'for f in {debugfs}/bdi/*/stats; do echo "$(basename $(dirname $f)) '
        f"$(awk '/BdiWritten/ {{print $2}}' $f)\"; done > {out_dir}/$sb"
    )
    return (
        f'sb=$(mountpoint -d "$1"); {snap}.before; '
        f"dd if=/dev/zero of=big.dat bs=64k count=512 status=none; sync -f .; {snap}.after"
    )


def kb_table(path):
    return {
        name: int(kb)
        for name, kb in (line.split() for line in Path(path).read_text().splitlines() if len(line.split()) == 2)
    }


def test_flusher_pages_match_the_bdi_written_counter(tmp_path, debugfs):
    out = tmp_path / "bdi"
    out.mkdir()
    script = tmp_path / "w.sh"
    script.write_text(bdi_written_script(debugfs, out))
    result = fsprof_result(tmp_path, "--fs", "ext4,xfs,btrfs", "--", "sh", str(script), "{mnt}")
    for fs in result["filesystems"]:
        s, bdis = section(fs), fs["behind"]["writeback"]["bdis"]
        before, after = (kb_table(out / f"{fs['superblock_dev']}.{when}") for when in ("before", "after"))
        kernel_pages = sum(after[b] - before[b] for b in bdis) * 1024 // PAGE
        ours = s["pages_written_by_flusher"]
        # syncfs had the flusher write the 8192 pages; the kernel counted every page whose
        # writeback ended on those bdis (a few metadata pages are written by other threads).
        assert ours >= 8192, (fs["fs"], s["writeback"])
        assert abs(ours - kernel_pages) <= 0.01 * kernel_pages, (fs["fs"], ours, kernel_pages)
        # The flusher's own per-call total (writeback_pages_written) is the sum of its passes.
        assert s["flusher"]["pages"] == ours, (fs["fs"], s["flusher"])
        assert sum(w["pages"] for w in s["writeback"][next(iter(bdis))].values()) > 0
        sync = s["writeback"][next(iter(bdis))]["sync"]
        assert sync["queued"] >= 1 and sync["executed"] >= 1, sync
        # The writer started no inode writeback itself: syncfs handed the work to the flusher.
        assert s["inodes"]["writeback_started"]["flusher"]["count"] >= 1
        # Machine-wide, the kernel wrote about as much or more (the rest of the machine; on a
        # buffered loop the backing file too, about twice ours). It is read from the
        # global_dirty_state events, the last of which can come just before the last page's
        # writeback ends: 8191 of 8192 seen once on a direct-I/O loop.
        assert s["dirty_state"]["nr_written_delta"] >= 0.99 * ours


# ---- who started the writeback ----


def test_fsync_starts_its_inode_writeback_itself(tmp_path):
    count = 200
    result = fsprof_result(tmp_path, "--fs", "ext4,xfs,btrfs", "--workload", "fsync-loop", "--count", str(count))
    for fs in result["filesystems"]:
        started = section(fs)["inodes"]["writeback_started"]
        assert fs["workload"]["fsyncs"] == count
        if fs["fs"] == "btrfs":  # the file, and the btree inode holding the log tree's blocks
            assert started["fsync"]["count"] >= count, started
        else:  # each fsync puts its file's one new page under writeback: one inode each
            assert started["fsync"]["count"] == count, (fs["fs"], started)


def test_flusher_passes_are_worker_windows_with_their_writes(tmp_path):
    """Each flusher pass (writeback_start to writeback_written) is a worker window of the
    filesystem: as many windows as the writeback section counts passes, and the data the flusher
    wrote (ext4 delayed allocation: every page of the file, at syncfs) made inside them, byte for
    byte what the device was sent as background writes."""
    result = fsprof_result(tmp_path, "--fs", "ext4", "--", "sh", "-c", " ".join(DD) + "; sync -f big.dat")
    (fs,) = result["filesystems"]
    flusher = fs["behind"]["workers"]["flusher writeback"]["all"]
    passes = sum(v["passes"] for by_reason in section(fs)["writeback"].values() for v in by_reason.values())
    assert flusher["windows"] == passes > 0
    device = fs["block"][fs["device"]["name"]]["async_write"]
    assert flusher["requests"]["async_write"]["bytes"] == device["bytes"] == 64 << 20
    assert 0 < flusher["oncpu_ns"] <= flusher["wall_ns"]


# ---- the periodic flusher ----

WRITER = """
import os, time
fd = os.open("slow.dat", os.O_CREAT | os.O_WRONLY, 0o644)
end = time.monotonic() + {seconds}
while time.monotonic() < end:
    os.write(fd, b"x" * 4096)
    time.sleep(0.05)
"""


@pytest.mark.parametrize("centisecs, seconds", [(100, 4.5), (200, 6.5)])
def test_periodic_flusher_interval_follows_dirty_writeback_centisecs(tmp_path, centisecs, seconds):
    fs = fsprof_result(
        tmp_path,
        "--fs",
        "ext4",
        "--sysctl",
        f"vm.dirty_writeback_centisecs={centisecs}",
        "--sysctl",
        "vm.dirty_expire_centisecs=100",
        "--",
        sys.executable,
        "-c",
        WRITER.format(seconds=seconds),
    )["filesystems"][0]
    periodic = section(fs)["run_interval"]["periodic"]
    assert periodic["count"] >= 2, section(fs)["run_interval"]
    assert abs(periodic["p50_ns"] / 1e9 - centisecs / 100) <= 0.1 * centisecs / 100, periodic
    assert fs["behind"]["writeback"]["sysctls"]["vm.dirty_writeback_centisecs"] == centisecs


# ---- names from this kernel ----


def test_reason_names_are_this_kernels_enum(tmp_path):
    """The tracepoint format's names (what the probe uses) against the BTF enum wb_reason."""
    btf = subprocess.run(
        ["bpftool", "btf", "dump", "file", "/sys/kernel/btf/vmlinux", "format", "c"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    body = re.search(r"^enum wb_reason \{(.*?)^\};", btf, re.M | re.S)[1]
    enum = {
        int(v): n.removeprefix("WB_REASON_").lower()
        for n, v in re.findall(r"(\w+) = (\d+)", body)
        if n != "WB_REASON_MAX"
    }
    assert writeback.reason_names() == enum
