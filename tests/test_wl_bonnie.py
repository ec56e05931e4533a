"""The bonnie workload through `fsprof run` on loop-backed ext4: every phase issues the operations
its parameters say (counted by the tracer, per phase), the CSV line has bonnie++ 2.00a's layout (a
real bonnie++ run on a loop mount of the test's own is the oracle, and bon_csv2txt reads ours), and
each bad parameter is one sentence."""

import json
import re
import subprocess

import pytest

from conftest import loops_under, mounts_under, run_fsprof

pytestmark = pytest.mark.root

MIB = 1 << 20
IO_PHASES = ["putc", "write", "rewrite", "getc", "read", "seeks"]
FILE_PHASES = ["seq-create", "seq-stat", "seq-delete", "rand-create", "rand-stat", "rand-delete"]


def bonnie_run(tmp_path, *options):
    """`fsprof run --fs ext4 --workload bonnie OPTIONS`: the ext4 entry of result.json (checked
    against the attribution invariants by run_fsprof)."""
    proc = run_fsprof(
        "run",
        "--fs",
        "ext4",
        "--workload",
        "bonnie",
        *options,
        "-o",
        str(tmp_path / "run"),
        "--scratch-dir",
        str(tmp_path / "scratch"),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert not mounts_under(tmp_path) and not loops_under(tmp_path)
    return json.loads((tmp_path / "run" / "result.json").read_text())["filesystems"][0]


def counts(fs, phase):
    return {name: s["count"] for name, s in fs["phases"].get(phase, {}).get("syscalls", {}).items()}


@pytest.fixture(scope="module")
def default_io_run(tmp_path_factory):
    """16 MiB in 4 KiB chunks, 1000 seeks by 3 seekers, 1024 empty files; caches dropped (default)."""
    return bonnie_run(tmp_path_factory.mktemp("bonnie-a"), "-s", "16:4k:1000:3", "-n", "1", "-z", "7", "-m", "testbox")


@pytest.fixture(scope="module")
def sync_files_run(tmp_path_factory):
    """No per-char tests, -b, 1024 files of 1-4 KiB over 2 directories, caches kept."""
    return bonnie_run(
        tmp_path_factory.mktemp("bonnie-b"),
        "--size",
        "8",
        "-f",
        "--files",
        "1:4k:1k:2",
        "-b",
        "--no-drop-caches",
        "--seed",
        "11",
    )


@pytest.mark.slow
def test_io_phases_issue_the_operations_their_parameters_say(default_io_run):
    fs = default_io_run
    own = fs["workload"]
    chunks, size = 16 * MIB // 4096, 16 * MIB
    assert own["phases"] == ["setup"] + IO_PHASES + FILE_PHASES
    # Per char: stdio-buffered, one syscall per buffer, never one per byte.
    buffer = own["stdio_buffer"]
    assert buffer >= 1024
    assert counts(fs, "putc")["write"] == size // buffer
    assert counts(fs, "getc")["read"] == size // buffer
    assert "read" not in counts(fs, "putc") and "write" not in counts(fs, "getc")
    # Per block: one write or read per chunk; rewrite reads and writes each chunk once.
    assert counts(fs, "write")["write"] == chunks and "read" not in counts(fs, "write")
    assert counts(fs, "rewrite")["read"] == counts(fs, "rewrite")["write"] == chunks
    assert counts(fs, "read")["read"] == chunks and "write" not in counts(fs, "read")
    # Each file of the IO tests is fsynced once before closing, inside its phase (as bonnie++).
    for phase in ("putc", "write", "rewrite", "getc", "read"):
        assert counts(fs, phase)["fsync"] == 1, phase
        assert own["tests"][phase]["ops"] == chunks, phase
    # Seeks: one read per seek, a write per update (about 1 in 10), each seeker fsyncs at its end.
    seeks = counts(fs, "seeks")
    assert seeks["read"] == own["tests"]["seeks"]["ops"] == 1000
    assert seeks.get("write", 0) == own["tests"]["seeks"]["updates"]
    assert 30 <= own["tests"]["seeks"]["updates"] <= 200
    assert seeks["fsync"] == 3
    # Preparation stays out of the measured phases: unlink of the previous file, opens, drops.
    assert counts(fs, "setup")["syncfs"] == len(IO_PHASES) + len(FILE_PHASES)
    for phase in IO_PHASES:
        assert "openat" not in counts(fs, phase) and "unlink" not in counts(fs, phase), phase
    assert own["caches"].startswith("caches: dropped")


@pytest.mark.slow
def test_file_phases_create_stat_and_delete_each_file_once(default_io_run):
    fs = default_io_run
    files = 1024
    for kind in ("seq", "rand"):
        create, stat, delete = (counts(fs, f"{kind}-{what}") for what in ("create", "stat", "delete"))
        assert create["openat"] == files and create["close"] == files, kind
        assert "write" not in create, kind  # -n 1: empty files
        assert delete["unlink"] == files and delete["rmdir"] == 1, kind
        assert fs["workload"]["tests"][f"{kind}-create"]["ops"] == files
    # stat in readdir order: glibc's opendir adds one fstat of the directory.
    assert counts(fs, "seq-stat")["newfstatat"] == files + 1
    assert counts(fs, "rand-stat")["newfstatat"] == files
    assert "openat" not in counts(fs, "rand-stat")  # empty files are not opened


@pytest.mark.slow
def test_no_buffering_files_with_data_and_no_per_char_phases(sync_files_run):
    fs = sync_files_run
    own, files = fs["workload"], 1024
    assert own["phases"] == ["setup", "write", "rewrite", "read", "seeks"] + FILE_PHASES
    assert "putc" not in fs["phases"] and "getc" not in fs["phases"]
    for kind in ("seq", "rand"):
        create, stat, delete = (counts(fs, f"{kind}-{what}") for what in ("create", "stat", "delete"))
        # 1-4 KiB files, one write each, then fsync of the file and of its directory.
        assert create["openat"] == files and create["write"] == files, kind
        assert create["fsync"] == 2 * files, kind
        # Files with data are opened and read when stat'ed.
        assert stat["read"] == files, kind
        assert delete["unlink"] == files and delete["fsync"] == files, kind
        assert delete["rmdir"] == 3, kind  # two subdirectories and the test directory
    assert counts(fs, "seq-stat")["openat"] == files + 2  # and one opendir per directory
    assert counts(fs, "rand-stat")["openat"] == files
    # Seek updates are fsynced with -b, besides each seeker's final fsync.
    assert counts(fs, "seeks")["fsync"] == own["tests"]["seeks"]["updates"] + 5
    assert "syncfs" not in counts(fs, "setup")
    assert "kept" in own["caches"]


@pytest.fixture
def ext4_mount(loopdev, tmp_path):
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    subprocess.run(["mkfs.ext4", "-q", "-F", loopdev], check=True)
    subprocess.run(["mount", loopdev, str(mountpoint)], check=True)
    yield mountpoint
    subprocess.run(["umount", str(mountpoint)], check=True)


@pytest.mark.slow
def test_csv_line_has_bonnie_plus_plus_layout(default_io_run, ext4_mount):
    real = subprocess.run(
        [
            "bonnie++",
            "-d",
            str(ext4_mount),
            "-s",
            "16:4k:1000:3",
            "-n",
            "1",
            "-r",
            "0",
            "-u",
            "root",
            "-q",
            "-m",
            "testbox",
            "-f",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert real.returncode == 0, real.stderr
    theirs = next(line for line in real.stdout.splitlines() if line.startswith("1.98,")).split(",")
    ours = default_io_run["workload"]["csv"].split(",")
    assert len(ours) == len(theirs) == 50
    # The description fields match bonnie++'s for the same options (its fields 5-8 and 21-25).
    assert ours[:4] == ["1.98", "fsprof", "testbox", "1"] and theirs[2:4] == ours[2:4]
    assert ours[5:9] == theirs[5:9] == ["16M", "", "1000", "3"]
    assert ours[21:26] == theirs[21:26]
    # Every measured field has a figure, "+++++"/"+++" (under 0.5 s) or a latency with its unit.
    assert all(f and f[0] in "+0123456789" for f in ours[9:21] + ours[26:38])
    assert all(f.endswith(("us", "ms", "s")) for f in ours[38:50])
    # bonnie++'s own formatter reads our line.
    txt = subprocess.run(
        ["bon_csv2txt"], input=default_io_run["workload"]["csv"] + "\n", capture_output=True, text=True
    )
    assert txt.returncode == 0 and not txt.stderr
    assert "16M::1000:3" in txt.stdout and "testbox" in txt.stdout


@pytest.mark.slow
def test_render_shows_bonnie_tables_and_the_cache_mode(default_io_run):
    from workloads import bonnie

    text = bonnie.render(default_io_run["workload"])
    assert "-Per Chr- --Block-- -Rewrite- -Per Chr- --Block-- --Seeks--" in text
    assert "-Create-- --Read--- -Delete-- -Create-- --Read--- -Delete--" in text
    assert text.count("\nLatency ") == 2
    assert default_io_run["workload"]["csv"] in text
    assert "caches: dropped before each test" in text


@pytest.mark.parametrize(
    "options, sentence",
    [
        (["-s", "abc"], "-s size 'abc' is not a number"),
        (["-s", "100k"], "not a whole number of MiB"),
        (["-n", "1.5"], "counted in multiples of 1024"),
        (["-s", "1:1m:100:5"], "too few for the seeks of 5 seeker processes"),
        (["-s", "16:1000"], "must be a power of two from 256 bytes to 1 MiB"),
        (["-s", "0", "-n", "0"], "there is nothing to run"),
        (["-r", "1024", "-s", "256"], "less than twice the RAM given by -r"),
        (["-n", "1:100:200"], "min size 200 is larger than the max size 100"),
        (["-f", "x"], "not a size in MiB for the per-char tests"),
    ],
)
def test_bad_parameters_are_one_sentence(tmp_path, options, sentence):
    proc = run_fsprof(
        "run",
        "--fs",
        "ext4",
        "--workload",
        "bonnie",
        *options,
        "-o",
        str(tmp_path / "run"),
        "--scratch-dir",
        str(tmp_path / "scratch"),
    )
    assert proc.returncode == 2
    assert sentence in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "scratch").exists()  # refused before anything was provisioned


@pytest.mark.slow
def test_a_file_larger_than_the_filesystem_is_one_sentence(tmp_path):
    proc = run_fsprof(
        "run",
        "--fs",
        "ext4",
        "--workload",
        "bonnie",
        "--image-size",
        "1G",
        "-s",
        "4096",
        "-n",
        "0",
        "-o",
        str(tmp_path / "run"),
        "--scratch-dir",
        str(tmp_path / "scratch"),
    )
    assert proc.returncode != 0
    assert "bonnie: the test needs 4096 MiB but this filesystem has" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not mounts_under(tmp_path) and not loops_under(tmp_path)


@pytest.mark.slow
def test_more_files_than_inodes_is_one_sentence_with_df_i_figures(tmp_path):
    proc = run_fsprof(
        "run",
        "--fs",
        "ext4",
        "--mkfs-options",
        "ext4=-N 2048",
        "--workload",
        "bonnie",
        "-s",
        "0",
        "-n",
        "3",
        "-o",
        str(tmp_path / "run"),
        "--scratch-dir",
        str(tmp_path / "scratch"),
    )
    assert proc.returncode != 0
    found = re.search(
        r"bonnie: 3,072 files in 1 directory need 3,074 inodes but this filesystem has ([\d,]+) free "
        r"\(df -i: ([\d,]+) of ([\d,]+) used\); use a smaller -n",
        proc.stderr,
    )
    assert found, proc.stderr
    free, used, total = (int(g.replace(",", "")) for g in found.groups())
    assert free < 3074 and used + free <= total <= 2048 + 64  # mke2fs rounds -N up to whole groups
    assert "Traceback" not in proc.stderr
    assert not mounts_under(tmp_path) and not loops_under(tmp_path)
