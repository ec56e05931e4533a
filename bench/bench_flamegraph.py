#!/usr/bin/env python3
"""Benchmark: rendering a 50,000-line folded file into an SVG with inferno-flamegraph, as fsprof
does it (profiler.views.flamegraph.render_svg: the same options, one process per graph).

The folded file is made of real kernel function names (this machine's /proc/kallsyms text
symbols), rooted at fsprof's synthetic [fs];[op];[cause] frames, 8 to 40 frames deep; each line
grows from a random earlier line's prefix, so lines share prefixes as real profiles do (a tree,
not 50,000 unrelated stacks), with weights in µs. Fixed seed: the same file every time on one
kernel.
Prints the file's size, then each render's wall time and the median, min and max.

    .venv/bin/python bench/bench_flamegraph.py [--lines 50000] [--repeats 7] [--keep DIR]
"""

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from profiler.views import flamegraph  # noqa: E402

CAUSES = [
    "journal commit wait",
    "data writeback wait",
    "cpu contention",
    "lock contention",
    "cache flush",
    "read I/O wait",
    "filesystem CPU",
    "other wait",
]
OPS = ["fsync", "write", "openat", "read", "unlink", "rename", "fdatasync", "close"]


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=50_000, help="folded lines (default 50,000)")
    ap.add_argument("--repeats", type=int, default=7, help="timed renders (default 7, after one warm-up)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", help="write the folded file and the SVG here instead of a temporary directory")
    return ap.parse_args()


def kernel_functions():
    """vmlinux's own text symbols (not modules', nor BPF programs', which come and go)."""
    names = set()
    with open("/proc/kallsyms") as f:
        for line in f:
            fields = line.split()
            if len(fields) == 3 and fields[1] in "tT" and not fields[2].startswith(("__pfx_", "bpf_prog_")):
                names.add(fields[2])
    return sorted(names)


def folded_lines(n, seed):
    """n distinct root-first stacks as a tree: each new line keeps a random prefix of an earlier one."""
    rnd = random.Random(seed)
    funcs = kernel_functions()
    stacks, seen = [], set()
    while len(stacks) < n:
        if stacks and rnd.random() < 0.95:
            parent = rnd.choice(stacks)
            stack = parent[: rnd.randint(3, len(parent) - 1)]
        else:
            stack = (f"[fs{rnd.randint(1, 3)}]", f"[{rnd.choice(OPS)}]", f"[{rnd.choice(CAUSES)}]")
        stack += tuple(rnd.choice(funcs) for _ in range(rnd.randint(max(1, 8 - len(stack)), 12)))
        stack = stack[:40]
        if stack not in seen:
            seen.add(stack)
            stacks.append(stack)
    return [f"{';'.join(s)} {rnd.randint(1, 100_000)}" for s in stacks]


def main():
    args = parse_args()
    if not flamegraph.find_tool(flamegraph.FLAMEGRAPH):
        raise SystemExit("bench_flamegraph: inferno-flamegraph not found (`make setup` installs it)")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.keep or tmp)
        out.mkdir(parents=True, exist_ok=True)
        folded, svg = out / "bench.folded", out / "bench.svg"
        folded.write_text("\n".join(folded_lines(args.lines, args.seed)) + "\n")
        print(
            f"{args.lines:,} lines, {folded.stat().st_size / 1e6:.1f} MB folded; "
            f"{flamegraph.find_tool(flamegraph.FLAMEGRAPH)}"
        )
        times = []
        for i in range(args.repeats + 1):
            start = time.perf_counter()
            flamegraph.render_svg(folded, svg, "bench", "50,000 lines", "us", "io")
            elapsed = time.perf_counter() - start
            if i:  # the first render warms the page cache and the binary
                times.append(elapsed)
                print(f"render {i}: {elapsed:.3f} s")
        print(
            f"median {statistics.median(times):.3f} s, min {min(times):.3f} s, max {max(times):.3f} s; "
            f"SVG {svg.stat().st_size / 1e6:.1f} MB"
        )


if __name__ == "__main__":
    main()
