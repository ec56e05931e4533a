"""A writer whose filesystem is frozen once, for 300 ms, under it (tests/test_tail.py): pwrite +
fsync of 4 KiB in a loop in the current directory for 1.5 s, while a thread freezes the filesystem
(fsfreeze -f) half a second in and thaws it (fsfreeze -u) 300 ms later. It reports, as a RESULT
line, its pid (the writing thread's tid) and bounds on the one write's wait for the thaw by its own
clock: at least from fsfreeze -f's return to fsfreeze -u's start (frozen_min_us), at most from
fsfreeze -f's start to fsfreeze -u's return (frozen_max_us)."""

import ctypes
import os
import subprocess
import threading
import time

# A name no other process has, for the bpftrace oracle (PR_SET_NAME); the freezing thread inherits it.
ctypes.CDLL(None).prctl(15, b"frozen-writer", 0, 0, 0)

mount = subprocess.run(["findmnt", "-n", "-o", "TARGET", "-T", "."], capture_output=True, text=True, check=True)
mountpoint = mount.stdout.strip()
frozen = {}


def freeze():
    time.sleep(0.5)
    frozen["freezing"] = time.monotonic_ns()
    subprocess.run(["fsfreeze", "-f", mountpoint], check=True)
    frozen["frozen"] = time.monotonic_ns()
    time.sleep(0.3)
    frozen["thawing"] = time.monotonic_ns()
    subprocess.run(["fsfreeze", "-u", mountpoint], check=True)
    frozen["thawed"] = time.monotonic_ns()


fd = os.open("frozen-writes", os.O_CREAT | os.O_WRONLY, 0o644)
thread = threading.Thread(target=freeze)
thread.start()
writes, end = 0, time.monotonic() + 1.5
while time.monotonic() < end or thread.is_alive():
    os.pwrite(fd, b"x" * 4096, (writes % 256) * 4096)
    os.fsync(fd)
    writes += 1
thread.join()
low, high = frozen["thawing"] - frozen["frozen"], frozen["thawed"] - frozen["freezing"]
print(
    f"RESULT writes={writes} pid={os.getpid()} frozen_min_us={low // 1000} frozen_max_us={high // 1000 + 1}", flush=True
)
