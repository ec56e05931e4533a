"""compare's verdicts on planted differences. The repeats are a real recorded run
(tests/data/stored-run: ext4's fsyncs) copied into a spec's output with each copy's fsync time
scaled by a planted factor (its causes alike, so each copy still adds up): the difference and
its noise are known by construction."""

import copy
import gzip
import json
from pathlib import Path

import pytest

from conftest import check_adds_up, run_fsprof
from profiler.analysis import repeats
from profiler.rundir import INDEX_SCHEMA

STORED = Path(__file__).resolve().parent / "data" / "stored-run" / "result.json.gz"


def spec_output(tmp_path, factors, unit=None):
    """A spec's output: configs {name: [factor per repeat]} of the stored run's ext4 fsyncs;
    unit: the spec workload's unit of work."""
    with gzip.open(STORED) as f:
        stored = json.load(f)
    ext4 = next(fs for fs in stored["filesystems"] if fs["label"] == "ext4")
    runs = []
    for config, per_repeat in factors.items():
        for i, factor in enumerate(per_repeat, 1):
            fs = copy.deepcopy(ext4)
            fsync = fs["attribution"]["fsync"]
            fsync["wall_ns"] = round(fsync["wall_ns"] * factor)
            fsync["causes"] = {k: v * factor for k, v in fsync["causes"].items()}
            run_dir = tmp_path / f"{config}-rep{i}"
            run_dir.mkdir()
            spec = {
                "file": "planted.toml",
                "config": config,
                "workload": "fsync-loop",
                **({"unit": unit} if unit else {}),
            }
            (run_dir / "result.json").write_text(json.dumps({**stored, "spec": spec, "filesystems": [fs]}))
            runs.append({"workload": "fsync-loop", "config": config, "dir": run_dir.name})
    (tmp_path / "index.json").write_text(json.dumps({"schema": INDEX_SCHEMA, "runs": runs}))
    return tmp_path


def compare(out):
    proc = run_fsprof("compare", str(out), "--op", "fsync", "--json")
    assert proc.returncode == 0, proc.stderr
    text = run_fsprof("compare", str(out), "--op", "fsync").stdout
    print(text)
    (cmp,) = json.loads(proc.stdout)
    check_adds_up(cmp)
    return cmp, text


def test_a_consistent_2x_with_one_outlier_is_significant(tmp_path):
    """Every repeat of b is at least 2.3x every repeat of a, one of them 6x: the spread (max - min)
    of b is wider than the difference, which a spread rule calls noise; the ranks do not."""
    cmp, text = compare(spec_output(tmp_path, {"a": [1.0, 1.02, 0.98], "b": [2.3, 2.35, 6.0]}))
    assert cmp["significant"] and cmp["statistics"]["separated"] == 1
    assert cmp["statistics"]["p"] == pytest.approx(0.1)
    low, high = cmp["statistics"]["ratio_ci"]
    assert low > 1.5 and "No significant difference" not in text
    assert "every repeat of fsync-loop/b above every one of fsync-loop/a" in text, text


def test_a_3_percent_difference_inside_10_percent_noise_is_not(tmp_path):
    cmp, text = compare(
        spec_output(tmp_path, {"a": [1.0, 1.10, 0.95, 1.05, 0.90], "b": [1.03, 1.13, 0.98, 1.08, 0.93]})
    )
    assert not cmp["significant"] and cmp["statistics"]["separated"] == 0
    assert cmp["statistics"]["p"] > 0.3
    low, high = cmp["statistics"]["ratio_ci"]
    assert low < 1 < high
    assert "No significant difference" in text and "the repeats overlap" in text, text


def test_one_run_each_says_noise_was_not_measured(tmp_path):
    cmp, text = compare(spec_output(tmp_path, {"a": [1.0], "b": [2.0]}))
    assert cmp["significant"] and not cmp["statistics"]["measured"]
    assert "run-to-run noise not measured; 3 repeats of each configuration" in text, text


