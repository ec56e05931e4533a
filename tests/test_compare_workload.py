"""`fsprof compare` answers the user's number first: the workload's time, decomposed over its
calls into count and latency parts that add up to the difference. Planted difference: two runs of
one script that differ only in how many fsyncs it makes per record (1 vs 4, each after a part of
the record: an fsync with nothing to write costs nearly nothing, and under load the difference
then drowned in the untraced time); the first part named
must be the fsync count, and the counts must equal a bpftrace count of sys_enter_fsync. Also: runs
of several filesystems pair by name, RUN/<fs> is a run, and a unit of work that does not parse or
that the workload never reported is one sentence."""

import json
import re
from pathlib import Path

import pytest

from conftest import bpftrace_output, bpftrace_start, run_fsprof

pytestmark = [pytest.mark.slow, pytest.mark.root]
RECORDS = 150
COMM = "fsync-units"  # the script names itself so, for the oracle (no other process has that name)
SCRIPT = f"""
import ctypes, os, sys
ctypes.CDLL(None).prctl(15, b"{COMM}", 0, 0, 0)   # PR_SET_NAME, before its first fsync
fsyncs = int(sys.argv[1])
fd = os.open("records", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
for _ in range({RECORDS}):
    for _ in range(fsyncs):   # the same 4 KiB per record, in as many parts as fsyncs: each one commits
        os.write(fd, b"r" * (4096 // fsyncs))
        os.fsync(fd)
print("RESULT records={RECORDS}")
"""
ORACLE = f"""
BEGIN {{ printf("ready\\n"); }}
tracepoint:syscalls:sys_enter_fsync /comm == "{COMM}"/ {{ @fsyncs = count(); }}
"""


def run_counted(tmp_path, name, fsyncs):
    """One ext4 run of SCRIPT with `fsyncs` per record; (run dir, the oracle's fsync count)."""
    oracle = bpftrace_start(ORACLE)
    try:
        proc = run_fsprof(
            "run",
            "--fs",
            "ext4",
            "--scratch-dir",
            str(tmp_path / "scratch"),
            "-o",
            str(tmp_path / name),
            "--",
            "python3",
            "-c",
            SCRIPT,
            str(fsyncs),
        )
    finally:
        out = bpftrace_output(oracle)
    assert proc.returncode == 0, proc.stderr
    assert f"RESULT records={RECORDS}" in proc.stdout  # the workload's own output still reaches the user
    return tmp_path / name, int(re.search(r"^@fsyncs: (\d+)$", out, re.M).group(1))


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("units")
    return run_counted(tmp, "one", 1), run_counted(tmp, "four", 4)


def test_the_fsync_count_is_named_first(planted):
    (one, n_one), (four, n_four) = planted
    assert (n_one, n_four) == (RECORDS, 4 * RECORDS)
    (cmp,) = json.loads(run_fsprof("compare", str(one), str(four), "--unit", "record", "--json").stdout)
    w = cmp["workload_time"]
    first = w["parts"][0]
    assert first["kind"] == "calls" and first["call"] == "fsync", w["parts"][:3]
    assert first["count"] == [n_one, n_four]  # the oracle's counts
    assert abs(first["count_s"]) > abs(first["latency_s"])  # the number of calls, not their latency
    assert w["unit"] == {"name": "record", "count": [RECORDS, RECORDS]}
    result = json.loads((one / "result.json").read_text())["filesystems"][0]
    assert result["workload"]["reported"] == {"records": RECORDS}
    assert result["workload_cpu"]["user_s"] > 0
    text = run_fsprof("compare", str(one), str(four), "--unit", "record").stdout
    listed = [line for line in text.splitlines() if re.match(r"    [+-][\d.]+ m?s: ", line)]
    assert listed and "fsync calls 150 -> 600 (1.00 -> 4.00 per record)" in listed[0], text


def test_a_unit_the_workload_did_not_report_is_one_sentence(planted):
    (one, _), (four, _) = planted
    for unit, words in (
        ("transaction", "reported no transaction count (its RESULT keys: records)"),
        ("=3", "give a name"),
        ("record=0", "must be a positive number"),
    ):
        proc = run_fsprof("compare", str(one), str(four), "--unit", unit)
        assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    (cmp,) = json.loads(run_fsprof("compare", str(one), str(four), "--unit", "record=50", "--json").stdout)
    assert cmp["workload_time"]["unit"]["count"] == [50, 50]


