"""Experiment matrices (`fsprof run --spec`): every combination runs on a fresh filesystem with its
own settings, which are undone after it; bad specs are refused before anything is touched."""

import json
from pathlib import Path

import pytest

from conftest import REPO, assert_invariants, run_fsprof
from profiler.machine import spec
from workloads import untar

SHIPPED = sorted((Path(REPO) / "workloads" / "specs").glob("*.toml"))

MATRIX = """
repeats = 2
stack_sample = 2
[[config]]
name = "ext4-dirty"
fs = "ext4"
mount_options = "noatime"
sysctls = {{ "vm.dirty_bytes" = 4000000 }}
[[config]]
name = "xfs-zram"
fs = "xfs"
device = "zram"
image_size = "512M"
[[workload]]
name = "loop"
workload = "fsync-loop"
args = ["--count", "{count}"]
"""


def read(path):
    return Path(path).read_text().strip()


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_specs_are_valid(path, tmp_path, monkeypatch):
    # untar's check makes its cache dir: a dir of the test's, never /var/tmp/fsprof as a user.
    monkeypatch.setattr(untar, "DEFAULT_CACHE_DIR", str(tmp_path / "cache"))
    matrix = spec.load(path)
    assert matrix.plan() and matrix.description


@pytest.mark.slow
@pytest.mark.root
def test_matrix_runs_every_combination_with_its_own_settings(tmp_path):
    spec_file = tmp_path / "m.toml"
    spec_file.write_text(MATRIX.format(count=30))
    dirty_before = read("/proc/sys/vm/dirty_bytes")
    zram_before = sorted(p.name for p in Path("/sys/block").glob("zram*"))
    proc = run_fsprof(
        "run", "--spec", str(spec_file), "-o", str(tmp_path / "out"), "--scratch-dir", str(tmp_path / "scratch")
    )
    assert proc.returncode == 0, proc.stderr
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    # Repeats interleaved: A B A B.
    assert [(r["config"], r["repeat"]) for r in index["runs"]] == [
        ("ext4-dirty", 1),
        ("xfs-zram", 1),
        ("ext4-dirty", 2),
        ("xfs-zram", 2),
    ]
    for r in index["runs"]:
        result = json.loads((tmp_path / "out" / r["dir"] / "result.json").read_text())
        assert_invariants(result)
        (fs,) = result["filesystems"]
        assert fs["syscalls"]["fsync"]["count"] == 30
        assert fs["stack_sampling"]["every"] == 2  # the spec's, not the command line's default
        if r["config"] == "ext4-dirty":
            assert fs["fs"] == "ext4" and "noatime" in fs["mount_options"]
            assert result["sysctls"] == {"vm.dirty_bytes": "4000000"}
            assert fs["device"]["name"].startswith("loop")
        else:
            assert fs["fs"] == "xfs" and fs["device"]["name"].startswith("zram")
    # Everything a configuration changed was undone after it.
    assert read("/proc/sys/vm/dirty_bytes") == dirty_before
    assert sorted(p.name for p in Path("/sys/block").glob("zram*")) == zram_before
    assert not list((tmp_path / "scratch").glob("*/*/mnt"))


