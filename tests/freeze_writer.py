"""A writer whose filesystem is frozen once, for 300 ms, under it (tests/test_tail.py): pwrite +
fsync of 4 KiB in a loop in the current directory for 1.5 s, while a thread freezes the filesystem
(fsfreeze -f) half a second in and thaws it (fsfreeze -u) 300 ms later. It reports, as a RESULT
line, how long the filesystem stayed frozen by its own clock: from fsfreeze -f's return to
fsfreeze -u's, which encloses the one write that waits for the thaw."""

import os
import subprocess
import threading
import time

mount = subprocess.run(["findmnt", "-n", "-o", "TARGET", "-T", "."], capture_output=True, text=True, check=True)
mountpoint = mount.stdout.strip()
frozen = {}


def freeze():
    time.sleep(0.5)
    subprocess.run(["fsfreeze", "-f", mountpoint], check=True)
    frozen["from"] = time.monotonic_ns()
    time.sleep(0.3)
    subprocess.run(["fsfreeze", "-u", mountpoint], check=True)
    frozen["to"] = time.monotonic_ns()


fd = os.open("frozen-writes", os.O_CREAT | os.O_WRONLY, 0o644)
thread = threading.Thread(target=freeze)
thread.start()
writes, end = 0, time.monotonic() + 1.5
while time.monotonic() < end or thread.is_alive():
    os.pwrite(fd, b"x" * 4096, (writes % 256) * 4096)
    os.fsync(fd)
    writes += 1
thread.join()
print(f"RESULT writes={writes} frozen_us={(frozen['to'] - frozen['from']) // 1000}", flush=True)
