"""`fsprof run`: provision each filesystem, run the workload under tracing, write result.json.

Order per filesystem: provision (scratch loop image, or a device the user named) -> settle ->
point the probes at its devices -> launch the workload gated -> snapshot in-kernel aggregates and
/sys/block counters -> undo the filesystem. Sysctls hold for the whole run.
"""

import dataclasses
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import __version__, behind, filesystems
from ..machine import blockdev, device_model, kthreads, scratch, settings, undo
from ..machine.device_model import DeviceModel
from ..trace import maps
from ..analysis.assemble import assemble
from ..trace.maps import EXEMPLARS
from .collect import DEFAULT_STACK_SAMPLE, DEFAULT_TAIL_NS, Collector
from ..machine.conditions import sysctls_in_force
from ..errors import FsprofError
from ..views.flamegraph import write_default_set
from ..machine.mounts import mount_of
from .. import rundir
from ..rundir import SCHEMA
from ..machine.workload import GatedProcess, WorkloadSpec, image_size
from ..verify import expectations_for, verify_scratch

if TYPE_CHECKING:
    from ..machine.spec import Config, Spec, Workload


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunOptions:
    """What `fsprof run` (and `run --spec`) is asked; profiler/commands/run.py builds it. A spec sets
    the filesystems, options and workloads itself: run_spec reads only output, scratch_dir,
    sample_hz, stack_sample and go_on."""

    fs: str  # comma-separated; a name again is a second configuration
    workload: str  # a bundled workload's name (its image size even with a command)
    workload_args: tuple[str, ...] = ()  # the bundled workload's own options
    command_argv: tuple[str, ...] = ()  # `-- CMD ARGS`, run instead of the workload when given
    mkfs_options: tuple[str, ...] = ()  # each '[FS=]OPTS'
    mount_options: tuple[str, ...] = ()  # each '[FS=]OPTS'
    sysctl: tuple[str, ...] = ()  # each 'NAME=VALUE'
    scheduler: str | None = None
    drop_caches: bool = False
    image_size: int | None = None  # bytes; None: the workload's own
    loop_io: str = scratch.FsConfig.loop_io
    device_model: DeviceModel | None = None  # dm-delay and/or null_blk's cache under the scratch fs
    devices: int = 1
    scratch_dir: str
    device: str | None = None
    erase_device: bool = False
    force_erase: bool = False
    output: str | None = None
    go_on: bool = False
    sample_hz: int
    stack_sample: int = DEFAULT_STACK_SAMPLE
    tail_threshold_ns: int = DEFAULT_TAIL_NS
    exemplars: int = EXEMPLARS  # the slowest calls kept whole per op


def per_fs_option(values: Iterable[str] | None, fs_names: list[str], what: str, sep: str) -> dict[str, str]:
    """--mkfs-options / --mount-options values are '[FS=]OPTS'; a value without a known
    filesystem prefix applies to every filesystem of the run. Returns {fs: OPTS joined by sep}."""
    out: dict[str, list[str]] = {}
    for value in values or []:
        prefix, has_eq, rest = value.partition("=")
        if has_eq and prefix in filesystems.NAMES:
            if prefix not in fs_names:
                raise FsprofError(f"{what} '{value}' names {prefix}, which is not among --fs {','.join(fs_names)}")
            targets, opts = [prefix], rest
        else:
            targets, opts = fs_names, value
        for fs in targets:
            out.setdefault(fs, []).append(opts)
    return {fs: sep.join(opts) for fs, opts in out.items()}


def parse_sysctls(values: Iterable[str] | None) -> list[tuple[str, str]]:
    out = []
    for value in values or []:
        name, sep, val = value.partition("=")
        if not sep or not name:
            raise FsprofError(f"--sysctl '{value}' is not NAME=VALUE (e.g. vm.dirty_bytes=100000)")
        out.append((name, val))
    return out


def build_configs(options: RunOptions) -> list[scratch.FsConfig]:
    names = [n.strip() for n in options.fs.split(",") if n.strip()]
    if not names:
        raise FsprofError("--fs names no filesystem; give e.g. --fs ext4,xfs,btrfs")
    for name in names:
        filesystems.row(name)
    mkfs = per_fs_option(options.mkfs_options, names, "--mkfs-options", " ")
    mount = per_fs_option(options.mount_options, names, "--mount-options", ",")
    multi = filesystems.MULTI_DEVICE
    if options.devices > 1 and not set(multi) & set(names):
        raise FsprofError(
            f"--devices {options.devices} applies to {', '.join(multi)} only, and --fs has no {' or '.join(multi)}"
        )
    seen: dict[str, int]
    configs, seen = [], {}
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        label = name if seen[name] == 1 else f"{name}-{seen[name]}"
        opts = shlex.split(mkfs.get(name, ""))
        configs.append(
            scratch.FsConfig(
                fs=name,
                mkfs_options=opts,
                mount_options=mount.get(name, ""),
                size_bytes=options.image_size or image_size(options.workload),
                devices=options.devices if name in multi else 1,
                label=label,
                loop_io=options.loop_io,
                device_model=options.device_model,
            )
        )
    return configs


