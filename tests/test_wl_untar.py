"""The untar workload through `fsprof run` on loop-backed ext4. Oracles: the tarball itself (its
first N entries by type, and the writes GNU tar's 10 KiB records cut their data into) against what
the tracer counted in phase "extract"; the block layer for the sync phase; hashes of the synthetic
tarball for its determinism; statvfs-style figures in the one sentence of a full filesystem."""

import glob
import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile

import pytest

from profiler.trace.maps import BLK_WRITE_CLASSES

from conftest import REPO, loops_under, mounts_under, run_fsprof
from workloads import synthetic_tree, untar

RECORD = 10240  # GNU tar's record: the engine's default read size, and the most one write carries


def untar_run(tmp_path, *options):
    """`fsprof run --fs ext4 --workload untar OPTIONS` in tmp_path; the process and, when the run
    succeeded, the ext4 entry of result.json."""
    proc = run_fsprof(
        "run",
        "--fs",
        "ext4",
        "--workload",
        "untar",
        *options,
        "-o",
        str(tmp_path / "run"),
        "--scratch-dir",
        str(tmp_path / "scratch"),
        timeout=300,
    )
    assert not mounts_under(tmp_path) and not loops_under(tmp_path)
    if proc.returncode != 0:
        return proc, None
    return proc, json.loads((tmp_path / "run" / "result.json").read_text())["filesystems"][0]


def first_entries(tar_path, n):
    """What extracting a tarball's first n entries must do: entries by type, file bytes, and the
    write() calls of a GNU-tar-like extractor (a file's data cut at every record boundary)."""
    want = {"entries": 0, "files": 0, "dirs": 0, "symlinks": 0, "bytes": 0, "writes": 0}
    with tarfile.open(tar_path) as tar:
        for m in tar:
            if want["entries"] == n:
                break
            want["entries"] += 1
            if m.isfile():
                want["files"] += 1
                want["bytes"] += m.size
                if m.size:
                    start, end = m.offset_data, m.offset_data + m.size - 1
                    want["writes"] += end // RECORD - start // RECORD + 1
            elif m.isdir():
                want["dirs"] += 1
            elif m.issym():
                want["symlinks"] += 1
    return want


def counts(fs, phase):
    return {name: s["count"] for name, s in fs["phases"].get(phase, {}).get("syscalls", {}).items()}


def assert_extracted_exactly(fs, n):
    own = fs["workload"]
    want = first_entries(own["tree"]["tarball"], n)
    assert want["entries"] == n
    assert {k: own[k] for k in ("entries", "files", "dirs", "symlinks", "bytes")} == {
        k: want[k] for k in ("entries", "files", "dirs", "symlinks", "bytes")
    }
    extract = counts(fs, "extract")
    assert extract["mkdir"] == want["dirs"]
    # libarchive's openat()s: one O_CREAT per file, one per directory when it sets the directory's
    # deferred mtime and mode at the end (as GNU tar does), one O_PATH per symlink to time it.
    assert extract["openat"] == want["files"] + want["dirs"] + want["symlinks"]
    assert extract["write"] == want["writes"]
    assert "mkdir" not in counts(fs, "startup") and "write" not in counts(fs, "startup")


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("untar-synthetic")
    proc, fs = untar_run(tmp, "--synthetic", "--seed", "7", "--files", "1500", "--cache-dir", str(tmp / "cache"))
    assert proc.returncode == 0, proc.stderr
    return proc, fs


@pytest.mark.slow
@pytest.mark.root
def test_files_n_extracts_exactly_the_first_n_entries(synthetic_run):
    proc, fs = synthetic_run
    assert_extracted_exactly(fs, 1500)
    assert fs["workload"]["tree"]["kind"] == "synthetic"
    assert "SYNTHETIC tree, seed 7" in proc.stdout


@pytest.mark.slow
@pytest.mark.root
def test_sync_phase_has_its_own_timing_and_writes_the_data(synthetic_run):
    _, fs = synthetic_run
    own = fs["workload"]
    assert own["phases"] == ["extract", "sync"] and own["sync_call"] == "syncfs"
    assert own["extract_ns"] > 0 and own["sync_ns"] > 0
    assert own["elapsed_ns"] == own["extract_ns"] + own["sync_ns"]
    assert own["dirty_kb"] >= 0 and own["writeback_kb"] >= 0
    sync = counts(fs, "sync")
    assert sync["syncfs"] == 1 and "write" not in sync and "mkdir" not in sync
    # The data was only dirty after the extraction (or partly written back already, when the
    # machine is over its background dirty threshold): by the end of the sync it is all on disk.
    written = sum(
        fs["phases"][p]["block"][dev].get(c, {}).get("bytes", 0)
        for c in BLK_WRITE_CLASSES
        for p in ("extract", "sync")
        for dev in fs["phases"][p]["block"]
    )
    assert written >= own["bytes"]
    assert fs["phases"]["sync"]["elapsed_s"] * 1e9 >= own["sync_ns"]


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.skipif(not glob.glob(untar.KERNEL_SOURCES), reason="linux-source-6.1 is not installed")
def test_fraction_of_the_real_kernel_tree(tmp_path):
    """The kernel tarball, decompressed once into the default cache (it persists across runs)."""
    proc, fs = untar_run(tmp_path, "--files", "0.02")
    assert proc.returncode == 0, proc.stderr
    tree = fs["workload"]["tree"]
    assert tree["kind"] == "kernel" and tree["source"] in glob.glob(untar.KERNEL_SOURCES)
    assert_extracted_exactly(fs, round(0.02 * tree["entries"]))
    assert "SYNTHETIC" not in proc.stdout


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def test_synthetic_tree_is_the_same_for_a_seed_and_differs_for_another(tmp_path):
    paths = {name: str(tmp_path / f"{name}.tar") for name in ("a", "b", "other", "prefix")}
    synthetic_tree.generate(paths["a"], seed=3, count=2000)
    synthetic_tree.generate(paths["b"], seed=3, count=2000)
    synthetic_tree.generate(paths["other"], seed=4, count=2000)
    synthetic_tree.generate(paths["prefix"], seed=3, count=500)
    assert sha256(paths["a"]) == sha256(paths["b"])
    assert sha256(paths["a"]) != sha256(paths["other"])
    # The first N entries do not depend on how many are written: a short tree is a prefix.
    with tarfile.open(paths["a"]) as a, tarfile.open(paths["prefix"]) as p:
        assert [m.get_info() for m in p] == [m.get_info() for m in list(a)[:500]]


