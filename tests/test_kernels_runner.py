"""The VM runner (kernels/vm.py) and the matrix (kernels/matrix.py) on bad input, invoked for real:
one sentence each, a non-zero exit, no traceback, and nothing left behind (no qemu process, no disk
image, no temp dir). The runner makes its temp dir (disk images, the guest's rw dir) under TMPDIR,
so each test points TMPDIR at a directory of its own and looks there and in the process table."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
KERNEL_61 = sorted(Path("/boot").glob("vmlinuz-6.1.*"))
can_boot = pytest.mark.skipif(
    not (
        shutil.which("qemu-system-x86_64")
        and KERNEL_61
        and (Path("/opt/vng/bin/vng").exists() or (REPO / ".venv-vm/bin/vng").exists())
    ),
    reason="qemu, virtme-ng or Debian's 6.1 kernel is not installed (make test-kernels installs them)",
)


def runner(module, *args, tmp, env=None, timeout=120):
    e = {**os.environ, "TMPDIR": str(tmp), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=REPO, env=e, capture_output=True, text=True, timeout=timeout
    )


def processes_mentioning(text):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if text.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            pass
    return found


def comm(pid):
    try:
        return Path(f"/proc/{pid}/comm").read_text()
    except OSError:
        return ""


def assert_one_sentence(proc, code, words):
    out = proc.stdout + proc.stderr
    assert proc.returncode == code, out
    assert "Traceback" not in out, out
    assert words in out, out


def assert_nothing_left(tmp):
    assert not processes_mentioning(str(tmp)), "a process of the VM is still running"
    assert not list(tmp.iterdir()), list(tmp.iterdir())


@pytest.fixture
def tmp(tmp_path):
    d = tmp_path / "t"
    d.mkdir()
    return d


@pytest.mark.parametrize(
    "kernel, words",
    [
        ("/nonexistent/vmlinuz", "no kernel image at /nonexistent/vmlinuz"),
        ("/etc/hostname", "is not a bootable x86 kernel image"),
        ("4.19", "no kernel 4.19 is installed in /boot"),  # a kernel no row of ours installs
    ],
)
def test_unknown_kernel(tmp, kernel, words):
    proc = runner("kernels.vm", "--kernel", kernel, "--", "true", tmp=tmp)
    assert_one_sentence(proc, 2, words)
    assert_nothing_left(tmp)


def test_rt_is_its_own_row_and_a_version_never_picks_it(monkeypatch):
    """Debian's 6.1 and its PREEMPT_RT build share a version: "6.1" is the stock image, "rt" the
    other, and "rt" without one installed is one sentence that says how to get it."""
    from kernels import vm

    boot = {r: Path(f"/boot/vmlinuz-{r}") for r in ("6.1.0-56-amd64", "6.1.0-56-rt-amd64", "6.12.117+deb12-amd64")}
    monkeypatch.setattr(vm, "installed_kernels", lambda: boot)
    assert vm.resolve_kernel("6.1") == boot["6.1.0-56-amd64"]
    assert vm.resolve_kernel("rt") == boot["6.1.0-56-rt-amd64"]
    del boot["6.1.0-56-rt-amd64"]
    with pytest.raises(vm.VMError, match="no PREEMPT_RT kernel is installed .* installs linux-image-rt-amd64"):
        vm.resolve_kernel("rt")


def test_matrix_unknown_kernel_and_check(tmp):
    assert_one_sentence(
        runner("kernels.matrix", "--kernels", "host,4.19", "--no-doc", tmp=tmp), 2, "no kernel 4.19 is installed"
    )
    assert_one_sentence(
        runner("kernels.matrix", "--kernels", "host", "--checks", "doctor,nope", "--no-doc", tmp=tmp),
        2,
        "unknown check nope",
    )
    # --kernels host: the default rows (6.1 first) fail first on a machine without Debian's 6.1 kernel.
    assert_one_sentence(
        runner("kernels.matrix", "--kernels", "host", "--kernel", "/nonexistent", "--no-doc", tmp=tmp),
        2,
        "no kernel image at /nonexistent",
    )


@pytest.mark.skipif(not KERNEL_61, reason="Debian's 6.1 kernel is not installed")
def test_no_qemu(tmp):
    proc = runner("kernels.vm", "--kernel", "6.1", "--", "true", tmp=tmp, env={"PATH": str(tmp)})
    assert_one_sentence(proc, 77, "qemu-system-x86_64 is not installed")
    assert_nothing_left(tmp)


@pytest.mark.skipif(not KERNEL_61, reason="Debian's 6.1 kernel is not installed")
def test_no_kvm(tmp):
    proc = runner(
        "kernels.vm", "--kernel", "6.1", "--accel", "kvm", "--kvm-dev", str(tmp / "kvm"), "--", "true", tmp=tmp
    )
    assert_one_sentence(proc, 77, "KVM is not available")
    assert_nothing_left(tmp)


@pytest.mark.root
@can_boot
def test_a_vm_that_does_not_boot_in_time_is_stopped(tmp):
    # Under TCG no kernel reaches its init in 3 s: the boot timeout fires with qemu running.
    proc = runner("kernels.vm", "--kernel", "6.1", "--accel", "tcg", "--boot-timeout", "3", "--", "true", tmp=tmp)
    assert_one_sentence(proc, 125, "the VM did not boot within 3 s")
    assert_nothing_left(tmp)


@pytest.mark.root
@can_boot
def test_sigterm_stops_the_vm_and_removes_its_images(tmp):
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernels.vm", "--kernel", "6.1", "--accel", "tcg", "--", "true"],
        cwd=REPO,
        env={**os.environ, "TMPDIR": str(tmp)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not any("qemu" in comm(p) for p in processes_mentioning(str(tmp))):
        assert time.monotonic() < deadline and proc.poll() is None, "qemu never started"
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=30)[0]
    assert proc.returncode == 130, out
    assert "Traceback" not in out and "the VM was stopped" in out, out
    assert_nothing_left(tmp)
