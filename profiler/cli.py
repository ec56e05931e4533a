"""fsprof's command line. Every failure a user can cause ends in one sentence and a non-zero exit."""

import argparse
import json
import os
import sys
from pathlib import Path

from . import __version__, rundir, units
from .errors import FsprofError

def size(text):
    try:
        return units.parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e))


def sample_hz(text):
    try:
        value = int(text)
    except ValueError:
        value = -1
    try:
        with open("/proc/sys/kernel/perf_event_max_sample_rate") as f:
            limit = int(f.read())
    except (OSError, ValueError):
        limit = 100000
    if not 0 <= value <= limit:
        raise argparse.ArgumentTypeError(f"'{text}' is not a sampling rate from 0 (off) to {limit} Hz "
                                         f"(kernel.perf_event_max_sample_rate)")
    return value


def pid(text):
    value = positive(text)
    if value > 1 << 22:  # PID_MAX_LIMIT
        raise argparse.ArgumentTypeError(f"'{text}' is not a process id")
    return value


def positive(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"'{text}' is not a positive whole number")
    return value


DEFAULT_FS = "ext4,xfs,btrfs"
# `fsprof run` options that a spec file sets per configuration instead.
SPEC_SETS = ("fs", "workload", "mkfs_options", "mount_options", "sysctl", "scheduler", "image_size", "device",
             "drop_caches", "erase_device", "force_erase", "json")


class Parser(argparse.ArgumentParser):
    """Usage errors in one sentence, as every other error: `--help` has the full usage."""

    def error(self, message):
        self.exit(2, f"fsprof: {message} (see `{self.prog} --help`)\n")


