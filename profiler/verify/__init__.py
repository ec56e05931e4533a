"""`fsprof verify`'s checks: did the barrier, writeback, journal and mount settings take effect?
Checked by what the kernel did during short purpose-built probe workloads on the mounted
filesystem, not by what the configuration says (docs/verify.md). Its command line is
profiler/commands/verify.py.

verify_mount(path, expectations) checks a mounted filesystem and returns a Report
(report.failures(), report.summary_lines(), report.to_json(); render(report) is its text);
verify_spec(spec_path, scratch_root) checks every configuration of an experiment matrix, in
scratch. parse_expectation("KEY=VALUE") reads an expectation the user wrote;
expectations_for(config, sysctls, scheduler) derives those of a run configuration (`fsprof run`).

The BPF object is loaded only when a verify runs (probe.py).

Over 500 lines: choosing, running and rendering the checks of one verify share its report;
the probes are probe.py and the judgements checks.py.
"""

import dataclasses
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from .. import filesystems
from ..errors import FsprofError
from ..machine import scratch, settings, undo
from ..machine.spec import load as load_spec
from ..units import parse_size
from ..trace.libbpf import check_privileges
from . import checks as vc, probe as vp
from .checks import CANNOT_TELL, NOT_IN_EFFECT, btrfs_commit_within, compress_name

SCHEMA = "fsprof.verify/1"
DEFAULT_PATIENCE_S = 12.0
EXT, JOURNALLED = filesystems.served_by("ext4"), ("ext3", "ext4")
ALL_FS = filesystems.NAMES
SYSCTL_KEYS = (
    "vm.dirty_bytes",
    "vm.dirty_ratio",
    "vm.dirty_background_bytes",
    "vm.dirty_background_ratio",
    "vm.dirty_writeback_centisecs",
    "vm.dirty_expire_centisecs",
)
ON, OFF = ("on", "1", "yes", "true"), ("off", "0", "no", "false")


# ---------------------------------------------------------------------------------------------
# Expectations: what can be checked, where, and how a value is written


def _on_off(value):
    v = value.lower()
    if v in ON:
        return "on"
    if v in OFF:
        return "off"
    raise ValueError("on or off")


def _whole(value):
    if not value.isdigit():
        raise ValueError("a whole number")
    return str(int(value))


def _one_of(*choices):
    def parse(value):
        if value.lower() not in choices:
            raise ValueError(" or ".join(choices))
        return value.lower()

    return parse


def _size(value):
    try:
        n = parse_size(value)
    except ValueError:
        n = 0
    if n <= 0:
        raise ValueError("a size like 32k or 256k")
    return value.strip().lower()


def _compress(value):
    name = compress_name(value)
    if name not in ("none", "zlib", "lzo", "zstd"):
        raise ValueError("none, zlib, lzo or zstd")
    return name


def _word(value):
    if not value or any(c.isspace() for c in value):
        raise ValueError("a name like mq-deadline")
    return value


@dataclasses.dataclass(frozen=True)
class KeySpec:
    phase: str  # the probe that shows it: fsync, dirty, atime, timing
    filesystems: tuple  # where it applies
    parse: Callable[[str], str]  # value text -> canonical value, ValueError(what it should be)
    what: str  # for the sentence when it does not apply


KEYS = {
    "barrier": KeySpec("fsync", ALL_FS, _on_off, "cache flushes on fsync"),
    "vm.dirty_bytes": KeySpec("dirty", ALL_FS, _whole, "the dirty limit"),
    "vm.dirty_ratio": KeySpec("dirty", ALL_FS, _whole, "the dirty limit"),
    "vm.dirty_background_bytes": KeySpec("dirty", ALL_FS, _whole, "the background threshold"),
    "vm.dirty_background_ratio": KeySpec("dirty", ALL_FS, _whole, "the background threshold"),
    "vm.dirty_writeback_centisecs": KeySpec("timing", ALL_FS, _whole, "the flusher's period"),
    "vm.dirty_expire_centisecs": KeySpec("timing", ALL_FS, _whole, "the dirty expiry"),
    "commit": KeySpec("timing", ("ext3", "ext4", "btrfs"), _whole, "the commit interval"),
    "journal": KeySpec("fsync", EXT, _on_off, "the ext journal"),
    "data": KeySpec("fsync", JOURNALLED, _one_of("journal", "ordered", "writeback"), "ext3/ext4 data journalling"),
    "fast_commit": KeySpec("fsync", ("ext4",), _on_off, "ext4 fast commits"),
    "delalloc": KeySpec("fsync", JOURNALLED, _on_off, "ext4 delayed allocation"),
    "logbsize": KeySpec("fsync", ("xfs",), _size, "the XFS log buffer size"),
    "logbufs": KeySpec("fsync", ("xfs",), _whole, "the XFS log buffer count"),
    "compress": KeySpec("fsync", ("btrfs",), _compress, "btrfs compression"),
    "atime": KeySpec("atime", ALL_FS, _one_of("noatime", "relatime", "strictatime"), "access time updates"),
    "scheduler": KeySpec("fsync", ALL_FS, _word, "the I/O scheduler"),
}
ALIASES = {
    **{k.removeprefix("vm."): k for k in SYSCTL_KEYS},
    "compress-force": "compress",
    "barriers": "barrier",
    "io_scheduler": "scheduler",
}
# What `verify` without --expect reports, in this order (the first applicable of a family).
OBSERVED_KEYS = (
    "barrier",
    "journal",
    "data",
    "commit",
    "fast_commit",
    "delalloc",
    "logbsize",
    "logbufs",
    "compress",
    "atime",
    "scheduler",
    "vm.dirty_bytes",
    "vm.dirty_background_bytes",
    "vm.dirty_writeback_centisecs",
    "vm.dirty_expire_centisecs",
)


