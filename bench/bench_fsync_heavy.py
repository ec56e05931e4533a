"""fsync-heavy against `sysbench fileio`, same options, same scratch ext4, alternating A B A B.

For each mount option set (default: barrier=0, where the workload's own CPU cost matters most,
then ext4's defaults) and each --file-fsync-freq (default 1 and 100), it makes a fresh loop-backed
ext4, then per repeat runs our workload (standalone, untraced) and sysbench (prepare, run,
cleanup), each from freshly prepared files after a `sync -f`, and prints requests/s (events per
second of the run phase, as sysbench's "total number of events" / "total time") and the ratio
ours/sysbench, then the median ratio and its spread (min..max). It also prints each tool's user
CPU time per request (ours: the engine's getrusage over its run phase; sysbench: wait4 of its
`run` process): the workload's own cost, which the shared machine's load disturbs far less than
requests/s; the kernel's share is the same syscalls for both (tests/test_wl_fsync_heavy.py checks
the counts against sysbench's).

Everything it sets up (image, loop device, mount) is undone on exit, on error, on Ctrl-C and on
SIGTERM/SIGHUP. Run as root from the repository:  .venv/bin/python bench/bench_fsync_heavy.py
"""

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from profiler import filesystems  # noqa: E402


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--mounts",
        default="barrier=0;defaults",
        help="ext4 mount option sets, separated by ';' (default: 'barrier=0;defaults')",
    )
    ap.add_argument("--fsync-freqs", default="1,100", help="--file-fsync-freq values (default 1,100)")
    ap.add_argument("--mode", default="rndwr", help="--file-test-mode (default rndwr)")
    ap.add_argument("--file-num", type=int, default=128)
    ap.add_argument("--file-total-size", default="256M")
    ap.add_argument("--time", type=int, default=5, help="seconds per run (default 5)")
    ap.add_argument("--repeats", type=int, default=5, help="runs of each tool per configuration (default 5)")
    ap.add_argument("--extra", default="", help="more options for both tools, e.g. '--threads=2'")
    ap.add_argument("--image-size", default="1G")
    ap.add_argument("--scratch-dir", default="/var/tmp", help="where the image lives (default /var/tmp)")
    return ap.parse_args()


def sh(*argv, **kw):
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw)


class ScratchExt4:
    """image -> loop -> mkfs.ext4 -> mount; each step undone in reverse on exit, only if done."""

    def __init__(self, scratch_dir, image_size, mount_options):
        self.scratch_dir, self.image_size, self.options = scratch_dir, image_size, mount_options
        self.tmp = self.loop = self.mountpoint = None

    def __enter__(self):
        try:
            self.tmp = tempfile.mkdtemp(prefix="bench-fsync-heavy-", dir=self.scratch_dir)
            image = os.path.join(self.tmp, "ext4.img")
            sh("truncate", "-s", self.image_size, image)
            self.loop = sh("losetup", "--find", "--show", image).stdout.strip()
            # Inode tables and journal initialised now, not by ext4lazyinit during the runs.
            sh("mkfs.ext4", "-q", "-F", *filesystems.mkfs_defaults("ext4"), self.loop)
            mountpoint = os.path.join(self.tmp, "mnt")
            os.mkdir(mountpoint)
            opts = [] if self.options in ("", "defaults") else ["-o", self.options]
            sh("mount", *opts, self.loop, mountpoint)
            self.mountpoint = mountpoint
            return self
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def __exit__(self, *exc):
        if self.mountpoint:
            for _ in range(10):  # a just-killed child may still hold the mount for a moment
                if subprocess.run(["umount", self.mountpoint], capture_output=True).returncode == 0:
                    break
                time.sleep(0.5)
            self.mountpoint = None
        if self.loop:
            subprocess.run(["losetup", "-d", self.loop], capture_output=True)
            self.loop = None
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


def common_options(args, freq):
    return [
        f"--file-num={args.file_num}",
        f"--file-total-size={args.file_total_size}",
        f"--file-test-mode={args.mode}",
        f"--file-fsync-freq={freq}",
        f"--time={args.time}",
        *args.extra.split(),
    ]


