#!/usr/bin/env python3
"""Experiment: how the scratch image's size shapes the bundled workloads (issue 35). Each bundled
workload runs under `fsprof run` on ext4, XFS and btrfs at several image sizes, the sizes
interleaved over rounds. Per (workload, filesystem, size): the workload's time, the share of its
traced time spent waiting for space (btrfs "space reservation", XFS "log space reservation"),
btrfs's reservation tickets, XFS's log space waits, and how full the filesystem was at the end.
docs/test-bed.md quotes it and says why the default image is the size it is.

    .venv/bin/python bench/bench_image_size.py [--rounds 1] [--sizes 1G,2G,4G,16G] [--workloads untar,bonnie]
    BENCH_QUICK=1 ...   # smaller workloads, two sizes: checks the script, not for quoting
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from common import PY, QUICK, REPO, interleaved, spread  # noqa: E402

SPACE_CAUSES = ("space reservation", "log space reservation")
WORKLOADS = {
    # The case users brought: 20,000 small files created (a synthetic tree, untar's engine).
    "untar": ["--workload", "untar", "--synthetic", "--files", "5000" if QUICK else "20000"],
    "bonnie": ["--workload", "bonnie", "--size", "128M" if QUICK else "512M"],
    "fsync-heavy": ["--workload", "fsync-heavy", "--file-total-size", "256M", "--time", "2" if QUICK else "10"],
    "fsync-loop": ["--workload", "fsync-loop", "--count", "200" if QUICK else "2000"],
}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--sizes", default="1G,16G" if QUICK else "1G,2G,4G,16G")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    return ap.parse_args()


def figures(fs):
    """What one filesystem's run says about space: its time, its waits for it, their counts."""
    traced = sum(b["wall_ns"] for b in fs["attribution"].values()) or 1
    space_ns = sum(ns for b in fs["attribution"].values() for c, ns in b["causes"].items() if c in SPACE_CAUSES)
    behind = fs.get("behind", {})
    btrfs = behind.get("btrfs", {}).get("all", {}).get("reservations", {})
    xfs = behind.get("xfs", {}).get("all", {}).get("log_space", {})
    space = fs.get("space") or {}
    return {
        "elapsed_s": fs["elapsed_s"],
        "space_share": space_ns / traced,
        "tickets": btrfs.get("tickets", 0),
        "log_space_waits": xfs.get("sleeps", 0),
        "full_at_end": space["used_bytes_end"] / space["size_bytes"] if space.get("size_bytes") else None,
    }


def fsprof_run(tmp, name, workload, size):
    out = tmp / name
    argv = [PY, "-m", "profiler", "run", "--fs", "ext4,xfs,btrfs", "--image-size", size, "-o", str(out)]
    argv += ["--scratch-dir", common.SCRATCH_DIR, *WORKLOADS[workload]]
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:  # e.g. out of space on the smallest image: a figure too
        return {"failed": proc.stderr.strip().splitlines()[-1][:200], "wall_s": time.monotonic() - started}
    result = json.loads((out / "result.json").read_text())
    return {fs["fs"]: figures(fs) for fs in result["filesystems"]}


def render(runs, sizes):
    lines = [
        "| workload | fs | image | workload time (s) | space waits (% of traced time) | btrfs tickets "
        "| XFS log space waits | full at end |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for workload, by_size in runs.items():
        for fs in ("ext4", "xfs", "btrfs"):
            for size in sizes:
                results = by_size[size]
                failed = [r["failed"] for r in results if "failed" in r]
                if failed:
                    lines.append(f"| {workload} | {fs} | {size} | failed: {failed[0]} | | | | |")
                    continue
                rows = [r[fs] for r in results if fs in r]
                med = {k: (spread([row[k] for row in rows]) or {"median": 0})["median"] for k in rows[0]}
                lines.append(
                    f"| {workload} | {fs} | {size} | {med['elapsed_s']:.2f} | {100 * med['space_share']:.1f} "
                    f"| {med['tickets']:,.0f} | {med['log_space_waits']:,.0f} | {100 * med['full_at_end']:.0f}% |"
                )
    return "\n".join(lines)


def main():
    args = parse_args()
    sizes = args.sizes.split(",")
    runs = {}
    with tempfile.TemporaryDirectory(prefix="fsprof-bench-size-") as tmp:
        for workload in args.workloads.split(","):
            counter = iter(range(1 << 30))  # each run its own directory
            variants = [
                (size, lambda s=size, w=workload: fsprof_run(Path(tmp), f"{w}-{s}-{next(counter)}", w, s))
                for size in sizes
            ]
            runs[workload] = interleaved(variants, args.rounds)
    table = render(runs, sizes)
    print(table)
    common.save("image_size", {"machine": common.machine(), "sizes": sizes, "runs": runs, "table": table})


if __name__ == "__main__":
    main()
