"""Emulated devices (`--device-model`, docs/test-bed.md): dm-delay between the scratch filesystem
and its loop device, or a null_blk RAM device with a volatile write cache in place of the loop.
Where the kernel has device-mapper and null_blk (Debian's kernels, so the VM rows' `device-model`
check), a planted barrier difference on the `hdd` model, the flushes and power cuts of the
`volatile-cache` model; where it has not (this host), one sentence and exit 2."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, TIME_SCALE, run_fsprof
from test_cli import assert_one_sentence
from profiler.machine import device_model as models, scratch, undo

pytestmark = [pytest.mark.root]

COUNT = 100


def device_mapper():
    """Whether this kernel has device-mapper's delay target (a module on Debian's kernels)."""
    subprocess.run(["modprobe", "-q", "dm-delay"], capture_output=True)
    return Path("/sys/class/misc/device-mapper").exists()


def null_blk():
    """Whether this kernel has null_blk (a module on Debian's kernels; this host has none)."""
    subprocess.run(["modprobe", "-q", "null_blk", "nr_devices=0"], capture_output=True)
    return Path(models.NULL_BLK_MODULE).is_dir()


def configfs_mounted():
    return any(m["fstype"] == "configfs" for m in undo.mounts())


def fsprof_null_blks():
    """The null_blk devices fsprof made (configfs groups fsprof-<pid>-<i>) that are still there."""
    return sorted(p.name for p in Path(undo.NULL_BLK_GROUPS).glob("fsprof-*"))


def dm_devices():
    """The device-mapper devices of the machine, by their kernel names."""
    return sorted(p.name for p in Path("/sys/block").glob("dm-*"))


@pytest.mark.parametrize(
    "model, words",
    [
        ("floppy", "unknown device model 'floppy': use one of hdd, ssd-no-plp, volatile-cache"),
        ("flush=-15", "flush delay -15 must be whole milliseconds, 0 or more"),
        ("read=0.5", "read delay 0.5 must be whole milliseconds"),
        ("cache=-64", "cache size -64 must be whole MiB, 0 or more"),
        ("seek=8", "'seek=8' is not read=MS, write=MS, flush=MS or cache=MiB"),
    ],
)
def test_a_bad_model_is_one_sentence(tmp_path, model, words):
    proc = run_fsprof("run", "--fs", "ext4", "--device-model", model, "-o", str(tmp_path / "run"), "--", "true")
    assert proc.returncode == 2
    assert_one_sentence(proc, words)
    assert not (tmp_path / "run").exists()


def test_a_model_on_a_named_device_is_refused(tmp_path):
    proc = run_fsprof("run", "--fs", "ext4", "--device-model", "hdd", "--device", "/dev/vdz", "--", "true")
    assert proc.returncode == 2
    assert_one_sentence(proc, "--device-model emulates a device in place of the scratch loop device")


@pytest.mark.skipif(device_mapper(), reason="this kernel has device-mapper")
def test_without_device_mapper_a_model_is_one_sentence_and_nothing_is_made(tmp_path):
    proc = run_fsprof(
        "run", "--fs", "ext4", "--device-model", "hdd", "--scratch-dir", str(tmp_path / "scratch"),
        "-o", str(tmp_path / "run"), "--", "true",
    )  # fmt: skip
    assert proc.returncode == 2
    assert_one_sentence(proc, "--device-model needs device-mapper, which this kernel does not have")
    assert not (tmp_path / "run").exists() and not (tmp_path / "scratch").exists()
    assert not os.path.exists("/dev/mapper"), "dmsetup made /dev/mapper on a kernel without device-mapper"


@pytest.mark.skipif(null_blk(), reason="this kernel has null_blk")
def test_without_null_blk_a_cache_model_is_one_sentence_and_nothing_is_made(tmp_path):
    mounted = configfs_mounted()
    proc = run_fsprof(
        "run", "--fs", "ext4", "--device-model", "volatile-cache", "--scratch-dir", str(tmp_path / "scratch"),
        "-o", str(tmp_path / "run"), "--", "true",
    )  # fmt: skip
    assert proc.returncode == 2
    assert_one_sentence(proc, "--device-model with a write cache needs null_blk, which this kernel does not have")
    assert not (tmp_path / "run").exists() and not (tmp_path / "scratch").exists()
    assert configfs_mounted() == mounted


def fsync_loop(tmp_path, name, barrier, model="hdd"):
    out = tmp_path / name
    proc = run_fsprof(
        "run", "--fs", "ext4", "--device-model", model, "--mount-options", f"barrier={barrier}",
        "--workload", "fsync-loop", "--count", str(COUNT), "--scratch-dir", str(tmp_path / "scratch"), "-o", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return out, json.loads((out / "result.json").read_text())["filesystems"][0]


@pytest.mark.skipif(not device_mapper(), reason="this kernel has no device-mapper (the VM rows have)")
def test_barriers_on_an_hdd_model_cost_its_flushes(tmp_path):
    """ext4 fsync-loop on the hdd model (flushes held 15 ms, writes passed at once: a disk whose
    write cache is on), barrier=1 against barrier=0. Known by construction: every jbd2 commit ends
    with a PREFLUSH write that the model holds 15 ms, so the fsyncs with barriers are many times
    slower, and the cause is the cache flush."""
    before = dm_devices()
    on_dir, on = fsync_loop(tmp_path, "on", 1)
    off_dir, off = fsync_loop(tmp_path, "off", 0)
    assert dm_devices() == before, "a dm-delay device was left behind"
    for fs in (on, off):
        bed = fs["device"]["test_bed"]
        assert bed["device_model"] == {"name": "hdd", "read_ms": 8, "write_ms": 0, "flush_ms": 15}, bed
        assert bed["kind"] == "loop" and bed["mapper"] == fs["device"]["name"], bed
    dm, loop = on["device"]["name"], on["device"]["all"][1]
    # The flushes the loop device was asked for, as its /sys/block stat counts them.
    done = on["behind"]["block"]["devices"][loop]["as_sys_block_stat"]
    assert done["flush_ios"] == on["kernel_counters"][loop]["flush_ios"] >= COUNT, (done, on["kernel_counters"][loop])
    # Every bio of dm-0 that carries a flush took at least the model's 15 ms to complete.
    bios = on["behind"]["block"]["devices"][dm]["classes"]
    flushing = [bios[c] for c in ("flush", "preflush_write") if bios.get(c, {}).get("completed")]
    assert sum(s["completed"] for s in flushing) >= COUNT, bios
    for s in flushing:
        assert s["device"]["avg_ns"] >= 15e6 and s["device"]["p50_ns"] >= 15e6 * 0.9, s["device"]

    # The user's number: fsync with barriers much slower. Each fsync waits for one commit whose
    # commit block the model holds 15 ms: by construction its wait grows by at least that. The
    # ratio is TCG's as much as the model's: an fsync waits for the jbd2 thread's CPU too, 10-30x a
    # real machine's (docs/test-bed.md): 5.1x on 6.1 alone, 3.5x in blocked time on 6.12 beside
    # `make test` (22.6 vs 6.5 ms), 2026-11-28.
    def waited(fs):
        b = fs["attribution"]["fsync"]
        return (b["offcpu_ns"] - b["causes"].get("cpu contention", 0)) / b["count"]

    assert waited(on) - waited(off) >= 0.9 * 15e6, (waited(on), waited(off))
    assert on["syscalls"]["fsync"]["avg_ns"] >= 2 * off["syscalls"]["fsync"]["avg_ns"]
    # compare names the cache flush first, and its test-bed lines name the model.
    proc = run_fsprof("compare", str(off_dir), str(on_dir), "--json")
    assert proc.returncode == 0, proc.stderr
    (cmp,) = json.loads(proc.stdout)
    assert cmp["op"] == "fsync"
    first = cmp["causes"][0]
    assert "cache flush" in first["cause"] and first["diff_us"] > 0, cmp["causes"][:3]
    text = run_fsprof("compare", str(off_dir), str(on_dir)).stdout
    assert "dm-delay model hdd (read 8 ms, write 0 ms, flush 15 ms)" in text, text
    assert "an emulated device, dm-delay model hdd" in run_fsprof("report", str(on_dir)).stdout


@pytest.mark.skipif(not null_blk(), reason="this kernel has no null_blk (the VM rows have)")
def test_a_volatile_cache_is_flushed_by_barriers_and_counted(tmp_path):
    """ext4 fsync-loop on the volatile-cache model (a null_blk RAM device whose 64 MiB write cache
    a flush empties), barrier=1 against barrier=0: every fsync's commit flushes the cache with
    barriers and never without; fsprof's flush count is the device's /sys/block stat, and the
    result, report and compare name the model. Nothing is left behind."""
    mounted = configfs_mounted()
    on_dir, on = fsync_loop(tmp_path, "on", 1, "volatile-cache")
    off_dir, off = fsync_loop(tmp_path, "off", 0, "volatile-cache")
    assert configfs_mounted() == mounted and not fsprof_null_blks(), "a null_blk device or configfs was left behind"
    flushes = {}
    for fs in (on, off):
        dev, bed = fs["device"], fs["device"]["test_bed"]
        assert bed == {
            "kind": "null_blk",
            "device_model": {"name": "volatile-cache", "read_ms": 0, "write_ms": 0, "flush_ms": 0, "cache_mib": 64},
        }, bed
        assert dev["all"] == [dev["name"]] and dev["write_cache"] == "write back", dev
        done = fs["behind"]["block"]["devices"][dev["name"]]["as_sys_block_stat"]
        assert done["flush_ios"] == fs["kernel_counters"][dev["name"]]["flush_ios"], (done, fs["kernel_counters"])
        flushes[fs is on] = done["flush_ios"]
    # By construction: one commit, so one cache flush, per fsync with barriers; none without.
    assert flushes[True] >= COUNT and flushes[False] < COUNT // 10, flushes
    # compare names the model only beside a significant difference: a flush into RAM costs little
    # (5.10 under load: no significant difference), so the report is checked, which always does.
    report = run_fsprof("report", str(on_dir)).stdout
    assert "an emulated device, null_blk model volatile-cache (a 64 MiB volatile write cache): a RAM device" in report


def fsynced_files_after_a_power_cut(tmp_path, barrier, files=10):
    """Write and fsync `files` files on ext4 on the volatile-cache model, power the device off and
    on (null_blk's configfs `power`: its cache is dropped, its storage kept), and count the files
    that came back whole."""
    content = b"flushed or lost\n" * 256
    model = models.MODELS["volatile-cache"]
    config = scratch.FsConfig("ext4", mount_options=f"barrier={barrier}", size_bytes=1 << 30, device_model=model)
    with undo.Changes() as changes:
        sfs = scratch.provision(changes, config, tmp_path / f"scratch{barrier}")
        for i in range(files):
            fd = os.open(f"{sfs.mountpoint}/f{i}", os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, content)
            os.fsync(fd)
            os.close(fd)
        (group,) = [r["group"] for r in changes.records if r["kind"] == "null_blk"]
        Path(group, "power").write_text("0")  # the power cut: the device goes, its cache with it
        subprocess.run(["umount", sfs.mountpoint], capture_output=True)  # fails its writes, but goes
        Path(group, "power").write_text("1")
        disk = f"/dev/{undo.null_blk_disk(group)}"
        fsck = subprocess.run(["e2fsck", "-fy", disk], capture_output=True, text=True)
        assert fsck.returncode <= 2, fsck.stdout + fsck.stderr  # 1, 2: errors corrected
        check = tmp_path / f"check{barrier}"
        check.mkdir()
        subprocess.run(["mount", "-o", "ro", disk, str(check)], check=True)
        try:
            return sum(
                1 for i in range(files) if (check / f"f{i}").is_file() and (check / f"f{i}").read_bytes() == content
            )
        finally:
            subprocess.run(["umount", str(check)], check=True)


@pytest.mark.skipif(not null_blk(), reason="this kernel has no null_blk (the VM rows have)")
def test_the_volatile_cache_loses_at_a_power_cut_what_was_not_flushed(tmp_path):
    """Why the model exists: what a disk's volatile write cache does to barriers off. Files
    written and fsynced with barrier=1 survive a power cut (each commit flushed the cache); with
    barrier=0 the fsyncs returned, but their blocks were still in the cache, and are lost."""
    mounted = configfs_mounted()
    assert fsynced_files_after_a_power_cut(tmp_path, 1) == 10
    assert fsynced_files_after_a_power_cut(tmp_path, 0) < 10
    assert configfs_mounted() == mounted and not fsprof_null_blks()


@pytest.mark.skipif(not device_mapper(), reason="this kernel has no device-mapper (the VM rows have)")
@pytest.mark.parametrize(
    "model",
    [
        "ssd-no-plp",  # dm-delay over a loop device
        pytest.param("flush=2,cache=16", marks=pytest.mark.skipif(not null_blk(), reason="no null_blk")),
    ],
)
def test_a_killed_run_leaves_its_devices_to_the_next_fsprof(tmp_path, model):
    """SIGKILL while the filesystem is mounted on its dm-delay device: `fsprof cleanup` unmounts
    it, removes the dm device, then detaches the loop device (or removes the null_blk device)
    under it (the journal's reverse order: a device is busy while a dm device holds it)."""
    before = dm_devices()
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "profiler", "run", "--fs", "ext4", "--device-model", model,
            "--count", "10000000", "--scratch-dir", str(tmp_path / "scratch"), "-o", str(tmp_path / "run"),
        ],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 300 * TIME_SCALE
    while not list((tmp_path / "scratch").glob("*/ext4/mnt/*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    made = [d for d in dm_devices() if d not in before]
    assert bool(fsprof_null_blks()) == ("cache=" in model), fsprof_null_blks()
    proc.kill()
    proc.wait()
    assert made, f"no dm device to clean up; the run said: {proc.stderr.read()[-2000:]}"
    after = run_fsprof("cleanup")
    assert after.returncode == 0, after.stderr
    assert "cleaned up after a dead run" in after.stderr, after.stderr
    assert dm_devices() == before and not fsprof_null_blks()
    assert not [p for p in Path("/sys/block").glob("loop*/loop/backing_file") if str(tmp_path) in p.read_text()]