def _syncfs(path):
    subprocess.run(["sync", "-f", str(path)], check=False)


def measure(
    collector: Collector,
    sfs: scratch.ScratchFs,
    workload: WorkloadSpec,
    out_dir: Path,
    drop_caches: bool,
    changes: undo.Changes | None = None,
) -> dict[str, Any]:
    """One traced workload run on a provisioned filesystem; returns its result entry. `workload`
    is a WorkloadSpec. With `changes`, the workload is journaled so that a cleanup after SIGKILL
    stops it."""
    assert sfs.config.label is not None  # FsConfig.__post_init__ sets it
    label_dir = out_dir / sfs.config.label
    label_dir.mkdir(parents=True, exist_ok=True)
    result_file = label_dir / "workload.json"
    workdir = Path(sfs.mountpoint) / "fsprof-work"
    workdir.mkdir(exist_ok=True)
    _syncfs(sfs.mountpoint)  # start from a clean filesystem: nothing of mkfs/mount left to write
    if drop_caches:
        settings.drop_caches()

    block_devs = {kdev: name for name, kdev in sfs.block_devs}
    target = behind.Target(sfs.config.fs, sfs.dev, block_devs, str(sfs.mountpoint))
    collector.set_targets([target])
    # reset() between two equal reads of /sys/block with nothing in flight: a request that ends
    # after the kernel's first count began must have started after the probes' did.
    threads = kthreads.find(sfs.config.fs, block_devs.values())
    _, before, quiet_at_start = blockdev.read_settled(block_devs.values(), collector.reset)
    threads_before = kthreads.read(threads)
    steal_before = kthreads.steal_ns()
    space_at_start = blockdev.space(sfs.mountpoint)
    proc = GatedProcess(
        workload.argv(str(result_file), sfs.mountpoint),
        cwd=str(workdir),
        env=workload.env(label_dir),
        read_results=bool(workload.command),
    )
    try:
        if changes is not None:
            undo.record_process(changes, proc.pid)
        collector.trace_pid(proc.pid)
        start_ns = time.monotonic_ns()
        proc.release()
        status = proc.wait()
    except BaseException:
        proc.kill()
        raise
    end_ns = time.monotonic_ns()
    elapsed = time.monotonic() - proc.started
    # The filesystem keeps writing after the workload ends (a btrfs transaction commit's metadata
    # writes, ...): the snapshot is taken between two equal reads of /sys/block with nothing in
    # flight, so that both count the same requests.
    raw, after, settled = blockdev.read_settled(block_devs.values(), collector.snapshot)
    threads_after = kthreads.read(threads)
    steal = kthreads.steal_ns() - steal_before
    space_at_end = blockdev.space(sfs.mountpoint)
    raw["phase_start_ns"][0] = start_ns  # phase 0 starts when the workload is let go
    own = workload.own_result(result_file, status, label_dir)
    if workload.command:
        own["reported"] = proc.reported  # its RESULT lines: units of work for compare --unit

    first = sfs.block_devs[0][0]
    entry = {
        "label": sfs.config.label,
        "fs": sfs.config.fs,
        "mkfs_options": list(sfs.config.mkfs_options),
        "mount_options": sfs.config.mount_options,
        "device": {
            "name": first,
            "dev": blockdev.kdev_str(sfs.block_devs[0][1]),
            "all": [name for name, _ in sfs.block_devs],
            **blockdev.queue_info(first),
            "test_bed": {
                **blockdev.test_bed(first),
                # An emulated device's model: dm-delay's delays, null_blk's volatile write cache.
                **({"device_model": sfs.config.device_model.as_dict()} if sfs.config.device_model else {}),
            },
        },
        # What the kernel took, not what was asked: options it ignored or defaulted show here.
        "mount_options_in_force": (mount_of(sfs.mountpoint) or {}).get("options", ""),
        "caches_dropped": bool(drop_caches),
        # How large and how full the filesystem was: a small or full one makes a filesystem
        # reserve and flush for space (btrfs tickets), a figure of the test bed, not of the workload.
        "space": {
            "size_bytes": space_at_start["size_bytes"],
            "used_bytes_start": space_at_start["used_bytes"],
            "used_bytes_end": space_at_end["used_bytes"],
        },
        "superblock_dev": blockdev.kdev_str(sfs.dev),
        "elapsed_s": elapsed,
        # CPU outside the traced calls is the user part: the workload decomposition's (compare).
        "workload_cpu": proc.cpu(),
        "workload": own,
        **assemble(raw, target, [workload.phase0, *own.get("phases", [])], end_ns),
        "kernel_counters": {name: blockdev.stat_delta(before[name], after[name]) for name in before},
        # False: the devices did not go quiet within 5 s at the start or the end, and the block
        # counts above may differ from kernel_counters by the requests that ended in between.
        "kernel_counters_settled": quiet_at_start and settled,
        # The filesystem's own kernel threads over the run (all their work, linked to an op or not).
        "kernel_threads": kthreads.delta(threads_before, threads_after),
        # Time the hypervisor took from the machine's CPUs over the run (in 10 ms ticks).
        "steal_ns": steal,
    }
    for name in block_devs.values():  # every device under test, every class, even at zero
        dev = entry["block"].setdefault(name, {})
        for cls in maps.BLK_CLASSES:
            dev.setdefault(cls, {"count": 0, "bytes": 0})
    return entry


