"""Scratch filesystems and the undo journal, on real loop devices, mounts and sysctls (needs root).

Every test works under its own tmp_path; the `dirs` fixture's teardown is the safety net that unmounts
and detaches whatever a failing test left there, and only there (other loop devices may be someone else's).
"""

import os
import signal
import subprocess
import sys
import textwrap
import types

import pytest

from conftest import loops_under, mounts_under
from profiler.errors import FsprofError
from profiler.machine.scratch import FsConfig, kernel_devt, provision, provision_device
from profiler.machine.settings import set_scheduler, set_sysctl
from profiler.machine.undo import Changes, cleanup_stale

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZE = 512 << 20  # xfs needs at least 300 MiB
SYSCTL = "vm.dirty_expire_centisecs"  # harmless to change for a few seconds


def read_sysctl(name):
    with open("/proc/sys/" + name.replace(".", "/")) as f:
        return f.read().strip()


def write_sysctl(name, value):
    with open("/proc/sys/" + name.replace(".", "/"), "w") as f:
        f.write(str(value))


def images_under(root):
    return [os.path.join(d, f) for d, _, files in os.walk(root) for f in files if f.endswith(".img")]


def assert_nothing_left(dirs):
    assert mounts_under(dirs.root) == []
    assert loops_under(dirs.scratch) == []
    assert images_under(dirs.scratch) == []
    assert not os.path.exists(dirs.scratch) or os.listdir(dirs.scratch) == []
    assert not os.path.exists(dirs.state) or os.listdir(dirs.state) == []


@pytest.fixture
def dirs(tmp_path):
    d = types.SimpleNamespace(root=tmp_path, state=str(tmp_path / "state"), scratch=str(tmp_path / "scratch"))
    yield d
    cleanup_stale(d.state)
    for target, _ in reversed(mounts_under(tmp_path)):
        subprocess.run(["umount", target], check=False)
    for loop in loops_under(tmp_path):
        subprocess.run(["losetup", "-d", loop], check=False)


def mount_as_user(device, target):
    """ext4 on device, mounted at target as a user would have it (the dirs fixture unmounts it)."""
    target.mkdir()
    subprocess.run(["mkfs.ext4", "-F", "-q", device], check=True)
    subprocess.run(["mount", device, str(target)], check=True)
    return target


def fstype_of(mountpoint):
    with open("/proc/mounts") as f:
        return next(e[2] for e in map(str.split, f) if e[1] == mountpoint)


# ---------------------------------------------------------------------------------------------------
# Provisioning and undo


CONFIGS = [
    FsConfig("ext4", size_bytes=SIZE),
    FsConfig("ext3", size_bytes=SIZE),
    FsConfig("ext2", size_bytes=SIZE),
    FsConfig("xfs", size_bytes=SIZE),
    FsConfig("btrfs", size_bytes=SIZE),
    FsConfig("btrfs", mkfs_options=["-d", "raid1", "-m", "raid1"], size_bytes=SIZE, devices=2, label="btrfs-raid1"),
]


@pytest.mark.root
@pytest.mark.parametrize("config", CONFIGS, ids=[c.label for c in CONFIGS])
def test_provision_then_undo_leaves_nothing(dirs, config):
    with Changes(dirs.state) as changes:
        fs = provision(changes, config, dirs.scratch)
        assert fs.mountpoint == os.path.join(os.path.realpath(dirs.scratch), config.label, "mnt")
        assert fstype_of(fs.mountpoint) == config.fs
        assert len(fs.devices) == len(fs.images) == len(fs.block_devs) == config.devices
        for device, (name, devt) in zip(fs.devices, fs.block_devs):
            assert device == f"/dev/{name}" and devt == kernel_devt(os.stat(device).st_rdev)
        if config.fs == "btrfs":
            assert fs.dev >> 20 == 0  # btrfs superblocks live on an anonymous device, not the loop
        else:
            assert fs.dev == fs.block_devs[0][1]
        if config.devices == 2:
            df = subprocess.run(["btrfs", "filesystem", "df", fs.mountpoint], capture_output=True, text=True)
            assert "Data, RAID1" in df.stdout
        with open(os.path.join(fs.mountpoint, "probe"), "w") as f:
            f.write("x")
        assert os.listdir(dirs.state) == [os.path.basename(changes.path)]
    assert changes.warnings == []
    assert_nothing_left(dirs)


@pytest.mark.root
def test_provision_device_with_force_erase(dirs, loopdev):
    subprocess.run(["mkfs.ext4", "-F", "-q", loopdev], check=True)
    with pytest.raises(FsprofError, match="--force-erase"):
        with Changes(dirs.state) as changes:
            provision_device(changes, FsConfig("xfs"), loopdev, erase=True, scratch_dir=dirs.scratch)
    with Changes(dirs.state) as changes:
        fs = provision_device(changes, FsConfig("xfs"), loopdev, erase=True, force=True, scratch_dir=dirs.scratch)
        assert fstype_of(fs.mountpoint) == "xfs" and fs.images == [] and fs.devices == [loopdev]
    assert_nothing_left(dirs)
    assert os.path.exists(f"/sys/block/{os.path.basename(loopdev)}/loop")  # the user's device stays


