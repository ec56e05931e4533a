"""`fsprof compare RUN [RUN ...]`: why runs of one workload differ: the workload's time, then its calls."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ..analysis.band import BANDS
from ..analysis.compare import compare
from ..work_unit import parse_unit
from ..views.compare import render

if TYPE_CHECKING:
    import argparse

NEEDS_ROOT = False


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "runs",
        nargs="+",
        metavar="RUN_DIR",
        help="run directories (each filesystem in them is a configuration; RUN/ext4 is one of them), "
        "or a spec's output",
    )
    p.add_argument("--op", help="the syscall to explain (default: the one taking the most time)")
    p.add_argument("--phase", help="explain one phase of the workload (e.g. a bonnie phase)")
    p.add_argument(
        "--unit",
        metavar="NAME[=N]",
        help="counts per unit of work: N units per run (transaction=1000), or NAME alone to take "
        "N from the workload's `RESULT NAMEs=N` line or its own count",
    )
    p.add_argument("--fs", metavar="FS[,FS]", help="only these filesystems (types or labels) of the runs")
    p.add_argument(
        "--band",
        choices=BANDS,
        help="also the causes of one latency band of the op: max (the slowest call), p99 (the slowest "
        "calls kept whole at or above p99), p50 (the body: each call's time but its waits at or above "
        "the tail threshold)",
    )
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")


def main(args: argparse.Namespace) -> int:
    unit = parse_unit(args.unit) if args.unit else None
    fs_filter = {f.strip() for f in args.fs.split(",") if f.strip()} if args.fs else None
    comparisons = compare(args.runs, args.op, args.phase, unit, fs_filter, args.band)
    print(json.dumps(comparisons, indent=1) if args.json else render(comparisons))
    return 0
