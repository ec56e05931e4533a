#!/usr/bin/env python3
"""Benchmark: fsprof's bonnie workload against bonnie++ on the block tests (-f), same parameters,
same scratch ext4, alternating (A B, B A, ...), several repeats. Prints each side's K/sec (median) and the
ratio ours/bonnie++ per test (median, min, max over the pairs).

By default both sides drop the caches before each test, as our workload does by default: bonnie++
is driven through its prompt mode (-y p) on a pty, and the caches are dropped at each prompt.
--keep-caches runs both without dropping.

The scratch filesystem is fsprof's (profiler.machine.scratch): undone on exit, error, Ctrl-C and SIGTERM, and
by any later `fsprof cleanup` if this is SIGKILLed.

    .venv/bin/python bench/bench_bonnie.py [--size 1024] [--repeats 5] [--keep-caches]
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from profiler.machine.scratch import FsConfig, provision  # noqa: E402
from profiler.machine.undo import Changes, record_process  # noqa: E402
from profiler.signals import install_handlers  # noqa: E402

TESTS = ("write", "rewrite", "read", "seeks")
# bonnie++ 1.98+ CSV fields: put_block 11, rewrite 13, get_block 17, seeks 19
CSV_FIELD = {"write": 11, "rewrite": 13, "read": 17, "seeks": 19}
PROMPT = re.compile(rb"(?m)^(\d+):\r?$")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=1024, help="file size in MiB (default 1024)")
    ap.add_argument("--repeats", type=int, default=5, help="pairs of runs (default 5)")
    ap.add_argument("--image-size", type=int, default=3, help="scratch image in GiB (default 3)")
    ap.add_argument("--keep-caches", action="store_true", help="do not drop caches before each test")
    ap.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="discarded runs first: the sparse image's first writes allocate host blocks (default 1)",
    )
    ap.add_argument("--scratch-dir", default="/var/tmp/fsprof/bench-scratch")
    return ap.parse_args()


def start(changes, argv, **kw):
    """A child in its own process group, journaled: the undo (on exit, error, Ctrl-C, SIGTERM, or a
    later `fsprof cleanup` after SIGKILL) kills the group before it unmounts the filesystem."""
    proc = subprocess.Popen(argv, start_new_session=True, **kw)
    record_process(changes, proc.pid)
    return proc


def run_ours(changes, workdir, args):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        argv = [
            sys.executable,
            "-m",
            "workloads.bonnie",
            "--result",
            out.name,
            "-s",
            str(args.size),
            "-n",
            "0",
            "-f",
            "-m",
            "bench",
        ] + (["--no-drop-caches"] if args.keep_caches else [])
        status = start(changes, argv, cwd=workdir, env={**os.environ, "PYTHONPATH": REPO}).wait()
        result = json.load(open(out.name))
    if status != 0 or "error" in result:
        raise SystemExit(f"bonnie workload failed: {result.get('error', status)}")
    tests = result["tests"]
    return {t: tests[t]["per_s"] if t == "seeks" else tests[t]["kib_per_s"] for t in TESTS}


def bonnie_argv(workdir, args):
    argv = [
        "bonnie++",
        "-d",
        workdir,
        "-s",
        str(args.size),
        "-n",
        "0",
        "-f",
        "-r",
        "0",
        "-u",
        "root",
        "-m",
        "bench",
        "-q",
    ]
    return argv if args.keep_caches else argv + ["-y", "p"]


def run_bonnie(changes, workdir, mountpoint, args):
    """bonnie++ on a pty, so that its prompts (-y p) reach us unbuffered."""
    master, slave = os.openpty()
    proc = start(changes, bonnie_argv(workdir, args), stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    try:
        output = answer_prompts(master, mountpoint).decode(errors="replace")
    finally:
        os.close(master)
    status = proc.wait()
    if status != 0:
        raise SystemExit(f"bonnie++ failed ({status}): {output[-500:]}")
    return parse_bonnie_csv(output)


def answer_prompts(master, mountpoint):
    """bonnie++'s output; at each of its prompts (before each test), drop caches then answer."""
    output, answered = b"", 0
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: bonnie++ closed the pty
            return output
        if not chunk:
            return output
        output += chunk
        for _ in PROMPT.findall(output)[answered:]:
            drop_caches(mountpoint)
            os.write(master, b"\n")
            answered += 1


def drop_caches(mountpoint):
    """As our workload does: write back this filesystem, then drop page cache, dentries, inodes."""
    subprocess.run(["sync", "-f", mountpoint], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")


def parse_bonnie_csv(text):
    line = next(ln for ln in text.replace("\r", "").splitlines() if ln.startswith("1.98,"))
    fields = line.split(",")
    figures = {}
    for test, index in CSV_FIELD.items():
        value = fields[index]
        figures[test] = None if value.startswith("+") else float(value)
    return figures


def summary(ours, theirs):
    print(f"{'test':<8} {'ours K/s':>12} {'bonnie++ K/s':>13} {'ratio med':>10} {'min':>6} {'max':>6}  (seeks: /s)")
    for test in TESTS:
        pairs = [(o[test], b[test]) for o, b in zip(ours, theirs) if b[test]]
        if not pairs:
            print(f"{test:<8} bonnie++ shows +++++ (under 0.5 s) in every run: use a larger --size")
            continue
        ratios = [o / b for o, b in pairs]
        print(
            f"{test:<8} {statistics.median(o for o, _ in pairs):12.0f} "
            f"{statistics.median(b for _, b in pairs):13.0f} {statistics.median(ratios):10.3f} "
            f"{min(ratios):6.3f} {max(ratios):6.3f}  ({len(pairs)} pairs)"
        )


def run_pair(index, changes, workdir, mountpoint, args):
    """One run of each, ours first on even pairs and bonnie++ first on odd ones (A B, B A, ...):
    whichever runs second follows the other's file deletion."""
    if index % 2 == 0:
        ours = run_ours(changes, workdir, args)
        theirs = run_bonnie(changes, workdir, mountpoint, args)
    else:
        theirs = run_bonnie(changes, workdir, mountpoint, args)
        ours = run_ours(changes, workdir, args)
    print(
        f"pair {index + 1}: ours "
        + " ".join(f"{t}={ours[t]:.0f}" for t in TESTS)
        + " | bonnie++ "
        + " ".join(f"{t}={theirs[t] or '+++++'}" for t in TESTS),
        flush=True,
    )
    return ours, theirs


def main():
    args = parse_args()
    install_handlers()
    with Changes() as changes:
        os.makedirs(args.scratch_dir, exist_ok=True)
        sfs = provision(
            changes,
            FsConfig("ext4", size_bytes=args.image_size << 30, label="bench-bonnie", loop_io="buffered"),
            scratch_dir=args.scratch_dir,
        )
        workdir = os.path.join(sfs.mountpoint, "work")
        os.mkdir(workdir)
        for _ in range(args.warmup):
            run_ours(changes, workdir, args)
        pairs = [run_pair(i, changes, workdir, sfs.mountpoint, args) for i in range(args.repeats)]
    caches = "kept" if args.keep_caches else "dropped before each test (both sides)"
    print(
        f"\next4 on a {args.image_size} GiB loop image, -s {args.size} -n 0 -f, caches {caches}, "
        f"{args.repeats} pairs after {args.warmup} discarded run(s)"
    )
    summary([o for o, _ in pairs], [t for _, t in pairs])


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        raise SystemExit("interrupted; the scratch filesystem was undone")
