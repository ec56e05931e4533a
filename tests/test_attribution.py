"""Attribution on experiments whose cause is known by construction (DESIGN.md section 5), each on
real loop-backed filesystems, with independent oracles: the workload's own counts, fio's fsync
percentiles, /sys/block/<dev>/stat and taskstats delay accounting. Every result these tests make
is also checked for the sum invariant (conftest.run_fsprof)."""

import json
from pathlib import Path
import shutil
import subprocess
import sys
import time

import pytest

from conftest import REPO, assert_invariants, blocked_ns, run_fsprof
from profiler.machine import scratch, settings, undo
from profiler.analysis.attribution import DELAYED_ALLOC, OTHER_WAIT, rules_for
from profiler.causes import TABLE, WAIT
from profiler.trace import maps

pytestmark = [pytest.mark.slow, pytest.mark.root]
COUNT = 200


def fsprof_result(tmp_path, *args, name="run"):
    out = tmp_path / name
    proc = run_fsprof("run", "--scratch-dir", str(tmp_path / "scratch"), "-o", str(out), *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads((out / "result.json").read_text())


def breakdown(fs, op, phase=None):
    return fs["phases"][phase]["attribution"][op] if phase else fs["attribution"][op]


def share(b, cause):
    return b["causes"].get(cause, 0) / b["wall_ns"]


def test_fsync_waits_for_each_filesystems_own_commit(tmp_path):
    result = fsprof_result(tmp_path, "--fs", "ext4,xfs,btrfs", "--count", str(COUNT))
    fs = {f["fs"]: f for f in result["filesystems"]}
    for f in fs.values():
        b = breakdown(f, "fsync", "run")
        assert b["count"] == f["workload"]["fsyncs"] == COUNT  # the workload's own count
        # The model's error bar: what no rule explains stays small.
        assert share(b, "other wait") < 0.05, (f["fs"], b["other_wait_frames"])
    # The commit is each fsync's main wait. Its share of the wall time also moves with the machine's
    # load (CPU contention, 0.09 here; XFS's log force share once fell to 0.49 of the wall in a
    # full run), so it is asserted of the blocked time, with a lower floor of the wall.
    for name, commit in (("ext4", "journal commit wait"), ("xfs", "log force wait")):
        b = breakdown(fs[name], "fsync", "run")
        blocked = b["offcpu_ns"] - b["causes"].get("cpu contention", 0)
        waits = {cause: ns for cause, ns in b["causes"].items() if TABLE[cause].kind == WAIT}
        assert max(waits, key=waits.get) == commit, (name, b["causes"])
        assert b["causes"][commit] > 0.6 * blocked and share(b, commit) > 0.35, (name, b["causes"])
    btrfs = breakdown(fs["btrfs"], "fsync", "run")
    assert share(btrfs, "btrfs tree-log sync") > 0.1
    assert share(btrfs, "btrfs tree-log sync") + share(btrfs, "cache flush") > 0.5
    # Each filesystem's commit cause is its own, never another's.
    assert "log force wait" not in breakdown(fs["ext4"], "fsync")["causes"]
    assert "journal commit wait" not in breakdown(fs["xfs"], "fsync")["causes"]
    # Who ended the waits: every blocked interval's wakeup was seen, but for those the kernel did
    # not run on_waking for (an interrupt's wakeup while on_waking ran on that CPU: its recursion
    # misses, any task's), and ext4's commit waits were ended by that filesystem's jbd2 thread, from
    # inside its commit.
    for f in fs.values():
        wakers = breakdown(f, "fsync", "run")["wakers"]
        unseen = sum(by.get("[not seen]", 0) for by in wakers.values())
        unseen_waits = sum(
            r["count"]
            for r in f["trace"]["offcpu"]
            if r["op"] == "fsync" and not r["runnable"] and not r["waker_comm"] and r["waker_stack"] < 0
        )
        skipped = f["drops"].get(maps.skipped_reason("syscalls:on_waking"), 0)
        if unseen > 0.01 * sum(sum(by.values()) for by in wakers.values()):
            assert unseen_waits <= skipped, (f["fs"], wakers, unseen_waits, f["drops"])
    ext4 = fs["ext4"]
    by = breakdown(ext4, "fsync", "run")["wakers"]["journal commit wait"]
    jbd2_thread = f"jbd2/{ext4['device']['name']}-8"
    assert by.get(jbd2_thread, 0) >= 0.95 * sum(by.values()), by
    stacks, rules = ext4["trace"]["stacks"], rules_for("ext4")
    commit_waits = [
        r
        for r in ext4["trace"]["offcpu"]
        if r["op"] == "fsync"
        and not r["runnable"]
        and rules.classify_off(stacks.get(str(r["stack"]), []), False)[0] == "journal commit wait"
    ]
    woken_in_commit = sum(
        r["total_ns"]
        for r in commit_waits
        if "jbd2_journal_commit_transaction" in stacks.get(str(r["waker_stack"]), [])
    )
    assert woken_in_commit >= 0.95 * sum(r["total_ns"] for r in commit_waits)


def test_barriers_off_remove_the_flush_causes(tmp_path):
    on = fsprof_result(tmp_path, "--fs", "ext4,btrfs", "--count", str(COUNT), name="on")
    off = fsprof_result(
        tmp_path,
        "--fs",
        "ext4,btrfs",
        "--count",
        str(COUNT),
        "--mount-options",
        "ext4=barrier=0",
        "--mount-options",
        "btrfs=nobarrier",
        name="off",
    )
    for f_on, f_off in zip(on["filesystems"], off["filesystems"]):
        assert sum(d["flush_ios"] for d in f_off["kernel_counters"].values()) == 0
        assert sum(d["flush_ios"] for d in f_on["kernel_counters"].values()) >= COUNT
        b_on, b_off = breakdown(f_on, "fsync", "run"), breakdown(f_off, "fsync", "run")
        assert share(b_off, "cache flush") < 0.01, f_off["fs"]
        if f_on["fs"] == "btrfs":  # btrfs waits for its superblock flush in the fsync itself: its
            # share is the host disk's flush latency against btrfs's own work, 0.19-0.25 seen here.
            assert share(b_on, "cache flush") > 0.1
        else:  # ext4's flush is in the jbd2 commit the fsync waits for: its commit block, the
            # PREFLUSH + FUA write each commit ends with, is there with barriers and gone without.
            # By how much the fsync's commit wait shrinks is the host disk's flush time against its
            # writes on a direct-I/O loop (docs/test-bed.md): 2.7-3.5x on 2026-11-25's host, 1.8x
            # and 1.2x on 2026-11-26's, and reversed (3.51 vs 3.58 ms) under `make test-stress`
            # beside two VMs, where the jbd2 thread's wait for a CPU outweighs the flush. So what
            # is asserted is the commit block's own wait, there with barriers and gone without.
            j_on = f_on["behind"]["ext4"]["journal"]["phases"]["run"]
            j_off = f_off["behind"]["ext4"]["journal"]["phases"]["run"]
            assert j_on["commit_block"]["count"] >= 0.9 * j_on["commits"] > 0, j_on["commit_block"]
            assert j_off["commit_block"]["count"] == 0 and j_off["commits"] > 0, j_off["commit_block"]
            assert j_on["commit_block"]["total_ns"] > 0 and j_off["commit_block"]["total_ns"] == 0


DD = ["dd", "if=/dev/zero", "of=big.dat", "bs=64k", "count=1024", "status=none"]


def test_tiny_dirty_limit_makes_writes_wait_on_dirty_throttling(tmp_path):
    tight = fsprof_result(
        tmp_path,
        "--fs",
        "ext4",
        "--sysctl",
        "vm.dirty_bytes=1048576",
        "--sysctl",
        "vm.dirty_background_bytes=524288",
        "--",
        *DD,
        name="tight",
    )
    default = fsprof_result(tmp_path, "--fs", "ext4", "--", *DD, name="default")
    b_tight, b_default = (breakdown(r["filesystems"][0], "write") for r in (tight, default))
    assert b_tight["count"] == b_default["count"] >= 1024
    assert share(b_tight, "dirty throttling") > 0.5, b_tight["causes"]
    assert share(b_default, "dirty throttling") < 0.01, b_default["causes"]


def fio(*args, output="/dev/null"):
    return ["fio", f"--output={output}", "--ioengine=psync", *args]


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed")
def test_two_writers_on_one_file_contend_for_its_lock(tmp_path):
    """ext4 holds the inode lock across a buffered write, dirty throttling included: with a small
    dirty limit, one writer sleeps holding it and a second writer of the same file waits for it;
    writers of two files never do. (Without a sleeping holder the waiter mostly spins on a CPU,
    which a 2-core machine shows as CPU contention instead.)"""
    job = ["--name=w", "--rw=write", "--bs=64k", "--size=32M", "--numjobs=2", "--thread"]
    tight = ["--fs", "ext4", "--sysctl", "vm.dirty_bytes=4194304", "--sysctl", "vm.dirty_background_bytes=2097152"]
    same = fsprof_result(tmp_path, *tight, "--", *fio(*job, "--filename=shared.dat"), name="same")
    apart = fsprof_result(tmp_path, *tight, "--", *fio(*job), name="apart")
    b_same, b_apart = (breakdown(r["filesystems"][0], "pwrite64") for r in (same, apart))
    assert b_same["count"] == b_apart["count"] == 2 * 32 * 16
    assert share(b_same, "lock contention") > 0.1, b_same["causes"]
    assert b_apart["causes"].get("lock contention", 0) < 0.05 * b_same["causes"]["lock contention"], b_apart["causes"]
    # The lock's site: where the waits took it. ext4's buffered write takes the inode lock
    # (inode_lock, inlined there); its sleeping waits are all there (on-CPU spinning has no site).
    sites = b_same["sites"]["lock contention"]
    assert 0 < sum(sites.values()) <= b_same["causes"]["lock contention"], sites
    assert sites.get("ext4_buffered_write_iter", 0) >= 0.9 * sum(sites.values()), sites

    # The same waits from the tail's stacks (1 call in 1000 walked, every wait of 50 us or more in
    # the tail): taken of the sleeper at its switch-in, they have no lock frames (the kernel skips
    # .sched.text for another task's stack); the waker's release names the lock, at the same site.
    tail = fsprof_result(
        tmp_path,
        *tight,
        "--stack-sample",
        "1000",
        "--tail-threshold",
        "50us",
        "--",
        *fio(*job, "--filename=shared.dat"),
        name="tail",
    )
    b_tail = breakdown(tail["filesystems"][0], "pwrite64")
    assert b_tail["tail"]["waits"] > 0, b_tail.get("tail")
    assert share(b_tail, "lock contention") > 0.1, b_tail["causes"]
    assert share(b_tail, OTHER_WAIT) <= share(b_same, OTHER_WAIT) + 0.05, (b_tail["causes"], b_same["causes"])
    sites = b_tail["sites"]["lock contention"]
    assert sites.get("ext4_buffered_write_iter", 0) >= 0.9 * sum(sites.values()), sites


READER = """
import os
fd = os.open("data", os.O_CREAT | os.O_RDWR, 0o644)
os.write(fd, os.urandom(1 << 20) * 32)
os.fsync(fd)
if {cold}:
    # All clean page cache, the loop device's backing file included: a cold read must reach the disk.
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("1")
os.lseek(fd, 0, 0)
while os.read(fd, 1 << 16):
    pass
"""


def test_read_io_wait_only_when_the_cache_is_cold(tmp_path):
    cold = fsprof_result(tmp_path, "--fs", "ext4", "--", sys.executable, "-c", READER.format(cold=True), name="cold")
    warm = fsprof_result(tmp_path, "--fs", "ext4", "--", sys.executable, "-c", READER.format(cold=False), name="warm")
    b_cold, b_warm = (breakdown(r["filesystems"][0], "read") for r in (cold, warm))
    # The waits are what is attributed; the read's CPU time (allocating and copying 32 MiB) varies
    # with the machine: 3 ms here, 27 ms once on a fresh CI machine, where the wait share fell to 0.26.
    assert b_cold["causes"].get("read I/O wait", 0) > 0.9 * blocked_ns(b_cold), b_cold
    assert share(b_cold, "read I/O wait") > 0.1, b_cold["causes"]
    assert b_warm["causes"].get("read I/O wait", 0) < 0.02 * b_cold["causes"]["read I/O wait"], b_warm["causes"]
    assert sum(d["read_ios"] for d in cold["filesystems"][0]["kernel_counters"].values()) > 0


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed")
def test_fsync_percentiles_agree_with_fios_own(tmp_path):
    out = tmp_path / "fio.json"
    result = fsprof_result(
        tmp_path,
        "--fs",
        "ext4",
        "--",
        *fio(
            "--name=f",
            "--rw=randwrite",
            "--bs=4k",
            "--size=16M",
            "--fsync=1",
            "--number_ios=600",
            "--output-format=json",
            output=out,
        ),
    )
    theirs = json.loads(out.read_text())["jobs"][0]["sync"]["lat_ns"]
    ours = result["filesystems"][0]["syscalls"]["fsync"]
    assert ours["count"] == theirs["N"]
    for q, key in (("50.000000", "p50_ns"), ("95.000000", "p95_ns"), ("99.000000", "p99_ns")):
        assert abs(ours[key] - theirs["percentile"][q]) <= 0.10 * theirs["percentile"][q], (q, ours[key], theirs)


# Taskstats counts every I/O wait of the task, page faults included, while fsprof counts the
# waits inside syscalls. The victim runs its loop once before "ready" and locks its memory, so
# that no page-fault I/O (slow on a fresh CI machine's cold disk) falls inside the measured span.
FSYNCER = """
import ctypes, os, sys
def loop(name, count):
    fd = os.open(name, os.O_CREAT | os.O_WRONLY, 0o644)
    for _ in range(count):
        os.write(fd, b"x" * 4096)
        os.fsync(fd)
    os.close(fd)
loop("warm-up", 3)
assert ctypes.CDLL(None, use_errno=True).mlockall(3) == 0   # MCL_CURRENT | MCL_FUTURE
os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))  # no delayed dequeue: see the test
print("ready", flush=True)
sys.stdin.readline()                      # wait until fsprof is attached
loop("f", {count})
print("done", flush=True)
sys.stdin.readline()                      # stay alive until the test has read taskstats
"""


def majflt(pid):
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[9])


