"""`fsprof record --pid/--cgroup/--mount`: attach to a live system, change nothing."""

from ..session.record import record
from .arguments import pid, sample_hz
from .report import print_result

NEEDS_ROOT = True


def add_arguments(p):
    p.add_argument("--pid", type=pid, help="a process, with its threads and the children it starts")
    p.add_argument("--cgroup", help="a cgroup v2 directory (absolute, or relative to /sys/fs/cgroup)")
    p.add_argument("--mount", help="every process's operations on the filesystem mounted here")
    p.add_argument("--duration", help="how long (e.g. 30s, 2m); default: until Ctrl-C or the process exits")
    p.add_argument("--sample-hz", type=sample_hz, default=999, help="on-CPU sampling frequency, 0 = off (default 999)")
    p.add_argument("-o", "--output", help="run directory (default fsprof-runs/<timestamp>)")
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of tables")


def main(args):
    result, out_dir = record(args)
    print_result(args, result, out_dir)
    return 0
