"""`fsprof phase NAME`: from a command that `fsprof run -- CMD` runs, mark that a phase named NAME
begins now. Everything the traced processes do from this moment until the next mark counts under
NAME (report, compare --phase, flame graphs); what comes before the first mark is phase "run".

The run names a file in FSPROF_PHASE_FILE; a phase's number is its line in that file (a name used
again reuses its number), and the mark itself is the prctl() the bundled workloads use: the BPF
probe that sees it makes the phase current at that syscall, so the boundary is exact."""

from __future__ import annotations

import fcntl
import os
from typing import TYPE_CHECKING

from workloads.common import MAX_PHASES, mark_phase
from ..errors import FsprofError
from ..machine.workload import PHASE_FILE_ENV

if TYPE_CHECKING:
    import argparse

NEEDS_ROOT = False
INSIDE_A_RUN = True  # runs inside a traced workload: no clean-up of dead runs first (cli.py)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="the phase that begins now (letters, digits, - _ .)")


def phase_index(path: str, name: str) -> int:
    """NAME's number in the run's phase file (1-based), added at the end if new."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as e:
        raise FsprofError(f"cannot open the run's phase file {path}: {e.strerror}")
    with os.fdopen(fd, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # two processes of one command marking at once
        f.seek(0)
        names = f.read().splitlines()
        if name in names:
            return names.index(name) + 1
        if len(names) + 1 >= MAX_PHASES:
            raise FsprofError(f"a run has at most {MAX_PHASES - 1} phases; {path} already names {len(names)}")
        f.write(name + "\n")
        return len(names) + 1


def main(args: argparse.Namespace) -> int:
    name = args.name
    if not name or not all(ch.isalnum() or ch in "-_." for ch in name):
        raise FsprofError(f"a phase name is letters, digits, '-', '_' and '.': not {name!r}", exit_code=2)
    path = os.environ.get(PHASE_FILE_ENV)
    if not path:
        raise FsprofError(
            f"fsprof phase marks a phase of a command run by `fsprof run ... -- CMD`; {PHASE_FILE_ENV} is not set here",
            exit_code=2,
        )
    mark_phase(phase_index(path, name))  # a prctl the kernel refuses; the probe has seen it
    return 0