def taskstats_blkio_ns(pid):
    from pyroute2 import TaskStats

    ts = TaskStats()
    ts.bind()
    try:
        msg = ts.get_pid_stat(pid)[0]
        return msg.get_attr("TASKSTATS_TYPE_AGGR_PID").get_attr("TASKSTATS_TYPE_STATS")["blkio_delay_total"]
    finally:
        ts.close()


def io_wait_attempt(tmp_path):
    """One victim traced by `fsprof record --pid`: its blocked I/O-wait ns, the runnable ns that
    followed those waits, taskstats' blkio delay, the span that was read across, waits, major faults."""
    with undo.Changes() as changes:
        sfs = scratch.provision(changes, scratch.FsConfig("ext4"), tmp_path / "scratch")
        settings.set_sysctl(changes, "kernel.task_delayacct", "1")
        victim = subprocess.Popen(
            [sys.executable, "-c", FSYNCER.format(count=COUNT)],
            cwd=sfs.mountpoint,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        rec = subprocess.Popen(
            # Every stack walked: the time is told by its io_schedule frames, which a tail stack (the
            # default's, for waits of 1 ms or more) has not, and no part of it may be estimated.
            [
                *[sys.executable, "-m", "profiler", "record", "--pid", str(victim.pid), "--stack-sample", "1"],
                *["-o", str(tmp_path / "rec")],
            ],
            cwd=REPO,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert victim.stdout.readline().strip() == "ready"
            assert "recording" in rec.stderr.readline()
            t0 = time.monotonic_ns()
            before, faults = taskstats_blkio_ns(victim.pid), majflt(victim.pid)
            victim.stdin.write("go\n")
            victim.stdin.flush()
            assert victim.stdout.readline().strip() == "done"
            theirs, faults = taskstats_blkio_ns(victim.pid) - before, majflt(victim.pid) - faults
            span = time.monotonic_ns() - t0
            victim.stdin.write("exit\n")
            victim.stdin.flush()
            victim.wait(timeout=30)
            assert rec.wait(timeout=60) == 0, rec.stderr.read()
        finally:
            victim.kill()
            rec.kill()
    result = json.loads((tmp_path / "rec" / "result.json").read_text())
    assert_invariants(result)
    (fs,) = [f for f in result["filesystems"] if f["label"] == sfs.mountpoint]
    assert fs["syscalls"]["fsync"]["count"] == COUNT
    trace = fs["trace"]
    io_stack = [
        r for r in trace["offcpu"] if any(f.startswith("io_schedule") for f in trace["stacks"].get(str(r["stack"]), []))
    ]
    blocked = [r for r in io_stack if not r["runnable"]]
    return dict(
        blocked=sum(r["total_ns"] for r in blocked),
        waits=sum(r["count"] for r in blocked),
        after_wake=sum(r["total_ns"] for r in io_stack if r["runnable"]),
        # Intervals whose stack was lost (a stack map collision under load: drops offcpu_stack)
        # may be I/O waits too: the kernel's figure may hold them.
        stackless=sum(r["total_ns"] for r in trace["offcpu"] if str(r["stack"]) not in trace["stacks"]),
        drops={k: v for k, v in fs["drops"].items() if v},
        theirs=theirs,
        span=span,
        major_faults=faults,
    )


def test_record_pid_io_wait_agrees_with_taskstats(tmp_path):
    """`fsprof record --pid` on a process it did not start; its I/O-wait time (blocked in
    io_schedule) agrees with the kernel's own delay accounting for the task."""
    # The victim runs SCHED_FIFO. For a fair-class task this kernel's delayed dequeue (EEVDF) can
    # finish a block later from another task's context, and delay accounting then stamps the start
    # on that task and charges the victim's wait from its previous stamp: 4 victims in 10 here got
    # about 300 ms of blkio delay inside a 150 ms span, a CI run 5.6 s. An RT task blocks at once.
    m = io_wait_attempt(tmp_path)
    # Delay accounting starts a wait in __schedule, before the switch tracepoint, and ends it when
    # the woken task is put on its run queue: on the waker's CPU in try_to_wake_up, after the waking
    # tracepoint, or, for a wakeup queued to another CPU, after that CPU takes the IPI. fsprof's
    # blocked time ends at the waking tracepoint and counts the rest as runnable, so the kernel's
    # figure lies between our blocked time and our blocked + after-wakeup time, up to the few us per
    # wait the tracers' own probes put between its stamps and ours.
    slack = 0.03 * m["theirs"] + 5_000 * m["waits"]
    assert 0 < m["theirs"] <= m["span"], m
    assert m["blocked"] - slack <= m["theirs"] <= m["blocked"] + m["after_wake"] + m["stackless"] + slack, m
    rules = rules_for("ext4")
    assert rules.classify_off(["jbd2_log_wait_commit"], False)[0] == "journal commit wait"


SCATTER = """
import os
fd = os.open("sparse", os.O_CREAT | os.O_WRONLY, 0o644)
for i in range(20000):
    os.pwrite(fd, b"x" * 4096, i * 8192)  # every other block: each needs an extent of its own
os.fsync(fd)
"""


def test_fsync_allocates_the_delayed_blocks_only_under_delalloc(tmp_path):
    """20,000 scattered 4 KiB writes, then fsync. With ext4's delayed allocation the blocks are
    allocated when the fsync writes them back, on the fsync's CPU time; with nodelalloc each
    write allocates its own and the fsync has none to do."""
    runs = {
        name: fsprof_result(tmp_path, "--fs", "ext4", *opts, "--", sys.executable, "-c", SCATTER, name=name)
        for name, opts in (("delalloc", ()), ("nodelalloc", ("--mount-options", "nodelalloc")))
    }
    da, nd = (breakdown(runs[name]["filesystems"][0], "fsync") for name in ("delalloc", "nodelalloc"))
    print({name: breakdown(r["filesystems"][0], "fsync")["causes"] for name, r in runs.items()})
    assert da["count"] == nd["count"] == 1
    assert da["causes"].get(DELAYED_ALLOC, 0) > 0.2 * (da["wall_ns"] - da["offcpu_ns"]), da["causes"]
    assert nd["causes"].get(DELAYED_ALLOC, 0) < 0.05 * da["causes"][DELAYED_ALLOC], nd["causes"]