@pytest.mark.parametrize(
    "a, b, p",
    [
        ([1, 2, 3], [4, 5, 6], 0.1),  # separated, three each: 2 / C(6, 3)
        ([1, 2], [3, 4], 1 / 3),  # separated, two each: cannot reach 0.10
        ([1, 2, 3, 4], [5, 6, 7, 8], 2 / 70),
        ([1, 3, 5], [2, 4, 6], 0.7),  # interleaved
    ],
)
def test_exact_rank_test_p_values(a, b, p):
    """Exact two-sided Mann-Whitney U p-values, checked against the counts of the splits by hand."""
    assert repeats.rank_test(a, b) == pytest.approx(p)
    assert repeats.repeats_needed() == 3


def test_a_spec_workloads_unit_is_compares_default(tmp_path):
    """A spec's workload that names its unit (`unit = "fsync"`): counts go per unit without --unit,
    from the workload's own count (the stored fsync-loop made 200 fsyncs)."""
    cmp, text = compare(spec_output(tmp_path, {"a": [1.0], "b": [2.0]}, unit="fsync"))
    assert cmp["workload_time"]["unit"] == {"name": "fsync", "count": [200, 200]}
    assert "; 200 vs 200 fsyncs: " in text.splitlines()[0], text


def planted_pair(tmp_path, size_gib, spec_name=None, argv=lambda name: ["sh", f"{name}/script.sh"]):
    """Two runs of the stored ext4 fsyncs; the second's fsyncs wait 2 ms more each for space
    reservation on a filesystem of size_gib, 70% full of 1 GiB at the end. argv(run name): the
    command each run ran."""
    with gzip.open(STORED) as f:
        stored = json.load(f)
    ext4 = next(fs for fs in stored["filesystems"] if fs["label"] == "ext4")
    dirs = []
    for name, extra_ns in (("a", 0), ("b", 2_000_000)):
        fs = copy.deepcopy(ext4)
        fsync = fs["attribution"]["fsync"]
        added = extra_ns * fsync["count"]
        fsync["wall_ns"] += added
        fs["syscalls"]["fsync"]["total_ns"] += added
        fsync["causes"]["space reservation"] = added
        fs["elapsed_s"] += added / 1e9
        fs["space"] = {"size_bytes": size_gib << 30, "used_bytes_start": 0, "used_bytes_end": 700 << 20}
        result = {**stored, "filesystems": [fs], "workload": {"name": "command", "argv": argv(name)}}
        if spec_name and name == "a":
            result["spec"] = {"file": "s.toml", "config": "c", "workload": spec_name}
        (tmp_path / name).mkdir(parents=True)
        (tmp_path / name / "result.json").write_text(json.dumps(result))
        dirs.append(tmp_path / name)
    proc = run_fsprof("compare", *map(str, dirs), "--op", "fsync", "--json")
    assert proc.returncode == 0, proc.stderr
    (cmp,) = json.loads(proc.stdout)
    return cmp


def test_space_waits_on_a_small_filesystem_carry_a_test_bed_note(tmp_path):
    cmp = planted_pair(tmp_path, 1, spec_name="script")
    assert cmp["causes"][0]["cause"] == "space reservation", cmp["causes"]
    assert any("a 1.0 GiB filesystem, 68% full at the end" in n for n in cmp["test_bed_notes"]), cmp["test_bed_notes"]
    # A spec's name for the command is not what it ran: the commands are named, not "script".
    assert cmp["workloads_differ"]["name"] == ["sh a/script.sh", "sh b/script.sh"], cmp["workloads_differ"]