# ---------------------------------------------------------------------------------------------------
# Settings


@pytest.mark.root
def test_sysctl_set_and_restored_including_the_dirty_pair(dirs):
    pair = ("vm.dirty_background_bytes", "vm.dirty_background_ratio")
    before = [read_sysctl(n) for n in pair]
    with Changes(dirs.state) as changes:
        set_sysctl(changes, pair[0], 64 << 20)
        assert [read_sysctl(n) for n in pair] == [str(64 << 20), "0"]
    assert [read_sysctl(n) for n in pair] == before
    assert changes.warnings == []


@pytest.mark.root
def test_sysctl_changed_by_someone_else_is_left_alone(dirs):
    before = read_sysctl(SYSCTL)
    try:
        with Changes(dirs.state) as changes:
            set_sysctl(changes, SYSCTL, int(before) + 7)
            write_sysctl(SYSCTL, int(before) + 9)
        assert read_sysctl(SYSCTL) == str(int(before) + 9)
        assert "someone changed it since" in changes.warnings[0]
    finally:
        write_sysctl(SYSCTL, before)


@pytest.mark.root
def test_bad_sysctl_names_and_values(dirs):
    with Changes(dirs.state) as changes:
        with pytest.raises(FsprofError, match="unknown sysctl 'vm.no_such_thing'"):
            set_sysctl(changes, "vm.no_such_thing", 1)
        with pytest.raises(FsprofError, match="the kernel rejected vm.dirty_bytes = 1: Invalid argument"):
            set_sysctl(changes, "vm.dirty_bytes", 1)


@pytest.mark.root
def test_scheduler_set_and_restored(dirs, loopdev):
    name = os.path.basename(loopdev)
    with open(f"/sys/block/{name}/queue/scheduler") as f:
        words = f.read().split()
    before = next(w.strip("[]") for w in words if w.startswith("["))
    other = next(w for w in words if not w.startswith("["))
    with Changes(dirs.state) as changes:
        with pytest.raises(FsprofError, match="I/O scheduler 'noop' is not available for"):
            set_scheduler(changes, name, "noop")
        set_scheduler(changes, loopdev, other)
        with open(f"/sys/block/{name}/queue/scheduler") as f:
            assert f"[{other}]" in f.read()
    with open(f"/sys/block/{name}/queue/scheduler") as f:
        assert f"[{before}]" in f.read()


# ---------------------------------------------------------------------------------------------------
# Crashes and signals


CHILD = textwrap.dedent(
    """
    import sys, time
    from profiler.machine.scratch import FsConfig, provision
    from profiler.machine.settings import set_sysctl
    from profiler.machine.undo import Changes
    from profiler.signals import install_handlers
    state, scratch, value = sys.argv[1:]
    install_handlers()
    with Changes(state) as changes:
        fs = provision(changes, FsConfig("ext4", size_bytes=%d), scratch)
        set_sysctl(changes, "%s", value)
        print(fs.mountpoint, flush=True)
        time.sleep(60)
"""
    % (SIZE, SYSCTL)
)


