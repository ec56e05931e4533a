"""tracefs: mounted on demand (it is not at boot on our kernels), and asked which events exist."""

import os
import subprocess
from pathlib import Path

from ..errors import FsprofError

TRACEFS = Path("/sys/kernel/tracing")


def is_mounted() -> bool:
    return (TRACEFS / "events").is_dir()


def ensure_mounted() -> None:
    """Mount tracefs at /sys/kernel/tracing if it is absent. It stays mounted: it is the kernel's
    standard tracing interface, changes nothing else, and other tools expect it there."""
    if is_mounted():
        return
    if os.geteuid() != 0:
        raise FsprofError("tracefs is not mounted and only root can mount it at /sys/kernel/tracing")
    proc = subprocess.run(["mount", "-t", "tracefs", "tracefs", str(TRACEFS)], capture_output=True, text=True)
    if proc.returncode != 0 or not is_mounted():
        raise FsprofError(f"could not mount tracefs at {TRACEFS}: {proc.stderr.strip() or 'no events directory'}")


def has_event(name: str, category: str | None = None) -> bool:
    """True if the tracepoint exists; without a category, in any category (as raw_tp looks it up)."""
    events = TRACEFS / "events"
    if category:
        return (events / category / name).is_dir()
    return any((d / name).is_dir() for d in events.iterdir() if d.is_dir())


def events_in(category: str) -> list[str]:
    """The event names of one tracepoint group, or [] when the group is absent."""
    d = TRACEFS / "events" / category
    return sorted(p.name for p in d.iterdir() if p.is_dir()) if d.is_dir() else []
