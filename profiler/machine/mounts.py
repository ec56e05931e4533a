"""The mount table of fsprof's mount namespace (/proc/self/mountinfo), as plain dicts."""

import os
import re


def _unescape(text):
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def mounts() -> list[dict[str, str]]:
    """Each mount: majmin (the superblock's "major:minor"), target, source, fstype, options (the
    mount's and the superblock's, comma-joined)."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            out.append(
                {
                    "majmin": fields[2],
                    "target": _unescape(fields[4]),
                    "source": _unescape(tail[1]),
                    "fstype": tail[0],
                    "options": ",".join(dict.fromkeys(",".join([fields[5], *tail[2:3]]).split(","))),
                }
            )
    return out


def mount_of(path: str) -> dict[str, str] | None:
    """The mount whose target is `path` exactly (after resolving symlinks), or None."""
    real = os.path.realpath(path)
    found = [m for m in mounts() if m["target"] == real]
    return found[-1] if found else None  # the topmost of stacked mounts
