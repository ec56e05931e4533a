"""Evidence in its scope, and work done elsewhere. A script writes and fsyncs 64 MiB and eight
small files, then deletes the big one: `compare --op unlinkat` may show the unlink's own figures
per unlink and the run's as run-wide, never the writes' requests or journal commits divided by one
unlink. The per-op request counts are checked against a bpftrace oracle that counts the same block
requests between the syscalls' own enter and exit tracepoints. The big file's blocks are freed
where each filesystem frees them: inside the unlink on ext4 (extent removal, timed between its
tracepoints and checked against the oracle's count of them), in the inodegc worker on XFS after
the unlink returned (its runs checked against the oracle's count of xfs_inodegc_worker)."""

import json
import re
import shutil

import pytest

from conftest import bpftrace_output, bpftrace_start, check_adds_up, kernel_has, run_fsprof

pytestmark = [pytest.mark.slow, pytest.mark.root]
SMALL = 8
# The oracle knows the workload's dd and rm by their command names: copies of them under names no
# other process on the machine has, so that a `dd` or `rm` elsewhere (the machine's root filesystem
# is often ext4 too) is never counted as the workload's. Under load it was: an oracle that races.
DD, RM = "scoped-dd", "scoped-rm"
SCRIPT = (
    f"fsprof phase write; {{bin}}/{DD} if=/dev/urandom of=big bs=1M count=64 conv=fsync status=none; "
    f"for i in $(seq {SMALL}); do {{bin}}/{DD} if=/dev/zero of=f$i bs=4k count=16 conv=fsync status=none; "
    f"done; fsprof phase delete; {{bin}}/{RM} big; sleep 1"
)  # XFS's inodegc runs a moment after the unlink

# Requests made (block_getrq) by dd inside fsync and by rm inside unlinkat, and by jbd2 threads.
ORACLE = f"""
BEGIN {{ printf("ready\\n"); }}
tracepoint:syscalls:sys_enter_fsync /comm == "{DD}"/ {{ @in[tid] = 1; }}
tracepoint:syscalls:sys_exit_fsync /comm == "{DD}"/ {{ delete(@in[tid]); }}
tracepoint:syscalls:sys_enter_unlinkat /comm == "{RM}"/ {{ @in[tid] = 2; }}
tracepoint:syscalls:sys_exit_unlinkat /comm == "{RM}"/ {{ delete(@in[tid]); }}
tracepoint:block:block_getrq /@in[tid] == 1/ {{ @fsync = count(); }}
tracepoint:block:block_getrq /@in[tid] == 2/ {{ @unlink = count(); }}
tracepoint:ext4:ext4_ext_remove_space_done /@in[tid] == 2/ {{ @extent_removals = count(); }}
tracepoint:xfs:xfs_inodegc_worker /args->dev >> 20 == 7/ {{ @inodegc_runs = count(); }}
END {{ clear(@in); }}
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One run of SCRIPT on ext4 and XFS with the oracle watching: (run dir, {fs: entry}, oracle counts)."""
    if not kernel_has("block_getrq", "block"):
        pytest.skip("this kernel has no block_getrq tracepoint")
    tmp = tmp_path_factory.mktemp("scoped")
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for name, tool in ((DD, "dd"), (RM, "rm")):
        shutil.copy2(shutil.which(tool), bin_dir / name)
    oracle = bpftrace_start(ORACLE)
    try:
        proc = run_fsprof(
            "run",
            "--fs",
            "ext4,xfs",
            "--scratch-dir",
            str(tmp / "scratch"),
            "-o",
            str(tmp / "run"),
            "--",
            "sh",
            "-c",
            SCRIPT.format(bin=bin_dir),
        )
    finally:
        out = bpftrace_output(oracle)
    assert proc.returncode == 0, proc.stderr
    counts = {m: int(n) for m, n in re.findall(r"^@(\w+): (\d+)$", out, re.M)}
    result = json.loads((tmp / "run" / "result.json").read_text())
    return tmp / "run", {f["fs"]: f for f in result["filesystems"]}, counts


def made(entry, op):
    return sum(v["count"] for v in entry["attribution"][op].get("requests", {}).values())


def test_requests_made_in_an_ops_calls_match_the_oracle(runs):
    _, fss, oracle = runs
    assert sum(made(f, "fsync") for f in fss.values()) == oracle.get("fsync", 0) > 0
    assert sum(made(f, "unlinkat") for f in fss.values()) == oracle.get("unlink", 0)
    for fs in fss.values():
        assert fs["attribution"]["fsync"]["count"] == SMALL + 1
        # The fsyncs wrote the 64 MiB themselves (the data of a file being fsynced goes out in its
        # own thread): their sync writes carry every byte the device was sent as sync writes.
        own = fs["attribution"]["fsync"]["requests"]
        device = fs["block"][fs["device"]["name"]]
        assert own["sync_write"]["bytes"] == device["sync_write"]["bytes"] >= 64 << 20


