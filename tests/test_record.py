"""`fsprof record` on a live system: a mount (every process, that filesystem only), a cgroup, and
bad input. The workload processes here are not started by fsprof."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import REPO, assert_invariants, kernel_programs, run_fsprof
from profiler.machine import scratch, undo
from profiler.session.record import cgroup2_root

pytestmark = pytest.mark.root

FSYNCS = """
import os, sys
fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0o644)
for _ in range(int(sys.argv[2])):
    os.write(fd, b"x" * 4096)
    os.fsync(fd)
"""


def start_record(tmp_path, *args, preexec_fn=None):
    rec = subprocess.Popen(
        [sys.executable, "-m", "profiler", "record", *args, "-o", str(tmp_path / "rec")],
        cwd=REPO,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=preexec_fn,
    )
    assert "recording" in rec.stderr.readline()
    return rec


def finish(rec, tmp_path):
    rec.send_signal(signal.SIGINT)  # Ctrl-C ends an open-ended recording normally
    try:
        status = rec.wait(timeout=60)
    except subprocess.TimeoutExpired:
        rec.terminate()  # unwinds it: a failed test leaves nothing recording
        rec.wait(timeout=60)
        raise
    assert status == 0, rec.stderr.read()
    result = json.loads((tmp_path / "rec" / "result.json").read_text())
    assert_invariants(result)
    return result


@pytest.mark.slow
def test_record_mount_sees_every_process_on_that_filesystem_only(tmp_path):
    elsewhere = tmp_path / "elsewhere.dat"  # not on the recorded mount
    with undo.Changes() as changes:
        sfs = scratch.provision(changes, scratch.FsConfig("ext4"), tmp_path / "scratch")
        rec = start_record(tmp_path, "--mount", sfs.mountpoint)
        try:
            for target in (os.path.join(sfs.mountpoint, "a.dat"), os.path.join(sfs.mountpoint, "b.dat"), elsewhere):
                subprocess.run([sys.executable, "-c", FSYNCS, target, "50"], check=True)
        finally:
            result = finish(rec, tmp_path)
    (fs,) = result["filesystems"]
    assert fs["label"] == sfs.mountpoint and fs["fs"] == "ext4"
    assert fs["syscalls"]["fsync"]["count"] == 100  # two processes, 50 each; the third was elsewhere
    assert fs["phases"]["record"]["attribution"]["fsync"]["causes"]
    assert result["workload"]["ended_by"] == "interrupted"


def fsprof_program_names():
    """The names the kernel gives fsprof's programs (function symbols of build/*.bpf.o; the kernel
    keeps 15 characters)."""
    names = set()
    for obj in (Path(REPO) / "build").glob("*.bpf.o"):
        syms = subprocess.run(["llvm-objdump", "-t", str(obj)], capture_output=True, text=True).stdout
        names |= {line.split()[-1][:15] for line in syms.splitlines() if " g     F " in line}
    return names


def loaded_fsprof_programs(names):
    return sorted({p.get("name") for p in kernel_programs()} & names)


def test_record_for_a_duration_leaves_no_program_loaded(tmp_path):
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        rec = subprocess.run(
            [
                sys.executable,
                "-m",
                "profiler",
                "record",
                "--pid",
                str(sleeper.pid),
                "--duration",
                "1s",
                "-o",
                str(tmp_path / "rec"),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        sleeper.kill()
        sleeper.wait()
    assert rec.returncode == 0, rec.stderr
    # Links go with the process; a tp_btf program is freed a grace period after its link.
    names = fsprof_program_names()
    assert {"on_sys_enter", "on_switch"} <= names
    deadline = time.monotonic() + 5
    while loaded_fsprof_programs(names) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert loaded_fsprof_programs(names) == []


@pytest.mark.slow
def test_record_under_nohup_outlives_a_hangup(tmp_path):
    """Started with SIGHUP ignored (`nohup fsprof record ... &`), a recording goes on when its
    terminal hangs up, and Ctrl-C still ends it normally."""
    with undo.Changes() as changes:
        sfs = scratch.provision(changes, scratch.FsConfig("ext4"), tmp_path / "scratch")
        rec = start_record(
            tmp_path, "--mount", sfs.mountpoint, preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN)
        )
        try:
            rec.send_signal(signal.SIGHUP)
            subprocess.run([sys.executable, "-c", FSYNCS, os.path.join(sfs.mountpoint, "a.dat"), "20"], check=True)
            assert rec.poll() is None, rec.stderr.read()
        finally:
            result = finish(rec, tmp_path)
    (fs,) = [f for f in result["filesystems"] if f["label"] == sfs.mountpoint]
    assert fs["syscalls"]["fsync"]["count"] == 20


@pytest.mark.slow
def test_record_cgroup_follows_its_tasks(tmp_path):
    root = cgroup2_root()
    if not (root / "cgroup.procs").exists():
        pytest.skip("no cgroup v2 hierarchy is mounted")
    cgroup = root / f"fsprof-test-{uuid.uuid4().hex[:8]}"
    cgroup.mkdir()
    try:
        with undo.Changes() as changes:
            sfs = scratch.provision(changes, scratch.FsConfig("ext4"), tmp_path / "scratch")
            rec = start_record(tmp_path, "--cgroup", str(cgroup))
            try:
                # Outside the cgroup: not traced. Inside (the shell joins it before exec): traced.
                subprocess.run(
                    [sys.executable, "-c", FSYNCS, os.path.join(sfs.mountpoint, "out.dat"), "30"], check=True
                )
                subprocess.run(
                    [
                        "sh",
                        "-c",
                        f'echo $$ > {cgroup}/cgroup.procs && exec "$0" -c "$1" "$2" "$3"',
                        sys.executable,
                        FSYNCS,
                        os.path.join(sfs.mountpoint, "in.dat"),
                        "40",
                    ],
                    check=True,
                )
            finally:
                result = finish(rec, tmp_path)
    finally:
        cgroup.rmdir()
    (fs,) = [f for f in result["filesystems"] if f["label"] == sfs.mountpoint]
    assert fs["syscalls"]["fsync"]["count"] == 40


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--pid", "4000000"], "there is no process"),
        (["--mount", "/proc/self"], "is not a mount point"),
        (["--mount", "/proc"], "fsprof profiles"),
        (["--pid", "1", "--mount", "/"], "exactly one of"),
        ([], "exactly one of"),
        (["--pid", "1", "--duration", "0"], "not a positive duration"),
        (["--pid", "1", "--duration", "nan"], "not a positive duration"),
        (["--pid", "99999999999"], "not a process id"),
        (["--pid", "1", "--sample-hz", "-5"], "not a sampling rate"),
        (["--cgroup", "no-such-cgroup-here"], "not a cgroup v2 directory"),
    ],
)
def test_record_bad_input_is_one_sentence(tmp_path, args, fragment):
    proc = run_fsprof("record", *args, "-o", str(tmp_path / "rec"))
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1 and fragment in err, err
    assert not (tmp_path / "rec").exists()  # nothing written for a bad command line