@dataclasses.dataclass(frozen=True)
class Expectation:
    key: str
    value: str
    source: str = "--expect"

    def __str__(self) -> str:
        return f"{self.key}={self.value}"


def usage(sentence: str) -> FsprofError:
    return FsprofError(sentence, exit_code=2)


class NotApplicable(FsprofError):
    """An expectation of a setting the filesystem does not have: a usage error (exit 2), which a
    spec's verify must not record as one configuration's failure."""

    def __init__(self, sentence: str) -> None:
        super().__init__(sentence, exit_code=2)


def parse_expectation(text: str, source: str = "--expect") -> Expectation:
    """KEY=VALUE -> Expectation, or a usage error (exit 2) in one sentence."""
    key, eq, value = text.partition("=")
    key = ALIASES.get(key.strip().lower(), key.strip().lower())
    if not eq or not key:
        raise usage(f"--expect '{text}' is not KEY=VALUE (e.g. barrier=on, vm.dirty_bytes=100000)")
    if key not in KEYS:
        raise usage(f"--expect key '{key}' is not one verify knows; known keys: {', '.join(KEYS)}")
    try:
        return Expectation(key, KEYS[key].parse(value.strip()), source)
    except ValueError as e:
        raise usage(f"--expect {key}={value} is not valid: {key} takes {e}") from None


def expectations_for(
    config: scratch.FsConfig,
    sysctls: dict[str, str] | Iterable[tuple[str, str]] = (),
    scheduler: str | None = None,
) -> list[Expectation]:
    """The expectations a run configuration states: its mount options and mkfs features (a
    scratch.FsConfig), the run's sysctls ({name: value} or [(name, value)]) and I/O scheduler.
    Only what the configuration sets explicitly; sysctls verify cannot check are left out."""
    out: dict[str, Expectation] = {}
    src = f"{config.label} mount options"
    for opt in filter(None, (o.strip() for o in config.mount_options.split(","))):
        name, eq, value = opt.partition("=")
        found = _mount_option_expectation(config.fs, name, value if eq else None)
        if found:
            out[found[0]] = Expectation(found[0], found[1], src)
    for key, value in _mkfs_expectations(config.fs, config.mkfs_options):
        out[key] = Expectation(key, value, f"{config.label} mkfs options")
    items = sysctls.items() if isinstance(sysctls, dict) else sysctls
    for name, value in items:
        if name in SYSCTL_KEYS and str(value).strip().isdigit():
            out[name] = Expectation(name, str(int(value)), "sysctl")
    if scheduler:
        out["scheduler"] = Expectation("scheduler", scheduler, "--scheduler")
    return [e for e in out.values() if config.fs in KEYS[e.key].filesystems]


def _mount_option_expectation(fs, name, value):
    if name in ("barrier", "nobarrier"):
        on = name == "barrier" and value in (None, "1")
        return "barrier", "on" if on else "off"
    if name == "commit" and value and value.isdigit():
        return "commit", str(int(value))
    if name == "data" and value in ("journal", "ordered", "writeback"):
        return "data", value
    if name in ("noatime", "relatime", "strictatime"):
        return "atime", name
    if name in ("delalloc", "nodelalloc"):
        return "delalloc", "on" if name == "delalloc" else "off"
    if name == "logbufs" and value and value.isdigit():
        return "logbufs", value
    if name == "logbsize" and value:
        return "logbsize", _size(value)
    if name in ("compress", "compress-force"):
        return "compress", compress_name(value or "zlib")
    return None


