"""End to end: fsprof run on real loop-backed ext4, XFS and btrfs, checked against independent
oracles: the workload's own counts, /sys/block/<dev>/stat, and a bpftrace one-liner."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import loops_under, mounts_under, run_fsprof, bpftrace_output, bpftrace_start
from profiler import behind
from profiler.machine import scratch, undo
from profiler.session.collect import Collector
from profiler.session.run import measure
from profiler.machine.workload import GatedProcess, WorkloadSpec, workload_argv

pytestmark = pytest.mark.root

COUNT = 300


def run_json(tmp_path, *args):
    out = tmp_path / "run"
    # A relative -o, as `make run` uses: the workload runs elsewhere and must still find it.
    proc = run_fsprof(
        "run", "--count", str(COUNT), "--scratch-dir", str(tmp_path / "scratch"), "-o", "run", *args, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert not mounts_under(tmp_path) and not loops_under(tmp_path)
    return json.loads((out / "result.json").read_text())


def flushes(fs):
    return sum(dev["flush"]["count"] for dev in fs["block"].values())


def kernel_flushes(fs):
    return sum(dev["flush_ios"] for dev in fs["kernel_counters"].values())


@pytest.mark.slow
def test_fsync_loop_on_ext4_xfs_btrfs_matches_the_oracles(tmp_path):
    result = run_json(tmp_path, "--fs", "ext4,xfs,btrfs")
    assert [fs["fs"] for fs in result["filesystems"]] == ["ext4", "xfs", "btrfs"]
    for fs in result["filesystems"]:
        own, ops = fs["workload"], fs["syscalls"]
        # Exactly the workload's own counts: nothing lost, nothing from other filesystems mixed in.
        assert ops["fsync"]["count"] == own["fsyncs"] == COUNT, fs["label"]
        assert ops["write"]["count"] == own["writes"] == COUNT, fs["label"]
        for h in (ops["fsync"], ops["write"]):
            assert sum(h["log2_ns"]) == h["count"]
        # fsync time seen at the syscall boundary cannot exceed what the workload timed around it.
        assert ops["fsync"]["total_ns"] <= own["fsync_ns_total"]
        assert ops["fsync"]["total_ns"] >= 0.9 * own["fsync_ns_total"]
        # Barriers are on by default and loop devices have a volatile cache: at least one flush per fsync.
        assert flushes(fs) >= COUNT, fs["label"]
        assert abs(flushes(fs) - kernel_flushes(fs)) <= 0.01 * kernel_flushes(fs), fs["label"]
    report = run_fsprof("report", str(tmp_path / "run"))
    assert report.returncode == 0 and "fsync latency" in report.stdout


@pytest.mark.slow
@pytest.mark.parametrize("barrier, expect_flushes", [("barrier=0", False), ("barrier=1", True)])
def test_ext4_barrier_option_decides_the_flushes(tmp_path, barrier, expect_flushes):
    fs = run_json(tmp_path, "--fs", "ext4", "--mount-options", barrier)["filesystems"][0]
    assert fs["mount_options"] == barrier
    assert fs["syscalls"]["fsync"]["count"] == COUNT
    if expect_flushes:
        assert flushes(fs) >= COUNT
    else:
        assert flushes(fs) == 0
    assert abs(flushes(fs) - kernel_flushes(fs)) <= 0.01 * max(kernel_flushes(fs), 1)


def start_bpftrace(kdev):
    script = (
        f'BEGIN {{ printf("ready\\n"); }} tracepoint:block:block_rq_issue '
        f"/args->dev == {kdev}/ {{ @[args->rwbs] = count(); }}"
    )
    return bpftrace_start(script)


def stop_bpftrace(proc):
    out = bpftrace_output(proc)
    # Lines like "@[FF]: 600": a flush request is REQ_PREFLUSH + REQ_OP_FLUSH, rwbs "FF..."
    return sum(int(line.rpartition(" ")[2]) for line in out.splitlines() if line.startswith("@[FF"))


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bpftrace") is None, reason="bpftrace (the oracle) is not installed")
def test_bpftrace_counts_the_same_flushes(tmp_path):
    with undo.Changes() as changes, Collector(stack_sample=1) as collector:  # every stack walked: counts told by stacks
        sfs = scratch.provision(changes, scratch.FsConfig("ext4"), tmp_path / "scratch")
        subprocess.run(["sync", "-f", sfs.mountpoint], check=True)
        oracle = start_bpftrace(sfs.block_devs[0][1])
        try:
            fs = measure(
                collector, sfs, WorkloadSpec("fsync-loop", ["--count", str(COUNT)]), tmp_path / "out", drop_caches=False
            )
        finally:
            theirs = stop_bpftrace(oracle)
    ours = flushes(fs)
    assert ours >= COUNT
    # bpftrace watched a little longer (fsprof's own pre-run syncfs): allow 1%.
    assert abs(theirs - ours) <= 0.01 * ours, (theirs, ours)


def test_children_of_the_workload_are_followed(tmp_path):
    """The traced process is a shell; the fsyncs happen in its child."""
    with undo.Changes() as changes, Collector(stack_sample=1) as collector:  # every stack walked: counts told by stacks
        sfs = scratch.provision(changes, scratch.FsConfig("ext4"), tmp_path / "scratch")
        collector.set_targets([behind.Target("ext4", sfs.dev, {kdev: name for name, kdev in sfs.block_devs})])
        collector.reset()
        inner = workload_argv("fsync-loop", ["--count", "50"], str(tmp_path / "w.json"))
        proc = GatedProcess(["/bin/sh", "-c", " ".join(inner) + "; true"], cwd=sfs.mountpoint)
        collector.trace_pid(proc.pid)
        proc.release()
        assert proc.wait() == 0
        ops = [r for r in collector.snapshot()["ops"] if r["dev"] == sfs.dev]
    assert sum(r["count"] for r in ops if r["op"] == "fsync") == 50


def scratch_state(tmp_path):
    return mounts_under(tmp_path), loops_under(tmp_path)


SYSCTL = Path("/proc/sys/vm/dirty_expire_centisecs")  # harmless to change for a few seconds


def start_long_run(tmp_path, changed_sysctl):
    """An ext4 fsync-loop run that sets a sysctl, returned once it is well into its workload."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "profiler",
            "run",
            "--fs",
            "ext4",
            "--count",
            "10000000",
            "--sysctl",
            f"vm.dirty_expire_centisecs={changed_sysctl}",
            "--scratch-dir",
            str(tmp_path / "scratch"),
            "-o",
            str(tmp_path / "run"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not mounts_under(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    return proc


@pytest.mark.slow
@pytest.mark.parametrize("next_command", ["cleanup", "doctor"])
def test_sigkill_mid_workload_then_next_invocation_cleans_up(tmp_path, next_command):
    original = SYSCTL.read_text().strip()
    changed = str(int(original) + 17)
    proc = start_long_run(tmp_path, changed)
    proc.kill()
    proc.wait()
    mounts, loops = scratch_state(tmp_path)
    assert mounts and loops and SYSCTL.read_text().strip() == changed, (
        f"the kill left nothing to clean; the run said: {proc.stderr.read()[-2000:]}"
    )

    after = run_fsprof(next_command)
    assert after.returncode == 0, after.stderr
    assert "cleaned up after a dead run" in after.stderr
    assert scratch_state(tmp_path) == ([], [])
    assert SYSCTL.read_text().strip() == original
    leftover = subprocess.run(["pgrep", "-f", "workloads.fsync_loop"], capture_output=True, text=True).stdout
    assert not leftover.strip()


@pytest.mark.slow
@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupted_run_undoes_everything(tmp_path, sig, status):
    original = SYSCTL.read_text().strip()
    proc = start_long_run(tmp_path, int(original) + 17)
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()  # a failed test leaves no run going; the next fsprof cleans up after it
        proc.communicate()
        raise
    assert proc.returncode == status, err
    assert "Traceback" not in err
    assert scratch_state(tmp_path) == ([], [])
    assert SYSCTL.read_text().strip() == original
    assert not any((tmp_path / "scratch").iterdir())


@pytest.mark.slow
def test_named_device_serves_several_filesystems(tmp_path, loopdev):
    """A device the user names (blank here) is checked once, then reused for each filesystem."""
    proc = run_fsprof(
        "run",
        "--fs",
        "ext4,xfs",
        "--count",
        "50",
        "--device",
        loopdev,
        "--erase-device",
        "--scratch-dir",
        str(tmp_path / "scratch"),
        "-o",
        str(tmp_path / "run"),
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert [fs["fs"] for fs in result["filesystems"]] == ["ext4", "xfs"]
    for fs in result["filesystems"]:
        assert fs["device"]["name"] == os.path.basename(loopdev)
        assert fs["syscalls"]["fsync"]["count"] == 50
    assert not mounts_under(tmp_path)


@pytest.mark.slow
def test_users_own_command_runs_on_the_filesystem_with_mnt_replaced(tmp_path):
    out = tmp_path / "run"
    proc = run_fsprof(
        "run",
        "--fs",
        "ext4",
        "--scratch-dir",
        str(tmp_path / "scratch"),
        "-o",
        str(out),
        "--",
        "dd",
        "if=/dev/zero",
        "of={mnt}/fsprof-work/by-abs-path",
        "bs=4k",
        "count=37",
        "conv=fsync",
        "status=none",
    )
    assert proc.returncode == 0, proc.stderr
    fs = json.loads((out / "result.json").read_text())["filesystems"][0]
    assert fs["workload"]["command"][0] == "dd"
    # The absolute path's open is placed by the fd it returned; the fd's writes and fsync follow.
    assert fs["syscalls"]["write"]["count"] == 37 and fs["syscalls"]["fsync"]["count"] == 1
    assert list(fs["phases"]) == ["run"]
