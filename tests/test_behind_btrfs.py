"""btrfs behind the wait (bpf/btrfs.bpf.c, profiler/behind/btrfs.py) on real loop-backed btrfs,
checked against independent oracles: /sys/fs/btrfs/<fsid>/commit_stats over the same interval
(commit count exactly, commit time within 10%), the workload's own fsync count, and bpftrace
one-liners on the same tracepoints (ordered extents, reservation tickets, superblock writes)."""

import json
import re
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from conftest import TIME_SCALE, assert_invariants, run_fsprof, bpftrace_output, bpftrace_skipped, bpftrace_start
from profiler import behind
from profiler.machine import scratch, tracefs, undo
from profiler.analysis.assemble import assemble
from profiler.behind import btrfs
from profiler.session.collect import Collector
from profiler.machine.workload import GatedProcess

pytestmark = [pytest.mark.slow, pytest.mark.root]

# Appends 4 KiB and fsyncs `per` times, then syncfs (a full commit), `rounds` times.
FSYNC_THEN_SYNCFS = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
rounds, per = int(sys.argv[1]), int(sys.argv[2])
fd = os.open("f", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
for r in range(rounds):
    for i in range(per):
        os.write(fd, b"x" * 4096)
        os.fsync(fd)
    if libc.syncfs(fd) != 0:
        raise OSError(ctypes.get_errno(), "syncfs")
os.close(fd)
"""

# `threads` threads, each appending 4 KiB + fsync `count` times to its own file: concurrent fsyncs
# share tree-log syncs. Then 8 MiB of buffered writes in 1 MiB calls and one fdatasync.
CONCURRENT_FSYNCS = """
import os, sys, threading
threads, count = int(sys.argv[1]), int(sys.argv[2])
def loop(i):
    fd = os.open(f"t{i}", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for _ in range(count):
        os.write(fd, b"y" * 4096)
        os.fsync(fd)
    os.close(fd)
ts = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
for t in ts: t.start()
for t in ts: t.join()
fd = os.open("big", os.O_WRONLY | os.O_CREAT, 0o644)
for _ in range(8):
    os.write(fd, b"z" * (1 << 20))
os.fdatasync(fd)
os.close(fd)
"""


def target_of(sfs):
    return behind.Target("btrfs", sfs.dev, {kdev: name for name, kdev in sfs.block_devs}, str(sfs.mountpoint))


def traced_run(collector, sfs, script, *args):
    """Runs `script` on the filesystem under tracing; returns (its result entry, the raw snapshot)."""
    target = target_of(sfs)
    collector.set_targets([target])
    collector.reset()
    proc = GatedProcess([sys.executable, "-c", script, *map(str, args)], cwd=str(sfs.mountpoint))
    collector.trace_pid(proc.pid)
    start_ns = time.monotonic_ns()
    proc.release()
    assert proc.wait() == 0
    return target, start_ns


def assembled(collector, target, start_ns):
    """The filesystem entry of the traced run, checked against the attribution invariants."""
    raw = collector.snapshot()
    raw["phase_start_ns"][0] = start_ns
    entry = assemble(raw, target, ["run"], time.monotonic_ns())
    assert_invariants({"filesystems": [{**entry, "label": "btrfs"}]}, schema=False)
    return entry


def test_commits_and_commit_time_match_commit_stats(tmp_path):
    rounds, per = 12, 10
    with undo.Changes() as changes, Collector(stack_sample=1) as collector:  # every stack walked: counts told by stacks
        sfs = scratch.provision(changes, scratch.FsConfig("btrfs"), tmp_path / "scratch")
        fsid = btrfs.fsid_of_devices([name for name, _ in sfs.block_devs])
        subprocess.run(["sync", "-f", str(sfs.mountpoint)], check=True)
        before = btrfs.commit_stats(fsid)
        target, start_ns = traced_run(collector, sfs, FSYNC_THEN_SYNCFS, rounds, per)
        after = btrfs.commit_stats(fsid)
        entry = assembled(collector, target, start_ns)
        # Nothing committed between the oracle's read and the snapshot (the fs is idle after syncfs).
        assert btrfs.commit_stats(fsid)["commits"] == after["commits"]
    section = entry["behind"]["btrfs"]
    assert section["fsid"] == fsid
    a = section["all"]
    commits = a["commits"]
    # Exactly the kernel's own commit count over the same interval.
    assert commits["count"] == after["commits"] - before["commits"] >= rounds
    # Every syncfs committed, in the syncfs caller (known cause); the rest were fsyncs' own.
    assert commits["by_committer"].get("sync/syncfs") == rounds
    assert sum(commits["by_committer"].values()) == commits["count"]
    # Commit time: the kernel timer read per commit, summed, vs its total (sysfs shows whole ms).
    ours_ms = commits["time"]["total_ns"] / 1e6
    theirs_ms = after["total_commit_ms"] - before["total_commit_ms"]
    assert commits["time"]["count"] == commits["count"]
    assert abs(ours_ms - theirs_ms) <= max(0.1 * theirs_ms, 1.0), (ours_ms, theirs_ms)
    assert section["last_commit_ns"] // 1_000_000 == after["last_commit_ms"]
    assert commits["time"]["max_ns"] // 1_000_000 <= after["max_commit_ms"]
    assert section["commits_interleaved"] == 0
    # fsyncs: the tracepoint, the syscall count and the workload agree exactly.
    assert a["fsyncs"]["count"] == entry["syscalls"]["fsync"]["count"] == rounds * per
    # One thread, each fsync after a write: it either synced the tree log or committed itself.
    m = a["many_to_one"]
    assert m["tree_log_syncs"] + m["full_commits_in_fsync"] == rounds * per
    assert m["full_commits_in_fsync"] == commits["by_committer"].get("fsync", 0)
    # A commit writes the primary superblock and its 64 MiB mirror; a log sync the primary only.
    supers = a["superblock_writes"]
    assert supers["by_copy"]["mirror 1"] == commits["count"]
    assert supers["by_copy"]["primary"] == commits["count"] + m["tree_log_syncs"]
    assert supers["by_writer"]["transaction commit"] == 2 * commits["count"]


def fsid_filter(fsid):
    return " && ".join(f"args->fsid[{i}] == {b}" for i, b in enumerate(uuid.UUID(fsid).bytes))


def start_bpftrace(fsid, kdev):
    on_fs = fsid_filter(fsid)
    script = (
        'BEGIN { printf("ready\\n"); } '
        f"tracepoint:btrfs:btrfs_ordered_extent_add /{on_fs}/ {{ @oe_add = count(); @oe_bytes = sum(args->len); }} "
        f"tracepoint:btrfs:btrfs_ordered_extent_remove /{on_fs}/ {{ @oe_remove = count(); }} "
        + (
            f"tracepoint:btrfs:btrfs_finish_ordered_extent /{on_fs}/ {{ @oe_finish = count(); }} "
            if tracefs.has_event("btrfs_finish_ordered_extent", "btrfs")
            else ""
        )  # since 6.5
        + f"tracepoint:btrfs:btrfs_sync_file /{on_fs}/ {{ @sync_file = count(); }} "
        f"tracepoint:btrfs:btrfs_transaction_commit /{on_fs}/ {{ @commits = count(); }} "
        + (
            f"tracepoint:btrfs:btrfs_reserve_ticket /{on_fs}/ {{ @tickets = count(); }} "
            f"tracepoint:btrfs:btrfs_reserve_ticket /{on_fs} && args->start_ns != 0/ "
            "{ @ticket_wait = sum(nsecs - args->start_ns); } "
            if tracefs.has_event("btrfs_reserve_ticket", "btrfs")
            else ""
        )  # since 5.11
        # Delalloc reservations are made by the writing thread only: the workload, within both windows.
        + f'tracepoint:btrfs:btrfs_space_reservation /{on_fs} && args->reserve && str(args->type) == "delalloc"/ '
        "{ @delalloc = count(); } "
        f"tracepoint:block:block_bio_queue /args->dev == {kdev} && args->sector == 128/ {{ @super[kstack] = count(); }}"
    )
    return bpftrace_start(script)


def stop_bpftrace(proc):
    """{name: value} of the scalar maps, and "log_sync_supers": primary superblock writes whose
    stack has btrfs_sync_log."""
    out = bpftrace_output(proc, 60)
    found = {m[1]: int(m[2]) for m in re.finditer(r"^@(\w+): (\d+)$", out, re.M)}
    found["log_sync_supers"] = sum(
        int(m[2]) for m in re.finditer(r"^@super\[(.*?)\]: (\d+)$", out, re.M | re.S) if "btrfs_sync_log" in m[1]
    )
    return found


@pytest.mark.skipif(shutil.which("bpftrace") is None, reason="bpftrace (the oracle) is not installed")
def test_ordered_extents_tickets_and_log_syncs_match_bpftrace(tmp_path):
    threads, count = 4, 100
    with undo.Changes() as changes, Collector(stack_sample=1) as collector:  # every stack walked: counts told by stacks
        sfs = scratch.provision(changes, scratch.FsConfig("btrfs"), tmp_path / "scratch")
        fsid = btrfs.fsid_of_devices([name for name, _ in sfs.block_devs])
        subprocess.run(["sync", "-f", str(sfs.mountpoint)], check=True)
        oracle = start_bpftrace(fsid, sfs.block_devs[0][1])
        try:
            target, start_ns = traced_run(collector, sfs, CONCURRENT_FSYNCS, threads, count)
            # Ordered extents complete after fsync returns: let the last ones be removed.
            subprocess.run(["sync", "-f", str(sfs.mountpoint)], check=True)
            time.sleep(0.3)
            entry = assembled(collector, target, start_ns)
            # The oracle's own misses: a classic tracepoint's program is not run while another BPF
            # program runs on that CPU (6.7+ count them): an ordered extent's I/O completion comes
            # in the bio's end, often an interrupt (404 against fsprof's 405 once, 6.12 under TCG).
            unseen = bpftrace_skipped("btrfs_finish_ordered_extent")
        finally:
            theirs = stop_bpftrace(oracle)
    a = entry["behind"]["btrfs"]["all"]
    oe, r = a["ordered_extents"], a["reservations"]
    assert oe["added"] == theirs.get("oe_add", 0) >= threads * count
    assert oe["bytes"] == theirs.get("oe_bytes", 0) >= (threads * count * 4096 + (8 << 20))
    assert oe["removed"] == theirs.get("oe_remove", 0) == oe["added"]
    if tracefs.has_event("btrfs_finish_ordered_extent", "btrfs"):
        finished = theirs.get("oe_finish", 0)
        assert finished <= oe["io_completions"] <= finished + unseen and oe["io_completions"] >= oe["added"], (
            oe,
            finished,
            unseen,
        )
    else:  # before 6.5: unknown, never a wrong 0
        assert oe["io_completions"] is None
    assert oe["life"]["count"] == oe["removed"]
    assert entry["behind"]["btrfs"]["ordered_extents_in_flight"] == 0
    assert a["fsyncs"]["count"] == theirs.get("sync_file", 0) == threads * count + 1
    assert a["fsyncs"]["datasync"] == 1
    assert a["commits"]["count"] == theirs.get("commits", 0) >= 1  # the test's own syncfs at least
    assert r["space_reservation"]["delalloc"]["reserve"]["count"] == theirs["delalloc"] > 0
    if tracefs.has_event("btrfs_reserve_ticket", "btrfs"):
        assert r["tickets"] == theirs.get("tickets", 0)
        # Both take now - the ticket's start_ns at the one tracepoint: they differ only by the time
        # between the two programs' clock reads, which an interrupt (and its softirqs) taken between
        # the two callbacks stretches: 42 us for one ticket in a full make test; in a VM under TCG
        # beside two others, a vCPU descheduled between them, 2.6 ms (6.12, 2026-11-28).
        their_wait = theirs.get("ticket_wait", 0)
        slack = 50_000 * TIME_SCALE**2 * r["tickets"]
        assert abs(r["ticket_wait_ns"] - their_wait) <= max(0.1 * their_wait, slack)
    else:  # 5.10: unknown, never a wrong 0
        assert r["tickets"] is None and r["ticket_wait_ns"] is None
    # Tree-log syncs: superblock writes from btrfs_sync_log, the same count bpftrace's stacks give.
    m = a["many_to_one"]
    assert m["tree_log_syncs"] == theirs["log_sync_supers"] > 0
    # Concurrent fsyncs share log syncs (wait_log_commit): fewer log syncs than fsyncs.
    assert m["tree_log_syncs"] + m["full_commits_in_fsync"] <= a["fsyncs"]["count"]
    assert m["fsyncs_per_tree_log_sync"] >= 1


def test_fsync_loop_run_shows_the_tree_log_behind_fsync(tmp_path):
    count = 200
    out = tmp_path / "run"
    proc = run_fsprof(
        "run",
        "--fs",
        "btrfs",
        "--workload",
        "fsync-loop",
        "--count",
        str(count),
        "--scratch-dir",
        str(tmp_path / "scratch"),
        "-o",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    fs = json.loads((out / "result.json").read_text())["filesystems"][0]
    section = fs["behind"]["btrfs"]
    run = section["phases"]["run"]
    assert run["fsyncs"]["count"] == fs["workload"]["fsyncs"] == count
    m = run["many_to_one"]
    assert m["tree_log_syncs"] + m["full_commits_in_fsync"] == count
    # The waiter's view never exceeds the fsyncs' own wall time (causes sum to it).
    fsync = fs["phases"]["run"]["attribution"]["fsync"]
    per_fsync_us = fsync["wall_ns"] / fsync["count"] / 1e3
    waits = [
        m[k]
        for k in (
            "tree_log_sync_us_per_fsync",
            "commit_wait_us_per_fsync",
            "cache_flush_us_per_fsync",
            "reservation_wait_us_per_fsync",
        )
    ]
    assert sum(waits) <= per_fsync_us * 1.0001
    assert m["tree_log_sync_us_per_fsync"] > 0
    # Who ended the tree-log sync waits is known for almost all of that time.
    wakers = m["wakers"][btrfs.LOG_SYNC_CAUSE]
    assert wakers.get("[not seen]", 0) <= 0.05 * sum(wakers.values())
    oe = run["ordered_extents"]
    assert oe["added"] == count and oe["avg_bytes"] == 4096
    assert section["worker_windows"] is None
    report = run_fsprof("report", str(out))
    assert report.returncode == 0
    assert f"behind btrfs: {count} fsyncs -> {m['tree_log_syncs']} tree-log syncs" in report.stdout
