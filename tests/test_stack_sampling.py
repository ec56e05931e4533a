"""Stack sampling (--stack-sample N): off-CPU and waker stacks walked in 1 of N calls of each op
once 64 of its waits have been, the other calls' blocked time divided in the walked calls' proportions
(analysis/attribution.split_unwalked). On real loop-backed filesystems, against a full run of the
same workload: the counts stay exact (the workload's own), the sum invariant holds, the sampler
passes over the share of calls it should, and the causes of the blocked time come out as in the
full run. docs/benchmarks.md measures the shares' agreement over repeated runs (bench_sampling)."""

import json

import pytest

from conftest import assert_invariants, run_fsprof
from profiler.analysis.attribution import CPU_CONTENTION, OTHER_WAIT

pytestmark = pytest.mark.slow
COUNT = 1000
EVERY = 4
FIRST = 64  # profiler/session/collect.py STACK_FIRST


def fsprof_result(tmp_path, name, *args):
    out = tmp_path / name
    proc = run_fsprof(
        "run",
        "--scratch-dir",
        str(tmp_path / "scratch"),
        "-o",
        str(out),
        "--fs",
        "ext4,xfs,btrfs",
        "--count",
        str(COUNT),
        *args,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads((out / "result.json").read_text())
    assert_invariants(result)
    return {f["fs"]: f for f in result["filesystems"]}, proc.stdout


def blocked_shares(b):
    """Each blocked cause's share of the blocked time (what stack sampling can change)."""
    blocked = {c: ns for c, ns in b["causes"].items() if c in b.get("waits", {}) and c != CPU_CONTENTION}
    total = sum(blocked.values())
    return {c: ns / total for c, ns in blocked.items()}


@pytest.mark.root
def test_sampled_stacks_keep_the_counts_and_the_causes(tmp_path):
    full, _ = fsprof_result(tmp_path, "full", "--stack-sample", "1")
    # No tail (an hour): every call's waits are sampled alike, which is what this test measures.
    sampled, stdout = fsprof_result(tmp_path, "sampled", "--stack-sample", str(EVERY), "--tail-threshold", "1h")
    assert f"walked in 1 of {EVERY} calls of each syscall once {FIRST} of its waits have been" in stdout
    for name, fs in sampled.items():
        b, ref = fs["phases"]["run"]["attribution"]["fsync"], full[name]["phases"]["run"]["attribution"]["fsync"]
        assert b["count"] == fs["workload"]["fsyncs"] == COUNT, name
        assert fs["stack_sampling"]["every"] == EVERY and "stack_sampling" not in full[name]
        # Once 64 waits (the first 20-30 fsyncs) have been walked, calls are passed over 3 times in
        # 4, at random: their share of the fsyncs' off-CPU time is about 0.97 * 3/4 = 0.73.
        estimated = b["offcpu_estimated_ns"] / b["offcpu_ns"]
        assert 0.55 < estimated < 0.85, (name, estimated)
        assert b["causes"].get(OTHER_WAIT, 0) < 0.05 * b["wall_ns"], (name, b["other_wait_frames"])
        # Every interval is still counted, whatever its stack: as many as the full run's, to what
        # two runs differ by (btrfs's tree-log sync blocks more or fewer times per fsync with the
        # timing: 3,476 vs 2,608 in 1,000 fsyncs beside two VMs on 2026-11-29).
        assert sum(b["waits"].values()) > 0.8 * sum(ref["waits"].values()), name
        got, want = blocked_shares(b), blocked_shares(ref)
        assert max(got, key=got.get) == max(want, key=want.get), (name, got, want)
        # Two runs, not one run read two ways: the difference is the sampling error of about 250
        # walked calls plus how much the workload itself moves between runs (ext4's data writeback
        # wait: 1.5 points apart on 2026-11-26, 5.2 once in CI, 9.4 under `make test-stress` on
        # 2026-11-27). A sampler that put the unwalked time (about 73% of it) under the wrong cause
        # would move a share by far more than 15 points.
        for cause in set(got) | set(want):
            assert abs(got.get(cause, 0) - want.get(cause, 0)) < 0.15, (name, cause, got, want)


def test_the_division_keeps_every_groups_totals():
    """split_unwalked on records shaped as the kernel's: each (phase, op, runnable) group keeps its
    exact time and count; unwalked time goes to the walked stacks in proportion to their time; a
    group with no walked record keeps its own, which attribution names."""
    from profiler.analysis.attribution import NOT_WALKED, attribute, split_unwalked
    from profiler.trace.maps import STACK_NOT_WALKED

    def rec(stack, runnable, count, ns, op="fsync", phase=1):
        return {
            "phase": phase,
            "op": op,
            "stack": stack,
            "runnable": runnable,
            "waker_stack": -1,
            "waker_comm": "",
            "count": count,
            "total_ns": ns,
        }

    raw = [
        rec(1, False, 10, 3_000),
        rec(2, False, 5, 1_000),
        rec(STACK_NOT_WALKED, False, 45, 20_000),
        rec(3, True, 2, 500),
        rec(STACK_NOT_WALKED, True, 7, 1_001),
        rec(STACK_NOT_WALKED, False, 4, 777, op="write"),
    ]
    out = split_unwalked(raw)
    by = {(r["op"], r["stack"], r["runnable"]): r for r in out}
    assert by[("fsync", 1, False)]["total_ns"] == 3_000 + 15_000
    assert by[("fsync", 2, False)]["total_ns"] == 1_000 + 5_000
    assert by[("fsync", 1, False)]["count"] + by[("fsync", 2, False)]["count"] == 60
    assert by[("fsync", 3, True)]["total_ns"] == 1_501 and by[("fsync", 3, True)]["estimated_ns"] == 1_001
    assert ("fsync", STACK_NOT_WALKED, False) not in by
    assert by[("write", STACK_NOT_WALKED, False)]["total_ns"] == 777
    b = attribute("ext4", {"count": 4, "total_ns": 1_000}, [by[("write", STACK_NOT_WALKED, False)]], [], {})
    assert b["other_wait_frames"] == {NOT_WALKED: 777} and b["offcpu_estimated_ns"] == 777
