"""The tail recorded exactly, the body by sampling (--stack-sample N, --tail-threshold T): a
syscall's blocked interval of T or longer keeps its own stacks and waker in every call, whether
sampling passed the call over or not, and is never part of the estimated time. Checked on waits
planted by construction: one fsfreeze of a known length under a writer, and a workload whose
waits are nearly all in the tail, against a full run of the same workload."""

import json
import re
import statistics
import sys
from pathlib import Path

import pytest

from conftest import (
    TIME_SCALE,
    blocked_ns,
    bpftrace_output,
    bpftrace_skipped,
    bpftrace_start,
    requests_untimed_at_most,
    run_fsprof,
)
from profiler.analysis.attribution import OTHER_WAIT
from profiler.trace.maps import BLK_WRITE_CLASSES, EXEMPLARS

pytestmark = [pytest.mark.slow, pytest.mark.root]
WRITER = Path(__file__).with_name("freeze_writer.py")


def fsprof_run(tmp_path, name, *args):
    out = tmp_path / name
    proc = run_fsprof("run", "--scratch-dir", str(tmp_path / "scratch"), "-o", str(out), *args)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((out / "result.json").read_text())
    return {f["fs"]: f for f in result["filesystems"]}, result, proc.stdout


def frozen_bounds(fs):
    """(least, most) ns the write that met the freeze can have waited, by the writer's own clock."""
    reported = fs["workload"]["reported"]
    low, high = int(reported["frozen_min_us"]) * 1000, int(reported["frozen_max_us"]) * 1000
    assert 0.3e9 <= low <= high < 5e9, reported
    return low, high


def test_a_freeze_is_one_exact_wait_named_and_ended_by_the_thaw(tmp_path):
    """The write that meets a 300 ms freeze is the slowest call; its wait is one tail wait within
    the bounds the writer's own clock sets on the freeze, named as the freeze, and ended by
    fsfreeze. With sampling on (1 in 8): the tail is exact whatever the sampler chose."""
    by_fs, result, stdout = fsprof_run(
        tmp_path, "freeze", "--fs", "ext4", "--stack-sample", "8", "--exemplars", "5", "--", sys.executable, str(WRITER)
    )
    fs = by_fs["ext4"]
    # --exemplars 5: five writes kept whole, the frozen one first.
    assert len(fs["exemplars"]["pwrite64"]) == 5 and all(len(calls) <= 5 for calls in fs["exemplars"].values())
    assert fs["exemplars"]["pwrite64"][0]["waits"][0]["cause"] == "filesystem frozen"
    low, high = frozen_bounds(fs)
    write = fs["attribution"]["pwrite64"]
    assert write["tail"]["waits"] == 1, write["tail"]
    assert low <= write["tail"]["ns"] <= high, (write["tail"], low, high)
    assert write["causes"]["filesystem frozen"] >= 0.95 * write["tail"]["ns"], write["causes"]
    assert write["wakers"]["filesystem frozen"] == {"fsfreeze": write["causes"]["filesystem frozen"]}
    # The slowest write is that one: its latency holds the whole freeze.
    assert fs["syscalls"]["pwrite64"]["max_ns"] >= write["tail"]["ns"]
    assert fs["stack_sampling"]["tail_waits"] >= 1
    assert "of 1ms or more" in stdout and "filesystem frozen" in stdout


