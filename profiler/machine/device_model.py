"""Emulated devices (`--device-model`, a spec's `device_model`; docs/test-bed.md, "Emulated slow
devices"). Two parts, either or both:
- delays: a device-mapper `delay` target over the scratch device holds each read, write and flush
  bio for a fixed time before passing it on. dm-delay takes whole milliseconds and holds a bio on
  a timer of jiffies: the added time is the delay rounded up to the next tick (4 ms at HZ=250,
  Debian's), plus the dispatching thread's wakeup. A delay of 0 passes that class straight through.
- a volatile write cache: the scratch device is a RAM-backed null_blk device (`memory_backed=1`)
  with a write cache of `cache_size` MiB instead of a loop device. Writes land in the cache; a
  flush copies it to the device's storage; powering the device off loses what was not flushed,
  as a disk's cache does at a power cut."""

import dataclasses
import os
import re

from profiler.errors import FsprofError
from profiler.machine.tools import first_line, run_tool


@dataclasses.dataclass(frozen=True)
class DeviceModel:
    name: str
    read_ms: int
    write_ms: int
    flush_ms: int
    cache_mib: int = 0  # a null_blk device with this much volatile write cache; 0: a loop device

    @property
    def delays(self) -> bool:
        """Whether a dm-delay device goes over the scratch device."""
        return bool(self.read_ms or self.write_ms or self.flush_ms) or not self.cache_mib

    def table(self, device: str, sectors: int) -> str:
        """The dm table line: reads, writes and flushes each with their own delay (9 arguments;
        dm-delay's flush class since Linux 4.19)."""
        return f"0 {sectors} delay {device} 0 {self.read_ms} {device} 0 {self.write_ms} {device} 0 {self.flush_ms}"

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "name": self.name,
            "read_ms": self.read_ms,
            "write_ms": self.write_ms,
            "flush_ms": self.flush_ms,
        }
        return {**out, "cache_mib": self.cache_mib} if self.cache_mib else out


def describe(model: dict[str, object]) -> str:
    """'dm-delay model hdd (read 8 ms, write 0 ms, flush 15 ms)', 'null_blk model volatile-cache
    (a 64 MiB volatile write cache)' of a result's device_model."""
    delays = f"read {model['read_ms']} ms, write {model['write_ms']} ms, flush {model['flush_ms']} ms"
    if not model.get("cache_mib"):
        return f"dm-delay model {model['name']} ({delays})"
    cache = f"a {model['cache_mib']} MiB volatile write cache"
    if model["read_ms"] or model["write_ms"] or model["flush_ms"]:
        return f"null_blk + dm-delay model {model['name']} ({cache}; {delays})"
    return f"null_blk model {model['name']} ({cache})"


# The models by name. A disk with a volatile write cache takes a write into its cache at once and
# pays at the flush: that difference is what barrier (and fsync-heavy) puzzles turn on, so writes
# are not delayed here; a model with slow writes is given by its values ("read=8,write=8,flush=15").
MODELS = {
    m.name: m
    for m in (
        # A disk with its write cache on: 8 ms reads (a seek), writes into the cache, 15 ms flushes.
        DeviceModel("hdd", 8, 0, 15),
        # A consumer SSD without power-loss protection: 2 ms flushes, the rest at once.
        DeviceModel("ssd-no-plp", 0, 0, 2),
        # A disk's volatile write cache itself: what was written but not flushed is lost when the
        # device powers off (null_blk's cache_size), and a flush costs what the cache holds.
        DeviceModel("volatile-cache", 0, 0, 0, cache_mib=64),
    )
}

_EXPLICIT = re.compile(r"(read|write|flush|cache)=(-?\d+(?:\.\d+)?)(ms|MiB)?$")


def parse(text: str) -> DeviceModel:
    """A model's name, or explicit delays in ms: "read=8,write=0,flush=15" (unnamed classes 0), with
    "cache=MiB" for a null_blk device with that volatile write cache below them."""
    text = text.strip()
    if text in MODELS:
        return MODELS[text]
    if "=" not in text:
        raise FsprofError(
            f"unknown device model '{text}': use one of {', '.join(MODELS)}, "
            "or delays such as read=8,write=0,flush=15 (ms), with cache=MiB for a volatile write cache"
        )
    delays = {"read": 0, "write": 0, "flush": 0, "cache": 0}
    for part in text.split(","):
        m = _EXPLICIT.match(part.strip())
        if not m:
            raise FsprofError(f"device model '{text}': '{part}' is not read=MS, write=MS, flush=MS or cache=MiB")
        value = float(m.group(2))
        if value < 0 or value != int(value):
            what = "size" if m.group(1) == "cache" else "delay"
            unit = "MiB" if m.group(1) == "cache" else "milliseconds"
            raise FsprofError(
                f"device model '{text}': {m.group(1)} {what} {m.group(2)} must be whole {unit}, 0 or more"
            )
        delays[m.group(1)] = int(value)
    return DeviceModel(text, delays["read"], delays["write"], delays["flush"], delays["cache"])


def check_available(model: DeviceModel) -> None:
    """Raise one sentence unless this kernel has what the model needs: null_blk for a write cache,
    device-mapper with the delay target for delays."""
    if model.cache_mib:
        _check_null_blk()
    if model.delays:
        _check_dm_delay()


NULL_BLK_MODULE = "/sys/module/null_blk"


def _check_null_blk() -> None:
    # nr_devices=0: loading the module makes no device of its own (fsprof makes its own by configfs).
    # Already loaded (by someone else): its parameters stay theirs, and so do its devices.
    run_tool(["modprobe", "-q", "null_blk", "nr_devices=0"], "loading null_blk")
    if not os.path.isdir(NULL_BLK_MODULE):
        raise FsprofError(
            "--device-model with a write cache needs null_blk, which this kernel does not have: run it on a "
            "kernel with CONFIG_BLK_DEV_NULL_BLK, e.g. in a VM (docs/kernels.md)",
            exit_code=2,
        )


def _check_dm_delay() -> None:
    run_tool(["modprobe", "-q", "dm-delay"], "loading dm-delay")  # a module on distribution kernels
    # The driver's misc device (dmsetup would make a /dev/mapper/control node even without it).
    if not os.path.exists("/sys/class/misc/device-mapper"):
        raise FsprofError(
            "--device-model needs device-mapper, which this kernel does not have (no device-mapper driver): "
            "run it on a kernel with CONFIG_BLK_DEV_DM and CONFIG_DM_DELAY, e.g. in a VM (docs/kernels.md)",
            exit_code=2,
        )
    proc = run_tool(["dmsetup", "targets"], "listing device-mapper targets")
    if proc.returncode != 0 or not re.search(r"^delay\s", proc.stdout, re.M):
        why = first_line(proc) if proc.returncode else "no delay target"
        raise FsprofError(
            f"--device-model needs device-mapper's delay target (dm-delay), not available here: {why}", exit_code=2
        )
