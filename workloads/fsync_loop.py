"""fsync-loop: append a block, fsync, repeat. The smallest workload that makes a filesystem commit
its journal/log and flush the device cache on every iteration.

Writes its own counts and timings as JSON to --result, which fsprof compares with what it traced
(the workload's own count is the oracle for fsprof's).
"""

import os
import time

from .common import Phases, UsageError, WorkloadParser, run_main, write_result

NAME = "fsync-loop"
PHASES = ["run"]
UNIT = "fsync"  # compare's unit of work: counts per fsync (the result's "fsyncs")


def parser():
    ap = WorkloadParser(prog=NAME)
    ap.add_argument("--count", type=int, default=1000, help="write+fsync iterations (default 1000)")
    ap.add_argument("--size", type=int, default=4096, help="bytes per write (default 4096)")
    ap.add_argument("--file", default="fsync-loop.dat", help="file to append to, relative to the cwd")
    return ap


def check(args):
    if args.count <= 0:
        raise UsageError(f"{NAME}: --count must be a positive number of iterations, not {args.count}")
    if args.size <= 0:
        raise UsageError(f"{NAME}: --size must be a positive number of bytes, not {args.size}")


def main(args):
    block = b"\xa5" * args.size
    write_ns = fsync_ns = 0
    phases = Phases(PHASES)
    fd = os.open(args.file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    phases.enter("run")
    start = time.perf_counter_ns()
    for _ in range(args.count):
        t0 = time.perf_counter_ns()
        if os.write(fd, block) != args.size:
            raise OSError(28, "short write")
        t1 = time.perf_counter_ns()
        os.fsync(fd)
        t2 = time.perf_counter_ns()
        write_ns += t1 - t0
        fsync_ns += t2 - t1
    elapsed_ns = time.perf_counter_ns() - start
    phases.end()
    os.close(fd)
    write_result(
        args.result,
        {
            "workload": NAME,
            "params": {"count": args.count, "size": args.size},
            "phases": PHASES,
            "writes": args.count,
            "fsyncs": args.count,
            "bytes_written": args.count * args.size,
            "write_ns_total": write_ns,
            "fsync_ns_total": fsync_ns,
            "elapsed_ns": elapsed_ns,
        },
    )


def render(result):
    n = result["fsyncs"]
    return (
        f"fsync-loop: {n} x (write {result['bytes_written'] // max(n, 1)} B + fsync) in "
        f"{result['elapsed_ns'] / 1e9:.2f} s: {n / (result['elapsed_ns'] / 1e9):.0f} fsyncs/s, "
        f"fsync avg {result['fsync_ns_total'] / max(n, 1) / 1e3:.0f} us"
    )


if __name__ == "__main__":
    raise SystemExit(run_main(__import__(__name__)))
