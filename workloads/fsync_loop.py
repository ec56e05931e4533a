"""fsync-loop: append a block, fsync, repeat. The smallest workload that makes a filesystem commit
its journal/log and flush the device cache on every iteration.

Prints nothing; writes its own counts and timings as JSON to --result, which fsprof compares with
what it traced (the workload's own count is the oracle for fsprof's).
"""

import argparse
import json
import os
import time


def main(argv=None):
    ap = argparse.ArgumentParser(prog="fsync-loop")
    ap.add_argument("--count", type=int, default=1000, help="write+fsync iterations")
    ap.add_argument("--size", type=int, default=4096, help="bytes per write")
    ap.add_argument("--file", default="fsync-loop.dat", help="file to append to, relative to the cwd")
    ap.add_argument("--result", required=True, help="where to write the JSON result")
    args = ap.parse_args(argv)

    block = b"\xa5" * args.size
    write_ns = fsync_ns = 0
    fd = os.open(args.file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    start = time.perf_counter_ns()
    for _ in range(args.count):
        t0 = time.perf_counter_ns()
        if os.write(fd, block) != args.size:
            raise SystemExit("short write")
        t1 = time.perf_counter_ns()
        os.fsync(fd)
        t2 = time.perf_counter_ns()
        write_ns += t1 - t0
        fsync_ns += t2 - t1
    elapsed_ns = time.perf_counter_ns() - start
    os.close(fd)
    result = {"writes": args.count, "fsyncs": args.count, "bytes_written": args.count * args.size,
              "write_ns_total": write_ns, "fsync_ns_total": fsync_ns, "elapsed_ns": elapsed_ns}
    with open(args.result, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    try:
        main()
    except OSError as e:  # e.g. ENOSPC on a small image: one line, and fsprof reports the status
        raise SystemExit(f"fsync-loop: {e.strerror}")