@pytest.mark.slow
@pytest.mark.root
def test_workload_tarball_is_the_generators(synthetic_run, tmp_path):
    _, fs = synthetic_run
    synthetic_tree.generate(str(tmp_path / "direct.tar"), seed=7, count=1500)
    assert sha256(fs["workload"]["tree"]["tarball"]) == sha256(tmp_path / "direct.tar")


def assert_one_sentence(proc, *fragments):
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    assert lines, proc.stdout
    for fragment in fragments:
        assert re.search(fragment, lines[-1]), lines[-1]


@pytest.mark.slow
@pytest.mark.root
def test_inode_exhaustion_is_one_sentence_with_df_i_figures(tmp_path):
    proc, _ = untar_run(
        tmp_path,
        "--synthetic",
        "--files",
        "2000",
        "--cache-dir",
        str(tmp_path / "cache"),
        "--mkfs-options",
        "-N 64",
        "--image-size",
        "64M",
    )
    assert proc.returncode != 0
    assert_one_sentence(
        proc,
        r"ran out of inodes after [\d,]+ of 2,000 entries",
        r"inodes ([\d,]+)/\1 used",
        r"space [\d.]+ .B/[\d.]+ MB used",
    )


@pytest.mark.slow
@pytest.mark.root
def test_out_of_space_is_one_sentence_with_df_figures(tmp_path):
    proc, _ = untar_run(
        tmp_path, "--synthetic", "--files", "3000", "--cache-dir", str(tmp_path / "cache"), "--image-size", "24M"
    )
    assert proc.returncode != 0
    assert_one_sentence(
        proc,
        r"ran out of space after [\d,]+ of 3,000 entries",
        r"inodes [\d,]+/[\d,]+ used",
        r"these 3,000 entries need 3,000 inodes and [\d.]+ MB of file data",
    )


@pytest.mark.parametrize(
    "options, fragment",
    [
        (["--files", "0"], "--files must be a positive number of entries, not 0"),
        (["--files", "-5"], "--files must be a positive number of entries, not -5"),
        (["--files", "1.5"], r"fraction must be above 0 and at most 1, not 1.5"),
        (["--files", "ten"], "--files takes a number of entries or a fraction"),
        (["--files", "100000", "--synthetic"], "--files 100000 is more than the 83,731 entries of the synthetic tree"),
        (["--record-size", "1000"], "--record-size must be a multiple of 512 bytes"),
        (["--cache-dir", "/proc/no/such/cache"], "cannot create the cache directory /proc/no/such/cache"),
        (["--source", "/no/linux.tar.xz"], "--source must name an existing .tar.xz file"),
        (["--source", "/no/linux.tar.xz", "--synthetic"], "--source and --synthetic exclude each other"),
    ],
)
def test_bad_parameter_is_one_sentence(tmp_path, options, fragment):
    """Standalone, the sentence goes to stderr; under fsprof (--result), into the result file."""
    argv = [sys.executable, "-m", "workloads.untar", "--cache-dir", str(tmp_path / "cache"), *options]
    env = {**os.environ, "PYTHONPATH": REPO}
    alone = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=60, env=env)
    assert alone.returncode == 2
    assert len(alone.stderr.strip().splitlines()) == 1 and fragment in alone.stderr, alone.stderr
    result = tmp_path / "result.json"
    traced = subprocess.run(
        [*argv, "--result", str(result)], capture_output=True, text=True, cwd=tmp_path, timeout=60, env=env
    )
    assert traced.returncode == 2
    assert json.loads(result.read_text()) == {"error": alone.stderr.strip()}


@pytest.mark.root
def test_fsprof_refuses_a_bad_parameter_before_provisioning(tmp_path):
    proc, _ = untar_run(tmp_path, "--files", "0", "--cache-dir", str(tmp_path / "cache"))
    assert proc.returncode == 2
    assert_one_sentence(proc, "--files must be a positive number of entries, not 0")
    assert not (tmp_path / "scratch").exists() or not os.listdir(tmp_path / "scratch")
