#!/usr/bin/env python3
"""fio's own figures and fsprof's, side by side (docs/io_uring.md, issue 35's "How we will know"):
for ext4, XFS and btrfs, `fsprof run --fs FS -- fio` with 4 KiB direct random writes of 16 MiB,
once with the psync engine and once with io_uring at queue depth 16. Prints per run fio's
completed writes and clat p50/p99, fsprof's count and p50/p99 (pwrite64, or the io_uring write
requests), the share of off-CPU time no rule explained and the requests lost in flight. Not part
of `make bench` (a check of figures, not of cost); about 2 minutes on the host.

    .venv/bin/python bench/fio_side_by_side.py [DIR]
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ENGINES = (("psync", []), ("io_uring", ["--iodepth=16"]))


def fio_percentile_us(job, p):
    return job["write"]["clat_ns"]["percentile"][f"{p:.6f}"] / 1e3


def one(root, fs, engine, extra):
    out, fio_json = root / f"{fs}-{engine}", root / f"{fs}-{engine}.json"
    fio = ["fio", "--name=j", f"--ioengine={engine}", *extra, "--direct=1", "--rw=randwrite", "--bs=4k"]
    fio += ["--size=16M", "--filename=data", "--output-format=json", f"--output={fio_json}"]
    cmd = [sys.executable, "-m", "profiler", "run", "--scratch-dir", str(root / "scratch"), "-o", str(out)]
    proc = subprocess.run([*cmd, "--fs", fs, "--", *fio], capture_output=True, text=True, cwd=REPO)
    if proc.returncode:
        return f"{fs} {engine}: fsprof failed: {proc.stderr.strip()[-300:]}"
    job = json.loads(fio_json.read_text())["jobs"][0]
    (entry,) = json.loads((out / "result.json").read_text())["filesystems"]
    if engine == "psync":
        h, off = entry["syscalls"]["pwrite64"], entry["attribution"]["pwrite64"]
    else:
        h, off = entry["io_uring"]["io_uring write"], entry.get("io_uring_io_wq", {}).get("io_uring write", {})
    unexplained = (
        f"{100 * off['causes'].get('other wait', 0) / off['offcpu_ns']:.1f}% of off-CPU unexplained"
        if off.get("offcpu_ns")
        else "no off-CPU time"
    )
    return (
        f"{fs} {engine}: fio {job['write']['total_ios']} writes, clat p50 {fio_percentile_us(job, 50):.0f} us, "
        f"p99 {fio_percentile_us(job, 99):.0f} us | fsprof {h['count']}, p50 {h['p50_ns'] / 1e3:.0f} us, "
        f"p99 {h['p99_ns'] / 1e3:.0f} us; {unexplained}; lost in flight {entry['drops'].get('uring_reqs_lost', 0)}"
    )


def main():
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="fsprof-fio-"))
    root.mkdir(parents=True, exist_ok=True)
    for fs in ("ext4", "xfs", "btrfs"):
        for engine, extra in ENGINES:
            print(one(root, fs, engine, extra), flush=True)


if __name__ == "__main__":
    main()