def provision_one(
    changes: undo.Changes, config: scratch.FsConfig, options: RunOptions, scratch_dir: str, first: bool
) -> scratch.ScratchFs:
    if not options.device:
        return scratch.provision(changes, config, scratch_dir)
    # The device is checked for a signature before the first filesystem only: the next one finds
    # the filesystem fsprof itself just made there.
    return scratch.provision_device(
        changes,
        config,
        options.device,
        erase=options.erase_device,
        force=options.force_erase or not first,
        scratch_dir=scratch_dir,
    )


def check_settings(
    sfs: scratch.ScratchFs,
    sysctls: dict[str, str] | list[tuple[str, str]],
    scheduler: str | None,
    go_on: bool,
    progress: Callable[[str], None] | None = None,
) -> tuple[dict[str, Any] | None, list[str]]:
    """Verify (profiler/verify/__init__.py) that what this configuration sets took effect, by what the
    kernel does in a short probe, before the workload runs: a comparison of settings that were
    silently ignored compares something else. Refuses unless go_on; returns (verify's report as
    data or None, warnings)."""
    expectations = expectations_for(sfs.config, sysctls, scheduler)
    loop = loop_io_warnings(sfs)
    if not expectations:
        return None, loop
    report = verify_scratch(sfs, expectations, progress=progress)
    warnings = report.summary_lines()
    if warnings and not go_on:
        raise FsprofError(
            "a setting did not take effect, so this run would not measure what it names: "
            + "; ".join(warnings)
            + " (`fsprof verify` shows the evidence; --go-on runs anyway "
            "and puts this warning at the top of the report)",
            exit_code=1,
        )
    return report.to_json(), warnings + loop


def loop_io_warnings(sfs: scratch.ScratchFs) -> list[str]:
    """Direct I/O asked of a scratch loop device and kept off by the kernel (its backing filesystem
    cannot do it, e.g. tmpfs): the run goes on, buffered, and says so (docs/test-bed.md)."""
    if not sfs.images or sfs.config.loop_io != "direct":
        return []
    out = []
    for dev in sfs.devices:
        bed = blockdev.test_bed(os.path.basename(dev))
        if bed["kind"] == "loop" and not bed["direct_io"]:
            out.append(
                f"{os.path.basename(dev)}: direct I/O was asked (--loop-io direct) but the kernel kept it "
                f"off (the filesystem holding {bed['backing_file']} cannot do it): its reads and flushes "
                "go through the host's page cache"
            )
    return out


def _say(line):
    print(line, file=sys.stderr, flush=True)


def run(options: RunOptions) -> tuple[dict[str, Any], Path]:
    configs = build_configs(options)
    sysctls = parse_sysctls(options.sysctl)
    # A bad workload parameter fails before anything is touched.
    workload = WorkloadSpec.checked(options.workload, options.workload_args, options.command_argv)
    if options.device_model:
        device_model.check_available(options.device_model)
    out_dir = rundir.make_out_dir(options.output)
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "fsprof_version": __version__,
        "kernel": platform.release(),
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "workload": workload.describe(),
        "sysctls": dict(sysctls),
        "warnings": [],
        "filesystems": [],
    }
    with undo.Changes() as run_changes:
        scratch_dir = scratch.make_scratch_dir(run_changes, Path(options.scratch_dir) / out_dir.name)
        for name, value in sysctls:
            settings.set_sysctl(run_changes, name, value)
        result["sysctls_in_force"] = sysctls_in_force()
        names = sorted({config.fs for config in configs})
        with Collector(
            sample_hz=options.sample_hz,
            fs=names,
            stack_sample=options.stack_sample,
            tail_ns=options.tail_threshold_ns,
            exemplars=options.exemplars,
        ) as collector:
            result["probes_skipped"] = collector.skipped
            result["unavailable"] = collector.unavailable
            for i, config in enumerate(configs):
                with undo.Changes() as changes:
                    sfs = provision_one(changes, config, options, scratch_dir, first=i == 0)
                    if options.scheduler:
                        for name in sfs.request_devices():
                            settings.set_scheduler(changes, name, options.scheduler)
                    verified, warnings = check_settings(sfs, sysctls, options.scheduler, options.go_on, _say)
                    entry = measure(collector, sfs, workload, out_dir, options.drop_caches, changes)
                    result["filesystems"].append({**entry, "verify": verified} if verified else entry)
                    result["warnings"].extend(warnings)
                # Written after each filesystem: an interrupted run keeps what it measured.
                rundir.write_result(out_dir, result)
    write_default_set(out_dir, result)
    return result, out_dir