def _mkfs_expectations(fs, mkfs_options):
    """has_journal / fast_commit from mke2fs -O features (and ext2, which has none)."""
    if fs not in EXT:
        return []
    out = {}
    opts = list(mkfs_options)
    for i, opt in enumerate(opts):
        features = opts[i + 1] if opt == "-O" and i + 1 < len(opts) else opt[2:] if opt.startswith("-O") else ""
        for feature in filter(None, features.split(",")):
            name = feature.lstrip("^")
            if name in ("has_journal", "fast_commit"):
                out["journal" if name == "has_journal" else name] = "off" if feature.startswith("^") else "on"
        if opt == "-j":
            out["journal"] = "on"
    return list(out.items())


# ---------------------------------------------------------------------------------------------
# The report


@dataclasses.dataclass
class Report:
    mountpoint: str
    fs: str
    devices: list
    disks: list
    bdi: str
    checks: list
    written_bytes: int
    elapsed_s: float
    patience_s: float
    phases: dict
    inodes: dict
    probes_skipped: dict

    def failures(self) -> list[vc.Check]:
        """The checks whose expectation does not hold."""
        return [c for c in self.checks if c.verdict == NOT_IN_EFFECT]

    def undecided(self) -> list[vc.Check]:
        return [c for c in self.checks if c.verdict == CANNOT_TELL]

    @property
    def ok(self) -> bool:
        return not self.failures()

    def summary_lines(self) -> list[str]:
        """One line per setting that did not take effect."""
        return [f"{self.mountpoint}: {c.setting}={c.expected} not in effect: {c.why}" for c in self.failures()]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "mount": self.mountpoint,
            "fs": self.fs,
            "devices": self.devices,
            "disks": self.disks,
            "bdi": self.bdi,
            "written_bytes": self.written_bytes,
            "elapsed_s": round(self.elapsed_s, 2),
            "patience_s": self.patience_s,
            "ok": self.ok,
            "phases": self.phases,
            "inodes": self.inodes,
            "probes_skipped": self.probes_skipped,
            "checks": [c.to_json() for c in self.checks],
        }


def render(report: Report) -> str:
    lines = [
        f"fsprof verify: {report.mountpoint} ({report.fs} on {', '.join(report.devices)}; "
        f"{_mib(report.written_bytes)} written in a temporary directory, removed; {report.elapsed_s:.1f} s)",
        "",
    ]
    header = f"{'SETTING':<30} {'EXPECTED':<12} {'IN EFFECT':<40} VERDICT"
    lines += [header, "-" * len(header)]
    for c in report.checks:
        verdict = c.verdict.upper() if c.verdict != "observed" else "-"
        lines.append(f"{c.setting:<30} {c.expected or '-':<12} {c.state:<40} {verdict}")
        lines.append(f"    configured: {c.configured}")
        lines.append(f"    kernel did: {c.kernel_did}")
        if c.why:
            lines.append(f"    why: {c.why}")
    if report.probes_skipped:
        lines.append("")
        lines.append("probes this kernel lacks: " + "; ".join(f"{p} ({w})" for p, w in report.probes_skipped.items()))
    return "\n".join(lines)


def _mib(n):
    return f"{n / (1 << 20):.1f} MiB"


# ---------------------------------------------------------------------------------------------
# Running a verify


def _wanted(target, expectations):
    """[(key, expected value or None)] for this filesystem; a key that does not apply is a usage error.
    expectations None: every check that applies, reporting what is in effect."""
    if expectations is not None:
        out = []
        for e in expectations:
            spec = KEYS[e.key]
            if target.fs not in spec.filesystems:
                raise NotApplicable(
                    f"{e.key}= does not apply to {target.fs} ({target.mountpoint}): {spec.what} "
                    f"is a setting of {', '.join(spec.filesystems)}"
                )
            out = [(k, v) for k, v in out if k != e.key] + [(e.key, e.value)]
        return out
    keys = [k for k in OBSERVED_KEYS if target.fs in KEYS[k].filesystems]
    if target.ext and not _has_journal(target):
        keys = [k for k in keys if k not in ("data", "commit", "fast_commit")]
    return [(k, None) for k in keys]


def _has_journal(target):
    return Path(f"/proc/fs/jbd2/{target.devices[0][0]}-8").exists()


def _read_sysctls():
    out = {}
    for name in SYSCTL_KEYS:
        try:
            out[name] = int(Path("/proc/sys", name.replace(".", "/")).read_text())
        except (OSError, ValueError):
            pass
    return out


