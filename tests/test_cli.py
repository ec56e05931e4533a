"""Bad input gets one sentence on stderr and a non-zero exit, never a traceback."""

import subprocess

import pytest

from conftest import FSPROF, loops_under, mounts_under, run_fsprof


def assert_one_sentence(proc, *fragments):
    assert proc.returncode != 0
    err = proc.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("fsprof: ")
    for fragment in fragments:
        assert fragment in err, err


# `fsprof run` checks for root before most of its arguments: its usage errors need root too.
@pytest.mark.root
def test_unknown_filesystem(tmp_path):
    proc = run_fsprof("run", "--fs", "ext4,zfs", "-o", str(tmp_path / "run"))
    assert_one_sentence(proc, "unknown filesystem 'zfs'")


@pytest.mark.root
def test_unknown_workload(tmp_path):
    assert_one_sentence(run_fsprof("run", "--workload", "nope", "-o", str(tmp_path / "run")), "unknown workload")


@pytest.mark.root
def test_mkfs_option_rejected_leaves_nothing(tmp_path):
    proc = run_fsprof(
        "run",
        "--fs",
        "ext4",
        "--mkfs-options",
        "-O nonsense_feature",
        "--scratch-dir",
        str(tmp_path),
        "-o",
        str(tmp_path / "run"),
    )
    assert_one_sentence(proc, "mkfs.ext4")
    assert not mounts_under(tmp_path) and not loops_under(tmp_path)


@pytest.mark.root
def test_device_that_does_not_exist(tmp_path):
    proc = run_fsprof(
        "run", "--fs", "ext4", "--device", "/dev/nosuchdisk", "--erase-device", "-o", str(tmp_path / "run")
    )
    assert_one_sentence(proc, "/dev/nosuchdisk does not exist")


@pytest.mark.root
def test_device_needs_the_erase_flag(tmp_path, ext4_loop):
    device, _ = ext4_loop
    proc = run_fsprof("run", "--fs", "ext4", "--device", device, "-o", str(tmp_path / "run"))
    assert_one_sentence(proc, "--erase-device")


@pytest.mark.root
def test_mounted_device_refused_even_with_both_flags(tmp_path, ext4_loop):
    device, mountpoint = ext4_loop
    subprocess.run(["mount", device, str(mountpoint)], check=True)
    try:
        proc = run_fsprof(
            "run", "--fs", "ext4", "--device", device, "--erase-device", "--force-erase", "-o", str(tmp_path / "run")
        )
        assert_one_sentence(proc, "mounted")
        assert (mountpoint / "precious").read_text() == "keep me"
    finally:
        subprocess.run(["umount", str(mountpoint)], check=True)


@pytest.mark.root
def test_device_with_a_filesystem_needs_force(tmp_path, ext4_loop):
    device, _ = ext4_loop
    proc = run_fsprof("run", "--fs", "xfs", "--device", device, "--erase-device", "-o", str(tmp_path / "run"))
    assert_one_sentence(proc, "--force-erase")


@pytest.mark.root
def test_non_root_user_is_told_so(tmp_path):
    # nobody keeps only the right to read files (our interpreter lives under /root).
    proc = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=+dac_read_search",
            "--ambient-caps=+dac_read_search",
            *FSPROF,
            "run",
            "--fs",
            "ext4",
            "-o",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
    )
    assert_one_sentence(proc, "must run as root")


def test_report_of_a_directory_that_is_no_run(tmp_path):
    assert_one_sentence(run_fsprof("report", str(tmp_path)), "not an fsprof run directory")


@pytest.mark.root
@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--sysctl", "vm.dirty_bytes"], "NAME=VALUE"),
        (["--sysctl", "vm=1"], "unknown sysctl 'vm'"),
        (["--sysctl", "vm.no_such_knob=1"], "unknown sysctl"),
        (["--image-size", "inf"], "is not a size"),
        (["--count", "-1"], "--count must be a positive number"),
        (["--workload", "fsync-loop", "--no-such-option"], "unrecognized arguments: --no-such-option"),
        (
            [
                "--",
            ],
            "nothing follows",
        ),
        (["--workload", "fsync-loop", "--", "true"], "not both"),
        (["--result", "x.json"], "set by fsprof"),
        (["--sample-hz", "1000000000"], "not a sampling rate"),
        (["--tail-threshold=-1ms"], "not a positive duration"),
        (["--tail-threshold", "0"], "not a positive duration"),
        (["--tail-threshold", "soon"], "not a positive duration"),
        (["--exemplars", "0"], "not a count of calls from 1 to 16"),
        (["--exemplars", "17"], "not a count of calls from 1 to 16"),
        (["--exemplars", "many"], "not a count of calls from 1 to 16"),
        (["--fs", ""], "names no filesystem"),
        (["--fs", "ext4", "--devices", "2"], "btrfs only"),
        (["--fs", "ext4", "--mount-options", "xfs=logbufs=8"], "not among --fs"),
        (["--fs", "ext4", "--scheduler", "bogus"], "not available"),
        (["--fs", "ext4", "--image-size", "1k"], "mkfs.ext4 failed"),
        (["--fs", "xfs", "--image-size", "100M"], "(the scratch image is 100 MiB: --image-size sets it)"),
        (["--fs", "btrfs", "--image-size", "64M"], "(the scratch image is 64 MiB: --image-size sets it)"),
    ],
)
def test_bad_run_arguments(tmp_path, args, fragment):
    proc = run_fsprof(
        "run", "--count", "5", "--scratch-dir", str(tmp_path / "scratch"), "-o", str(tmp_path / "run"), *args
    )
    assert_one_sentence(proc, fragment)
    assert not mounts_under(tmp_path) and not loops_under(tmp_path)
    assert not (tmp_path / "scratch").exists() or not any((tmp_path / "scratch").iterdir())


@pytest.mark.root
def test_run_directory_that_is_a_file(tmp_path):
    (tmp_path / "taken").write_text("")
    assert_one_sentence(run_fsprof("run", "-o", str(tmp_path / "taken")), "cannot use")


@pytest.mark.root
def test_scratch_dir_that_is_a_file(tmp_path):
    (tmp_path / "taken").write_text("")
    proc = run_fsprof("run", "--fs", "ext4", "--scratch-dir", str(tmp_path / "taken"), "-o", str(tmp_path / "run"))
    assert_one_sentence(proc, "scratch directory")


@pytest.mark.parametrize("content", [b"[]", b'{"schema": "x"}', b"\xff\xfe"])
def test_report_of_something_that_is_no_result(tmp_path, content):
    (tmp_path / "result.json").write_bytes(content)
    assert_one_sentence(run_fsprof("report", str(tmp_path)), "result.json")


@pytest.mark.root
def test_root_without_bpf_capabilities_is_told_which(tmp_path):
    proc = subprocess.run(
        [
            "setpriv",
            "--bounding-set=-bpf,-perfmon,-sys_admin",
            *FSPROF,
            "run",
            "--fs",
            "ext4",
            "-o",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
    )
    assert_one_sentence(proc, "lacks CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF")


@pytest.mark.root
def test_doctor_says_fsprof_can_run():
    proc = run_fsprof("doctor")
    assert proc.returncode == 0, proc.stdout
    assert "fsprof can run here" in proc.stdout
    for piece in ("raw_syscalls", "kprobes", "fentry", "perf_event sampling"):
        assert piece in proc.stdout
