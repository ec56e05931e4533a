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


def test_different_workloads_are_not_compared(tmp_path):
    a = run(tmp_path, "a", "--count", "20")
    b = run(tmp_path, "b", "--count", "30")
    proc = run_fsprof("compare", str(a), str(b))
    assert proc.returncode == 2 and "different workloads" in proc.stderr
