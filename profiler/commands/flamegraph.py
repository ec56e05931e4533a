"""`fsprof flamegraph RUN`: flame graphs of a recorded run (profiler/views/flamegraph.py draws them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import FsprofError
from ..views.flamegraph import ALL_PHASES, draw, draw_diff

if TYPE_CHECKING:
    import argparse

EPILOG = (
    "Writes RUN/flamegraphs/<name>.folded and .svg unless -o says where (an -o ending in "
    ".folded writes the folded stacks only); see docs/flamegraphs.md."
)
NEEDS_ROOT = False


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN")
    kind = p.add_mutually_exclusive_group()
    for name, what in (
        ("off-cpu", "blocked and runnable time by stack (the default)"),
        ("on-cpu", "CPU time, split by the on-CPU samples as in the attribution"),
        ("off-wake", "blocked time with the waker's stack on top"),
        ("workers", "the filesystem's worker threads (jbd2, ...) inside their work"),
    ):
        kind.add_argument(f"--{name}", dest="kind", action="store_const", const=name, help=what)
    p.set_defaults(kind="off-cpu")
    p.add_argument(
        "--diff", metavar="BASE_RUN", help="differential against this run, per operation: red where RUN costs more"
    )
    p.add_argument(
        "--diff-fs",
        metavar="LABEL",
        help="the baseline's filesystem (default: RUN's label, or the baseline's only one)",
    )
    p.add_argument("--phase", help="one workload phase (default: all phases)")
    p.add_argument("--fs", metavar="LABEL[,LABEL]", help="filesystems of RUN to draw (default: all)")
    p.add_argument("-o", "--output", metavar="FILE", help="the SVG to write (its .folded sibling too)")


def main(args: argparse.Namespace) -> int:
    """Draws what the options ask for and prints the paths written."""
    labels = [label for label in args.fs.split(",") if label] if args.fs else None
    phase = args.phase or ALL_PHASES
    if args.diff:
        if labels and len(labels) > 1:
            raise FsprofError("a differential compares one filesystem with one other: give --fs one label")
        written = draw_diff(
            args.run_dir, args.diff, args.kind, phase, labels[0] if labels else None, args.diff_fs, args.output
        )
    else:
        written = draw(args.run_dir, args.kind, phase, labels, args.output)
    if not written:
        raise FsprofError(f"nothing to draw: {args.run_dir} recorded no {args.kind} time in phase {phase}")
    for path in written:
        print(path)
    return 0