# Through `fsprof run --spec`, which checks for root before it reads the spec.
@pytest.mark.root
@pytest.mark.parametrize(
    "text, words",
    [
        ("[[config]]\nfs = 'tmpfs'\n[[workload]]\nworkload = 'fsync-loop'\n", "fs 'tmpfs'"),
        ("[[config]]\nfs = 'ext4'\ncolour = 1\n[[workload]]\nworkload = 'fsync-loop'\n", "unknown key colour"),
        ("[[config]]\nfs = 'ext4'\n[[workload]]\nworkload = 'fsync-loop'\nargs = ['--bogus']\n", "--bogus"),
        (
            "[[config]]\nfs = 'ext4'\nsysctls = { 'vm.no_such' = 1 }\n[[workload]]\nworkload = 'fsync-loop'\n",
            "vm.no_such",
        ),
        ("[[config]]\nfs = 'ext4'\ndevice = '/dev/vdz'\n[[workload]]\nworkload = 'fsync-loop'\n", "erase_device"),
        ("[[config]]\nfs = 'ext4'\n[[config]]\nfs = 'ext4'\n[[workload]]\nworkload = 'fsync-loop'\n", "used twice"),
        ("[[config]]\nfs = 'ext4'\n", "at least one"),
        ("not toml [", "not valid TOML"),
        ("stack_sample = 0\n[[config]]\nfs = 'ext4'\n[[workload]]\nworkload = 'fsync-loop'\n", "stack_sample must be"),
        (
            "[[config]]\nfs = 'ext4'\n[[workload]]\nworkload = 'fsync-loop'\nunit = 'record=0'\n",
            "unit 'record=0': the count after '=' must be a positive number",
        ),
        (
            "[[config]]\nfs = 'ext4'\ndevice_model = 'floppy'\n[[workload]]\nworkload = 'fsync-loop'\n",
            "unknown device model 'floppy'",
        ),
        (
            "[[config]]\nfs = 'ext4'\ndevice_model = 'flush=-2'\n[[workload]]\nworkload = 'fsync-loop'\n",
            "flush delay -2 must be whole milliseconds",
        ),
        (
            "[[config]]\nfs = 'ext4'\ndevice = 'zram'\ndevice_model = 'hdd'\n[[workload]]\nworkload = 'fsync-loop'\n",
            'for device = "loop" only',
        ),
    ],
)
def test_bad_specs_get_one_sentence_and_exit_2(tmp_path, text, words):
    spec_file = tmp_path / "bad.toml"
    spec_file.write_text(text)
    proc = run_fsprof("run", "--spec", str(spec_file), "-o", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stderr
    assert words in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_workloads_unit_of_work_is_read(tmp_path):
    spec_file = tmp_path / "u.toml"
    spec_file.write_text(
        "[[config]]\nfs = 'ext4'\n[[workload]]\nname = 'db'\ncommand = ['true']\nunit = 'transaction=1000'\n"
    )
    (workload,) = spec.load(spec_file).workloads
    assert workload.unit == "transaction=1000"


def test_spec_excludes_per_run_options(tmp_path):
    proc = run_fsprof("run", "--spec", str(SHIPPED[0]), "--fs", "ext4")
    assert proc.returncode == 2 and "--fs" in proc.stderr


ZRAM_BARRIER = """
[[config]]
name = "ext4-zram"
fs = "ext4"
device = "zram"
image_size = "256M"
mount_options = "barrier=1"
[[workload]]
name = "loop"
workload = "fsync-loop"
args = ["--count", "20"]
"""


@pytest.mark.slow
@pytest.mark.root
def test_a_setting_that_did_not_take_effect_stops_the_run_unless_told_to_go_on(tmp_path):
    """zram has no volatile write cache, so the block layer drops ext4's barriers: asking for
    barrier=1 there measures nothing of barriers. fsprof run verifies first and refuses."""
    spec_file = tmp_path / "z.toml"
    spec_file.write_text(ZRAM_BARRIER)
    proc = run_fsprof(
        "run", "--spec", str(spec_file), "-o", str(tmp_path / "refused"), "--scratch-dir", str(tmp_path / "scratch")
    )
    assert proc.returncode == 1, proc.stderr
    (entry,) = json.loads((tmp_path / "refused" / "index.json").read_text())["runs"]
    assert "barrier=on not in effect" in entry["error"] and "no volatile" in entry["error"], entry
    assert not (tmp_path / "refused" / entry["dir"] / "result.json").exists()

    proc = run_fsprof(
        "run",
        "--spec",
        str(spec_file),
        "-o",
        str(tmp_path / "went-on"),
        "--go-on",
        "--scratch-dir",
        str(tmp_path / "scratch"),
        "--html",
        str(tmp_path / "report.html"),
    )
    assert proc.returncode == 0, proc.stderr
    run_dir = tmp_path / "went-on" / "loop" / "ext4-zram"
    result = json.loads((run_dir / "result.json").read_text())
    (warning,) = result["warnings"]
    assert "barrier=on not in effect" in warning
    (fs,) = result["filesystems"]
    assert not fs["verify"]["ok"] and fs["syscalls"]["fsync"]["count"] == 20
    assert run_fsprof("report", str(run_dir)).stdout.startswith(f"WARNING: {warning}")
    assert "Warning: " + warning.split(":")[0] in (tmp_path / "report.html").read_text()
