"""The filesystem-related syscalls fsprof traces, and how each names its filesystem.

Numbers are the x86_64 syscall ABI (stable by kernel rule). Each entry: name -> (nr, dev source),
with the dev sources of bpf/fsprof.h (profiler/trace/maps.py mirrors them).
"""

import os

from ..errors import FsprofError
from .maps import DEV_SRC_CWD as CWD, DEV_SRC_DIRFD as DIRFD, DEV_SRC_FD as FD
from .maps import DEV_SRC_GLOBAL as GLOBAL, DEV_SRC_MARKER as MARKER, DEV_SRC_RET_FD as RET_FD
from .maps import DEV_SRC_RET_FD_AT as RET_FD_AT
from .maps import DEV_SRC_AIO_REAP as AIO_REAP, DEV_SRC_AIO_SUBMIT as AIO_SUBMIT

X86_64 = {
    "read": (0, FD),
    "write": (1, FD),
    "open": (2, RET_FD),
    "close": (3, FD),
    "stat": (4, CWD),
    "fstat": (5, FD),
    "lstat": (6, CWD),
    "pread64": (17, FD),
    "pwrite64": (18, FD),
    "readv": (19, FD),
    "writev": (20, FD),
    "fsync": (74, FD),
    "fdatasync": (75, FD),
    "truncate": (76, CWD),
    "ftruncate": (77, FD),
    "getdents": (78, FD),
    "rename": (82, CWD),
    "mkdir": (83, CWD),
    "rmdir": (84, CWD),
    "creat": (85, RET_FD),
    "link": (86, CWD),
    "unlink": (87, CWD),
    "fchmod": (91, FD),
    "fchown": (93, FD),
    "lchown": (94, CWD),
    "fchownat": (260, DIRFD),
    "fchmodat": (268, DIRFD),
    "utimensat": (280, DIRFD),
    "prctl": (157, MARKER),
    "sync": (162, GLOBAL),
    "io_getevents": (208, AIO_REAP),
    "io_submit": (209, AIO_SUBMIT),
    "getdents64": (217, FD),
    "openat": (257, RET_FD_AT),
    "mkdirat": (258, DIRFD),
    "newfstatat": (262, DIRFD),
    "unlinkat": (263, DIRFD),
    "renameat": (264, DIRFD),
    "linkat": (265, DIRFD),
    "sync_file_range": (277, FD),
    "fallocate": (285, FD),
    "preadv": (295, FD),
    "pwritev": (296, FD),
    "syncfs": (306, FD),
    "renameat2": (316, DIRFD),
    "copy_file_range": (326, FD),
    "preadv2": (327, FD),
    "pwritev2": (328, FD),
    "io_pgetevents": (333, AIO_REAP),
    "statx": (332, DIRFD),
    "io_uring_enter": (426, GLOBAL),
    "openat2": (437, RET_FD_AT),
}


# Syscalls whose positive return value is bytes moved (the "bytes" of the syscall figures).
MOVES_BYTES = {
    "read",
    "write",
    "pread64",
    "pwrite64",
    "readv",
    "writev",
    "preadv",
    "pwritev",
    "preadv2",
    "pwritev2",
    "copy_file_range",
}


def table() -> dict[str, tuple[int, int]]:
    """The syscall table for this machine's architecture."""
    if os.uname().machine != "x86_64":
        raise FsprofError(f"fsprof's syscall table covers x86_64 only; this machine is {os.uname().machine}")
    return X86_64


def name_of(nr: int) -> str:
    return next((name for name, (n, _) in table().items() if n == nr), f"syscall_{nr}")