def run_spec_one(
    collector: Collector,
    spec: "Spec",
    workload: "Workload",
    cfg: "Config",
    run_dir: Path,
    scratch_dir: str,
    erased: set[str],
    go_on: bool = False,
) -> dict[str, Any]:
    """One (workload, configuration) of a spec on a fresh filesystem: its sysctls and scheduler
    hold for this run only. Writes run_dir/result.json (the same schema as `fsprof run`)."""
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "fsprof_version": __version__,
        "kernel": platform.release(),
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "workload": workload.spec.describe(),
        "sysctls": dict(cfg.sysctls),
        "spec": {
            "file": str(spec.path),
            "config": cfg.name,
            "workload": workload.name,
            **({"unit": workload.unit} if workload.unit else {}),
        },
        "probes_skipped": collector.skipped,
        "unavailable": collector.unavailable,
        "filesystems": [],
    }
    run_dir.mkdir(parents=True, exist_ok=True)
    with undo.Changes() as changes:
        for name, value in cfg.sysctls.items():
            settings.set_sysctl(changes, name, value)
        result["sysctls_in_force"] = sysctls_in_force()
        sfs = cfg.provision(changes, scratch_dir, erased)
        if cfg.scheduler:
            for name in sfs.request_devices():
                settings.set_scheduler(changes, name, cfg.scheduler)
        verified, result["warnings"] = check_settings(sfs, cfg.sysctls, cfg.scheduler, go_on)
        entry = measure(collector, sfs, workload.spec, run_dir, spec.drop_caches, changes)
        result["filesystems"].append({**entry, "verify": verified} if verified else entry)
    rundir.write_result(run_dir, result)
    write_default_set(run_dir, result)
    return result


def run_spec(spec: "Spec", options: RunOptions, progress: Callable[[str], None] = print) -> tuple[dict[str, Any], Path]:
    """Every (repeat, workload, configuration) of a spec, repeats interleaved; one result
    directory per run (OUT/<workload>/<config>[/rep<N>]) and OUT/index.json listing them. A run
    that fails is recorded with its reason and the matrix goes on."""
    for model in {cfg.device_model for cfg in spec.configs if cfg.device_model}:
        device_model.check_available(model)
    out_dir = rundir.make_out_dir(options.output)
    index: dict[str, Any] = {
        "schema": rundir.INDEX_SCHEMA,
        "spec": str(spec.path),
        "description": spec.description,
        "repeats": spec.repeats,
        "runs": [],
    }
    plan = spec.plan()
    sample_hz = spec.sample_hz if spec.sample_hz is not None else options.sample_hz
    stack_sample = spec.stack_sample if spec.stack_sample is not None else options.stack_sample
    with undo.Changes() as run_changes:
        scratch_dir = scratch.make_scratch_dir(run_changes, Path(options.scratch_dir) / out_dir.name)
        erased: set[str] = set()
        names = sorted({cfg.fs for _, _, cfg in plan})
        with Collector(
            sample_hz=sample_hz,
            fs=names,
            stack_sample=stack_sample,
            tail_ns=options.tail_threshold_ns,
            exemplars=options.exemplars,
        ) as collector:
            for i, (rep, workload, cfg) in enumerate(plan, 1):
                rel = Path(workload.name) / cfg.name
                if spec.repeats > 1:
                    rel /= f"rep{rep}"
                progress(
                    f"[{i}/{len(plan)}] {workload.name} on {cfg.name}"
                    + (f" (repeat {rep})" if spec.repeats > 1 else "")
                    + " ..."
                )
                entry = {"workload": workload.name, "config": cfg.name, "repeat": rep, "dir": str(rel)}
                started = time.monotonic()
                try:
                    run_spec_one(collector, spec, workload, cfg, out_dir / rel, scratch_dir, erased, options.go_on)
                except (FsprofError, OSError) as e:
                    entry["error"] = str(e) if isinstance(e, FsprofError) else f"{e.strerror}: {e.filename}"
                    progress(f"    failed: {e}")
                entry["elapsed_s"] = round(time.monotonic() - started, 2)
                index["runs"].append(entry)
                rundir.write_index(out_dir, index)
    return index, out_dir
