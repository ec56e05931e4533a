"""The external tools fsprof runs (mkfs, mount, losetup, blkid, ...): a tool that is missing or fails
is one sentence naming it and the Debian package that has it."""

import re
import shlex
import subprocess

from profiler import filesystems
from profiler.errors import FsprofError

_PACKAGES = {
    "mount": "mount",
    "umount": "mount",
    "dmsetup": "dmsetup",
    "modprobe": "kmod",
    **{f"mkfs.{fs.name}": fs.package for fs in filesystems.TABLE.values()},
}


def run_tool(argv: list[str], purpose: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    """Run a tool with its output captured; a missing tool is a one-sentence error."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        package = _PACKAGES.get(argv[0], "util-linux")
        raise FsprofError(f"{argv[0]} is not installed ({purpose} needs it; it comes with {package})") from None
    if check and proc.returncode != 0:
        raise FsprofError(f"{shlex.join(argv)} failed: {first_line(proc)}")
    return proc


def first_line(proc):
    """The tool's first meaningful line of stderr (else stdout), without "ERROR:" prefixes."""
    for line in (proc.stderr + "\n" + proc.stdout).splitlines():
        line = re.sub(r"^((error|ERROR):\s*)+", "", line.strip()).rstrip(".")
        if line:
            return line
    return f"exit status {proc.returncode}"
