"""Every call placed: a call by absolute path is placed on the filesystem whose code it ran (the
filesystem's own tracepoints inside the call name its superblock: bpf/shared_maps.h place_call).
A script creates files and unlinks them by absolute path, as SQLite does its journal; on ext4,
XFS and btrfs its unlinks must be on the scratch filesystem, as many as a bpftrace count of
sys_enter_unlink for the script, and none left "not placed". A call that touched no traced
filesystem (an unlink of a file in /dev/shm) stays unplaced."""

import json
import re

import pytest

from conftest import bpftrace_output, bpftrace_start, run_fsprof

pytestmark = [pytest.mark.slow, pytest.mark.root]
FILES = 40
COMM = "abs-unlinker"
SCRIPT = f"""
import ctypes, os
ctypes.CDLL(None).prctl(15, b"{COMM}", 0, 0, 0)   # PR_SET_NAME: the oracle's key
for i in range({FILES}):
    path = os.path.abspath(f"journal-{{i}}")
    with open(path, "w") as f:
        f.write("x")
    os.unlink(path)
shm = f"/dev/shm/fsprof-placement-{{os.getpid()}}"
open(shm, "w").close()
os.unlink(shm)                                     # on tmpfs: on no traced filesystem
"""
ORACLE = f"""
BEGIN {{ printf("ready\\n"); }}
tracepoint:syscalls:sys_enter_unlink /comm == "{COMM}"/ {{ @unlinks = count(); }}
"""


@pytest.fixture(scope="module")
def placed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("placement")
    oracle = bpftrace_start(ORACLE)
    try:
        proc = run_fsprof(
            "run",
            "--fs",
            "ext4,xfs,btrfs",
            "--scratch-dir",
            str(tmp / "scratch"),
            "-o",
            str(tmp / "run"),
            "--",
            "python3",
            "-c",
            SCRIPT,
        )
    finally:
        out = bpftrace_output(oracle)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp / "run" / "result.json").read_text())
    return {fs["fs"]: fs for fs in result["filesystems"]}, int(re.search(r"^@unlinks: (\d+)$", out, re.M).group(1))


@pytest.mark.parametrize("fs", ["ext4", "xfs", "btrfs"])
def test_unlinks_by_absolute_path_are_placed(placed, fs):
    entries, oracle = placed
    assert oracle == 3 * (FILES + 1)  # each filesystem's run: its files and the one in /dev/shm
    entry = entries[fs]
    assert entry["syscalls"]["unlink"]["count"] == FILES, entry["syscalls"].get("unlink")
    assert entry["attribution"]["unlink"]["count"] == FILES
    # What is left unplaced is the call on tmpfs, which no traced filesystem ran.
    assert entry["unresolved_syscalls"]["unlink"]["count"] == 1, entry["unresolved_syscalls"]