def test_a_jbd2_commits_requests_are_its_own(runs):
    """Each ext4 fsync waits for one jbd2 commit; the commit thread writes the journal blocks and
    the commit block (PREFLUSH + FUA) in its window: one commit block per commit, none of them
    counted as the fsyncs' own requests."""
    _, fss, _ = runs
    ext4 = fss["ext4"]
    jbd2 = ext4["behind"]["workers"]["jbd2 commit"]["all"]
    commits = ext4["behind"]["ext4"]["journal"]["all"]["commits"]
    assert jbd2["windows"] == commits > 0
    assert jbd2["requests"]["preflush_write"]["count"] == commits
    assert "preflush_write" not in ext4["attribution"]["fsync"]["requests"]
    assert ext4["attribution"]["fsync"]["waits"]["journal commit wait"] >= SMALL + 1


def test_unlink_evidence_holds_only_its_own_figures(runs):
    run_dir, _, _ = runs
    proc = run_fsprof("compare", str(run_dir), "--op", "unlinkat", "--json")
    assert proc.returncode == 0, proc.stderr
    (cmp,) = json.loads(proc.stdout)
    check_adds_up(cmp)
    ev = cmp["evidence"]
    per_op = {k: v for k, v in ev.items() if "per unlinkat" in k}
    # Per unlink: only what the unlink's own calls did (its requests, its waits, its log forces).
    assert per_op and all(re.search(r"made in its calls|times blocked in", k) for k in per_op), per_op
    assert per_op["sync write requests made in its calls, per unlinkat"] == [0, 0]
    # The writes' requests and the commits are there, as run-wide rates.
    # The fsyncs own the device's requests, not the unlink: they stay a rate, saying so.
    assert ev["sync write requests to the device per second (run-wide; no one call owns them)"][0] > 0
    assert ev["jbd2 commits per second (run-wide)"][0] > 0
    text = run_fsprof("compare", str(run_dir), "--op", "unlinkat").stdout
    assert "per unlinkat" in text and "jbd2 commits per unlinkat" not in text, text


def test_ext4_frees_the_blocks_inside_the_unlink(runs):
    _, fss, oracle = runs
    ext4 = fss["ext4"]
    removals = ext4["behind"]["ext4"]["block_freeing"]["all"]["extent_removal"]["unlinkat"]
    assert removals["on_cpu"]["count"] + removals["switched"]["count"] == oracle["extent_removals"] >= 1
    assert ext4["behind"]["ext4"]["block_freeing"]["all"]["blocks_freed"]["unlinkat"] >= (64 << 20) // 4096
    unlink = ext4["attribution"]["unlinkat"]
    assert unlink["causes"].get("block freeing", 0) > 0, unlink
    assert abs(unlink["sum_error"]) < 0.01


def test_xfs_frees_the_blocks_in_inodegc_after_the_unlink(runs):
    run_dir, fss, oracle = runs
    xfs = fss["xfs"]
    gc = xfs["behind"]["xfs"]["all"]["inodegc"]
    assert gc["queued"]["by_context"].get("unlinkat") == 1
    assert gc["worker"]["windows"] == oracle.get("inodegc_runs") >= 1
    assert gc["worker"]["oncpu_ns"] > 0
    assert "block freeing" not in xfs["attribution"]["unlinkat"]["causes"]
    # compare ranks it beside the unlink's own causes, linked by the inode the unlink queued.
    proc = run_fsprof("compare", str(run_dir), "--op", "unlinkat", "--json")
    (cmp,) = json.loads(proc.stdout)
    (gc_row,) = [r for r in cmp["elsewhere"] if r["kind"] == "xfs inodegc"]
    assert gc_row["us_per_op"][0] == 0 and gc_row["us_per_op"][1] == pytest.approx(gc["worker"]["wall_ns"] / 1e3)
    assert "inodes" in gc_row["link"]
    assert "Work done elsewhere for this op" in run_fsprof("compare", str(run_dir), "--op", "unlinkat").stdout


def test_kernel_threads_cpu_covers_their_windows(runs):
    """The filesystems' own threads over the run (/proc/PID/schedstat) against the worker windows
    timed in BPF: jbd2's thread ran at least its commit windows' on-CPU time; XFS's AIL pusher is
    found by its device's name."""
    _, fss, _ = runs
    ext4, xfs = fss["ext4"], fss["xfs"]
    (jbd2,) = [t for name, t in ext4["kernel_threads"].items() if name.startswith("jbd2/")]
    windows = ext4["behind"]["workers"]["jbd2 commit"]["all"]
    assert jbd2["cpu_ns"] >= 0.95 * windows["oncpu_ns"] > 0, (jbd2, windows)
    assert [name for name in xfs["kernel_threads"]] == [f"xfsaild/{xfs['device']['name']}"]
