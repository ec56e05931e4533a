"""Experiment matrices: a TOML file naming configurations (filesystem, mkfs and mount options,
sysctls, I/O scheduler, device kind) and workloads; `fsprof run --spec FILE` runs every
combination, each on a fresh filesystem. The format is documented in docs/spec.md; shipped specs
are in workloads/specs/. This module only reads and checks a spec: profiler/session/run.py runs it."""

import dataclasses
import re
import shlex
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

from .. import filesystems
from . import device_model, scratch
from .device_model import DeviceModel
from ..errors import FsprofError
from ..units import parse_size
from ..work_unit import parse_unit
from .workload import WORKLOADS, WorkloadSpec, check_args, image_size

if TYPE_CHECKING:
    from .undo import Changes

DEVICE_KINDS = ("loop", "zram")
_TOP_KEYS = {"description", "repeats", "drop_caches", "sample_hz", "stack_sample", "image_size", "config", "workload"}
_CONFIG_KEYS = {
    "name",
    "fs",
    "mkfs_options",
    "mount_options",
    "sysctls",
    "scheduler",
    "device",
    "devices",
    "image_size",
    "erase_device",
    "loop_io",
    "device_model",
}
_WORKLOAD_KEYS = {"name", "workload", "args", "command", "unit"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=,-]*$")


@dataclasses.dataclass
class Config:
    name: str
    fs: str
    mkfs_options: list
    mount_options: str
    sysctls: dict
    scheduler: str | None
    device: str  # "loop", "zram", or a block device the user named
    devices: int
    image_size: int
    erase_device: bool
    loop_io: str = scratch.FsConfig.loop_io  # a loop device's: "direct" or "buffered"
    device_model: DeviceModel | None = None  # dm-delay over the loop device(s), or null_blk for them

    def fs_config(self) -> scratch.FsConfig:
        return scratch.FsConfig(
            fs=self.fs,
            mkfs_options=self.mkfs_options,
            mount_options=self.mount_options,
            size_bytes=self.image_size,
            devices=self.devices,
            label=self.name,
            loop_io=self.loop_io,
            device_model=self.device_model,
        )

    def provision(self, changes: "Changes", scratch_dir: str, erased: set[str]) -> scratch.ScratchFs:
        """This configuration's filesystem, made in scratch_dir (loop, zram) or on its device.
        `erased`: the devices this matrix has already erased (and adds this one)."""
        config = self.fs_config()
        if self.device == "loop":
            return scratch.provision(changes, config, scratch_dir)
        if self.device == "zram":
            return scratch.provision_zram(changes, config, scratch_dir)
        # The signature check guards the user's data: a device fsprof itself erased earlier in this
        # matrix carries only fsprof's own filesystem.
        sfs = scratch.provision_device(
            changes, config, self.device, erase=self.erase_device, force=self.device in erased, scratch_dir=scratch_dir
        )
        erased.add(self.device)
        return sfs


@dataclasses.dataclass
class Workload:
    name: str
    spec: WorkloadSpec
    unit: str | None = None  # its unit of work, as `compare --unit` takes it (profiler/work_unit.py)


@dataclasses.dataclass
class Spec:
    path: Path
    description: str
    configs: list
    workloads: list
    repeats: int
    drop_caches: bool
    sample_hz: int | None
    stack_sample: int | None
    image_size: int | None

    def plan(self) -> list[tuple[int, Workload, Config]]:
        """(repeat, workload, config) in run order: repeats interleaved (A B A B ...), so that
        drift on a noisy machine spreads evenly over the configurations."""
        return [(r, w, c) for r in range(1, self.repeats + 1) for w in self.workloads for c in self.configs]


def _fail(path, where, sentence):
    raise FsprofError(f"{path}: {where}: {sentence}", exit_code=2)


def _check_keys(path, where, table, allowed):
    if not isinstance(table, dict):
        _fail(path, where, "must be a table")
    unknown = sorted(set(table) - allowed)
    if unknown:
        _fail(
            path,
            where,
            f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} (known: {', '.join(sorted(allowed))})",
        )


def _name(path, where, value):
    if not isinstance(value, str) or not _NAME.match(value):
        _fail(path, where, f"name {value!r} must be letters, digits and . _ + = , - (it names a directory)")
    return value


def _strings(path, where, what, value):
    """A string of shell words, or a list of strings."""
    if isinstance(value, str):
        return shlex.split(value)
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        _fail(path, where, f"{what} must be a string or a list of strings")
    return value


def _flag(path, where, table, key):
    value = table.get(key, False)
    if not isinstance(value, bool):
        _fail(path, where, f"{key} must be true or false")
    return value


def _size(path, where, value):
    if not isinstance(value, str):
        _fail(path, where, f'image_size {value!r} must be a string like "2G" or "512M"')
    try:
        return parse_size(value)
    except ValueError:
        _fail(path, where, f"image_size {value!r} is not a size like 2G or 512M")


