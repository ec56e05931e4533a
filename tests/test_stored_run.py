"""Behaviour unchanged: on a result.json recorded earlier (tests/data/stored-run/README.md),
`fsprof report` and `fsprof compare` print what the code printed then, and the flame graphs
`report` writes hold the same stacks."""

import gzip
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from conftest import check_adds_up, run_fsprof

STORED = Path(__file__).resolve().parent / "data" / "stored-run"


@pytest.fixture
def run_dir(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    with gzip.open(STORED / "result.json.gz") as src, open(run / "result.json", "wb") as dst:
        shutil.copyfileobj(src, dst)
    return run


@pytest.mark.parametrize(
    "args, expected",
    [
        (("report",), "report.txt"),
        (("compare",), "compare.txt"),
        (("compare", "--json"), "compare.json"),
        (("compare", "--op", "fsync", "--phase", "run"), "compare-fsync-run.txt"),
    ],
)
def test_same_output_as_before(run_dir, args, expected):
    proc = run_fsprof(args[0], str(run_dir), *args[1:])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (STORED / expected).read_text()
    if "--json" in args:
        for cmp in json.loads(proc.stdout):
            check_adds_up(cmp)


def test_report_writes_the_same_flame_graph_stacks(run_dir):
    assert run_fsprof("report", str(run_dir)).returncode == 0
    expected = dict(reversed(line.split()) for line in (STORED / "folded-sorted.sha256").read_text().splitlines())
    written = {
        f.name: hashlib.sha256("".join(sorted(f.read_text().splitlines(keepends=True))).encode()).hexdigest()
        for f in (run_dir / "flamegraphs").glob("*.folded")
    }
    assert written == expected
