"""Helpers shared by the tests: running the CLI, and finding what a test left mounted or attached."""

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FSPROF = [sys.executable, "-m", "profiler"]

if os.geteuid() != 0:
    pytest.exit("fsprof's tests load BPF programs and mount filesystems: run them as root", returncode=2)


def run_fsprof(*args, cwd=REPO, timeout=600):
    env = {**os.environ, "PYTHONPATH": REPO}  # the package, whatever the cwd
    return subprocess.run([*FSPROF, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)


def mounts_under(root):
    """(target, fstype) of every mount below root, from /proc/mounts."""
    with open("/proc/mounts") as f:
        entries = [line.split() for line in f]
    return [(e[1], e[2]) for e in entries if e[1].startswith(str(root) + "/")]


def loops_under(root):
    """Loop devices whose backing file lies below root."""
    found = []
    for name in os.listdir("/sys/block"):
        try:
            with open(f"/sys/block/{name}/loop/backing_file") as f:
                backing = f.read().strip()
        except OSError:
            continue
        if backing.startswith(str(root) + "/"):
            found.append(f"/dev/{name}")
    return found


@pytest.fixture
def loopdev(tmp_path):
    """A loop device of the test's own over an image outside any scratch dir: a user's disk stand-in."""
    image = tmp_path / "user-disk.img"
    with open(image, "wb") as f:
        f.truncate(512 << 20)  # xfs needs at least 300 MiB
    device = subprocess.run(["losetup", "--find", "--show", str(image)], check=True,
                            capture_output=True, text=True).stdout.strip()
    yield device
    subprocess.run(["losetup", "-d", device], check=False)


@pytest.fixture
def ext4_loop(loopdev, tmp_path):
    """loopdev carrying ext4 with a file on it; yields (device, an empty mountpoint for it)."""
    mountpoint = tmp_path / "user-mnt"
    mountpoint.mkdir()
    subprocess.run(["mkfs.ext4", "-q", "-F", loopdev], check=True)
    subprocess.run(["mount", loopdev, str(mountpoint)], check=True)
    try:
        (mountpoint / "precious").write_text("keep me")
    finally:
        subprocess.run(["umount", str(mountpoint)], check=True)
    yield loopdev, mountpoint
    subprocess.run(["umount", str(mountpoint)], capture_output=True)