def parser():
    ap = Parser(prog="fsprof", description="Kernel-tracing filesystem profiler.")
    ap.add_argument("--version", action="version", version=f"fsprof {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=Parser)

    run = sub.add_parser(
        "run", help="run a workload on scratch filesystems under tracing", allow_abbrev=False,
        usage="fsprof run [options] [--workload NAME [workload options]] [-- CMD ARGS] | --spec FILE",
        epilog="Options fsprof does not know go to the workload: e.g. `fsprof run --workload "
               "fsync-heavy --file-test-mode rndwr --file-fsync-freq 1`; `python -m workloads.<name> "
               "--help` lists a workload's own. After `--`, your own command runs instead, in a "
               "directory on the filesystem under test; {mnt} in it is replaced by the mount point.")
    run.add_argument("--spec", metavar="FILE",
                     help="run an experiment matrix (TOML: configurations x workloads; docs/spec.md)")
    run.add_argument("--fs", help=f"filesystems, comma-separated (default: {DEFAULT_FS})")
    run.add_argument("--workload",
                     help="bundled workload: fsync-loop, fsync-heavy, bonnie, untar (default: %(default)s)")
    run.add_argument("--sample-hz", type=sample_hz, default=999,
                     help="on-CPU sampling frequency of the traced threads, 0 = off (default 999)")
    run.add_argument("--mkfs-options", action="append", metavar="[FS=]OPTS",
                     help="extra mkfs arguments, for one filesystem with an FS= prefix; repeatable")
    run.add_argument("--mount-options", action="append", metavar="[FS=]OPTS",
                     help="mount -o options, e.g. ext4=barrier=0; repeatable")
    run.add_argument("--sysctl", action="append", metavar="NAME=VALUE", help="set for the run, restored after")
    run.add_argument("--scheduler", help="I/O scheduler of the devices under test for the run")
    run.add_argument("--drop-caches", action="store_true", help="drop the page cache before the workload")
    run.add_argument("--image-size", type=size, default=None,
                     help="scratch image size (default 1G, or the workload's own: untar 3G)")
    run.add_argument("--devices", type=positive, default=1, help="btrfs only: loop images in one filesystem")
    run.add_argument("--scratch-dir", default="/var/tmp/fsprof/scratch", help="where scratch images live")
    run.add_argument("--device", help="use this block device instead of a scratch image (erases it)")
    run.add_argument("--erase-device", action="store_true", help="confirm that --device may be erased")
    run.add_argument("--force-erase", action="store_true",
                     help="erase --device even though it carries a filesystem or partition signature")
    run.add_argument("-o", "--output", help="run directory (default fsprof-runs/<timestamp>)")
    run.add_argument("--go-on", action="store_true",
                     help="run even when `fsprof verify` finds a setting did not take effect (the report "
                          "then starts with the warning)")
    run.add_argument("--json", action="store_true", help="print the result as JSON instead of tables")
    run.add_argument("--html", metavar="FILE", help="also write the self-contained HTML report (and comparison)")

    rec = sub.add_parser("record", help="attach to a live process, cgroup or mount (changes nothing)")
    rec.add_argument("--pid", type=pid, help="a process, with its threads and the children it starts")
    rec.add_argument("--cgroup", help="a cgroup v2 directory (absolute, or relative to /sys/fs/cgroup)")
    rec.add_argument("--mount", help="every process's operations on the filesystem mounted here")
    rec.add_argument("--duration", help="how long (e.g. 30s, 2m); default: until Ctrl-C or the process exits")
    rec.add_argument("--sample-hz", type=sample_hz, default=999, help="on-CPU sampling frequency, 0 = off (default 999)")
    rec.add_argument("-o", "--output", help="run directory (default fsprof-runs/<timestamp>)")
    rec.add_argument("--json", action="store_true", help="print the result as JSON instead of tables")

    rep = sub.add_parser("report", help="show a recorded run")
    rep.add_argument("run_dir")
    rep.add_argument("--json", action="store_true", help="print the result JSON (schema: docs/result-schema.md)")
    rep.add_argument("--html", metavar="FILE", help="write one self-contained HTML report (no network needed)")

    cmp = sub.add_parser("compare", help="explain why runs of one workload differ (the first is the base)")
    cmp.add_argument("runs", nargs="+", metavar="RUN_DIR",
                     help="run directories (each filesystem in them is a configuration), or a spec's output")
    cmp.add_argument("--op", help="the syscall to explain (default: the one taking the most time)")
    cmp.add_argument("--phase", help="explain one phase of the workload (e.g. a bonnie phase)")
    cmp.add_argument("--json", action="store_true", help="print the comparison as JSON")

    flame = sub.add_parser(
        "flamegraph", help="flame graphs of a recorded run: folded stacks, and SVG by inferno",
        epilog="Writes RUN/flamegraphs/<name>.folded and .svg unless -o says where (an -o ending in "
               ".folded writes the folded stacks only); see docs/flamegraphs.md.")
    flame.add_argument("run_dir", metavar="RUN")
    kind = flame.add_mutually_exclusive_group()
    for name, what in (("off-cpu", "blocked and runnable time by stack (the default)"),
                       ("on-cpu", "CPU time, split by the on-CPU samples as in the attribution"),
                       ("off-wake", "blocked time with the waker's stack on top"),
                       ("workers", "the filesystem's worker threads (jbd2, ...) inside their work")):
        kind.add_argument(f"--{name}", dest="kind", action="store_const", const=name, help=what)
    flame.set_defaults(kind="off-cpu")
    flame.add_argument("--diff", metavar="BASE_RUN",
                       help="differential against this run, per operation: red where RUN costs more")
    flame.add_argument("--diff-fs", metavar="LABEL",
                       help="the baseline's filesystem (default: RUN's label, or the baseline's only one)")
    flame.add_argument("--phase", help="one workload phase (default: all phases)")
    flame.add_argument("--fs", metavar="LABEL[,LABEL]", help="filesystems of RUN to draw (default: all)")
    flame.add_argument("-o", "--output", metavar="FILE", help="the SVG to write (its .folded sibling too)")

    from .verify import add_arguments as verify_arguments
    verify_arguments(sub.add_parser(
        "verify", help="check that barrier, writeback, journal and mount settings took effect, from what the kernel did"))

    sub.add_parser("doctor", help="what this kernel supports and what fsprof can therefore do")
    sub.add_parser("cleanup", help="undo what a killed fsprof run left behind")
    return ap


def _cleanup_stale():
    from .machine import scratch
    for sentence in scratch.cleanup_stale():
        print(f"fsprof: cleaned up after a dead run: {sentence}", file=sys.stderr)


def dispatch(args):
    from .views import report
    if os.geteuid() == 0:
        _cleanup_stale()  # whatever the command: a dead run's mounts and sysctls go first
    if args.command == "report" and args.html:
        write_html_if_asked(args, args.run_dir)
        return 0
    if args.command == "report":
        result = rundir.load(args.run_dir)
        if args.json:
            print(json.dumps(result, indent=1))
            return 0
        from .views.flamegraph import write_default_set
        print(report.render(result))
        try:
            graphs = write_default_set(args.run_dir, result)
        except OSError as e:  # someone else's or a read-only run directory: the report stands
            print(f"fsprof: flame graphs not written: {e.strerror}: {e.filename}", file=sys.stderr)
            return 0
        if graphs:
            print(f"\nflame graphs: {Path(graphs[0]).parent}", file=sys.stderr)
        return 0
    if args.command == "compare":
        from .views.compare import compare, render
        comparisons = compare(args.runs, args.op, args.phase)
        print(json.dumps(comparisons, indent=1) if args.json else render(comparisons))
        return 0
    if args.command == "verify":
        from .verify import command
        return command(args)
    if args.command == "flamegraph":
        from .views.flamegraph import command
        return command(args)
    if args.command == "doctor":
        from .commands.doctor import doctor
        return doctor()

    from .trace.bpf import check_privileges
    check_privileges()
    if args.command == "cleanup":
        return 0
    from . import signals
    signals.install_handlers()
    if args.command == "record":
        from .session.record import record
        result, out_dir = record(args)
    elif args.command == "run" and args.spec:
        return run_spec(args)
    else:
        from .session.run import run
        result, out_dir = run(args)
    print(json.dumps(result, indent=1) if args.json else report.render(result))
    print(f"\nresult: {out_dir / rundir.RESULT_FILE}", file=sys.stderr)
    if (out_dir / rundir.FLAMEGRAPH_DIR).is_dir():
        print(f"flame graphs: {out_dir / rundir.FLAMEGRAPH_DIR}", file=sys.stderr)
    write_html_if_asked(args, out_dir)
    return 0


def write_html_if_asked(args, out_dir):
    if getattr(args, "html", None):
        from .views.html.report import write_html
        print(f"html report: {write_html(out_dir, args.html)}", file=sys.stderr)


def run_spec(args):
    from .machine import spec
    from .session.run import run_spec as run_matrix
    matrix = spec.load(args.spec)  # every configuration and workload is checked before anything runs
    index, out_dir = run_matrix(matrix, args, progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(f"{'workload':<20} {'config':<24} {'repeat':>6} {'time':>8}  result")
    for r in index["runs"]:
        status = f"failed: {r['error']}" if "error" in r else str(out_dir / r["dir"])
        print(f"{r['workload']:<20} {r['config']:<24} {r['repeat']:>6} {r['elapsed_s']:>7.1f}s  {status}")
    print(f"\nindex: {out_dir / rundir.INDEX_FILE}", file=sys.stderr)
    write_html_if_asked(args, out_dir)
    return 1 if any("error" in r for r in index["runs"]) else 0


def parse(argv):
    """`run` takes options it does not know as the workload's own, and `-- CMD ARGS` as the
    user's command; every other command is parsed strictly."""
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = parser()
    has_command = "--" in argv
    command = argv[argv.index("--") + 1:] if has_command else []
    before = argv[:argv.index("--")] if has_command else argv
    args, rest = ap.parse_known_args(before)
    if rest and args.command in before and before.index(args.command) > before.index(rest[0]):
        ap.error(f"unrecognized arguments: {rest[0]} (fsprof's own options come after the command)")
    if args.command != "run" and (rest or has_command):
        ap.error(f"unrecognized arguments: {' '.join(rest + (['--', *command] if has_command else []))}")
    if has_command and not command:
        ap.error("nothing follows `--`; give the command to run")
    if args.command == "run" and args.spec:
        given = [f"--{k.replace('_', '-')}" for k in SPEC_SETS if getattr(args, k) not in (None, False)]
        given += ["--devices"] if args.devices != 1 else []
        if has_command or rest or given:
            what = ", ".join(given + rest[:1] + (["-- CMD"] if has_command else []))
            ap.error(f"--spec sets the filesystems, options and workloads itself; drop {what}")
    if args.command == "run":
        args.fs = DEFAULT_FS if args.fs is None else args.fs
        if has_command and args.workload:
            ap.error("give either --workload or `-- CMD`, not both")
        if any(a == "--result" or a.startswith("--result=") for a in rest):
            ap.error("--result is set by fsprof (the workload's figures go into the run's result.json)")
        args.workload = args.workload or "fsync-loop"
    args.workload_args, args.command_argv = rest, command
    return args


def main(argv=None):
    args = parse(argv)
    try:
        return dispatch(args)
    except FsprofError as e:
        print(f"fsprof: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("fsprof: interrupted; everything fsprof set up was undone", file=sys.stderr)
        return 130
    except OSError as e:
        # The machine said no (a path, a permission): one sentence, as for any other bad input.
        where = f": {e.filename}" if e.filename else ""
        print(f"fsprof: {e.strerror or e}{where}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
