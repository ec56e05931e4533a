"""Which part of a behind module's summary `fsprof compare` is explaining."""

from typing import Any


def in_scope(part: dict[str, Any] | None, fs: dict[str, Any]) -> dict[str, Any]:
    """Of a summary's {"all": ..., "phases": {name: ...}} pair, one phase's when the entry is a
    phase view (`compare --phase`: it carries "phase_view"), else the whole run's."""
    phase = fs.get("phase_view")
    return (part or {}).get("phases", {}).get(phase, {}) if phase else (part or {}).get("all", {})


def wide(fs: dict[str, Any]) -> str:
    """How a count over that part is labelled: "run-wide", or "phase-wide" for one phase."""
    return "phase-wide" if fs.get("phase_view") else "run-wide"
