"""The legacy objects (kernels before task storage: Debian 11's 5.10), checked here on the build
machine; they run in the 5.10 VM row (docs/kernels.md, "5.10")."""

import re
import subprocess
import sys
from pathlib import Path

from profiler import filesystems
from profiler.trace import tp_fields
from profiler.trace.bpf import BUILD_DIR

from conftest import REPO

CHECK = [sys.executable, str(Path(REPO) / "kernels" / "legacy_objects.py")]


def test_the_legacy_objects_hold_nothing_510_refuses_and_the_check_can_fail():
    legacy = sorted((BUILD_DIR / "legacy").glob("*.bpf.o"))
    assert {p.name for p in legacy} == {p.name for p in BUILD_DIR.glob("*.bpf.o")}
    for obj in legacy:
        proc = subprocess.run([*CHECK, str(obj)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    # The current objects use task storage (helper 156), the current task as a BTF pointer (158)
    # and the fetching add of the exemplar try-lock: each is found.
    proc = subprocess.run([*CHECK, str(BUILD_DIR / "syscalls.bpf.o")], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "helper 156" in proc.stderr and "helper 158" in proc.stderr and "atomic op 0x1" in proc.stderr


def test_record_offsets_follow_the_c_enum_and_this_kernels_formats():
    """tp_fields.FIELDS is enum tp_field in order (bpf/fsprof.h), and each offset is the one the
    running kernel's format file gives, with the size the program reads."""
    source = (Path(REPO) / "bpf" / "fsprof.h").read_text()
    body = re.search(r"enum tp_field \{(.*?)\};", source, re.S)[1]
    names = re.findall(r"^\s*(TPF_\w+|N_TP_FIELDS)", body, re.M)
    assert names == [name for name, *_ in tp_fields.FIELDS] + ["N_TP_FIELDS"]
    filesystems.load_modules(["ext4", "xfs", "btrfs"])
    found = tp_fields.offsets()
    for (_, tracepoint, field, size), off in zip(tp_fields.FIELDS, found):
        layout = tp_fields.record_layout(tracepoint).get(field)
        if layout is None or layout[1] != size:  # e.g. 5.10's ext4_da_reserve_space has no reserve_blocks
            assert off == 0, (tracepoint, field, layout)
            continue
        assert layout == (off, size), (tracepoint, field)
        assert off >= 8  # past the common fields: 0 would mean absent