def test_fio_runs_that_differ_only_in_where_fio_writes_its_figures_ran_one_workload(tmp_path):
    """fio --output=a/fio.json vs --output=b/fio.json (each run's figures beside its own run) is
    one workload; a job option that differs is not."""
    job = ["--name=w", "--rw=randwrite", "--bs=4k", "--fsync=1"]
    same = planted_pair(
        tmp_path / "same", 16, argv=lambda n: ["fio", f"--output={n}/fio.json", "--output-format", "json", *job]
    )
    assert same["workloads_differ"] is None, same["workloads_differ"]
    other = planted_pair(
        tmp_path / "other", 16, argv=lambda n: ["fio", f"--output={n}/fio.json", *job, f"--size={n == 'a' and 4 or 8}m"]
    )
    assert other["workloads_differ"]["words"] == [["--size=4m"], ["--size=8m"]], other["workloads_differ"]


def test_space_waits_on_a_large_filesystem_carry_none(tmp_path):
    cmp = planted_pair(tmp_path, 16)
    assert cmp["causes"][0]["cause"] == "space reservation"
    assert not any("full at the end" in n for n in cmp["test_bed_notes"]), cmp["test_bed_notes"]
    report = run_fsprof("report", str(tmp_path / "b"))
    assert report.returncode == 0 and "test bed: a " not in report.stdout, report.stdout


def test_the_report_says_when_a_small_filesystem_waited_for_space(tmp_path):
    """The run whose fsyncs waited for space (2 ms of each) on a 1 GiB filesystem carries the
    test-bed line in its report, with the filesystem's own count; the run that did not, none."""
    planted_pair(tmp_path, 1)
    slow = json.loads((tmp_path / "b" / "result.json").read_text())
    with gzip.open(STORED) as f:  # the stored btrfs's own section, its ticket count planted
        btrfs = next(fs for fs in json.load(f)["filesystems"] if fs["fs"] == "btrfs")["behind"]["btrfs"]
    btrfs["all"]["reservations"]["tickets"] = 9804
    slow["filesystems"][0]["behind"]["btrfs"] = btrfs
    (tmp_path / "b" / "result.json").write_text(json.dumps(slow))
    report = run_fsprof("report", str(tmp_path / "b"))
    assert report.returncode == 0, report.stderr
    assert "test bed: a 1.0 GiB filesystem, 68% full at the end (9,804 btrfs reservation tickets)" in report.stdout
    assert "test bed: a " not in run_fsprof("report", str(tmp_path / "a")).stdout


