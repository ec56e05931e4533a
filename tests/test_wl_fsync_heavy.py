"""The fsync-heavy workload (sysbench fileio model) through `fsprof run` on loop-backed ext4.

Oracles: sysbench 1.0.20's request rule (below, as a plain simulation) gives the exact number of
pread64/pwrite64/fsync calls the tracer must count in phase "run"; sysbench itself, run under
`fsprof run -- CMD` with the same parameters, must make the same calls as our engine; the files'
size gives the prepare phase's write() calls; bpftrace on the syscall tracepoints counts one
run's fsync and pwrite64 calls."""

import json
import os
import pty
import re
import subprocess

import pytest

from conftest import FSPROF, REPO, bpftrace_output, bpftrace_start, loops_under, mounts_under, run_fsprof

pytestmark = pytest.mark.root

FILES = 4
TOTAL = 8 << 20  # 4 files of 2 MiB: small and quick
BLOCK = 16384
SMALL = ["--file-num", str(FILES), "--file-total-size", "8M"]


def sysbench_rule(mode, events, freq, ratio=1.5, files=FILES):
    """sysbench 1.0.20's generator for one synchronous thread: (reads, writes, periodic fsyncs).
    A counter of reads/writes handed out; once a write happened since the last round and the
    counter is a multiple of freq, the next `files` events are one fsync per file."""
    reads = writes = fsyncs = handed = fsynced = 0
    dirty = False
    for _ in range(events):
        write = mode in ("seqwr", "seqrewr", "rndwr") or (mode == "rndrw" and (reads + 1) / (writes + 1) >= ratio)
        if freq and dirty and handed % freq == 0 and (mode.startswith("rnd") or write):
            fsyncs += 1
            fsynced += 1
            if fsynced == files:
                fsynced, dirty = 0, False
            continue
        handed += 1
        if write:
            writes, dirty = writes + 1, True
        else:
            reads += 1
    return reads, writes, fsyncs


def fsprof_run(tmp_path, *options, command=None):
    out = tmp_path / "run"
    argv = ["run", "--fs", "ext4", "-o", str(out), "--scratch-dir", str(tmp_path / "scratch")]
    argv += ["--", *command] if command else ["--workload", "fsync-heavy", *options]
    proc = run_fsprof(*argv, timeout=300)
    assert not mounts_under(tmp_path) and not loops_under(tmp_path)
    assert proc.returncode == 0, proc.stderr
    return json.loads((out / "result.json").read_text())["filesystems"][0]


def counts(fs, phase):
    return {name: s["count"] for name, s in fs["phases"].get(phase, {}).get("syscalls", {}).items()}


def assert_prepared(fs):
    """Phase prepare: every file written in whole blocks with write() and fsynced; none in run."""
    prep = counts(fs, "prepare")
    assert prep["write"] == TOTAL // BLOCK == fs["workload"]["prepare"]["writes"]
    assert prep["fsync"] == FILES
    assert "write" not in counts(fs, "run")


def assert_run(fs, reads, writes, fsyncs, call="fsync"):
    run = counts(fs, "run")
    assert run.get("pread64", 0) == reads
    assert run.get("pwrite64", 0) == writes
    assert run.get(call, 0) == fsyncs
    other = "fdatasync" if call == "fsync" else "fsync"
    assert other not in run
    own = fs["workload"]["run"]
    assert (own["reads"], own["writes"], own["fsyncs"]) == (reads, writes, fsyncs)
    for kind, n in (("read", reads), ("write", writes), ("fsync", fsyncs)):
        lat = own["latency"][kind]
        assert lat["count"] == n
        if n:
            assert 0 < lat["min_ns"] <= lat["pct_ns"] <= lat["max_ns"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode,events,freq",
    [
        ("rndwr", 300, 100),
        ("rndwr", 300, 1),
        ("rndrw", 500, 10),
        ("rndrd", 1000, 100),
        ("seqrewr", 400, 7),
        ("seqrd", 300, 100),
    ],
)
def test_each_mode_issues_what_its_parameters_say(tmp_path, mode, events, freq):
    fs = fsprof_run(tmp_path, *SMALL, "--file-test-mode", mode, "--events", str(events), "--file-fsync-freq", str(freq))
    reads, writes, periodic = sysbench_rule(mode, events, freq)
    end = 0 if mode in ("rndrd", "seqrd") else FILES
    assert_prepared(fs)
    assert_run(fs, reads, writes, periodic + end)
    assert fs["workload"]["run"]["events"] == events == reads + writes + periodic