def test_the_tail_keeps_its_stacks_when_sampling_passes_the_calls_over(tmp_path):
    """fsync-loop on ext4 with 1 call in 1000 walked (after the first 64 waits) and a 50 us tail:
    nearly every fsync wait is in the tail, so its stacks come from the sleeper at switch-in
    and the waker at wakeup, not from sampling. Little is left to estimate, no tail wait is
    unexplained, and the causes come out as in a full run of the same workload."""
    args = ("--fs", "ext4", "--count", "1000")
    full, _, _ = fsprof_run(tmp_path, "full", *args, "--stack-sample", "1")
    sampled, _, stdout = fsprof_run(tmp_path, "tail", *args, "--stack-sample", "1000", "--tail-threshold", "50us")
    assert "and in every wait of 50us or more" in stdout
    fs, ref = sampled["ext4"], full["ext4"]
    b, want = fs["phases"]["run"]["attribution"]["fsync"], ref["phases"]["run"]["attribution"]["fsync"]
    blocked = blocked_ns(b)
    assert b["tail"]["ns"] > 0.5 * blocked, (b["tail"], blocked)
    assert b.get("offcpu_estimated_ns", 0) < 0.5 * b["tail"]["ns"], b
    assert b["causes"].get(OTHER_WAIT, 0) < 0.05 * b["wall_ns"], b["other_wait_frames"]
    # Two runs: bounded as test_stack_sampling bounds them (what the load moves between runs).
    got = {c: ns / blocked for c, ns in b["causes"].items() if c in b["waits"]}
    ref_blocked = blocked_ns(want)
    expect = {c: ns / ref_blocked for c, ns in want["causes"].items() if c in want["waits"]}
    for cause in set(got) | set(expect):
        assert abs(got.get(cause, 0) - expect.get(cause, 0)) < 0.15, (cause, got, expect)
    # A full run estimates nothing.
    assert "offcpu_estimated_ns" not in want


# Every pwrite64 (18) and fsync (74) of the writer of 1 ms or more, timed on the same clock as
# fsprof's, and how many there were in all. Only the long ones are printed: a line for each of the
# ~5,000 calls overflowed bpftrace's output buffer under load and lost the freeze's line.
LONG_NS = 1_000_000
ORACLE = r"""BEGIN { printf("ready\n"); }
tracepoint:raw_syscalls:sys_enter /comm == "frozen-writer" && (args->id == 18 || args->id == 74)/ {
  @start[tid] = nsecs; @nr[tid] = args->id; }
tracepoint:raw_syscalls:sys_exit /@start[tid]/ {
  $ns = nsecs - @start[tid];
  @calls[@nr[tid]] = count();
  if ($ns >= LONG) { printf("call %d %d %llu %llu\n", @nr[tid], tid, @start[tid], $ns); }
  delete(@start[tid]); delete(@nr[tid]); }
END { clear(@start); clear(@nr); }""".replace("LONG", str(LONG_NS))