def planted_tails(tmp_path, slow_ms):
    """Two runs of the stored ext4 fsyncs, each with two calls kept whole (exemplars): one of
    slow_ms[side] ms, 90% of it a journal commit wait, and one at the run's p99. The body's tail
    waits are planted too (a 'filesystem frozen' wait of 40 ms on the other side only)."""
    with gzip.open(STORED) as f:
        stored = json.load(f)
    ext4 = next(fs for fs in stored["filesystems"] if fs["label"] == "ext4")
    dirs = []
    for name, ms in zip("ab", slow_ms):
        fs = copy.deepcopy(ext4)
        p99 = fs["syscalls"]["fsync"]["p99_ns"]
        ns = int(ms * 1e6)

        def call(length, commit):
            wait = {"at_ns": 0, "ns": commit, "cause": "journal commit wait", "ended_by": "jbd2/loop0-8"}
            return {
                "tid": 7, "phase": "run", "start_ns": 1, "ns": length, "ret": 0, "waits": [wait],
                "other_blocked_ns": 0, "blocked_intervals": 1, "runnable_ns": 0, "cpu_ns": length - commit,
            }  # fmt: skip

        fs["exemplars"] = {"fsync": [call(ns, int(0.9 * ns)), call(p99, p99 // 2)]}
        fs["syscalls"]["fsync"]["max_ns"] = ns
        fsync = fs["attribution"]["fsync"]
        if name == "b":
            fsync["causes"]["filesystem frozen"] = 40_000_000
            fsync["wall_ns"] += 40_000_000
            fsync["tail"] = {"waits": 1, "ns": 40_000_000, "causes": {"filesystem frozen": 40_000_000}}
        (tmp_path / name).mkdir(parents=True)
        (tmp_path / name / "result.json").write_text(json.dumps({**stored, "filesystems": [fs]}))
        dirs.append(tmp_path / name)
    return dirs


JBD2 = "journal commit wait > jbd2 commit"


@pytest.mark.parametrize("band", ["max", "p99", "p50"])
def test_a_bands_causes_come_from_its_own_calls(tmp_path, band):
    """--band max and p99 explain the calls kept whole, p50 the body without its tail waits: a
    slower slowest call (20 ms against 5 ms, 90% journal commit wait) is the max band's first
    cause; the p99 band averages both kept calls; the other side's one 40 ms freeze, a tail wait,
    moves the whole-run mean and not the body."""
    a, b = planted_tails(tmp_path, (5, 20))
    proc = run_fsprof("compare", str(a), str(b), "--op", "fsync", "--band", band, "--json")
    assert proc.returncode == 0, proc.stderr
    (cmp,) = json.loads(proc.stdout)
    got = cmp["band"]
    # The commit wait, split by the jbd2 thread's own time (its commit block's flush first).
    commit = sum(c["diff_us"] for c in got["causes"] + got["not_different"] if c["cause"].startswith("journal commit"))
    if band == "max":
        assert got["calls"] == [1, 1] and got["us_per_call"] == [5000, 20000]
        assert got["causes"][0]["cause"].startswith("journal commit wait > jbd2 commit") and commit == pytest.approx(
            13500
        )
    elif band == "p99":
        p99 = cmp["p99_us"][0]
        assert got["calls"] == [2, 2] and got["us_per_call"][1] == pytest.approx((20000 + p99) / 2)
        assert got["causes"][0]["cause"].startswith("journal commit wait > jbd2 commit") and commit == pytest.approx(
            6750
        )
    else:  # the body: the freeze is the tail, not in it; nothing else differs
        assert got["us_per_call"][0] == pytest.approx(got["us_per_call"][1])
        assert not got["causes"] and cmp["us_per_op"][1] > cmp["us_per_op"][0]
    assert abs(got["residual_us"]) < 1e-6 * max(got["us_per_call"])


def test_op_naming_an_asynchronous_request(tmp_path):
    """`--op "io_uring write"` explains that opcode's requests as a syscall's calls (their time,
    its causes, their requests); `--op "libaio pwrite"` names iocbs, whose time has no causes: one
    sentence saying why and where compare sets them side by side, and exit 2."""
    with gzip.open(STORED) as f:
        stored = json.load(f)
    ext4 = next(fs for fs in stored["filesystems"] if fs["label"] == "ext4")
    hist = dict(ext4["syscalls"]["fsync"])
    wq = {"offcpu_ns": hist["total_ns"] // 2, "causes": {"journal commit wait": hist["total_ns"] // 2}}
    fs = {
        **ext4,
        "io_uring": {"io_uring write": hist, "libaio pwrite": hist},
        "io_uring_io_wq": {"io_uring write": wq},
    }
    dirs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "result.json").write_text(json.dumps({**stored, "filesystems": [fs]}))
        dirs.append(str(tmp_path / name))
    proc = run_fsprof("compare", *dirs, "--op", "io_uring write", "--json")
    assert proc.returncode == 0, proc.stderr
    (cmp,) = json.loads(proc.stdout)
    assert cmp["op"] == "io_uring write" and cmp["us_per_op"] == [hist["total_ns"] / hist["count"] / 1e3] * 2, cmp
    causes = {c["cause"]: c["us_per_op"] for c in cmp["causes"] + cmp["not_different"]}
    half = hist["total_ns"] / 2 / hist["count"] / 1e3
    assert causes["outside an io-wq worker's waits"] == pytest.approx([half, half]), causes
    assert sum(x for x, _ in causes.values()) == pytest.approx(cmp["us_per_op"][0]), causes
    text = run_fsprof("compare", *dirs, "--op", "io_uring write").stdout
    assert "Per io_uring write request: " in text, text
    proc = run_fsprof("compare", *dirs, "--op", "libaio pwrite")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "libaio pwrite: a libaio iocb's time has no causes to compare" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