@pytest.mark.slow
def test_fsync_freq_1_against_100(tmp_path):
    """rndwr, 300 events, 4 files: every write then a round of 4 fsyncs, against rounds after
    every 100 writes; plus the 4 end fsyncs each time. bpftrace counts the engine's fsync and
    pwrite64 calls of the first run too, on the syscall tracepoints fsprof does not use."""
    oracle = bpftrace_start(
        'BEGIN { printf("ready\\n"); } '
        'tracepoint:syscalls:sys_enter_fsync /comm == "fsync_heavy"/ { @calls["fsync"] = count(); } '
        'tracepoint:syscalls:sys_enter_pwrite64 /comm == "fsync_heavy"/ { @calls["pwrite64"] = count(); }'
    )
    try:
        one = fsprof_run(
            tmp_path / "1", *SMALL, "--file-test-mode", "rndwr", "--events", "300", "--file-fsync-freq", "1"
        )
    finally:
        theirs = dict(re.findall(r"@calls\[(\w+)\]: (\d+)", bpftrace_output(oracle)))
    for call in ("fsync", "pwrite64"):
        ours = sum(counts(one, phase).get(call, 0) for phase in one["phases"])
        assert ours == int(theirs[call]), (call, ours, theirs)
    hundred = fsprof_run(
        tmp_path / "100", *SMALL, "--file-test-mode", "rndwr", "--events", "300", "--file-fsync-freq", "100"
    )
    assert counts(one, "run")["fsync"] == 300 // (1 + FILES) * FILES + FILES
    assert counts(one, "run")["pwrite64"] == 300 // (1 + FILES)
    assert counts(hundred, "run")["fsync"] == 300 // (100 + FILES) * FILES + FILES
    assert counts(hundred, "run")["pwrite64"] == 300 - 300 // (100 + FILES) * FILES


@pytest.mark.slow
def test_seqwr_creates_empty_files_in_prepare_and_writes_them_in_run(tmp_path):
    fs = fsprof_run(tmp_path, *SMALL, "--file-test-mode", "seqwr", "--events", "400", "--file-fsync-freq", "7")
    prep = counts(fs, "prepare")
    assert "write" not in prep and "pwrite64" not in prep and prep["openat"] == 2 * FILES
    _, writes, periodic = sysbench_rule("seqwr", 400, 7)
    assert_run(fs, 0, writes, periodic + FILES)


@pytest.mark.slow
def test_fdatasync_mode_without_end_fsync(tmp_path):
    fs = fsprof_run(
        tmp_path,
        *SMALL,
        "--file-test-mode",
        "rndwr",
        "--events",
        "300",
        "--file-fsync-freq",
        "10",
        "--file-fsync-mode",
        "fdatasync",
        "--file-fsync-end",
        "off",
    )
    _, writes, periodic = sysbench_rule("rndwr", 300, 10)
    assert_run(fs, 0, writes, periodic, call="fdatasync")
    assert counts(fs, "prepare")["fsync"] == FILES  # sysbench's prepare always uses fsync()


@pytest.mark.slow
def test_fsync_all_syncs_each_write_only(tmp_path):
    fs = fsprof_run(tmp_path, *SMALL, "--file-test-mode", "rndwr", "--events", "200", "--file-fsync-all")
    assert_run(fs, 0, 200, 200)


