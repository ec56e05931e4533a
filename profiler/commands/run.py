"""`fsprof run`: a bundled workload (or the user's own command, or a spec's matrix) on scratch
filesystems under tracing. Options fsprof does not know are the workload's own."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from .. import rundir
from ..machine import spec
from ..session.run import RunOptions, run, run_spec
from ..machine.scratch import LOOP_IO, FsConfig
from ..machine.device_model import MODELS
from ..session.collect import DEFAULT_STACK_SAMPLE, DEFAULT_TAIL_NS
from ..trace.maps import EXEMPLARS
from .arguments import (
    EXEMPLARS_HELP,
    STACK_SAMPLE_HELP,
    TAIL_THRESHOLD_HELP,
    device_model_arg,
    duration_ns,
    exemplar_count,
    positive,
    sample_hz,
    size,
)
from .report import print_result, write_html_if_asked

if TYPE_CHECKING:
    import argparse

DEFAULT_LOOP_IO = FsConfig.loop_io

USAGE = "fsprof run [options] [--workload NAME [workload options]] [-- CMD ARGS] | --spec FILE"
EPILOG = (
    "Options fsprof does not know go to the workload: e.g. `fsprof run --workload "
    "fsync-heavy --file-test-mode rndwr --file-fsync-freq 1`; `python -m workloads.<name> "
    "--help` lists a workload's own. After `--`, your own command runs instead, in a "
    "directory on the filesystem under test; {mnt} in it is replaced by the mount point."
)
NEEDS_ROOT = True
TAKES_UNKNOWN_OPTIONS = True  # the workload's, or `-- CMD ARGS`

DEFAULT_FS = "ext4,xfs,btrfs"
# `fsprof run` options that a spec file sets per configuration instead.
SPEC_SETS = (
    "fs",
    "workload",
    "mkfs_options",
    "mount_options",
    "sysctl",
    "scheduler",
    "image_size",
    "device",
    "drop_caches",
    "erase_device",
    "force_erase",
    "json",
    "loop_io",
    "device_model",
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--spec", metavar="FILE", help="run an experiment matrix (TOML: configurations x workloads; docs/spec.md)"
    )
    p.add_argument("--fs", help=f"filesystems, comma-separated (default: {DEFAULT_FS})")
    p.add_argument("--workload", help="bundled workload: fsync-loop, fsync-heavy, bonnie, untar (default: %(default)s)")
    p.add_argument(
        "--sample-hz",
        type=sample_hz,
        default=999,
        help="on-CPU sampling frequency of the traced threads, 0 = off (default 999)",
    )
    p.add_argument("--stack-sample", type=positive, default=DEFAULT_STACK_SAMPLE, metavar="N", help=STACK_SAMPLE_HELP)
    p.add_argument(
        "--tail-threshold", type=duration_ns, default=DEFAULT_TAIL_NS, metavar="TIME", help=TAIL_THRESHOLD_HELP
    )
    p.add_argument("--exemplars", type=exemplar_count, default=EXEMPLARS, metavar="K", help=EXEMPLARS_HELP)
    p.add_argument(
        "--mkfs-options",
        action="append",
        metavar="[FS=]OPTS",
        help="extra mkfs arguments, for one filesystem with an FS= prefix; repeatable",
    )
    p.add_argument(
        "--mount-options",
        action="append",
        metavar="[FS=]OPTS",
        help="mount -o options, e.g. ext4=barrier=0; repeatable",
    )
    p.add_argument("--sysctl", action="append", metavar="NAME=VALUE", help="set for the run, restored after")
    p.add_argument("--scheduler", help="I/O scheduler of the devices under test for the run")
    p.add_argument("--drop-caches", action="store_true", help="drop the page cache before the workload")
    p.add_argument(
        "--image-size",
        type=size,
        default=None,
        help="scratch image size (default 16G, sparse: docs/test-bed.md says why)",
    )
    p.add_argument(
        "--loop-io",
        choices=LOOP_IO,
        default=None,
        help="how a scratch loop device reaches its image file: direct (O_DIRECT: writes, reads and "
        f"flushes reach the disk, as on a real one) or buffered (the host's page cache); "
        f"default {DEFAULT_LOOP_IO} (docs/test-bed.md)",
    )
    p.add_argument(
        "--device-model",
        type=device_model_arg,
        default=None,
        metavar="MODEL",
        help=f"emulate a device: dm-delay over the scratch loop device, or a null_blk RAM device with a "
        f"volatile write cache instead of it; {', '.join(MODELS)}, or delays in ms like "
        "read=8,write=0,flush=15 with cache=MiB for the cache (needs device-mapper or null_blk: docs/test-bed.md)",
    )
    p.add_argument("--devices", type=positive, default=1, help="btrfs only: loop images in one filesystem")
    p.add_argument("--scratch-dir", default="/var/tmp/fsprof/scratch", help="where scratch images live")
    p.add_argument("--device", help="use this block device instead of a scratch image (erases it)")
    p.add_argument("--erase-device", action="store_true", help="confirm that --device may be erased")
    p.add_argument(
        "--force-erase",
        action="store_true",
        help="erase --device even though it carries a filesystem or partition signature",
    )
    p.add_argument("-o", "--output", help="run directory (default fsprof-runs/<timestamp>)")
    p.add_argument(
        "--go-on",
        action="store_true",
        help="run even when `fsprof verify` finds a setting did not take effect (the report "
        "then starts with the warning)",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of tables")
    p.add_argument("--html", metavar="FILE", help="also write the self-contained HTML report (and comparison)")


def check_arguments(
    ap: argparse.ArgumentParser, args: argparse.Namespace, rest: list[str], command: list[str] | None
) -> None:
    """The workload's own options (`rest`) and `-- CMD` (`command`, or None) against fsprof's."""
    if args.spec:
        given = [f"--{k.replace('_', '-')}" for k in SPEC_SETS if getattr(args, k) not in (None, False)]
        given += ["--devices"] if args.devices != 1 else []
        if command is not None or rest or given:
            what = ", ".join(given + rest[:1] + (["-- CMD"] if command is not None else []))
            ap.error(f"--spec sets the filesystems, options and workloads itself; drop {what}")
    args.fs = DEFAULT_FS if args.fs is None else args.fs
    if command is not None and args.workload:
        ap.error("give either --workload or `-- CMD`, not both")
    if any(a == "--result" or a.startswith("--result=") for a in rest):
        ap.error("--result is set by fsprof (the workload's figures go into the run's result.json)")
    args.workload = args.workload or "fsync-loop"
    if args.loop_io and args.device:
        ap.error("--loop-io is for scratch loop devices; --device names a real one")
    if args.device_model and args.device:
        ap.error("--device-model emulates a device in place of the scratch loop device; --device names a real one")
    args.loop_io = args.loop_io or DEFAULT_LOOP_IO


def run_options(args: argparse.Namespace) -> RunOptions:
    """The session's options from the parsed (and check_arguments-completed) arguments."""
    return RunOptions(
        fs=args.fs,
        workload=args.workload,
        workload_args=tuple(args.workload_args),
        command_argv=tuple(args.command_argv),
        mkfs_options=tuple(args.mkfs_options or ()),
        mount_options=tuple(args.mount_options or ()),
        sysctl=tuple(args.sysctl or ()),
        scheduler=args.scheduler,
        drop_caches=args.drop_caches,
        image_size=args.image_size,
        loop_io=args.loop_io,
        device_model=args.device_model,
        devices=args.devices,
        scratch_dir=args.scratch_dir,
        device=args.device,
        erase_device=args.erase_device,
        force_erase=args.force_erase,
        output=args.output,
        go_on=args.go_on,
        sample_hz=args.sample_hz,
        stack_sample=args.stack_sample,
        tail_threshold_ns=args.tail_threshold,
        exemplars=args.exemplars,
    )


def main(args: argparse.Namespace) -> int:
    if args.spec:
        return _run_matrix(args)
    result, out_dir = run(run_options(args))
    print_result(args, result, out_dir)
    write_html_if_asked(args, out_dir)
    return 0


def _run_matrix(args):
    matrix = spec.load(args.spec)  # every configuration and workload is checked before anything runs
    index, out_dir = run_spec(matrix, run_options(args), progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(f"{'workload':<20} {'config':<24} {'repeat':>6} {'time':>8}  result")
    for r in index["runs"]:
        status = f"failed: {r['error']}" if "error" in r else str(out_dir / r["dir"])
        print(f"{r['workload']:<20} {r['config']:<24} {r['repeat']:>6} {r['elapsed_s']:>7.1f}s  {status}")
    print(f"\nindex: {out_dir / rundir.INDEX_FILE}", file=sys.stderr)
    write_html_if_asked(args, out_dir)
    return 1 if any("error" in r for r in index["runs"]) else 0