def timing_horizon(
    target: vp.FsTarget, wanted: list[tuple[str, str | None]], sysctls: dict[str, int], ext4_commit: int
) -> float:
    """How long the timing phase must watch for every timing check to be decided (seconds)."""
    interval = sysctls.get("vm.dirty_writeback_centisecs", 500) / 100
    needs = []
    for key, expected in wanted:
        if KEYS[key].phase != "timing":
            continue
        exp = None if expected is None else int(expected)
        if key == "vm.dirty_writeback_centisecs":
            base = min(interval, exp / 100) if exp is not None else interval
            needs.append(2 * base + 0.5 if base else 5)
        elif key == "vm.dirty_expire_centisecs":
            conf = sysctls.get(key, 3000) / 100
            base = min(conf, exp / 100) if exp is not None else conf
            needs.append(base + interval + 1)
        elif key == "commit":
            conf = ext4_commit if target.ext else _btrfs_commit(target)
            base = min(conf, exp or conf) if exp is not None else conf
            needs.append(base + 1.5 if target.ext else btrfs_commit_within(base) + base + 0.3)
    return max(needs) if needs else 0


def _btrfs_commit(target):
    value = target.option_words().get("commit")
    return int(value) if value else 30


def _enough(wanted, target, sysctls):
    """Whether the timing data so far decides every timing check, to end the wait early: an
    expectation that took effect is decided; so is a report of what is in effect once it has two
    commits, three flusher runs or the dirtied file written."""
    timing = [(k, v) for k, v in wanted if KEYS[k].phase == "timing"]

    def enough(so_far):
        ev = vc.Evidence(target, {"timing": so_far}, sysctls)
        for key, expected in timing:
            c = judge(ev, key, expected)
            if expected is not None and c.verdict != vc.TOOK_EFFECT:
                return False
            if expected is None and not _seen_enough(key, c.evidence):
                return False
        return True

    return enough


def _seen_enough(key, evidence):
    if key == "commit":
        return len(evidence.get("ages_s", evidence.get("by_kthread_at_s", []))) >= 2
    if key == "vm.dirty_writeback_centisecs":
        return evidence["runs"] >= 3
    return "age_s" in evidence


PHASE_ORDER = ("fsync", "dirty", "atime", "timing")


def planned_bytes(phases: Iterable[str]) -> int:
    sizes = {
        "fsync": vp.FSYNC_WRITES * vp.FSYNC_CHUNK,
        "dirty": vp.DIRTY_BYTES,
        "atime": vp.ATIME_BYTES,
        "timing": 2 * vp.PAGE,
    }
    return sum(sizes[p] for p in phases)


def verify_mount(
    path: str,
    expectations: list[Expectation] | None = None,
    patience: float = DEFAULT_PATIENCE_S,
    progress: Callable[[str], object] | None = None,
) -> Report:
    """Verify the filesystem mounted at `path` against `expectations` (a list of Expectation; None:
    report what is in effect for every check; []: nothing to check, an empty report at once).
    Loads bpf/verify.bpf.o for the length of the call (independent of a running Collector) and
    writes only in a temporary directory under `path`, removed before returning. Usage errors
    (not a mount point, tmpfs, read-only, a key that does not apply) raise FsprofError with
    exit_code 2. progress(line) hears what it is about to do."""
    say = progress or (lambda line: None)
    started = time.monotonic()
    target = vp.describe_mount(path)
    wanted = _wanted(target, expectations)
    if not wanted:
        return _report(target, [], {}, 0, started, patience, {})
    phases = [p for p in PHASE_ORDER if any(KEYS[k].phase == p for k, _ in wanted)]
    sysctls = _read_sysctls()
    ext4_commit = vc.commit_configured(vc.Evidence(target, {}, sysctls))[0] if target.ext else 0
    horizon = min(patience, timing_horizon(target, wanted, sysctls, ext4_commit))
    check_privileges()
    say(
        f"fsprof verify: writing about {_mib(planned_bytes(phases))} in a temporary directory under "
        f"{target.mountpoint} (removed after); probes: {', '.join(phases)}"
        + (f"; the timing probe watches up to {horizon:.0f} s" if "timing" in phases else "")
    )
    data, written, skipped = _run_probes(target, phases, wanted, horizon, sysctls, say)
    ev = vc.Evidence(target, data, sysctls)
    return _report(
        target, [judge(ev, key, expected) for key, expected in wanted], data, written, started, patience, skipped
    )


