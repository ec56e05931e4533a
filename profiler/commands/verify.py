"""`fsprof verify`: did the settings take effect? The checks are profiler/verify/, which `fsprof
run` also calls."""

from __future__ import annotations

import json
import shlex
import sys
from typing import TYPE_CHECKING

from .. import signals
from ..verify import DEFAULT_PATIENCE_S, KEYS, Report, parse_expectation, render, usage, verify_mount, verify_spec

if TYPE_CHECKING:
    import argparse

NEEDS_ROOT = False  # it checks privileges itself, once its arguments are known to be good


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Check that barrier, writeback, journal and mount settings took effect, by what the "
        "kernel did during short probe workloads (docs/verify.md)."
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--mount",
        metavar="DIR",
        help="a mounted ext2/3/4, XFS or btrfs filesystem (verify writes "
        "a few MiB in a temporary directory there and removes it)",
    )
    where.add_argument("--spec", metavar="FILE", help="every configuration of an experiment matrix, made in scratch")
    parser.add_argument(
        "--expect",
        action="append",
        metavar="KEY=VALUE",
        help=f"a setting that must be in effect, repeatable; keys: {', '.join(KEYS)} "
        "(without --expect: report what is in effect)",
    )
    parser.add_argument(
        "--patience",
        type=float,
        default=DEFAULT_PATIENCE_S,
        metavar="SECONDS",
        help="the longest the timing probe (commit interval, flusher period, dirty expiry) "
        f"waits (default {DEFAULT_PATIENCE_S:g})",
    )
    parser.add_argument("--scratch-dir", default="/var/tmp/fsprof/scratch", help="where --spec makes its images")
    parser.add_argument("--json", action="store_true", help="print the verdicts as JSON")


def main(args: argparse.Namespace) -> int:
    """Exit status: 0 when every expectation holds, 1 when one does not; usage errors raise
    FsprofError(exit_code=2)."""
    if args.patience <= 0:
        raise usage(f"--patience {args.patience:g} must be a positive number of seconds")

    def progress(line):
        print(line, file=sys.stderr, flush=True)

    if args.spec:
        if args.expect:
            raise usage("--spec takes its expectations from each configuration; drop --expect")
        signals.install_handlers()
        results = verify_spec(args.spec, args.scratch_dir, args.patience, progress)
        return _print_spec(results, args.json)
    expectations = [parse_expectation(e) for e in args.expect or []]
    signals.install_handlers()
    report = verify_mount(args.mount, expectations or None, args.patience, progress)
    print(json.dumps(report.to_json(), indent=1) if args.json else render(report))
    return 0 if report.ok else 1


def _print_spec(results, as_json):
    failed = False
    if as_json:
        out = [{"config": name, **(r.to_json() if isinstance(r, Report) else {"error": r})} for name, r in results]
        print(json.dumps(out, indent=1))
    for name, r in results:
        failed |= not isinstance(r, Report) or not r.ok
        if as_json:
            continue
        print(f"== configuration {shlex.quote(name)}")
        print(render(r) if isinstance(r, Report) else f"failed: {r}")
        print()
    return 1 if failed else 0
