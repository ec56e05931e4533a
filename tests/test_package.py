"""The package installs: the wheel `pip wheel .` builds, installed into a fresh venv (not editable,
no source tree on the path), gives a working `fsprof` with its rules, schema, BPF objects and
workload engines."""

import json
import os
import subprocess
import sys
import zipfile

import pytest

from conftest import REPO, assert_invariants, loops_under, mounts_under

pytestmark = pytest.mark.root


def run(argv, **kw):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, **kw)
    assert proc.returncode == 0, (argv, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A venv of its own with the wheel built from this tree installed in it; yields its bin/."""
    tmp = tmp_path_factory.mktemp("package")
    # pip builds in an isolated environment with setuptools from PyPI; setup.py runs `make build`.
    run([sys.executable, "-m", "pip", "wheel", REPO, "--no-deps", "-q", "-w", str(tmp / "dist")])
    (wheel,) = (tmp / "dist").glob("fsprof-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for shipped in (
        "profiler/behind/block.py",
        "profiler/analysis/rules/common.toml",
        "profiler/schema/result.schema.json",
        "profiler/trace/bpf_objects/syscalls.bpf.o",
        "workloads/engines/fsync_heavy",
    ):
        assert shipped in names, shipped
    run([sys.executable, "-m", "venv", str(tmp / "venv")], env=clean_env())
    # Its dependencies (prometheus-client, requests, ...) as wheels beside it, fetched by pip.
    run([sys.executable, "-m", "pip", "download", "-q", "-d", str(tmp / "dist"), str(wheel)])
    run(
        [
            str(tmp / "venv" / "bin" / "pip"),
            "install",
            "-q",
            "--no-index",
            "--find-links",
            str(tmp / "dist"),
            str(wheel),
        ],
        env=clean_env(),
    )
    yield tmp / "venv" / "bin", tmp


def clean_env():
    """No PYTHONPATH (conftest's points at the tree, where pip would find fsprof.egg-info and take
    fsprof as installed) and no FSPROF_BPF_DIR: the venv alone."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FSPROF_BPF_DIR")}


@pytest.mark.slow
def test_installed_wheel_runs_doctor_and_a_traced_run(installed):
    bin_dir, tmp = installed
    where = run(
        [
            str(bin_dir / "python"),
            "-c",
            "import profiler.trace.bpf as b, workloads.common as w; "
            "print(b.__file__, b.BUILD_DIR, w.engine_path('fsync_heavy'))",
        ],
        cwd=tmp,
        env=clean_env(),
    ).stdout.split()
    assert all(p.startswith(str(tmp / "venv")) for p in where), where
    run([str(bin_dir / "fsprof"), "doctor"], cwd=tmp, env=clean_env())
    run(
        [
            str(bin_dir / "fsprof"),
            "run",
            "--fs",
            "ext4",
            "--workload",
            "fsync-loop",
            "--count",
            "50",
            "--scratch-dir",
            str(tmp / "scratch"),
            "-o",
            str(tmp / "out"),
        ],
        cwd=tmp,
        env=clean_env(),
    )
    assert not mounts_under(tmp) and not loops_under(tmp)
    result = json.loads((tmp / "out" / "result.json").read_text())
    assert_invariants(result)
    (fs,) = result["filesystems"]
    assert fs["fs"] == "ext4"
    assert fs["workload"]["fsyncs"] == 50
    assert fs["phases"]["run"]["syscalls"]["fsync"]["count"] == 50
    # Continuous mode and its dependencies came with it: a short recording writes profiles.
    run(
        [
            str(bin_dir / "fsprof"),
            "record",
            "--continuous",
            "--all",
            "--window",
            "1s",
            "--duration",
            "2s",
            "--listen",
            "off",
            "--pprof-dir",
            str(tmp / "profiles"),
        ],
        cwd=tmp,
        env=clean_env(),
    )
    assert list((tmp / "profiles").glob("fsprof-*.pb.gz"))
