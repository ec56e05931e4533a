"""`fsprof compare RUN [RUN ...]`: why runs of one workload differ, ranked by cause."""

import json

from ..views.compare import compare, render

NEEDS_ROOT = False


def add_arguments(p):
    p.add_argument("runs", nargs="+", metavar="RUN_DIR",
                   help="run directories (each filesystem in them is a configuration), or a spec's output")
    p.add_argument("--op", help="the syscall to explain (default: the one taking the most time)")
    p.add_argument("--phase", help="explain one phase of the workload (e.g. a bonnie phase)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")


def main(args):
    comparisons = compare(args.runs, args.op, args.phase)
    print(json.dumps(comparisons, indent=1) if args.json else render(comparisons))
    return 0