@pytest.mark.slow
def test_two_threads_share_the_rule_and_each_syncs_every_file_at_the_end(tmp_path):
    fs = fsprof_run(
        tmp_path, *SMALL, "--file-test-mode", "rndwr", "--events", "500", "--file-fsync-freq", "20", "--threads", "2"
    )
    _, writes, periodic = sysbench_rule("rndwr", 500, 20)
    assert_run(fs, 0, writes, periodic + 2 * FILES)
    assert [t["events"] > 0 for t in fs["workload"]["run"]["threads"]] == [True, True]


@pytest.mark.slow
@pytest.mark.parametrize("engine,call", [("io_uring", "io_uring_enter"), ("libaio", "io_submit")])
def test_async_io_goes_through_its_interface_not_pwrite(tmp_path, engine, call):
    fs = fsprof_run(
        tmp_path,
        *SMALL,
        "--file-test-mode",
        "rndwr",
        "--events",
        "300",
        "--file-io-mode",
        "async",
        "--file-async-engine",
        engine,
        "--file-async-backlog",
        "8",
    )
    _, writes, periodic = sysbench_rule("rndwr", 300, 100)
    run = counts(fs, "run")
    assert "pwrite64" not in run and "write" not in run
    assert run["fsync"] == periodic + FILES  # synchronous fsync() calls, as sysbench's async mode
    # io_uring_enter names no file descriptor of the filesystem: the tracer reports it unplaced
    # (summed over phases): one submission per request, and at most one wait each. io_submit is
    # placed by its iocbs' file, each iocb followed to its reaping (docs/io_uring.md, libaio).
    if engine == "libaio":
        assert writes <= run["io_submit"] <= 2 * writes, run
        assert fs["io_uring"]["libaio pwrite"]["count"] == writes, fs["io_uring"]
    else:
        submitted = fs["unresolved_syscalls"][call]["count"]
        assert writes <= submitted <= 2 * writes
    assert fs["workload"]["run"]["writes"] == writes


@pytest.mark.slow
def test_direct_io(tmp_path):
    fs = fsprof_run(
        tmp_path,
        *SMALL,
        "--file-test-mode",
        "rndrw",
        "--events",
        "300",
        "--file-fsync-freq",
        "10",
        "--file-extra-flags",
        "direct",
    )
    reads, writes, periodic = sysbench_rule("rndrw", 300, 10)
    assert_run(fs, reads, writes, periodic + FILES)


@pytest.mark.slow
def test_same_calls_as_sysbench_itself(tmp_path):
    """sysbench fileio prepare + run under fsprof, against our workload with the same options:
    the same write/pwrite64/pread64/fsync totals on the filesystem."""
    opts = ["--file-num=4", "--file-total-size=8M", "--file-test-mode=rndrw", "--events=500", "--file-fsync-freq=10"]
    script = f"sysbench fileio {' '.join(opts)} prepare && sysbench fileio {' '.join(opts)} run"
    theirs = fsprof_run(tmp_path / "sysbench", command=["sh", "-c", script])
    ours = fsprof_run(tmp_path / "ours", *opts)
    for name in ("write", "pwrite64", "pread64", "fsync"):
        assert ours["syscalls"][name]["count"] == theirs["syscalls"][name]["count"], name


@pytest.mark.slow
@pytest.mark.parametrize(
    "options,sentence",
    [
        (["--file-total-size", "4G"], "MiB free; lower --file-total-size."),
        (
            ["--file-num", "70000", "--file-total-size", "800M", "--file-block-size", "4K"],
            "70,000 files need as many inodes but the filesystem has 65,5",
        ),  # and "... free (df -i: ...)"
    ],
)
def test_files_beyond_the_filesystem_fail_in_one_sentence(tmp_path, options, sentence):
    """A 1 GiB scratch ext4 has about 906 MiB and 65 536 inodes free."""
    proc = run_fsprof(
        "run",
        "--fs",
        "ext4",
        "--image-size",
        "1G",
        "--workload",
        "fsync-heavy",
        *options,
        "-o",
        str(tmp_path / "run"),
        "--scratch-dir",
        str(tmp_path / "scratch"),
        timeout=300,
    )
    assert proc.returncode != 0
    assert sentence in proc.stderr
    if "inodes" in sentence:
        assert re.search(r"free \(df -i: [\d,]+ of 65,536 used\); lower --file-num\.", proc.stderr), proc.stderr
    assert "Traceback" not in proc.stderr
    assert not mounts_under(tmp_path) and not loops_under(tmp_path)


