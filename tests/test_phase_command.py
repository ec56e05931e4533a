"""A user's own command as first-class as a bundled workload: `fsprof phase NAME` marks phases
from inside it (exact boundaries: the syscalls between two marks, counted by the script itself,
are the phase's), and two runs of it compare phase by phase, or with an argument changed."""

import json

import pytest

from conftest import check_adds_up, run_fsprof

pytestmark = pytest.mark.slow
WRITES, SYNCS = 50, 20
SCRIPT = (
    "fsprof phase writes; i=0; while [ $i -lt {w} ]; do echo x >> f; i=$((i+1)); done; "
    "fsprof phase syncs; i=0; while [ $i -lt {s} ]; do sync f; i=$((i+1)); done"
)


def run(tmp_path, name, *args, script=SCRIPT.format(w=WRITES, s=SYNCS)):
    out = tmp_path / name
    proc = run_fsprof(
        "run",
        "--fs",
        "ext4",
        "--scratch-dir",
        str(tmp_path / "scratch"),
        "-o",
        str(out),
        *args,
        "--",
        "sh",
        "-c",
        script,
    )
    assert proc.returncode == 0, proc.stderr
    (fs,) = json.loads((out / "result.json").read_text())["filesystems"]
    return out, fs


def compare(*args):
    proc = run_fsprof("compare", *map(str, args), "--json")
    assert proc.returncode == 0, proc.stderr
    (cmp,) = json.loads(proc.stdout)
    check_adds_up(cmp)
    print(run_fsprof("compare", *map(str, args)).stdout)
    return cmp


@pytest.mark.root
def test_a_users_script_marks_phases_exactly(tmp_path):
    _, fs = run(tmp_path, "a")
    assert fs["workload"]["phases"] == ["writes", "syncs"]
    writes, syncs = fs["phases"]["writes"]["syscalls"], fs["phases"]["syncs"]["syscalls"]
    # `echo x >> f` is one open, one write, one close in sh; `sync f` one open, one fsync, one close.
    assert writes["write"]["count"] == WRITES and "fsync" not in writes, writes
    assert syncs["fsync"]["count"] == SYNCS and "write" not in syncs, syncs
    assert syncs["openat"]["count"] == SYNCS
    assert "write" not in fs["phases"]["run"]["syscalls"] and "fsync" not in fs["phases"]["run"]["syscalls"]


@pytest.mark.root
def test_phases_of_a_users_script_compare_across_two_runs(tmp_path):
    on, _ = run(tmp_path, "on")
    off, _ = run(tmp_path, "off", "--mount-options", "barrier=0")
    cmp = compare(on, off, "--phase", "syncs")
    assert cmp["op"] == "fsync" and cmp["significant"], cmp["us_per_op"]
    assert any("flush" in c["cause"] for c in cmp["causes"][:2]), cmp["causes"]
    assert cmp.get("workloads_differ") is None
    writes = compare(on, off, "--phase", "writes", "--op", "write")
    assert writes["op"] == "write" and writes["us_per_repeat"] == [
        [pytest.approx(writes["us_per_op"][0])],
        [pytest.approx(writes["us_per_op"][1])],
    ]


@pytest.mark.root
def test_runs_of_a_command_with_one_argument_changed_compare(tmp_path):
    a, _ = run(tmp_path, "a", script=SCRIPT.format(w=WRITES, s=SYNCS))
    b, _ = run(tmp_path, "b", script=SCRIPT.format(w=WRITES, s=2 * SYNCS))
    cmp = compare(a, b, "--phase", "syncs")
    assert cmp["op"] == "fsync"
    differ = cmp["workloads_differ"]
    assert differ and str(SYNCS) in " ".join(differ["words"][0]) and str(2 * SYNCS) in " ".join(differ["words"][1])


def test_phase_outside_a_run_is_one_sentence(tmp_path):
    proc = run_fsprof("phase", "x")
    assert proc.returncode == 2 and "FSPROF_PHASE_FILE is not set" in proc.stderr and "Traceback" not in proc.stderr
