"""Behind the wait on ext4/jbd2 (bpf/ext4.bpf.c, profiler/behind/ext4.py), on real loop-backed
ext4, against independent oracles: the kernel's own /proc/fs/jbd2/<dev>-8/info and
/proc/fs/ext4/<dev>/fc_info read around the same interval, a bpftrace one-liner on the same
tracepoints, the workload's own counts, and known-cause experiments (data=journal, commit=60,
barrier=0, fast_commit, nodelalloc, syncfs vs fsync). docs/behind-ext4.md explains each comparison."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import assert_invariants, run_fsprof, bpftrace_output, bpftrace_start
from profiler.machine import scratch, undo
from profiler.machine.conditions import kernel_hz
from profiler.behind import ext4
from profiler.session.collect import Collector
from profiler.session.run import measure
from profiler.machine.workload import COMMAND, WorkloadSpec

pytestmark = [pytest.mark.slow, pytest.mark.root]
HZ = kernel_hz()


# ---- the kernel's own counters ----


def jbd2_info(dev_name):
    """/proc/fs/jbd2/<dev>-8/info: {"transactions": n, "<what>": value} (ms, us or a count, as printed)."""
    text = Path(f"/proc/fs/jbd2/{dev_name}-8/info").read_text()
    out = {"transactions": int(re.match(r"(\d+) transactions", text).group(1))}
    for value, _unit, what in re.findall(r"^\s+(\d+)(ms|us)? (.+?)\s*$", text, re.M):
        out[what] = int(value)
    return out


def fc_info(dev_name):
    """/proc/fs/ext4/<dev>/fc_info: commits, ineligible, numblks, avg_commit_time (us)."""
    text = Path(f"/proc/fs/ext4/{dev_name}/fc_info").read_text()
    return {what: int(value) for value, what in re.findall(r"^(\d+)(?:us)? (\w+)$", text, re.M)}


def kernel_counters(dev_name):
    return {"info": jbd2_info(dev_name), "fc": fc_info(dev_name)}


# ---- one measured workload on a fresh ext4 ----


def measured(tmp_path, workload, mkfs=(), mount="", oracle=None, loop_io="direct"):
    """The result entry of `workload` (a WorkloadSpec) on a fresh loop-backed ext4, with the
    kernel's counters read just before the probes are reset and just after the snapshot, and
    oracle(kdev) -> stop() run around it. Returns (entry, before, after, oracle's result)."""
    config = scratch.FsConfig("ext4", mkfs_options=mkfs, mount_options=mount, loop_io=loop_io)
    with undo.Changes() as changes, Collector(stack_sample=1) as collector:  # every stack walked: counts told by stacks
        sfs = scratch.provision(changes, config, tmp_path / "scratch")
        name, kdev = sfs.block_devs[0]
        # measure() makes this directory and syncs before resetting the probes: do both first, so
        # that nothing is committed between reading the counters and the reset.
        (Path(sfs.mountpoint) / "fsprof-work").mkdir(exist_ok=True)
        subprocess.run(["sync", "-f", str(sfs.mountpoint)], check=True)
        stop = oracle(kdev) if oracle else None
        before = kernel_counters(name)
        try:
            entry = measure(collector, sfs, workload, tmp_path / "out", drop_caches=False)
        finally:
            theirs = stop() if stop else None
        after = kernel_counters(name)
    assert_invariants({"filesystems": [entry]})
    check_commit_thread_sums(entry)
    return entry, before, after, theirs


def command(script, *args):
    return WorkloadSpec(COMMAND, command=[sys.executable, "-c", script, *args])


def journal(entry, scope="all"):
    return entry["behind"]["ext4"]["journal"][scope]


def check_commit_thread_sums(entry):
    """The commit thread's causes add up to its time inside commits, and no rule left its waits
    unexplained."""
    section = entry["behind"]["ext4"]
    j = section.get("journal", {}).get("all")
    if not j or not j["timed_commits"]:
        return
    t = j["thread"]
    assert t["offcpu_ns"] <= t["window_ns"] * 1.01, t
    # unseen_ns: windows with an off-CPU interval on_switch did not time (drop worker_switches)
    assert abs(sum(t["causes"].values()) + t["unseen_ns"] - t["window_ns"]) <= 0.01 * t["window_ns"], t
    assert t["causes"].get("other wait", 0) <= 0.02 * t["window_ns"], t["other_wait_frames"]


def lifetime_average_range(avg0, n0, ours, n1):
    """info prints floor(sum / n) over the journal's whole life. Before the run it said avg0 over
    n0 transactions (so their sum lies in [avg0 n0, (avg0 + 1) n0 - 1]); we add `ours` over the
    n1 - n0 of the run. The floor info must print after the run lies in the returned range."""
    low = avg0 * n0
    high = (avg0 + 1) * n0 - 1 if n0 else 0
    return (low + ours) // n1, (high + ours) // n1


def jiffies(ms):
    return ms * HZ // 1000


# ---- jbd2 commits against /proc/fs/jbd2/<dev>-8/info ----


def test_commits_and_run_stats_match_jbd2_info(tmp_path):
    entry, before, after, _ = measured(tmp_path, WorkloadSpec("fsync-loop", ["--count", "300"]))
    j, b, a = journal(entry), before["info"], after["info"]
    # Exactly the transactions the kernel counted over the same interval, each seen start to end.
    assert j["commits"] == a["transactions"] - b["transactions"] > 250
    assert j["timed_commits"] == j["commits"]
    # Per workload phase: fsync-loop's commits happen in its "run" phase, but for periodic ones
    # (every 5 s) while the other phases last (a slow machine, e.g. an emulated VM, starts slowly).
    phases = entry["behind"]["ext4"]["journal"]["phases"]
    assert sum(p["commits"] for p in phases.values()) == j["commits"]
    others = sum(entry["phases"].get(name, {}).get("elapsed_s", 5) for name in phases if name != "run")
    assert phases["run"]["commits"] >= j["commits"] - int(others / 5), (phases, others)
    # Per-transaction averages: info's lifetime floor is what our sums imply, exactly.
    n0, n1 = b["transactions"], a["transactions"]
    for field, label in (
        ("handles", "handles per transaction"),
        ("blocks", "blocks per transaction"),
        ("blocks_logged", "logged blocks per transaction"),
    ):
        low, high = lifetime_average_range(b.get(label, 0), n0, j["totals"][field], n1)
        assert low <= a[label] <= high, (field, a[label], low, high)
    for field, label in (
        ("running", "running transaction"),
        ("logging", "logging transaction"),
        ("locked", "transaction was being locked"),
        ("flushing", "flushing data (in ordered mode)"),
    ):
        low, high = lifetime_average_range(jiffies(b.get(label, 0)), n0, j["run_stats"]["jiffies"][field], n1)
        assert low <= jiffies(a[label]) <= high, (field, a[label], low, high)
    # "average transaction commit time" is jbd2's running average (newest commit weighted 1/4) of
    # commit_flushing -> run_stats; ours is computed the same way over the same commits.
    assert a["average transaction commit time"] == pytest.approx(j["ewma_commit_ns"] / 1e3, rel=0.10)
    # fsync-loop: one fsync, one commit; every fsync's commit wait is the commit's time or less.
    assert j["fsyncs_per_commit"] == pytest.approx(1.0, abs=0.02)
    assert j["waiter_view"]["commit_wait_ns"] <= entry["syscalls"]["fsync"]["total_ns"]
    assert "fast_commits" not in entry["behind"]["ext4"]


def test_long_commit_times_match_jbd2_info(tmp_path):
    """info's per-phase times are jiffy averages (4 ms at HZ=250), floored: comparable with our
    nanosecond phases only when commits take tens of ms. data=journal commits of 64 MiB do on a
    buffered loop device (its writes queue behind the host's page cache writeback); through
    direct I/O this host's disk logs them in about 40 ms, too close to the jiffy quantum."""
    script = (
        "import os\nfd = os.open('data', os.O_WRONLY | os.O_CREAT)\nbuf = b'j' * (64 << 20)\n"
        "for i in range(6):\n    os.pwrite(fd, buf, 0)\n    os.fsync(fd)\n"
    )
    entry, before, after, _ = measured(
        tmp_path, command(script), mkfs=("-J", "size=400"), mount="data=journal", loop_io="buffered"
    )
    j, b, a = journal(entry), before["info"], after["info"]
    n0, n1 = b["transactions"], a["transactions"]
    assert j["commits"] == n1 - n0 >= 6
    logging_ns = j["phases"]["logging"]["total_ns"]
    assert logging_ns / j["timed_commits"] > 40e6, "commits too short for a jiffy-based comparison"
    # info's lifetime average of the logging phase, from our nanoseconds and its own past.
    expected_ms = (logging_ns / 1e6 + b["logging transaction"] * n0) / n1
    quantum_ms = 1000 / HZ
    assert abs(a["logging transaction"] - expected_ms) <= 0.10 * expected_ms + quantum_ms, (a, expected_ms)
    # The same phase as the kernel timed it in jiffies (jbd2_run_stats), commit by commit.
    assert j["run_stats"]["avg_ms"]["logging"] == pytest.approx(logging_ns / j["commits"] / 1e6, rel=0.10)
    # data=journal: every data block goes through the log.
    assert j["totals"]["blocks_logged"] >= 6 * 16384


def test_data_journal_multiplies_blocks_logged_per_commit(tmp_path):
    wl = WorkloadSpec("fsync-loop", ["--count", "100", "--size", "65536"])
    ordered, *_ = measured(tmp_path / "ordered", wl)
    journalled, *_ = measured(tmp_path / "journal", wl, mount="data=journal")
    per_ordered = journal(ordered)["per_commit"]["blocks_logged"]
    per_journal = journal(journalled)["per_commit"]["blocks_logged"]
    # 16 data blocks per fsync join the few metadata blocks in the log.
    assert per_journal >= 3 * per_ordered, (per_ordered, per_journal)
    assert per_journal - per_ordered == pytest.approx(16, abs=2)
    # data=journal switches delayed allocation off; ordered mode keeps it on.
    assert ordered["behind"]["ext4"]["delalloc"]["all"]["enabled"] is True
    assert journalled["behind"]["ext4"]["delalloc"]["all"]["enabled"] is False


SLOW_WRITER = (
    "import os, time\nfd = os.open('slow', os.O_WRONLY | os.O_CREAT | os.O_APPEND)\n"
    "end = time.time() + 12.5\nwhile time.time() < end:\n    os.write(fd, b's' * 4096)\n    time.sleep(0.1)\n"
)


@pytest.mark.parametrize("mount, periodic", [("", True), ("commit=60", False)])
def test_commit_interval_follows_the_commit_option(tmp_path, mount, periodic):
    """A writer that never syncs: only jbd2's commit timer commits, every 5 s by default."""
    entry, before, after, _ = measured(tmp_path, command(SLOW_WRITER), mount=mount)
    j = journal(entry)
    assert j["commits"] == after["info"]["transactions"] - before["info"]["transactions"]
    if periodic:
        assert j["commits"] >= 2
        assert 4.5e9 <= j["interval"]["avg_ns"] <= 6.5e9, j["interval"]
    else:
        assert j["commits"] == 0


@pytest.mark.parametrize("mount", ["barrier=1", "barrier=0"])
def test_barrier_decides_the_cache_flush_in_the_commit(tmp_path, mount):
    entry, *_ = measured(tmp_path, WorkloadSpec("fsync-loop", ["--count", "200"]), mount=mount)
    j = journal(entry)
    causes = j["thread"]["causes"]
    flushes = sum(d["flush_ios"] for d in entry["kernel_counters"].values())
    if mount == "barrier=1":
        # The commit block carries REQ_PREFLUSH|REQ_FUA: on a loop device (no FUA) two flushes
        # per commit, and most of the commit thread's time waits for them.
        assert j["commit_block"]["count"] == j["timed_commits"]
        assert flushes >= 2 * j["commits"]
        assert causes[ext4.COMMIT_BLOCK] >= 0.5 * j["thread"]["window_ns"], causes
    else:
        assert j["commit_block"]["count"] == 0 and flushes == 0
        assert ext4.COMMIT_BLOCK not in causes and "cache flush" not in causes, causes
        assert causes.get(ext4.LOG_WRITES, 0) > 0, causes


def test_fast_commits_are_told_apart_and_match_fc_info(tmp_path):
    entry, before, after, _ = measured(
        tmp_path, WorkloadSpec("fsync-loop", ["--count", "300"]), mkfs=("-O", "fast_commit")
    )
    fc = entry["behind"]["ext4"]["fast_commits"]["all"]
    j = journal(entry)
    b, a = before["fc"], after["fc"]
    # fc_info counts the same events: fast commits done, ineligible (incl. failed), blocks.
    assert fc["fast"] == a["commits"] - b["commits"] > 250
    assert fc["fell_back_to_full"] == a["ineligible"] - b["ineligible"]
    assert fc["by_status"]["ok"]["blocks"] == a["numblks"] - b["numblks"]
    assert a["avg_commit_time"] == pytest.approx(fc["ewma_commit_ns"] / 1e3, rel=0.10)
    # Every fsync asked for a fast commit; full jbd2 commits are the few fallbacks and timers.
    assert fc["calls"] == entry["syscalls"]["fsync"]["count"]
    assert j["commits"] == after["info"]["transactions"] - before["info"]["transactions"]
    assert j["commits"] <= 0.1 * fc["calls"]
    causes = fc["thread"]["causes"]
    assert max(causes, key=causes.get) == "fast-commit block writes (tail with cache flush + FUA)", causes


def bpftrace_delalloc(kdev):
    """A bpftrace one-liner counting delayed allocation and commits on kdev; returns stop()."""
    script = (
        f'BEGIN {{ printf("ready\\n"); }} '
        f"tracepoint:ext4:ext4_da_reserve_space /args->dev == {kdev}/ {{ @reserved = sum(args->reserve_blocks); }} "
        f"tracepoint:ext4:ext4_da_write_pages_extent /args->dev == {kdev}/ {{ @mapped = sum(args->len); }} "
        f"tracepoint:ext4:ext4_allocate_blocks /args->dev == {kdev} && (args->flags & 0x400)/ "
        f"{{ @allocated = sum(args->len); @by_comm[comm] = sum(args->len); }} "
        f"tracepoint:jbd2:jbd2_run_stats /args->dev == {kdev}/ {{ @commits = count(); "
        f"@logged = sum(args->blocks_logged); }}"
    )
    proc = bpftrace_start(script)

    def stop():
        out = bpftrace_output(proc)
        found = {m[0]: int(m[1]) for m in re.findall(r"^@(\w+): (\d+)$", out, re.M)}
        found["by_comm"] = {m[0]: int(m[1]) for m in re.findall(r"^@by_comm\[(.+)\]: (\d+)$", out, re.M)}
        return found

    return stop


TWO_WAYS = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
a = os.open('by-fsync', os.O_WRONLY | os.O_CREAT)
os.write(a, b'a' * 40 * 4096)
os.fsync(a)
b = os.open('by-syncfs', os.O_WRONLY | os.O_CREAT)
os.write(b, b'b' * 24 * 4096)
assert libc.syncfs(b) == 0
"""


@pytest.mark.skipif(shutil.which("bpftrace") is None, reason="bpftrace (the oracle) is not installed")
def test_delalloc_is_charged_to_what_forced_it(tmp_path):
    """40 blocks allocated by the fsync itself, 24 by the flusher working for syncfs()."""
    entry, before, after, theirs = measured(tmp_path, command(TWO_WAYS), oracle=bpftrace_delalloc)
    da = entry["behind"]["ext4"]["delalloc"]["all"]
    assert da["enabled"] is True
    assert da["reserved"]["blocks"] == theirs["reserved"] == 64
    assert da["mapped_at_writeback"]["blocks"] == theirs["mapped"] == 64
    assert da["allocated"]["delalloc"]["blocks"] == theirs["allocated"] == 64
    # Who allocated, as bpftrace's comm saw it (the flusher may also take some of the fsync's
    # blocks if another run on this machine pushes dirty memory over the background limit).
    by, side = da["allocated"]["delalloc"]["by"], da["allocated"]["delalloc"]["side"]
    kworkers = sum(n for comm, n in theirs["by_comm"].items() if comm.startswith("kworker/u"))
    assert side == {k: v for k, v in {"user threads": 64 - kworkers, "kernel threads": kworkers}.items() if v}, (
        side,
        theirs["by_comm"],
    )
    assert by.get("fsync", 0) == 64 - kworkers and by.get("flusher (kworker/u*)", 0) == kworkers, by
    # Known cause: syncfs() hands its writeback to the flusher; the fsync writes its own file.
    assert kworkers >= 24 and by.get("fsync", 0) > 0, by
    j = journal(entry)
    assert j["commits"] == theirs["commits"] == after["info"]["transactions"] - before["info"]["transactions"]
    assert j["totals"]["blocks_logged"] == theirs["logged"]


def test_nodelalloc_writes_allocate_at_write_time_and_the_commit_flushes_the_data(tmp_path):
    """Without delalloc, blocks are allocated in write() and the next commit writes the ordered
    data itself: the commit thread waits for it."""
    script = (
        "import os\nfd = os.open('big', os.O_WRONLY | os.O_CREAT)\n"
        "for i in range(1024):\n    os.write(fd, b'y' * 16384)\n"
        "small = os.open('small', os.O_WRONLY | os.O_CREAT)\nos.write(small, b'z' * 4096)\nos.fsync(small)\n"
    )
    entry, *_ = measured(tmp_path, command(script), mount="nodelalloc")
    da = entry["behind"]["ext4"]["delalloc"]["all"]
    assert da["enabled"] is False and da["write_begin"]["nodelalloc"] >= 1024
    assert da["allocated"]["other"]["by"].get("write", 0) >= 4096
    j = journal(entry)
    assert j["thread"]["causes"].get("data flush (ordered mode)", 0) > 0, j["thread"]
    assert j["phases"]["flushing"]["total_ns"] > j["phases"]["locking"]["total_ns"]


THREADS = """
import os, threading
def worker(n):
    fd = os.open(f't{n}', os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    for i in range(150):
        os.write(fd, b'x' * 4096)
        os.fsync(fd)
ts = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
[t.start() for t in ts]
[t.join() for t in ts]
"""


def test_concurrent_fsyncs_share_commits_without_double_counting(tmp_path):
    entry, before, after, _ = measured(tmp_path, command(THREADS))
    j = journal(entry)
    assert j["commits"] == after["info"]["transactions"] - before["info"]["transactions"]
    assert j["fsyncs"] == 600
    # Four threads: a commit serves more than one fsync (event's view) ...
    assert j["fsyncs_per_commit"] > 1.3
    assert j["event_view"]["commit_ns_per_fsync"] == pytest.approx(j["commit_ns"]["total_ns"] / 600)
    # ... while several fsyncs wait on one commit at once (waiter's view), each within its own wall time.
    fsync = entry["attribution"]["fsync"]
    assert j["waiter_view"]["commit_wait_ns"] == fsync["causes"].get("journal commit wait", 0) <= fsync["wall_ns"]
    assert j["waiters_per_commit_time"] > 1.0
    lines = ext4.report_lines(entry["behind"]["ext4"], entry)
    assert any(line.strip().startswith("behind journal commit wait") for line in lines), lines
    assert any("fsyncs served per commit" in line for line in lines), lines


def test_report_shows_the_chain_under_the_fsync_attribution(tmp_path):
    out = tmp_path / "run"
    proc = run_fsprof(
        "run",
        "--fs",
        "ext4",
        "--workload",
        "fsync-loop",
        "--count",
        "100",
        "--scratch-dir",
        str(tmp_path / "scratch"),
        "-o",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    fs = json.loads((out / "result.json").read_text())["filesystems"][0]
    j = fs["behind"]["ext4"]["journal"]["all"]
    assert j["commits"] >= 100 and j["phases"]["logging"]["avg_ns"] > 0
    report = run_fsprof("report", str(out))
    assert report.returncode == 0, report.stderr
    text = report.stdout
    assert "behind journal commit wait" in text and "commit block (cache flush + FUA)" in text
    assert text.index("where the time went") < text.index("behind journal commit wait")