def run_ours(scratch, options):
    """(requests/s, user CPU us per request) of the engine's run phase."""
    result = os.path.join(scratch.tmp, "result.json")
    sh("sync", "-f", scratch.mountpoint)
    sh(
        sys.executable,
        "-m",
        "workloads.fsync_heavy",
        "--result",
        result,
        *options,
        cwd=scratch.mountpoint,
        env={**os.environ, "PYTHONPATH": REPO},
    )
    with open(result) as f:
        run = json.load(f)["run"]
    return run["events"] / (run["elapsed_ns"] / 1e9), run["cpu_user_ns"] / 1e3 / run["events"]


def run_with_rusage(argv, cwd):
    """stdout and the user CPU seconds of a child, from wait4."""
    with subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        out, err = proc.stdout.read(), proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, argv, out, err)
    return out, usage.ru_utime


def run_sysbench(scratch, options):
    """(requests/s, user CPU us per request) of `sysbench fileio run` (its CPU includes its
    start-up and file opening, a few ms against seconds of run)."""
    base = ["sysbench", "fileio", *options]
    sh("sync", "-f", scratch.mountpoint)
    sh(*base, "prepare", cwd=scratch.mountpoint)
    sh("sync", "-f", scratch.mountpoint)
    try:
        out, cpu_s = run_with_rusage([*base, "run"], scratch.mountpoint)
    finally:
        sh(*base, "cleanup", cwd=scratch.mountpoint)
    events = int(re.search(r"total number of events:\s+(\d+)", out).group(1))
    secs = float(re.search(r"total time:\s+([\d.]+)s", out).group(1))
    return events / secs, cpu_s * 1e6 / events


def bench_config(args, mount_options, freq):
    options = common_options(args, freq)
    label = f"ext4 {mount_options}, {' '.join(options)}"
    print(
        f"\n{label}\n  {'repeat':>6} {'fsync-heavy req/s':>18} {'sysbench req/s':>15} {'ratio':>7}"
        f" {'user us/req ours':>17} {'sysbench':>9} {'ratio':>7}",
        flush=True,
    )
    ratios, cpu_ratios = [], []
    with ScratchExt4(args.scratch_dir, args.image_size, mount_options) as scratch:
        for i in range(args.repeats):
            ours, ours_cpu = run_ours(scratch, options)
            theirs, theirs_cpu = run_sysbench(scratch, options)
            ratios.append(ours / theirs)
            cpu_ratios.append(ours_cpu / theirs_cpu)
            print(
                f"  {i + 1:>6} {ours:>18.0f} {theirs:>15.0f} {ours / theirs:>7.3f}"
                f" {ours_cpu:>17.3f} {theirs_cpu:>9.3f} {ours_cpu / theirs_cpu:>7.3f}",
                flush=True,
            )
    summary = (
        f"req/s ratio median {statistics.median(ratios):.3f} (spread {min(ratios):.3f}..{max(ratios):.3f}); "
        f"user CPU per request ratio median {statistics.median(cpu_ratios):.3f} "
        f"(spread {min(cpu_ratios):.3f}..{max(cpu_ratios):.3f}); {len(ratios)} pairs"
    )
    print(f"  {summary}", flush=True)
    return label, summary


def raise_on_signal(signum, _frame):
    raise SystemExit(128 + signum)  # unwinds through ScratchExt4.__exit__


def main():
    args = parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_fsync_heavy: needs root (loop devices and mounts)")
    # Ctrl-C raises KeyboardInterrupt even when started in the background (where SIGINT is ignored).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, raise_on_signal)
    signal.signal(signal.SIGHUP, raise_on_signal)
    print(f"load average at start: {open('/proc/loadavg').read().split()[:3]}", flush=True)
    summaries = []
    try:
        for mount_options in args.mounts.split(";"):
            for freq in (int(f) for f in args.fsync_freqs.split(",")):
                summaries.append(bench_config(args, mount_options.strip(), freq))
    except subprocess.CalledProcessError as e:
        sys.exit(f"bench_fsync_heavy: {' '.join(e.cmd)} failed: {(e.stderr or '').strip()}")
    except OSError as e:
        sys.exit(f"bench_fsync_heavy: {e}")
    except KeyboardInterrupt:
        sys.exit("bench_fsync_heavy: interrupted; scratch filesystem removed")
    print("\nSummary (ours / sysbench):")
    for label, summary in summaries:
        print(f"  {label}: {summary}")
    print(f"load average at end: {open('/proc/loadavg').read().split()[:3]}")


if __name__ == "__main__":
    main()
