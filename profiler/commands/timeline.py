"""`fsprof timeline RUN`: the run's slowest calls as a Perfetto trace (profiler/views/timeline.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..views.timeline import write

if TYPE_CHECKING:
    import argparse

EPILOG = "Writes RUN/timeline.pftrace unless -o says where; open it in https://ui.perfetto.dev. See docs/tail.md."
NEEDS_ROOT = False


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN")
    p.add_argument("-o", "--output", metavar="FILE", help="the trace to write (default RUN/timeline.pftrace)")


def main(args: argparse.Namespace) -> int:
    path, calls = write(args.run_dir, args.output)
    print(f"{path}: {calls} slow calls, their waits and the work that ended them")
    return 0
