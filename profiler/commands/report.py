"""`fsprof report RUN [--json] [--html FILE]`: re-render a recorded run (and its flame graphs)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import rundir
from ..views import report
from ..views.flamegraph import write_default_set
from ..views.html.report import write_html

if TYPE_CHECKING:
    import argparse

NEEDS_ROOT = False


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir")
    p.add_argument("--json", action="store_true", help="print the result JSON (schema: docs/result-schema.md)")
    p.add_argument("--html", metavar="FILE", help="write one self-contained HTML report (no network needed)")


def main(args: argparse.Namespace) -> int:
    if args.html:
        write_html_if_asked(args, args.run_dir)
        return 0
    result = rundir.load(args.run_dir)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(report.render(result))
    try:
        graphs = write_default_set(args.run_dir, result)
    except OSError as e:  # someone else's or a read-only run directory: the report stands
        print(f"fsprof: flame graphs not written: {e.strerror}: {e.filename}", file=sys.stderr)
        return 0
    if graphs:
        print(f"\nflame graphs: {Path(graphs[0]).parent}", file=sys.stderr)
    return 0


def print_result(args: argparse.Namespace, result: dict[str, Any], out_dir: Path) -> None:
    """What `run` and `record` print at the end: the result (tables or JSON) and where it lies."""
    print(json.dumps(result, indent=1) if args.json else report.render(result))
    print(f"\nresult: {out_dir / rundir.RESULT_FILE}", file=sys.stderr)
    if (out_dir / rundir.FLAMEGRAPH_DIR).is_dir():
        print(f"flame graphs: {out_dir / rundir.FLAMEGRAPH_DIR}", file=sys.stderr)


def write_html_if_asked(args: argparse.Namespace, out_dir: str | Path) -> None:
    if getattr(args, "html", None):
        print(f"html report: {write_html(out_dir, args.html)}", file=sys.stderr)
