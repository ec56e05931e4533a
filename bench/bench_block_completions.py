#!/usr/bin/env python3
"""How often a block request's completion goes untraced (issue 17, docs/behind-block.md).

Runs `fsprof run` (fsync-loop on ext4, XFS and btrfs) ROUNDS times and, for every device under
test, tallies what the suite's oracle test checks: requests issued and never seen to end, requests
whose end went by untraced (`lost`), and how far fsprof's completed counts fall short of
/sys/block/<dev>/stat's. With --busy, a second fsprof run on its own scratch filesystems runs
beside each round (the suite's parallel runs, where the shortfall was first seen).

    python bench/bench_block_completions.py [--rounds 20] [--count 1000] [--busy]

Writes build/bench/block_completions.json and prints one line per round and a total.
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import PY, REPO, RESULTS, machine  # noqa: E402

KINDS = ("flush", "write", "read")


def fsprof_run(tmp, count, fs="ext4,xfs,btrfs"):
    out = Path(tmp) / "run"
    cmd = [
        PY,
        "-m",
        "profiler",
        "run",
        "--count",
        str(count),
        "--fs",
        fs,
        "--scratch-dir",
        str(Path(tmp) / "scratch"),
        "-o",
        str(out),
    ]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True), out


def tally(result):
    """Per filesystem: requests issued, not ended, lost, and the kernel's count minus ours per kind."""
    rows = {}
    for fs in result["filesystems"]:
        for name, dev in fs["behind"]["block"]["devices"].items():
            classes = dev["classes"].values()
            kernel = fs["kernel_counters"][name]
            ours = dev["as_sys_block_stat"]
            rows[fs["fs"]] = {
                "issued": sum(c["count"] for c in classes),
                "unended": sum(c["count"] - c["completed"] - c["requeued"] - c["lost"] for c in classes),
                "lost": sum(c["lost"] for c in classes),
                "lost_by_class": {name: c["lost"] for name, c in dev["classes"].items() if c["lost"]},
                "short": {
                    k: None if ours[k + "_ios"] is None else kernel[k + "_ios"] - ours[k + "_ios"] for k in KINDS
                },
                "settled": fs.get("kernel_counters_settled"),
                "drops": {k: v for k, v in fs["drops"].items() if v},
            }
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--count", type=int, default=1000, help="fsyncs per filesystem per round")
    ap.add_argument("--busy", action="store_true", help="a second fsprof run beside each round")
    args = ap.parse_args()
    rounds = []
    for r in range(args.rounds):
        with (
            tempfile.TemporaryDirectory(prefix="fsprof-blk-") as tmp,
            tempfile.TemporaryDirectory(prefix="fsprof-blk-busy-") as busy_tmp,
        ):
            proc, out = fsprof_run(tmp, args.count)
            busy = fsprof_run(busy_tmp, args.count)[0] if args.busy else None
            err = proc.communicate()[1]
            if busy:
                busy.communicate()
            if proc.returncode != 0:
                sys.exit(f"round {r + 1}: fsprof run failed: {err.strip()}")
            rows = tally(json.loads((out / "result.json").read_text()))
        rounds.append(rows)
        print(
            f"round {r + 1:>3}: "
            + "; ".join(
                f"{fs} issued {t['issued']} unended {t['unended']} lost {t['lost']} short "
                + "/".join("n/a" if t["short"][k] is None else str(t["short"][k]) for k in KINDS)
                + (f" {t['lost_by_class']}" if t["lost"] else "")
                + ("" if t["settled"] else " NOT SETTLED")
                + (f" drops {t['drops']}" if t["drops"] else "")
                for fs, t in rows.items()
            ),
            flush=True,
        )
    issued = sum(t["issued"] for rows in rounds for t in rows.values())
    missed = sum(t["unended"] + t["lost"] for rows in rounds for t in rows.values())
    short = sum(v or 0 for rows in rounds for t in rows.values() for v in t["short"].values())
    worst = max((t["unended"] + t["lost"], fs) for rows in rounds for fs, t in rows.items())
    unsettled = sum(1 for rows in rounds for t in rows.values() if not t["settled"])
    print(
        f"total: {issued} requests issued in {len(rounds)} rounds{' (busy)' if args.busy else ''}; "
        f"{missed} ends untraced (unended or lost), kernel ahead of ours by {short}; "
        f"{unsettled} snapshots not settled; most in one run: {worst[0]} ({worst[1]})"
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "block_completions.json").write_text(
        json.dumps(
            {
                "machine": machine(),
                "args": vars(args),
                "rounds": rounds,
                "total": {
                    "issued": issued,
                    "untraced": missed,
                    "kernel_ahead": short,
                    "unsettled": unsettled,
                    "most_in_one_run": worst[0],
                },
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