@pytest.mark.parametrize("fs_name", ["ext4", "xfs", "btrfs"])
def test_the_exemplars_are_the_slowest_calls_and_the_freeze_is_first(tmp_path, fs_name):
    """A bpftrace oracle times every call of the writer; fsprof's exemplars of pwrite64 and fsync
    include every call the oracle saw clearly longer than the shortest they kept (thread, start
    within 50 us, length within 10% or 200 us, each x TIME_SCALE squared in a VM: two probes on
    one tracepoint read their clocks apart), and the slowest write is the one that met the
    freeze, explained as that wait: on ext4, XFS and btrfs alike."""
    oracle = bpftrace_start(ORACLE)
    try:
        by_fs, _, stdout = fsprof_run(
            tmp_path, "exemplars", "--fs", fs_name, "--stack-sample", "8", "--", sys.executable, str(WRITER)
        )
    finally:
        seen = bpftrace_output(oracle)
    assert "Lost" not in seen, seen[-500:]
    calls = {18: [], 74: []}
    for line in seen.splitlines():
        if line.startswith("call "):
            _, nr, tid, start, ns = line.split()
            calls[int(nr)].append((int(ns), int(tid), int(start)))
    counted = {int(n): int(v) for n, v in re.findall(r"@calls\[(\d+)\]: (\d+)", seen)}
    fs = by_fs[fs_name]
    for nr, op in ((18, "pwrite64"), (74, "fsync")):
        ours = fs["exemplars"][op]
        theirs = sorted(calls[nr], reverse=True)
        assert counted[nr] >= len(ours) == EXEMPLARS, (op, counted)
        # Every call the oracle saw clearly longer than the shortest one fsprof kept is one of them.
        # Not the calls near that boundary: on 6.13+ a syscall tracepoint's probes run preemptible,
        # and a busy CPU can run another task between the oracle's and fsprof's (1.7 ms once, at
        # an 18 ms fsync's exit, beside a VM): the same call, its length 10% apart.
        # In a VM under TCG the host can deschedule the vCPU between two probes: on 6.1 (TIME_SCALE
        # 10) up to 1.02 ms apart at a call's entry and 1.1 ms at its exit; 5 ms is allowed there.
        apart = 50_000 * TIME_SCALE**2
        clearly = [c for c in theirs if c[0] >= max(1.5 * ours[-1]["ns"] + 4 * apart, LONG_NS)]
        for ns, tid, start in clearly:
            assert any(
                e["tid"] == tid and abs(e["start_ns"] - start) <= apart and abs(e["ns"] - ns) <= max(4 * apart, ns / 10)
                for e in ours
            ), (op, (ns, tid, start), [(e["ns"], e["tid"], e["start_ns"]) for e in ours])
        assert clearly or op == "fsync", op  # the write that met the freeze, at least
    slowest = fs["exemplars"]["pwrite64"][0]
    low, high = frozen_bounds(fs)
    # Once in ~30 suites (btrfs, under load) the slowest write came with no wait: what was kept
    # then, and what was dropped, says whether the wait or the call went missing.
    writes = [(e["ns"], e["tid"], e["start_ns"], len(e["waits"])) for e in fs["exemplars"]["pwrite64"]]
    why = (slowest, fs["drops"], fs["stack_sampling"], writes)
    assert slowest["waits"] and slowest["waits"][0]["cause"] == "filesystem frozen", why
    assert slowest["waits"][0]["ended_by"] == "fsfreeze", why
    assert low <= slowest["waits"][0]["ns"] <= high, (slowest["waits"][0], low, high)
    # Its parts add up to its length.
    parts = sum(w["ns"] for w in slowest["waits"]) + slowest["other_blocked_ns"]
    assert parts + slowest["runnable_ns"] + slowest["cpu_ns"] == slowest["ns"]
    assert "slowest pwrite64 calls and why:" in stdout and "filesystem frozen" in stdout


# Into maps, printed at the end: a printf at the tracepoint (perf output) put 30 us, and 300 us
# under the suite's load, between the oracle's clock reading and fsprof's.
JBD2_ORACLE = r"""BEGIN { printf("ready\n"); }
tracepoint:jbd2:jbd2_start_commit { @start[args->dev, args->transaction] = nsecs; }
tracepoint:jbd2:jbd2_end_commit { @end[args->dev, args->transaction] = nsecs; }"""

# The same, and each commit's requests (block_getrq in the committing thread, between the two),
# timed from their issue to the device's completion: @rqs and @device_ns by transaction. Host
# only: under TCG this oracle lost most commits' edges (5.10, 6.12; not 6.1), while the one above
# keeps them.
JBD2_RQ_ORACLE = r"""BEGIN { printf("ready\n"); }
tracepoint:jbd2:jbd2_start_commit { @start[args->dev, args->transaction] = nsecs; @tx[tid] = args->transaction; }
tracepoint:jbd2:jbd2_end_commit { @end[args->dev, args->transaction] = nsecs; delete(@tx[tid]); }
tracepoint:block:block_getrq /@tx[tid]/ { @rq_tx[args->dev, args->sector] = @tx[tid]; }
tracepoint:block:block_rq_issue /@rq_tx[args->dev, args->sector]/ { @issue[args->dev, args->sector] = nsecs; }
tracepoint:block:block_rq_complete /@issue[args->dev, args->sector]/ {
  $tx = @rq_tx[args->dev, args->sector];
  @rqs[$tx] = count(); @device_ns[$tx] = sum(nsecs - @issue[args->dev, args->sector]);
  delete(@issue[args->dev, args->sector]); delete(@rq_tx[args->dev, args->sector]); }"""