def start_child(dirs, value):
    """A child fsprof that provisions, sets SYSCTL and sleeps; returns it once it is ready."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, dirs.state, dirs.scratch, str(value)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    mountpoint = child.stdout.readline().strip()
    if not mountpoint:
        child.wait()
        pytest.fail(f"child failed: {child.stderr.read()}")
    assert mounts_under(dirs.root) == [(mountpoint, "ext4")]
    assert read_sysctl(SYSCTL) == str(value)
    return child


@pytest.mark.root
def test_sigkill_leaves_a_state_that_cleanup_stale_undoes(dirs):
    before = read_sysctl(SYSCTL)
    try:
        child = start_child(dirs, int(before) + 11)
        child.kill()
        child.wait()
        child.stdout.close()
        child.stderr.close()
        assert loops_under(dirs.scratch) and mounts_under(dirs.root)  # the crash left it all behind
        with Changes(dirs.state) as live:
            kept = dirs.root / "kept"
            kept.mkdir()
            live.record("mountpoint", path=str(kept))
            done = cleanup_stale(dirs.state)
            assert os.path.exists(live.path) and kept.exists()  # a live holder is never touched
        assert not kept.exists()
    finally:
        if read_sysctl(SYSCTL) != before:
            write_sysctl(SYSCTL, before)
    text = "\n".join(done)
    assert "unmounted" in text and "detached /dev/loop" in text and f"restored {SYSCTL}" in text
    assert read_sysctl(SYSCTL) == before
    assert_nothing_left(dirs)


@pytest.mark.root
def test_sigterm_unwinds_and_undoes(dirs):
    before = read_sysctl(SYSCTL)
    child = start_child(dirs, int(before) + 13)
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=30)
    assert child.returncode == 143, err
    assert read_sysctl(SYSCTL) == before
    assert_nothing_left(dirs)


@pytest.mark.root
def test_failed_undo_stays_recorded_for_a_later_cleanup(dirs):
    with Changes(dirs.state) as changes:
        fs = provision(changes, FsConfig("ext4", size_bytes=SIZE), dirs.scratch)
        busy = open(os.path.join(fs.mountpoint, "busy"), "w")  # makes umount fail
    busy.close()
    assert any("could not undo mount" in w for w in changes.warnings)
    assert os.path.exists(changes.path) and mounts_under(dirs.root)
    assert any("unmounted" in s for s in cleanup_stale(dirs.state))
    assert_nothing_left(dirs)


@pytest.mark.root
def test_unknown_and_foreign_records_are_warned_about_not_undone(dirs, loopdev):
    target = mount_as_user(loopdev, dirs.root / "theirs")
    with Changes(dirs.state) as changes:
        changes.record("mount", target=str(target), source="/dev/loop99", devnums=["7:99"])
        changes.record("loop", backing_file=str(dirs.root / "user-disk.img.not"))
        changes.record("frobnicate", what="x")
    assert mounts_under(dirs.root) == [(str(target), "ext4")]
    assert any("unknown change" in w for w in changes.warnings)
    assert any(f"not unmounting {target}" in w for w in changes.warnings)
    subprocess.run(["umount", str(target)], check=True)


# ---------------------------------------------------------------------------------------------------
# Bad input: one sentence, nothing left behind


def test_unknown_filesystem():
    with pytest.raises(FsprofError, match="^unknown filesystem 'foo'; fsprof supports ext2, ext3, ext4, xfs, btrfs$"):
        FsConfig("foo")


def test_several_devices_only_for_btrfs():
    with pytest.raises(FsprofError, match="only btrfs"):
        FsConfig("xfs", devices=2)


@pytest.mark.root
def test_mkfs_rejects_option(dirs):
    with pytest.raises(
        FsprofError,
        match="^mkfs.ext4 failed on .* with the options '-E lazy_itable_init=0,lazy_journal_init=0 "
        "-O nonsense_feature': .*nonsense_feature",
    ):
        with Changes(dirs.state) as changes:
            provision(changes, FsConfig("ext4", mkfs_options=["-O", "nonsense_feature"], size_bytes=SIZE), dirs.scratch)
    assert_nothing_left(dirs)


@pytest.mark.root
@pytest.mark.parametrize("fs, option", [("xfs", "nobarrier"), ("ext4", "data=bogus")])
def test_kernel_rejects_mount_option(dirs, fs, option):
    with pytest.raises(FsprofError, match=f"^mount of {fs} with options '{option}' failed: ") as caught:
        with Changes(dirs.state) as changes:
            provision(changes, FsConfig(fs, mount_options=option, size_bytes=SIZE), dirs.scratch)
    assert option.split("=")[0] in str(caught.value)  # the kernel's own reason, from its log
    assert_nothing_left(dirs)


def test_nonexistent_device(dirs):
    with pytest.raises(FsprofError, match="^device /dev/fsprof-no-such-disk does not exist$"):
        with Changes(dirs.state) as changes:
            provision_device(changes, FsConfig("ext4"), "/dev/fsprof-no-such-disk", erase=True)


def test_regular_file_is_not_a_device(dirs):
    with pytest.raises(FsprofError, match="is not a block device"):
        with Changes(dirs.state) as changes:
            provision_device(changes, FsConfig("ext4"), "/etc/hostname", erase=True)


@pytest.mark.root
def test_device_refused_without_erase(dirs, loopdev):
    with pytest.raises(FsprofError, match="--erase-device"):
        with Changes(dirs.state) as changes:
            provision_device(changes, FsConfig("ext4"), loopdev, scratch_dir=dirs.scratch)
    assert_nothing_left(dirs)


@pytest.mark.root
def test_mounted_device_refused_even_with_force(dirs, loopdev):
    target = mount_as_user(loopdev, dirs.root / "users-mount")
    try:
        with pytest.raises(FsprofError, match=f"is mounted at {target}, and fsprof never mkfs's"):
            with Changes(dirs.state) as changes:
                provision_device(changes, FsConfig("ext4"), loopdev, erase=True, force=True, scratch_dir=dirs.scratch)
        assert mounts_under(dirs.root) == [(str(target), "ext4")]
    finally:
        subprocess.run(["umount", str(target)], check=True)