def _config(path, i, t, default_size):
    where = f"config #{i + 1}"
    _check_keys(path, where, t, _CONFIG_KEYS)
    fs = t.get("fs")
    if fs not in filesystems.NAMES:
        _fail(path, where, f"fs {fs!r} is not one of {', '.join(filesystems.NAMES)}")
    where = f"config {t.get('name', fs)!r}"
    mkfs = _strings(path, where, "mkfs_options", t.get("mkfs_options", []))
    mount = t.get("mount_options", "")
    mount = ",".join(_strings(path, where, "mount_options", mount)) if isinstance(mount, list) else mount
    if not isinstance(mount, str):
        _fail(path, where, 'mount_options must be a string like "noatime,data=writeback"')
    sysctls = t.get("sysctls", {})
    if not isinstance(sysctls, dict):
        _fail(path, where, 'sysctls must be a table like { "vm.dirty_bytes" = 100000 }')
    for key in sysctls:
        if key.startswith(("/", ".")) or ".." in key or not Path("/proc/sys", key.replace(".", "/")).is_file():
            _fail(path, where, f"sysctl {key} does not exist on this kernel")
    device = t.get("device", "loop")
    if device not in DEVICE_KINDS and not (isinstance(device, str) and device.startswith("/dev/")):
        _fail(path, where, f"device {device!r} must be loop, zram or a /dev/ path you want erased")
    erase = _flag(path, where, t, "erase_device")
    if device.startswith("/dev/") and not erase:
        _fail(path, where, f"device {device} would be erased: say erase_device = true to allow it")
    if t.get("scheduler") is not None and (device == "zram" or not isinstance(t["scheduler"], str)):
        _fail(path, where, "scheduler must be a name like mq-deadline, and zram (bio-based) has none")
    loop_io = t.get("loop_io", scratch.FsConfig.loop_io)
    if loop_io not in scratch.LOOP_IO or ("loop_io" in t and device != "loop"):
        _fail(path, where, f'loop_io must be one of {", ".join(scratch.LOOP_IO)}, for device = "loop" only')
    model = None
    if "device_model" in t:
        if device != "loop" or not isinstance(t["device_model"], str):
            _fail(
                path,
                where,
                'device_model must be a model name or delays like "read=8,write=0,flush=15", for device = "loop" only',
            )
        try:
            model = device_model.parse(t["device_model"])
        except FsprofError as e:
            _fail(path, where, str(e))
    devices = t.get("devices", 1)
    if (
        not isinstance(devices, int)
        or devices < 1
        or (devices > 1 and (not filesystems.TABLE[fs].multi_device or device != "loop"))
    ):
        _fail(path, where, f"devices > 1 is for {', '.join(filesystems.MULTI_DEVICE)} on loop images only")
    return Config(
        name=_name(path, where, t.get("name", fs)),
        fs=fs,
        mkfs_options=mkfs,
        mount_options=mount,
        sysctls={k: str(v) for k, v in sysctls.items()},
        scheduler=t.get("scheduler"),
        device=device,
        devices=devices,
        image_size=_size(path, where, t["image_size"]) if "image_size" in t else default_size,
        erase_device=erase,
        loop_io=loop_io,
        device_model=model,
    )


def _workload(path, i, t):
    where = f"workload #{i + 1}"
    _check_keys(path, where, t, _WORKLOAD_KEYS)
    workload = _workload_spec(path, where, t)
    if "unit" in t:
        try:
            parse_unit(t["unit"] if isinstance(t["unit"], str) else "", where="unit")
        except FsprofError as e:
            _fail(path, where, str(e))
    return dataclasses.replace(workload, unit=t.get("unit"))


def _workload_spec(path, where, t):
    args = _strings(path, where, "args", t.get("args", []))
    if "command" in t:
        command = _strings(path, where, "command", t["command"])
        if not command or "workload" in t or args:
            _fail(path, where, "a command workload has `command` (and a `name`), not `workload` or `args`")
        return Workload(_name(path, where, t.get("name", "command")), WorkloadSpec("command", command=command))
    name = t.get("workload")
    if name not in WORKLOADS:
        _fail(path, where, f"workload {name!r} is not one of {', '.join(WORKLOADS)} (or give `command`)")
    try:
        check_args(name, args)
    except FsprofError as e:
        _fail(path, f"workload {t.get('name', name)!r}", str(e))
    return Workload(_name(path, where, t.get("name", name)), WorkloadSpec(name, args))


def load(path: str | Path) -> Spec:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as e:
        raise FsprofError(f"cannot read the spec {path}: {e.strerror}", exit_code=2)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise FsprofError(f"{path} is not valid TOML: {e}", exit_code=2)
    _check_keys(path, "top level", data, _TOP_KEYS)
    configs, workloads = data.get("config", []), data.get("workload", [])
    if not isinstance(configs, list) or not isinstance(workloads, list):
        _fail(path, "top level", "configurations are [[config]] tables and workloads [[workload]] tables")
    if not configs or not workloads:
        _fail(path, "top level", "a spec needs at least one [[config]] and one [[workload]]")
    workloads = [_workload(path, i, t) for i, t in enumerate(workloads)]
    default_size = _size(path, "top level", data["image_size"]) if "image_size" in data else None
    if default_size is None:
        default_size = max(image_size(w.spec.name) for w in workloads)
    configs = [_config(path, i, t, default_size) for i, t in enumerate(configs)]
    for what, items in (("config", configs), ("workload", workloads)):
        names = [x.name for x in items]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            _fail(path, f"{what} names", f"{', '.join(dup)} used twice; give each a distinct `name`")
    repeats = data.get("repeats", 1)
    if not isinstance(repeats, int) or repeats < 1:
        _fail(path, "top level", "repeats must be a whole number >= 1")
    sample_hz = data.get("sample_hz")
    if sample_hz is not None and (not isinstance(sample_hz, int) or sample_hz < 0):
        _fail(path, "top level", "sample_hz must be a whole number >= 0")
    stack_sample = data.get("stack_sample")
    if stack_sample is not None and (
        not isinstance(stack_sample, int) or isinstance(stack_sample, bool) or stack_sample < 1
    ):
        _fail(path, "top level", "stack_sample must be a whole number >= 1 (1: every call's stacks)")
    return Spec(
        path=path,
        description=data.get("description", ""),
        configs=configs,
        workloads=workloads,
        repeats=repeats,
        drop_caches=_flag(path, "top level", data, "drop_caches"),
        sample_hz=sample_hz,
        stack_sample=stack_sample,
        image_size=default_size,
    )