@pytest.mark.parametrize("barrier", ["1", "0"])
def test_an_fsyncs_commit_wait_names_the_commit_it_waited_for(tmp_path, barrier):
    """An fsync's journal commit wait, kept whole in an exemplar, names the work that ended it:
    the jbd2 commit, by its transaction id, its window where a bpftrace oracle on jbd2_start_commit
    and jbd2_end_commit saw that transaction's commit (their median edge to 50 us, each to 2 ms),
    ended before the fsync was woken; the commit's own requests hold its commit block's cache
    flush (a PREFLUSH write) with barriers, and none without."""
    oracle = bpftrace_start(JBD2_ORACLE)
    try:
        by_fs, _, _ = fsprof_run(
            tmp_path, f"barrier{barrier}", "--fs", "ext4", "--count", "200", "--mount-options", f"barrier={barrier}"
        )
    finally:
        seen = bpftrace_output(oracle)
    commits = {}  # the scratch filesystem's (its journal's dev is the run's device), by transaction
    dev = by_fs["ext4"]["device"]["dev"].split(":")
    scratch_dev = (int(dev[0]) << 20) | int(dev[1])
    for edge, dev_t, tid, ns in re.findall(r"@(start|end)\[(\d+), (\d+)\]: (\d+)", seen):
        if int(dev_t) == scratch_dev:
            commits.setdefault(int(tid), {})[edge] = int(ns)
    # The window's edges and the oracle's are clock reads of two programs on one tracepoint: an
    # interrupt taken between them, with the softirqs run on its exit, parts them (144 us once, in
    # a full make test), up to MAX_SOFTIRQ_TIME (2 ms) before the kernel hands softirqs to
    # ksoftirqd. So each edge is held to that, and their median to 50 us (x TIME_SCALE squared
    # in a VM, where the host can deschedule the vCPU between the two); which commit it was is
    # the transaction id's, exact.
    near = 50_000 * TIME_SCALE**2
    apart = 2_000_000 + near
    waits = [(c, w) for c in by_fs["ext4"]["exemplars"]["fsync"] for w in c["waits"]]
    commit_waits = [(c, w) for c, w in waits if w["cause"] == "journal commit wait"]
    assert commit_waits, waits[:4]
    edges, unseen = [], 0
    for call, w in commit_waits:
        work = w.get("work")
        assert work and work["worker"] == "jbd2 commit", w
        seen_commit = commits.get(work["id"], {})  # a transaction the oracle saw commit
        if "start" not in seen_commit or "end" not in seen_commit:
            # The oracle missed an edge of it (under TCG, on 5.10 and 6.1 beside another VM: one
            # commit's start in a run, once its block probes joined): the rest are checked.
            unseen += 1
            continue
        edges += [
            abs(call["start_ns"] + work["start_at_ns"] - seen_commit["start"]),
            abs(call["start_ns"] + work["end_at_ns"] - seen_commit["end"]),
        ]
        assert max(edges[-2:]) <= apart, (work, seen_commit)
        assert work["end_at_ns"] <= w["at_ns"] + w["ns"] + apart  # the commit ended, then woke the fsync
        assert work["blocked_ns"] <= work["end_at_ns"] - work["start_at_ns"]
        flushes = work["requests"].get("preflush_write", 0) + work["requests"].get("fua_write", 0)
        assert (flushes >= 1) if barrier == "1" else (flushes == 0), work["requests"]
    assert unseen <= len(commit_waits) // 4, (unseen, len(commit_waits))
    assert statistics.median(edges) <= near, sorted(edges)


