"""`fsprof flamegraph RUN`: flame graphs of a recorded run (profiler/views/flamegraph.py draws them)."""

from ..views.flamegraph import command as main

EPILOG = ("Writes RUN/flamegraphs/<name>.folded and .svg unless -o says where (an -o ending in "
          ".folded writes the folded stacks only); see docs/flamegraphs.md.")
NEEDS_ROOT = False

__all__ = ["EPILOG", "NEEDS_ROOT", "add_arguments", "main"]


def add_arguments(p):
    p.add_argument("run_dir", metavar="RUN")
    kind = p.add_mutually_exclusive_group()
    for name, what in (("off-cpu", "blocked and runnable time by stack (the default)"),
                       ("on-cpu", "CPU time, split by the on-CPU samples as in the attribution"),
                       ("off-wake", "blocked time with the waker's stack on top"),
                       ("workers", "the filesystem's worker threads (jbd2, ...) inside their work")):
        kind.add_argument(f"--{name}", dest="kind", action="store_const", const=name, help=what)
    p.set_defaults(kind="off-cpu")
    p.add_argument("--diff", metavar="BASE_RUN",
                   help="differential against this run, per operation: red where RUN costs more")
    p.add_argument("--diff-fs", metavar="LABEL",
                   help="the baseline's filesystem (default: RUN's label, or the baseline's only one)")
    p.add_argument("--phase", help="one workload phase (default: all phases)")
    p.add_argument("--fs", metavar="LABEL[,LABEL]", help="filesystems of RUN to draw (default: all)")
    p.add_argument("-o", "--output", metavar="FILE", help="the SVG to write (its .folded sibling too)")