def test_runs_of_several_filesystems_pair_by_name(tmp_path):
    runs = []
    for name in ("a", "c"):
        proc = run_fsprof(
            "run",
            "--fs",
            "ext4,xfs",
            "--scratch-dir",
            str(tmp_path / "scratch"),
            "-o",
            str(tmp_path / name),
            "--workload",
            "fsync-loop",
            "--count",
            "40",
        )
        assert proc.returncode == 0, proc.stderr
        runs.append(tmp_path / name)
    a, c = map(str, runs)
    pairs = [(x["base"], x["other"]) for x in json.loads(run_fsprof("compare", a, c, "--json").stdout)]
    assert pairs == [("a/ext4", "c/ext4"), ("a/xfs", "c/xfs")], pairs
    # A bundled workload declares its unit: fsync-loop's counts go per fsync by default.
    (cmp, _) = json.loads(run_fsprof("compare", a, c, "--json").stdout)
    assert cmp["workload_time"]["unit"] == {"name": "fsync", "count": [40, 40]}
    # One filesystem of a run is a run; --fs picks one of each.
    (one,) = json.loads(run_fsprof("compare", f"{a}/xfs", f"{c}/xfs", "--json").stdout)
    assert (one["base"], one["other"]) == ("a/xfs", "c/xfs")
    (picked,) = json.loads(run_fsprof("compare", a, c, "--fs", "xfs", "--json").stdout)
    assert (picked["base"], picked["other"]) == ("a/xfs", "c/xfs")
    proc = run_fsprof("compare", a, c, "--fs", "btrfs")
    assert proc.returncode == 2 and "no filesystem results of btrfs" in proc.stderr, proc.stderr


DATASYNC = """
import os
fd = os.open("log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
for _ in range(150):
    os.write(fd, b"l" * 1024)
    os.fdatasync(fd)
"""


def test_the_io_of_each_side_is_stated_per_call(tmp_path):
    """ext4 and XFS, 1 KiB writes each followed by fdatasync: the flushes per fdatasync are the
    device's own count (/sys/block's flush_ios) over the calls, equal on both sides, and the
    mechanism says who issued them: jbd2 on ext4, the caller on XFS, with device times."""
    run = tmp_path / "run"
    proc = run_fsprof(
        "run",
        "--fs",
        "ext4,xfs",
        "--scratch-dir",
        str(tmp_path / "scratch"),
        "-o",
        str(run),
        "--",
        "python3",
        "-c",
        DATASYNC,
    )
    assert proc.returncode == 0, proc.stderr
    entries = {fs["fs"]: fs for fs in json.loads((run / "result.json").read_text())["filesystems"]}
    (cmp,) = json.loads(run_fsprof("compare", str(run), "--op", "fdatasync", "--json").stdout)
    key = "flush requests to the device per fdatasync (all of the device's: its calls own them)"
    flushes = cmp["evidence"][key]
    for side, fs in zip(flushes, ("ext4", "xfs")):
        e = entries[fs]
        assert side * e["attribution"]["fdatasync"]["count"] == e["kernel_counters"][e["device"]["name"]]["flush_ios"]
    assert flushes[0] >= 1 and flushes[1] == pytest.approx(flushes[0], rel=0.05)
    assert key in cmp["evidence_by_cause"]["steady"]  # shown as equal, with its figures
    ext4, xfs = cmp["mechanism"]
    assert any(who.startswith("jbd2/") for who in ext4["requests"]["flush"]["by"]), ext4["requests"]["flush"]
    assert list(xfs["requests"]["flush"]["by"]) == ["python3"], xfs["requests"]["flush"]
    assert ext4["requests"]["flush"]["device_us"] > 0 and xfs["requests"]["flush"]["device_us"] > 0
    # ext4's two serialized rounds: one jbd2 commit per call, blocked for its log blocks, then for
    # its commit block (PREFLUSH + FUA).
    jbd2 = ext4["workers"]["jbd2 commit"]
    assert jbd2["windows_per_call"] == pytest.approx(1, abs=0.05) and jbd2["blocked_per_window"] >= 1.9, jbd2
    text = run_fsprof("compare", str(run), "--op", "fdatasync").stdout
    assert "How each side did its I/O, per fdatasync" in text and "jbd2/" in text, text


def test_sqlite_wal_against_delete_is_explained_by_the_fdatasync_count(tmp_path):
    """docs/compare.md's worked example, workloads/examples/sqlite_inserts.py (Python's sqlite3,
    Debian's libsqlite3): DELETE mode makes 4 fdatasyncs per transaction and unlinks its journal
    by absolute path every time; WAL with synchronous=NORMAL almost none. The first part of the
    difference is the fdatasync count; the unlinks are on ext4."""
    example = str(Path(__file__).resolve().parent.parent / "workloads" / "examples" / "sqlite_inserts.py")
    runs = []
    for mode, sync in (("delete", "full"), ("wal", "normal")):
        out = tmp_path / mode
        proc = run_fsprof(
            "run",
            "--fs",
            "ext4",
            "--scratch-dir",
            str(tmp_path / "scratch"),
            "-o",
            str(out),
            "--",
            "python3",
            example,
            "--transactions",
            "200",
            "--journal-mode",
            mode,
            "--synchronous",
            sync,
        )
        assert proc.returncode == 0, proc.stderr
        runs.append(str(out))
    (cmp,) = json.loads(run_fsprof("compare", *runs, "--unit", "transaction", "--json").stdout)
    w = cmp["workload_time"]
    first = w["parts"][0]
    assert first["call"] == "fdatasync" and first["count_s"] < 0, w["parts"][:3]
    delete, wal = (n / 200 for n in first["count"])
    assert delete == pytest.approx(4, abs=0.05) and wal < 0.5, first["count"]
    unlinks = next(p for p in w["parts"] if p.get("call") == "unlink")
    assert unlinks["count"][0] >= 200  # placed on ext4: the journal, by its absolute path