# Each fsync's own requests (block_getrq in its thread, inside the call), timed from their issue to
# the device's completion, by (thread, the call's start): @n and @device_ns. Not an empty cache
# flush: never issued itself, it has no device time (the queue's flush request, issued at its
# sector 0, would pass for it here).
OWN_ORACLE = r"""BEGIN { printf("ready\n"); }
tracepoint:syscalls:sys_enter_fsync { @start[tid] = nsecs; }
tracepoint:syscalls:sys_exit_fsync { delete(@start[tid]); }
tracepoint:block:block_getrq /@start[tid] && args->nr_sector > 0/ {
  @rq_tid[args->dev, args->sector] = tid; @rq_start[args->dev, args->sector] = @start[tid]; }
tracepoint:block:block_rq_issue /@rq_tid[args->dev, args->sector]/ { @issue[args->dev, args->sector] = nsecs; }
tracepoint:block:block_rq_complete /@issue[args->dev, args->sector]/ {
  $t = @rq_tid[args->dev, args->sector]; $s = @rq_start[args->dev, args->sector];
  @n[$t, $s] = count(); @device_ns[$t, $s] = sum(nsecs - @issue[args->dev, args->sector]);
  delete(@issue[args->dev, args->sector]); delete(@rq_tid[args->dev, args->sector]);
  delete(@rq_start[args->dev, args->sector]); }
END { clear(@start); clear(@rq_tid); clear(@rq_start); clear(@issue); }"""


@pytest.mark.parametrize("fs_name", ["ext4", "xfs", "btrfs"])
def test_a_slow_calls_own_requests_are_timed_as_bpftrace_times_them(tmp_path, fs_name):
    """What a slow fsync's own I/O took: XFS's fsync writes its log's iclog itself (a PREFLUSH
    write: the cache flush before it is most of its log force wait), btrfs's writes its tree log.
    Each exemplar fsync's own requests (issued ones: an empty cache flush is served by the
    queue's) and their summed device time equal a bpftrace oracle's for the same call (thread,
    start within 50 us x TIME_SCALE squared); from start to end they took at least that."""
    oracle = bpftrace_start(OWN_ORACLE)
    try:
        by_fs, _, stdout = fsprof_run(tmp_path, "own", "--fs", fs_name, "--workload", "fsync-loop", "--count", "300")
        # The oracle's own misses: a classic tracepoint's program is not run while another BPF
        # program runs on that CPU (6.7+ count them); a call it missed a probe of is not compared.
        unseen = sum(
            bpftrace_skipped(p)
            for p in ("sys_enter_fsync", "sys_exit_fsync", "block_getrq", "block_rq_issue", "block_rq_complete")
        )
    finally:
        seen = bpftrace_output(oracle)
    theirs: dict[tuple[int, int], dict[str, int]] = {}
    for name, tid, start, value in re.findall(r"@(n|device_ns)\[(\d+), (\d+)\]: (\d+)", seen):
        theirs.setdefault((int(tid), int(start)), {})[name] = int(value)
    near = 50_000 * TIME_SCALE**2
    checked = missed = compared = ours_ns = theirs_ns = 0
    for call in by_fs[fs_name]["exemplars"]["fsync"]:
        own = call.get("own_requests")
        if not own:
            continue
        issued = sum(n for cls, n in own["requests"].items() if cls != "flush")
        match = [
            v for (tid, start), v in theirs.items() if tid == call["tid"] and abs(start - call["start_ns"]) <= near
        ]
        if not issued:
            assert not match, (call, match)
            continue
        if len(match) != 1 or issued != match[0]["n"]:
            unseen -= 1  # one of the oracle's misses, or a failure once they are used up
            assert unseen >= 0, (call, match, [k for k in theirs if k[0] == call["tid"]][:5])
            continue
        (seen_call,) = match
        if own["timed"] < issued:  # a completion the kernel did not run fsprof's program for
            missed += issued - own["timed"]
            continue
        # Summed over the calls: one request can be timed apart by a probe pair parted for a while.
        ours_ns += own["device_ns"]
        theirs_ns += seen_call["device_ns"]
        compared += issued

        assert own["life_ns"] >= own["device_ns"], own
        checked += 1
    assert checked >= 8, by_fs[fs_name]["exemplars"]["fsync"][:2]
    assert abs(ours_ns - theirs_ns) <= max(0.03 * theirs_ns, near * compared), (ours_ns, theirs_ns, compared)
    assert missed <= requests_untimed_at_most(by_fs[fs_name]["drops"], 0), by_fs[fs_name]["drops"]
    assert "its own block requests: " in stdout


