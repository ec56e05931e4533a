"""Emulated slow devices (`--device-model`, a spec's `device_model`): the scratch filesystem goes on a
device-mapper `delay` target over its loop device, which holds each read, write and flush bio for
a fixed time before passing it on (docs/test-bed.md, "Device models").

dm-delay takes whole milliseconds, and holds a bio on a timer of jiffies: the added time is the
delay rounded up to the next tick (4 ms at HZ=250, Debian's), plus the dispatching thread's
wakeup. A delay of 0 passes that class straight through."""

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

    def table(self, device: str, sectors: int) -> str:
        """The dm table line: reads, writes and flushes each with their own delay (9 arguments;
        dm-delay's flush class since Linux 4.19)."""
        return f"0 {sectors} delay {device} 0 {self.read_ms} {device} 0 {self.write_ms} {device} 0 {self.flush_ms}"

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "read_ms": self.read_ms, "write_ms": self.write_ms, "flush_ms": self.flush_ms}


def describe(model: dict[str, object]) -> str:
    """'hdd (read 8 ms, write 0 ms, flush 15 ms)' of a result's device_model."""
    return f"{model['name']} (read {model['read_ms']} ms, write {model['write_ms']} ms, flush {model['flush_ms']} ms)"


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
    )
}

_EXPLICIT = re.compile(r"(read|write|flush)=(-?\d+(?:\.\d+)?)(ms)?$")


def parse(text: str) -> DeviceModel:
    """A model's name, or explicit delays in ms: "read=8,write=0,flush=15" (unnamed classes 0)."""
    text = text.strip()
    if text in MODELS:
        return MODELS[text]
    if "=" not in text:
        raise FsprofError(
            f"unknown device model '{text}': use one of {', '.join(MODELS)}, "
            "or delays such as read=8,write=0,flush=15 (ms)"
        )
    delays = {"read": 0, "write": 0, "flush": 0}
    for part in text.split(","):
        m = _EXPLICIT.match(part.strip())
        if not m:
            raise FsprofError(f"device model '{text}': '{part}' is not read=MS, write=MS or flush=MS")
        value = float(m.group(2))
        if value < 0 or value != int(value):
            raise FsprofError(
                f"device model '{text}': {m.group(1)} delay {m.group(2)} must be whole milliseconds, 0 or more"
            )
        delays[m.group(1)] = int(value)
    return DeviceModel(text, delays["read"], delays["write"], delays["flush"])


def check_available() -> None:
    """Raise one sentence unless this kernel has device-mapper with the delay target."""
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
