"""Emulated slow devices (`--device-model`, docs/test-bed.md): dm-delay between the scratch
filesystem and its loop device. Where the kernel has device-mapper (Debian's kernels, so the VM
rows' `device-model` check), a planted barrier difference on the `hdd` model; where it has not
(this host), one sentence and exit 2."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, TIME_SCALE, run_fsprof
from test_cli import assert_one_sentence

pytestmark = [pytest.mark.root]

COUNT = 100


def device_mapper():
    """Whether this kernel has device-mapper's delay target (a module on Debian's kernels)."""
    subprocess.run(["modprobe", "-q", "dm-delay"], capture_output=True)
    return Path("/sys/class/misc/device-mapper").exists()


def dm_devices():
    """The device-mapper devices of the machine, by their kernel names."""
    return sorted(p.name for p in Path("/sys/block").glob("dm-*"))


@pytest.mark.parametrize(
    "model, words",
    [
        ("floppy", "unknown device model 'floppy': use one of hdd, ssd-no-plp"),
        ("flush=-15", "flush delay -15 must be whole milliseconds, 0 or more"),
        ("read=0.5", "read delay 0.5 must be whole milliseconds"),
        ("seek=8", "'seek=8' is not read=MS, write=MS or flush=MS"),
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
    assert_one_sentence(proc, "--device-model puts dm-delay over a scratch loop device")


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


def fsync_loop(tmp_path, name, barrier):
    out = tmp_path / name
    proc = run_fsprof(
        "run", "--fs", "ext4", "--device-model", "hdd", "--mount-options", f"barrier={barrier}",
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


@pytest.mark.skipif(not device_mapper(), reason="this kernel has no device-mapper (the VM rows have)")
def test_a_killed_run_leaves_its_dm_device_to_the_next_fsprof(tmp_path):
    """SIGKILL while the filesystem is mounted on its dm-delay device: `fsprof cleanup` unmounts
    it, removes the dm device, then detaches the loop device under it (the journal's reverse
    order: a loop device is busy while a dm device holds it)."""
    before = dm_devices()
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "profiler", "run", "--fs", "ext4", "--device-model", "ssd-no-plp",
            "--count", "10000000", "--scratch-dir", str(tmp_path / "scratch"), "-o", str(tmp_path / "run"),
        ],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 300 * TIME_SCALE
    while not list((tmp_path / "scratch").glob("*/ext4/mnt/*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    made = [d for d in dm_devices() if d not in before]
    proc.kill()
    proc.wait()
    assert made, f"no dm device to clean up; the run said: {proc.stderr.read()[-2000:]}"
    after = run_fsprof("cleanup")
    assert after.returncode == 0, after.stderr
    assert "cleaned up after a dead run" in after.stderr, after.stderr
    assert dm_devices() == before
    assert not [p for p in Path("/sys/block").glob("loop*/loop/backing_file") if str(tmp_path) in p.read_text()]