# Every issued block request: @end[dev, sector, issue] its last completion, @device_ns[...] its first
# completion after the issue less the issue (a request in a flush sequence completes twice: when
# its data is written and when the sequence ends), as fsprof's device ring keeps them. A cache
# flush has no sector: block_rq_issue says 0 (blk_rq_trace_sector) or -1, block_rq_complete -1.
DEVICE_ORACLE = r"""BEGIN { printf("ready\n"); }
tracepoint:block:block_rq_issue {
  $s = args->sector;
  if ($s == 0xffffffffffffffff) { $s = 0; }
  @issue[args->dev, $s] = nsecs; @done[args->dev, $s] = 0; }
tracepoint:block:block_rq_complete {
  $s = args->sector;
  if ($s == 0xffffffffffffffff) { $s = 0; }
  $i = @issue[args->dev, $s];
  if ($i) {
    if (@done[args->dev, $s] == 0) { @device_ns[args->dev, $s, $i] = nsecs - $i; }
    @done[args->dev, $s] = 1; @end[args->dev, $s, $i] = nsecs; } }
END { clear(@issue); clear(@done); }"""


def test_a_slow_calls_device_requests_are_the_devices_as_bpftrace_sees_them(tmp_path):
    """What the device did while a slow fsync ran (ext4, barrier=1: each commit block is a
    cache flush and a FUA write): each exemplar's requests on the loop device are requests a bpftrace oracle
    saw end on that device at that time (within 50 us x TIME_SCALE squared), their device times
    within as much (all but one in 20; summed within 3%); every request the oracle saw end well
    inside the call is among them when they are not cut at EXEMPLAR_RQS; and the slowest fsyncs
    name their commit's flush."""
    from profiler.machine.blockdev import kdev_of_block, kdev_str

    oracle = bpftrace_start(DEVICE_ORACLE, map_keys=65536)  # a key per request of the run, every disk's
    try:
        by_fs, _, stdout = fsprof_run(
            tmp_path, "device", "--fs", "ext4", "--count", "200", "--mount-options", "barrier=1"
        )
        unseen = sum(bpftrace_skipped(p) for p in ("block_rq_issue", "block_rq_complete"))
    finally:
        seen = bpftrace_output(oracle)
    device_ns = {
        (dev, sector, issue): int(v)
        for dev, sector, issue, v in re.findall(r"@device_ns\[(\d+), (\d+), (\d+)\]: (\d+)", seen)
    }
    theirs = [  # (device, issue, device_ns, end)
        (kdev_str(int(dev)), int(issue), device_ns.get((dev, sector, issue)), int(end))
        for dev, sector, issue, end in re.findall(r"@end\[(\d+), (\d+), (\d+)\]: (\d+)", seen)
    ]
    fs = by_fs["ext4"]
    # A traced device by name (its dev_t read back from sysfs: a loop device's node outlives its
    # file), another as major:minor.
    numbers = {}
    for call in fs["exemplars"]["fsync"]:
        for r in call.get("device_requests", []):
            name = r["device"]
            numbers[name] = name if ":" in name else kdev_str(kdev_of_block(name))
    near = 50_000 * TIME_SCALE**2
    calls = fs["exemplars"]["fsync"]
    compared = apart = flushes = ours_ns = theirs_ns = 0
    for call in calls:
        rqs = call.get("device_requests", [])
        assert len(rqs) <= 8 and all(r["start_at_ns"] <= r["end_at_ns"] <= call["ns"] for r in rqs), rqs
        # The scratch filesystem's own device. Its backing disk (also traced) has requests to one
        # sector in flight together (the image's rewritten blocks, flushes on several queues),
        # which the oracle's (device, sector) key cannot tell apart; so do two cache flushes (no
        # sector) in flight on the loop device: theirs are counted below, not timed one by one.
        issued = [r for r in rqs if r["device_ns"] is not None and r["device"].startswith("loop")]
        for r in issued:
            if r["class"] == "flush":
                continue
            end = call["start_ns"] + r["end_at_ns"]
            same = [t for t in theirs if t[0] == numbers[r["device"]] and abs(t[3] - end) <= near]
            if not same:
                unseen -= 1  # a completion the oracle's program was not run for, or a failure
                assert unseen >= 0, (r, call["start_ns"], sorted(theirs, key=lambda t: abs(t[3] - end))[:2])
                continue
            best = min(same, key=lambda t: abs((t[2] or 0) - r["device_ns"]))
            assert best[2] is not None, (r, best)
            # One request's two timings can be parted by a preemption between the two programs at
            # one tracepoint (preemptible since 6.13): a few apart, the sum close.
            apart += abs(best[2] - r["device_ns"]) > near
            ours_ns += r["device_ns"]
            theirs_ns += best[2]
            assert r["end_at_ns"] - r["start_at_ns"] >= r["device_ns"]
            compared += 1
        # Not cut: every request the oracle saw end well inside the call is there.
        if not call.get("device_requests_more"):
            start, end = call["start_ns"] + near, call["start_ns"] + call["ns"] - near
            devices = {numbers[r["device"]] for r in rqs if r["device"].startswith("loop")}
            inside = [t for t in theirs if t[0] in devices and start <= t[3] <= end]
            assert len(issued) >= len(inside) - unseen, (call, inside)
        flushes += any(r["class"] in ("flush", "preflush_write", "fua_write") for r in rqs)
    assert compared >= 10, calls[:2]
    assert apart <= max(1, compared // 20), (apart, compared)
    assert abs(ours_ns - theirs_ns) <= max(0.03 * theirs_ns, near * compared), (ours_ns, theirs_ns, compared)
    # The slowest fsyncs wait on commits whose commit block is a cache flush and a FUA write.
    assert flushes >= len(calls) // 2, [[r["class"] for r in c.get("device_requests", [])] for c in calls]
    assert re.search(r"on the devices meanwhile \(.*\): \S+ .*flush", stdout), stdout[-2000:]
    # A commit block's PREFLUSH write waits for its pre-flush on the same device: some request
    # queued while its device flushed, never longer than its time before the device.
    behind = [r for c in calls for r in c.get("device_requests", []) if r.get("queued_while_flushing_ns")]
    assert behind and all(
        r["queued_while_flushing_ns"] <= r["end_at_ns"] - r["start_at_ns"] - r["device_ns"] for r in behind
    ), behind[:3]
    assert " flushed)" in stdout, stdout[-2000:]


def test_a_commits_requests_are_timed_as_bpftrace_times_them(tmp_path):
    """The jbd2 commit an exemplar fsync waited for says what its requests took: those that had
    ended by the wakeup (all: jbd2 waits for its writes before it ends the commit), their number
    and summed device time equal to a bpftrace oracle's for that transaction's requests; from start
    to end at least that (with barriers, the commit block's cache flush ran before it). Not in the
    kernel rows: under TCG this oracle lost most commits' edges."""
    oracle = bpftrace_start(JBD2_RQ_ORACLE)
    try:
        by_fs, _, _ = fsprof_run(tmp_path, "commits", "--fs", "ext4", "--count", "200")
    finally:
        seen = bpftrace_output(oracle)
    requests = {int(tx): int(n) for tx, n in re.findall(r"@rqs\[(\d+)\]: (\d+)", seen)}
    device_ns = {int(tx): int(ns) for tx, ns in re.findall(r"@device_ns\[(\d+)\]: (\d+)", seen)}
    near = 50_000 * TIME_SCALE**2
    works = [
        w["work"]
        for c in by_fs["ext4"]["exemplars"]["fsync"]
        for w in c["waits"]
        if w["cause"] == "journal commit wait" and w.get("work")
    ]
    checked = [work for work in works if work["id"] in requests]
    assert len(checked) >= 0.75 * len(works) > 0, (len(checked), len(works))
    apart = ours_ns = theirs_ns = timed = 0
    for work in checked:
        times = work.get("request_times")
        assert times and times["timed"] == sum(work["requests"].values()) == requests[work["id"]], (work, requests)
        # One request's two timings can be parted by a preemption between the two programs at one
        # tracepoint (preemptible since 6.13; 140 us once beside two VMs): a few apart, the sum close.
        apart += abs(times["device_ns"] - device_ns[work["id"]]) > max(
            0.02 * device_ns[work["id"]], near * times["timed"]
        )
        ours_ns, theirs_ns, timed = (
            ours_ns + times["device_ns"],
            theirs_ns + device_ns[work["id"]],
            timed + times["timed"],
        )
        assert times["life_ns"] >= times["device_ns"], times
    assert apart <= max(1, len(checked) // 20), (apart, len(checked))
    assert abs(ours_ns - theirs_ns) <= max(0.03 * theirs_ns, near * timed), (ours_ns, theirs_ns)


# Every completion of a block request, by device, at its time (a request in a flush sequence
# completes twice: its data, then the sequence; fsprof's ring keeps the last).
COMPLETION_ORACLE = r"""BEGIN { printf("ready\n"); }
tracepoint:block:block_rq_complete { @end[args->dev, nsecs] = 1; }"""


def test_a_log_force_names_the_iclog_write_that_ended_it(tmp_path):
    """XFS fsyncs, every stack walked: each kept wait's last request (the last to end on the
    filesystem's device before its wakeup) is, within 50 us x TIME_SCALE squared, the last
    completion a bpftrace oracle saw on that device before the wakeup. An fsync's log force ends
    when its iclog write (a PREFLUSH and FUA write) does, which queues xlog_ioend_work to wake the
    forcer: most log force waits of the slowest fsyncs name a write, ended just before."""
    from profiler.machine.blockdev import kdev_of_block, kdev_str

    oracle = bpftrace_start(COMPLETION_ORACLE, map_keys=65536)
    try:
        by_fs, _, stdout = fsprof_run(tmp_path, "xfs", "--fs", "xfs", "--count", "200", "--stack-sample", "1")
        unseen = bpftrace_skipped("block_rq_complete")
    finally:
        seen = bpftrace_output(oracle)
    ends: dict[str, list[int]] = {}
    for dev, t in re.findall(r"@end\[(\d+), (\d+)\]: 1", seen):
        ends.setdefault(kdev_str(int(dev)), []).append(int(t))
    near = 50_000 * TIME_SCALE**2
    checked = forces = named = 0
    for call in by_fs["xfs"]["exemplars"]["fsync"]:
        for w in call["waits"]:
            rq = w.get("last_request")
            if w["cause"] == "log force wait" and w["ns"] >= 500_000:
                forces += 1
                # A preflush write; a meta write where the kernel has no block_io_start (5.10,
                # 6.1): its class is read at issue, after the flush machinery took PREFLUSH and
                # FUA off the request.
                named += bool(rq) and rq["class"] in BLK_WRITE_CLASSES and rq["before_wake_ns"] <= 10 * near
            if not rq:
                continue
            wake = call["start_ns"] + w["at_ns"] + w["ns"]
            ours = wake - rq["before_wake_ns"]
            theirs = ends[kdev_str(kdev_of_block(rq["device"]))]
            # The oracle saw it end, and nothing end on that device between it and the wakeup.
            same = [t for t in theirs if abs(t - ours) <= near]
            later = [t for t in theirs if ours + near < t < wake - near]
            if not same or later:
                unseen -= 1  # a completion the oracle's program was not run for, or a failure
                assert unseen >= 0, (rq, w, ours, same, later)
            checked += 1
    assert checked >= 10, by_fs["xfs"]["exemplars"]["fsync"][:2]
    # 14 of 16 here: the forcer's own iclog write, 15-70 us before xlog_ioend_work woke it.
    waits = [
        (w["ns"], w["ended_by"], w.get("last_request"))
        for call in by_fs["xfs"]["exemplars"]["fsync"]
        for w in call["waits"]
        if w["cause"] == "log force wait"
    ]
    assert forces >= 5 and named >= forces // 2, (forces, named, waits)
    assert re.search(r"last request before the wakeup: its own \w+ write, ended", stdout), stdout[-2000:]
