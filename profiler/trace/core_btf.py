"""The core-BTF cache: the kernel BTF cut down to the types fsprof's objects use, which they
relocate against (made by `bpftool gen min_core_btf`, once per boot and build)."""

import hashlib
import os
import platform
import subprocess
import threading
import time
from pathlib import Path

CORE_BTF_DIR = Path(os.environ.get("FSPROF_CORE_BTF_DIR", "/var/tmp/fsprof/cache/core-btf"))
VMLINUX_BTF = Path("/sys/kernel/btf/vmlinux")

# CO-RE relocation against the whole kernel BTF (about 130,000 types) makes libbpf search it for
# every type each object relocates: 10 to 20 ms of CPU per object, for every object, every run.
# `bpftool gen min_core_btf` cuts the kernel BTF down to the types and members fsprof's objects
# use, with the kernel's own offsets, so relocations come out the same. It is made once per boot
# (the running kernel's BTF cannot change before a reboot) and per build of the objects, and kept
# in CORE_BTF_DIR. Without bpftool, or if it fails, objects relocate against the kernel's BTF.
_core_btf: dict[str, Path | None] = {}
_core_btf_lock = threading.Lock()


def module_btf() -> list[str]:
    """Names of the kernel modules with BTF of their own (/sys/kernel/btf/<module>). Where there
    are any (distribution kernels build ext4, jbd2, xfs and btrfs as modules), objects relocate
    against the kernel's BTF: given a custom BTF, libbpf consults no module's."""
    try:
        return sorted(n for n in os.listdir(VMLINUX_BTF.parent) if n != "vmlinux")
    except OSError:
        return []


def _core_btf_key(objects):
    with open("/proc/sys/kernel/random/boot_id") as f:
        parts = [f.read().strip(), platform.release(), platform.version()]
    for obj in objects:
        st = obj.stat()
        parts.append(f"{obj.name}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:20]


def core_btf(objects_dir: str | Path) -> Path | None:
    """The minimised kernel BTF for the objects in `objects_dir`, every *.bpf.o there (made on
    first use), or None."""
    if module_btf():
        return None
    with _core_btf_lock:  # objects load side by side: one makes it, the others wait for it
        objects = sorted(Path(objects_dir).glob("*.bpf.o"))
        try:
            key = _core_btf_key(objects)
        except OSError:
            return None
        if key not in _core_btf:
            _core_btf[key] = _make_core_btf(key, objects)
        return _core_btf[key]


def _make_core_btf(key, objects):
    out = CORE_BTF_DIR / f"core-{key}.btf"
    if out.exists():
        return out
    try:
        CORE_BTF_DIR.mkdir(parents=True, exist_ok=True)
        tmp = CORE_BTF_DIR / f".core-{key}.{os.getpid()}.tmp"
        proc = subprocess.run(
            ["bpftool", "gen", "min_core_btf", str(VMLINUX_BTF), str(tmp), *map(str, objects)],
            capture_output=True,
            timeout=60,
        )
        if proc.returncode != 0 or not tmp.exists():
            tmp.unlink(missing_ok=True)
            return None
        os.replace(tmp, out)  # whole or absent, even with several fsprof runs starting at once
    except (OSError, subprocess.SubprocessError):
        return None
    for old in CORE_BTF_DIR.glob("core-*.btf"):  # other boots' and builds', a day old
        try:
            if old != out and time.time() - old.stat().st_mtime > 86400:
                old.unlink()
        except OSError:
            pass
    return out