def _run_probes(target, phases, wanted, horizon, sysctls, say):
    """(data by phase, bytes written, probes the kernel lacks): the tracer loaded, the probes run
    in their temporary directory, both gone on return."""
    data = {}
    tracer = vp.Tracer(target)
    try:
        with vp.Workdir(target.mountpoint) as work:
            for phase in phases:
                say(f"  probe: {phase}")
                if phase == "timing":
                    data[phase] = vp.timing_phase(tracer, work, horizon, _enough(wanted, target, sysctls))
                else:
                    data[phase] = getattr(vp, f"{phase}_phase")(tracer, work)
            written = work.written
        return data, written, dict(tracer.skipped)
    finally:
        tracer.close()


def _report(target, checks, data, written, started, patience, skipped):
    inodes = {
        role: ino
        for role, ino in (
            ("fsync", data.get("fsync", {}).get("ino")),
            ("atime", data.get("atime", {}).get("ino")),
            ("expire", data.get("timing", {}).get("expire_ino")),
        )
        if ino
    }
    phases = {p: {"start_ns": d["start_ns"], "end_ns": d["end_ns"]} for p, d in data.items() if p != "atime"}
    return Report(
        mountpoint=target.mountpoint,
        fs=target.fs,
        devices=[n for n, _ in target.devices],
        disks=[n for n, _ in target.disks],
        bdi=target.bdi,
        checks=checks,
        written_bytes=written,
        elapsed_s=time.monotonic() - started,
        patience_s=patience,
        phases=phases | _atime_windows(data),
        inodes=inodes,
        probes_skipped=skipped,
    )


def _atime_windows(data):
    a = data.get("atime")
    if not a:
        return {}
    out = {}
    for n in ("a", "b"):
        out[f"atime_{n}_read"] = {"start_ns": a[n]["start_ns"], "end_ns": a[n]["end_ns"]}
        out[f"atime_{n}_sync"] = {"start_ns": a[n]["sync_start_ns"], "end_ns": a[n]["sync_end_ns"]}
    return out


def judge(ev: vc.Evidence, key: str, expected: str | None) -> vc.Check:
    if key.startswith("vm.dirty_") and KEYS[key].phase == "dirty":
        return vc.judge_dirty(ev, key, expected)
    return {
        "barrier": vc.judge_barrier,
        "vm.dirty_writeback_centisecs": vc.judge_writeback_interval,
        "vm.dirty_expire_centisecs": vc.judge_expire,
        "commit": vc.judge_commit,
        "journal": vc.judge_journal,
        "data": vc.judge_data,
        "fast_commit": vc.judge_fast_commit,
        "delalloc": vc.judge_delalloc,
        "logbsize": vc.judge_logbsize,
        "logbufs": vc.judge_logbufs,
        "compress": vc.judge_compress,
        "atime": vc.judge_atime,
        "scheduler": vc.judge_scheduler,
    }[key](ev, expected)


def verify_scratch(
    sfs: scratch.ScratchFs,
    expectations: list[Expectation] | None,
    patience: float = DEFAULT_PATIENCE_S,
    progress: Callable[[str], object] | None = None,
) -> Report:
    """verify_mount for a scratch.ScratchFs (fsprof run's provisioned filesystem)."""
    return verify_mount(sfs.mountpoint, expectations, patience=patience, progress=progress)


# ---------------------------------------------------------------------------------------------
# --spec: every configuration of a matrix, provisioned in scratch as `fsprof run --spec` does


def verify_spec(
    spec_path: str | Path,
    scratch_root: str | Path,
    patience: float = DEFAULT_PATIENCE_S,
    progress: Callable[[str], object] | None = None,
) -> list[tuple[str, Report | str]]:
    """[(config name, Report or error sentence)] for each configuration of the spec."""
    say = progress or (lambda line: None)
    matrix = load_spec(spec_path)
    results: list[tuple[str, Report | str]] = []
    with undo.Changes() as run_changes:
        scratch_dir = scratch.make_scratch_dir(
            run_changes, Path(scratch_root) / f"verify-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
        )
        erased: set[str] = set()
        for cfg in matrix.configs:
            say(f"[{cfg.name}] provisioning {cfg.fs}")
            expectations = expectations_for(cfg.fs_config(), cfg.sysctls, cfg.scheduler)
            try:
                with undo.Changes() as changes:
                    for name, value in cfg.sysctls.items():
                        settings.set_sysctl(changes, name, value)
                    sfs = cfg.provision(changes, scratch_dir, erased)
                    if cfg.scheduler:
                        for name, _ in sfs.block_devs:
                            settings.set_scheduler(changes, name, cfg.scheduler)
                    results.append((cfg.name, verify_mount(sfs.mountpoint, expectations or None, patience, say)))
            except NotApplicable:
                raise
            except FsprofError as e:
                results.append((cfg.name, str(e)))
    return results
