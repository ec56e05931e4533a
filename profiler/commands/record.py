"""`fsprof record --pid/--cgroup/--mount`: attach to a live system, change nothing. With
--continuous, record indefinitely in windows for Prometheus and continuous profilers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..session.collect import DEFAULT_STACK_SAMPLE, DEFAULT_TAIL_NS
from ..trace.maps import EXEMPLARS
from .arguments import (
    EXEMPLARS_HELP,
    STACK_SAMPLE_HELP,
    TAIL_THRESHOLD_HELP,
    duration_ns,
    exemplar_count,
    pid,
    positive,
    sample_hz,
)

if TYPE_CHECKING:
    import argparse

NEEDS_ROOT = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pid", type=pid, help="a process, with its threads and the children it starts")
    p.add_argument("--cgroup", help="a cgroup v2 directory (absolute, or relative to /sys/fs/cgroup)")
    p.add_argument("--mount", help="every process's operations on the filesystem mounted here")
    p.add_argument("--duration", help="how long (e.g. 30s, 2m); default: until Ctrl-C or the process exits")
    p.add_argument("--sample-hz", type=sample_hz, default=999, help="on-CPU sampling frequency, 0 = off (default 999)")
    p.add_argument("--stack-sample", type=positive, default=DEFAULT_STACK_SAMPLE, metavar="N", help=STACK_SAMPLE_HELP)
    p.add_argument(
        "--tail-threshold", type=duration_ns, default=DEFAULT_TAIL_NS, metavar="TIME", help=TAIL_THRESHOLD_HELP
    )
    p.add_argument("--exemplars", type=exemplar_count, default=EXEMPLARS, metavar="K", help=EXEMPLARS_HELP)
    p.add_argument("-o", "--output", help="run directory (default fsprof-runs/<timestamp>)")
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of tables")
    c = p.add_argument_group("continuous mode (docs/continuous.md)")
    c.add_argument(
        "--continuous",
        action="store_true",
        help="record until stopped, in windows: Prometheus metrics and pprof profiles, no run directory",
    )
    c.add_argument(
        "--all", action="store_true", help="with --continuous: every process on every ext4/XFS/btrfs filesystem"
    )
    c.add_argument("--window", default="15s", help="window length (default 15s)")
    c.add_argument(
        "--listen",
        default="127.0.0.1:9478",
        help="HOST:PORT of the /metrics endpoint (default 127.0.0.1:9478; off = none)",
    )
    c.add_argument("--pprof-dir", help="write each window's profile here as fsprof-<UTC time>.pb.gz")
    c.add_argument("--pprof-keep", type=positive, default=240, help="profiles kept in --pprof-dir (default 240)")
    c.add_argument("--pprof-url", help="POST each window's profile to this Pyroscope-compatible ingest URL")


def check_arguments(
    ap: argparse.ArgumentParser, args: argparse.Namespace, rest: list[str], command: list[str] | None
) -> None:
    if args.continuous:
        if args.output or args.json:
            ap.error("--continuous writes no run directory: -o/--output and --json do not apply")
        if args.all and any(x is not None for x in (args.pid, args.cgroup, args.mount)):
            ap.error("--all traces every process: leave out --pid, --cgroup and --mount")
    else:
        for name in ("all", "pprof_dir", "pprof_url"):
            if getattr(args, name):
                ap.error(f"--{name.replace('_', '-')} needs --continuous")


def main(args: argparse.Namespace) -> int:
    shared = {
        "pid": args.pid,
        "cgroup": args.cgroup,
        "mount": args.mount,
        "duration": args.duration,
        "sample_hz": args.sample_hz,
        "stack_sample": args.stack_sample,
        "tail_threshold_ns": args.tail_threshold,
        "exemplars": args.exemplars,
    }
    if args.continuous:
        from ..session.continuous import ContinuousOptions, continuous

        return continuous(
            ContinuousOptions(
                **shared,
                all=args.all,
                window=args.window,
                listen=args.listen,
                pprof_dir=args.pprof_dir,
                pprof_keep=args.pprof_keep,
                pprof_url=args.pprof_url,
            )
        )
    from ..session.record import RecordOptions, record

    result, out_dir = record(RecordOptions(**shared, output=args.output))
    # The report's modules load after the recording: `record` is attached sooner (docs/benchmarks.md).
    from .report import print_result

    print_result(args, result, out_dir)
    return 0