BAD_INPUT = [
    (["--file-test-mode", "rndwrite"], "--file-test-mode 'rndwrite' is not one of"),
    (["--file-block-size", "0"], "--file-block-size must be a positive number of bytes"),
    (["--file-block-size", "1000", "--file-extra-flags", "direct"], "must be a multiple of 512"),
    (
        ["--file-total-size", "100000", "--file-num", "3", "--file-block-size", "4096", "--file-extra-flags", "direct"],
        "each file's size",
    ),
    (["--time", "0"], "--time 0 with no --events would run forever"),
    (["--file-num", "0"], "--file-num must be at least 1 file"),
    (["--file-total-size", "1M", "--file-num", "128"], "less than one 16384-byte block"),
    (["--file-fsync-freq", "-1"], "--file-fsync-freq must be 0 (never) or more"),
    (["--file-fsync-mode", "sync"], "is neither fsync nor fdatasync"),
    (["--file-io-mode", "mmap"], "mmap is not modelled"),
    (["--file-async-engine", "posix"], "is neither libaio nor io_uring"),
    (["--file-extra-flags", "direct,odd"], "'odd' is not one of sync, dsync, direct"),
    (["--file-fsync-end", "maybe"], "is neither on nor off"),
    (["--threads", "0"], "--threads must be at least 1"),
    (["--file-total-size", "lots"], "'lots' is not a size"),
    (["--file-rw-ratio", "-2"], "--file-rw-ratio must be 0 or more"),
]


@pytest.mark.parametrize("options,sentence", BAD_INPUT, ids=[" ".join(o) for o, _ in BAD_INPUT])
def test_bad_input_is_one_sentence(tmp_path, options, sentence):
    proc = run_fsprof(
        "run",
        "--fs",
        "ext4",
        "--workload",
        "fsync-heavy",
        *options,
        "-o",
        str(tmp_path / "run"),
        "--scratch-dir",
        str(tmp_path / "scratch"),
    )
    assert proc.returncode == 2, proc.stderr
    assert sentence in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "scratch").exists() or not any((tmp_path / "scratch").iterdir())


@pytest.mark.slow
def test_progress_line_on_a_terminal_only(tmp_path):
    """A 4 s run with stderr on a pseudo-terminal shows the progress line (after 2 s, redrawn in
    place) and clears it; the captured runs of the other tests never show one."""
    master, slave = pty.openpty()
    argv = [
        *FSPROF,
        "run",
        "--fs",
        "ext4",
        "-o",
        str(tmp_path / "run"),
        "--scratch-dir",
        str(tmp_path / "scratch"),
        "--workload",
        "fsync-heavy",
        *SMALL,
        "--file-test-mode",
        "rndwr",
        "--time",
        "4",
    ]
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": REPO},
    )
    os.close(slave)
    shown = b""
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: every holder of the terminal has exited
            break
        if not data:
            break
        shown += data
    os.close(master)
    stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, shown.decode(errors="replace")
    assert re.search(rb"\r\x1b\[Kfsync-heavy: [234] s \(run limit 4 s\)", shown), shown
    assert b"\x1b[K" not in stdout
    captured = run_fsprof(
        "run",
        "--fs",
        "ext4",
        "-o",
        str(tmp_path / "captured"),
        "--scratch-dir",
        str(tmp_path / "scratch"),
        "--workload",
        "fsync-heavy",
        *SMALL,
        "--time",
        "3",
    )
    assert captured.returncode == 0 and "\x1b[K" not in captured.stderr + captured.stdout
