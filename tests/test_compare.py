"""`fsprof compare`: explanations built from measured figures, on real runs."""

import json

import pytest

from conftest import run_fsprof

pytestmark = pytest.mark.slow
COUNT = 300


def run(tmp_path, name, *args):
    out = tmp_path / name
    proc = run_fsprof("run", "--fs", "ext4", "--scratch-dir", str(tmp_path / "scratch"), "-o", str(out), *args)
    assert proc.returncode == 0, proc.stderr
    return out


def compare(*args):
    proc = run_fsprof("compare", *map(str, args))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_a_run_against_itself_does_not_differ(tmp_path):
    out = run(tmp_path, "a", "--count", str(COUNT))
    text = compare(out, out)
    assert "No significant difference" in text, text
    (cmp,) = json.loads(compare(out, out, "--json"))
    assert cmp["us_per_op"][0] == cmp["us_per_op"][1] and not cmp["causes"]


def test_barrier_off_is_explained_by_cache_flushing_first(tmp_path):
    on = run(tmp_path, "on", "--count", str(COUNT))
    off = run(tmp_path, "off", "--count", str(COUNT), "--mount-options", "barrier=0")
    (cmp,) = json.loads(compare(on, off, "--json"))
    assert cmp["op"] == "fsync" and cmp["significant"] and cmp["us_per_op"][1] < cmp["us_per_op"][0]
    # The first cause of the difference is the cache flush (inside the jbd2 commit the fsync
    # waits for), and the evidence says why: flush requests per fsync went to zero.
    assert "cache flush" in cmp["causes"][0]["cause"], cmp["causes"][:3]
    flush = cmp["evidence"]["flush requests to the device per fsync"]
    assert flush[0] >= 1 and flush[1] == 0
    text = compare(on, off)
    first = next(line for line in text.splitlines() if line.startswith("    "))
    assert "cache flush" in first, text
    # One phase of the workload, explained alone, from that phase's own figures.
    (phase,) = json.loads(compare(on, off, "--phase", "run", "--json"))
    assert "cache flush" in phase["causes"][0]["cause"] and phase["evidence"]["flush requests to the device per fsync"][1] == 0
    proc = run_fsprof("compare", str(on), str(off), "--phase", "no-such")
    assert proc.returncode == 2 and "no phase 'no-such'" in proc.stderr


def test_different_workloads_are_not_compared(tmp_path):
    a = run(tmp_path, "a", "--count", "20")
    b = run(tmp_path, "b", "--count", "30")
    proc = run_fsprof("compare", str(a), str(b))
    assert proc.returncode == 2 and "different workloads" in proc.stderr


TWO_WORKLOADS = """
[[config]]
name = "barrier-on"
fs = "ext4"
[[config]]
name = "barrier-off"
fs = "ext4"
mount_options = "barrier=0"
[[workload]]
name = "short"
workload = "fsync-loop"
args = ["--count", "100"]
[[workload]]
name = "long"
workload = "fsync-loop"
args = ["--count", "150"]
"""


def test_a_spec_with_two_workloads_is_compared_per_workload(tmp_path):
    spec_file = tmp_path / "two.toml"
    spec_file.write_text(TWO_WORKLOADS)
    proc = run_fsprof("run", "--spec", str(spec_file), "-o", str(tmp_path / "out"),
                      "--scratch-dir", str(tmp_path / "scratch"))
    assert proc.returncode == 0, proc.stderr
    comparisons = json.loads(compare(tmp_path / "out", "--json"))
    # Each workload's configurations are set against each other, never across workloads.
    assert [(c["workload"], c["base"], c["other"]) for c in comparisons] == \
        [("short", "short/barrier-on", "short/barrier-off"), ("long", "long/barrier-on", "long/barrier-off")]
    for c in comparisons:
        assert c["significant"] and "cache flush" in c["causes"][0]["cause"], c["causes"][:2]
    text = compare(tmp_path / "out")
    assert text.index("== workload short") < text.index("== workload long"), text
