#!/usr/bin/env python3
"""Benchmark: fsprof's untar workload against GNU `tar -xf` of the same plain tarball, on the same
scratch ext4, alternating A B A B (a fresh directory each time, deleted and synced between runs),
several repeats. Prints each run's extraction and sync times and the ratio ours/tar (median, min,
max over the pairs).

What is compared: our workload's own "extract" time (first header read to the deferred directory
times, in the engine) against the wall time of the whole `tar -xf` process; then, on both sides,
the same syncfs(2) of the filesystem, timed separately. Both run as root, so both restore owners,
modes and mtimes. The tarball is read once beforehand so both sides find it in the page cache.

The scratch filesystem is fsprof's (profiler.machine.scratch): undone on exit, error, Ctrl-C and SIGTERM,
and by any later `fsprof cleanup` if this is SIGKILLed.

    .venv/bin/python bench/bench_untar.py [--repeats 5] [--files N|FRACTION] [--synthetic]
"""

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import namedtuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from profiler.machine.scratch import FsConfig, provision  # noqa: E402
from profiler.machine.undo import Changes  # noqa: E402
from profiler.signals import install_handlers  # noqa: E402
from workloads import untar  # noqa: E402
from workloads.common import UsageError, WorkloadError  # noqa: E402

_libc = ctypes.CDLL(None, use_errno=True)
Run = namedtuple("Run", "extract cpu sync")  # seconds: extraction wall, its CPU (user+sys), syncfs


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5, help="pairs of runs (default 5)")
    ap.add_argument("--warmup", type=int, default=1, help="pairs run first and not counted (default 1)")
    ap.add_argument("--files", default="all", help="entries to extract, as the workload's --files")
    ap.add_argument("--synthetic", action="store_true", help="the synthetic tree instead of the kernel's")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cache-dir", default=untar.DEFAULT_CACHE_DIR)
    ap.add_argument("--image-size", type=int, default=4, help="scratch image in GiB (default 4)")
    ap.add_argument("--scratch-dir", default="/var/tmp/fsprof/bench-scratch")
    return ap.parse_args()


def prepare_tarball(args):
    """The same tarball and entry count the workload will use (decompressed or generated once)."""
    wl_args = workload_args(args)
    wl = untar.parser().parse_args(wl_args)
    untar.check(wl)
    tar_path, meta, entries, _ = untar.prepare_tree(wl)
    if entries != meta["entries"]:
        raise SystemExit(
            f"bench_untar: GNU tar extracts the whole of {tar_path}, which has more than "
            f"{entries:,} entries: --files works here only for a synthetic tree of exactly "
            f"N entries (when no full synthetic tree of that seed is cached)"
        )
    with open(tar_path, "rb") as f:  # into the page cache, for both sides alike
        while f.read(1 << 24):
            pass
    return tar_path, meta


def workload_args(args):
    return ["--files", args.files, "--cache-dir", args.cache_dir, "--seed", str(args.seed)] + (
        ["--synthetic"] if args.synthetic else []
    )


def syncfs_here():
    """syncfs(2) of the cwd's filesystem, as the workload's sync phase; returns seconds."""
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        start = time.perf_counter()
        if _libc.syncfs(fd) != 0:
            raise OSError(ctypes.get_errno(), "syncfs")
        return time.perf_counter() - start
    finally:
        os.close(fd)


def run_child(argv, cwd, env=None, check=True):
    """Runs argv to its end; returns (wall seconds, its rusage). The child has its own session so
    that Ctrl-C reaches only this script, which then kills it before undoing the mount."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, start_new_session=True)
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    proc.returncode = os.waitstatus_to_exitcode(status)
    if check and proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed with status {proc.returncode}")
    return time.perf_counter() - start, usage


def run_ours(workdir, args):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        argv = [sys.executable, "-m", "workloads.untar", "--result", out.name, *workload_args(args)]
        run_child(argv, workdir, env={**os.environ, "PYTHONPATH": REPO}, check=False)
        result = json.load(open(out.name)) if os.path.getsize(out.name) else {"error": "no result"}
    if "error" in result:
        raise SystemExit(f"untar workload failed: {result['error']}")
    return Run(result["extract_ns"] / 1e9, result["extract_cpu_ns"] / 1e9, result["sync_ns"] / 1e9)


def run_tar(workdir, tar_path):
    extract, usage = run_child(["tar", "-xf", tar_path], workdir)
    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        return Run(extract, usage.ru_utime + usage.ru_stime, syncfs_here())
    finally:
        os.chdir(cwd)


def fresh_dir(mountpoint, name):
    path = os.path.join(mountpoint, name)
    os.mkdir(path)
    return path


def remove_and_sync(path, mountpoint):
    """Delete a run's tree and commit the deletion, so the next run starts from the same state."""
    run_child(["rm", "-rf", path], mountpoint)
    run_child(["sync", "-f", mountpoint], mountpoint)


def spread(values):
    return f"median {statistics.median(values):.3f}  min {min(values):.3f}  max {max(values):.3f}"


def main():
    try:
        bench(parse_args())
    except KeyboardInterrupt:
        raise SystemExit("bench_untar: interrupted; the scratch filesystem is undone")
    except (UsageError, WorkloadError) as e:
        raise SystemExit(f"bench_untar: {e}")


def bench(args):
    install_handlers()
    tar_path, meta = prepare_tarball(args)
    with Changes() as changes:
        os.makedirs(args.scratch_dir, exist_ok=True)
        sfs = provision(
            changes,
            FsConfig("ext4", size_bytes=args.image_size << 30, label="bench-untar", loop_io="buffered"),
            scratch_dir=args.scratch_dir,
        )
        ours, theirs = [], []
        for i in range(args.warmup + args.repeats):
            d = fresh_dir(sfs.mountpoint, "ours")
            o = run_ours(d, args)
            remove_and_sync(d, sfs.mountpoint)
            d = fresh_dir(sfs.mountpoint, "tar")
            t = run_tar(d, tar_path)
            remove_and_sync(d, sfs.mountpoint)
            counted = i >= args.warmup
            if counted:
                ours.append(o)
                theirs.append(t)
            print(
                f"{'pair ' + str(i + 1 - args.warmup) if counted else 'warm-up':>8}: ours extract "
                f"{o.extract:.3f} s (CPU {o.cpu:.3f}) sync {o.sync:.3f} s | tar -xf {t.extract:.3f} s "
                f"(CPU {t.cpu:.3f}) sync {t.sync:.3f} s | ratio {o.extract / t.extract:.3f}",
                flush=True,
            )
        print(
            f"\n{os.path.basename(tar_path)}: {meta['entries']:,} entries, {meta['bytes'] / 1e6:,.0f} MB; "
            f"ext4 on a {args.image_size} GiB loop image; {args.repeats} pairs (ours first in each)"
        )
        for label, field in (("extract", "extract"), ("CPU", "cpu"), ("sync", "sync")):
            print(f"{label:<8} ours  {spread([getattr(r, field) for r in ours])} s")
            print(f"{label:<8} tar   {spread([getattr(r, field) for r in theirs])} s")
            print(
                f"{label:<8} ratio ours/tar  "
                f"{spread([getattr(o, field) / getattr(t, field) for o, t in zip(ours, theirs)])}"
            )


if __name__ == "__main__":
    main()
