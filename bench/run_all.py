#!/usr/bin/env python3
"""`make bench`: every benchmark, one after another, each in its own process (one failing does not
stop the others), its output kept in build/bench/<name>.txt; then docs/benchmarks.md is written
from their results (bench/write_doc.py).

Environment (make passes these through): BENCH_QUICK=1 few short repeats, to check the scripts;
BENCH_LONG=1 the capacity bench's 10-minute run; BENCH_WORKLOADS=0 skips the benches of the
bundled workloads against their reference tools (sysbench, bonnie++, GNU tar, inferno).
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import PY, QUICK, REPO, RESULTS  # noqa: E402
import write_doc  # noqa: E402

# fsprof's own cost, then the workloads against their reference tools (shortened from their own
# defaults so that the whole of `make bench` stays near 35 minutes; their docs/workload-*.md
# give the longer runs).
OWN = [
    ("overhead", ["bench/bench_overhead.py"]),
    ("startup", ["bench/bench_startup.py"]),
    ("pgbench", ["bench/bench_pgbench.py"]),
    ("sampling", ["bench/bench_sampling.py"]),
    ("capacity", ["bench/bench_capacity.py"]),
    ("report", ["bench/bench_report.py"]),
    ("soak", ["bench/bench_soak.py"]),
]
WORKLOADS_FULL = [
    ("fsync_heavy", ["bench/bench_fsync_heavy.py", "--repeats", "3"]),
    ("bonnie", ["bench/bench_bonnie.py", "--repeats", "3"]),
    ("untar", ["bench/bench_untar.py", "--repeats", "3"]),
    ("flamegraph", ["bench/bench_flamegraph.py", "--repeats", "5"]),
]
WORKLOADS_QUICK = [
    (
        "fsync_heavy",
        ["bench/bench_fsync_heavy.py", "--repeats", "1", "--time", "1", "--mounts", "barrier=0", "--fsync-freqs", "1"],
    ),
    ("bonnie", ["bench/bench_bonnie.py", "--repeats", "1", "--size", "256", "--warmup", "0"]),
    ("untar", ["bench/bench_untar.py", "--repeats", "1", "--warmup", "0"]),
    ("flamegraph", ["bench/bench_flamegraph.py", "--repeats", "1", "--lines", "5000"]),
]


def run(name, argv):
    """Runs one bench with its output shown and kept; returns (exit status, seconds)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    log = RESULTS / f"{name}.txt"
    print(f"==> {name}: {' '.join(argv)}", flush=True)
    start = time.monotonic()
    with (
        open(log, "w") as f,
        subprocess.Popen([PY, *argv], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc,
    ):
        for line in proc.stdout:
            sys.stdout.write(line)
            f.write(line)
        status = proc.wait()
    return status, time.monotonic() - start


def main():
    workloads = (os.environ.get("BENCH_WORKLOADS") or "1") != "0"
    benches = OWN + ((WORKLOADS_QUICK if QUICK else WORKLOADS_FULL) if workloads else [])
    for stale in RESULTS.glob("*.json") if RESULTS.exists() else []:
        stale.unlink()  # the document shows this run's figures only
    done = {}
    for name, argv in benches:
        status, secs = run(name, argv)
        done[name] = {"status": status, "seconds": secs, "argv": argv}
        print(f"==> {name}: {'ok' if status == 0 else f'FAILED ({status})'} in {secs:.0f} s", flush=True)
    (RESULTS / "run_all.json").write_text(json.dumps(done, indent=1))  # for write_doc.py run alone
    write_doc.write(done)
    failed = [n for n, d in done.items() if d["status"] != 0]
    print(f"wrote {write_doc.DOC.relative_to(REPO)}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
