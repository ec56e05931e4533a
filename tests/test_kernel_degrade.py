"""A kernel that lacks something loses only the figures that need it, and says so (issue 16).

The host kernel has every tracepoint fsprof uses, so the tests take one away for real: a copy of
the built objects whose program names a tracepoint no kernel has (the section name changed in
the ELF, same length), or a program the verifier refuses."""

import json
import shutil

import pytest

from profiler.trace.bpf import BUILD_DIR, BpfObject
from profiler.errors import FsprofError

from conftest import run_fsprof
from test_loader import compile_bpf

pytestmark = pytest.mark.root


def objects_without(tmp_path, obj, section, renamed):
    """A copy of build/*.bpf.o where `obj`'s section `section` is called `renamed` instead."""
    assert len(section) == len(renamed)
    out = tmp_path / "bpf"
    out.mkdir()
    for f in BUILD_DIR.glob("*.bpf.o"):
        shutil.copy(f, out / f.name)
    data = (out / f"{obj}.bpf.o").read_bytes()
    assert section.encode() in data
    (out / f"{obj}.bpf.o").write_bytes(data.replace(section.encode(), renamed.encode()))
    return out


def test_run_without_block_io_done_leaves_the_ticks_out_and_says_so(tmp_path, monkeypatch):
    """Kernels before 6.5 have no block_io_done: the request life times (the /sys/block ticks)
    are unknown there, every other figure stays, and result.json and the report say which."""
    monkeypatch.setenv(
        "FSPROF_BPF_DIR", str(objects_without(tmp_path, "block", "tp_btf/block_io_done", "tp_btf/block_io_donX"))
    )
    out = tmp_path / "run"
    proc = run_fsprof("run", "--fs", "ext4", "--workload", "fsync-loop", "--count", "100", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    result = json.loads((out / "result.json").read_text())
    left_out = {u["probe"]: u for u in result["unavailable"]}
    assert "block:on_io_done" in left_out, left_out
    # Anything else left out is what this kernel itself lacks (none on the host; 6.1 lacks more).
    assert all("does not exist on this kernel" in u["why"] for u in left_out.values()), left_out
    assert "block_io_donX does not exist" in left_out["block:on_io_done"]["why"]
    assert "life times" in left_out["block:on_io_done"]["figures"]
    line = [x for x in proc.stdout.splitlines() if "unavailable on this kernel" in x]
    assert len(line) == len(left_out) and any(
        "block request life times" in x and "block:on_io_done" in x for x in line
    ), proc.stdout
    fs = result["filesystems"][0]
    dev = fs["device"]["name"]
    ours = fs["behind"]["block"]["devices"][dev]["as_sys_block_stat"]
    assert ours["write_ticks_ms"] is None and ours["flush_ticks_ms"] is None  # unknown, not 0
    # What does not need block_io_done still matches the kernel's own counters.
    kernel = fs["kernel_counters"][dev]
    assert ours["flush_ios"] == kernel["flush_ios"] > 0
    assert fs["syscalls"]["fsync"]["count"] == 100


def test_a_refused_program_is_left_out_and_the_object_reloaded(tmp_path, monkeypatch):
    monkeypatch.setattr("profiler.trace.bpf.LOG_DIR", tmp_path / "logs")
    obj = compile_bpf(
        tmp_path,
        "halfbad",
        """
SEC("tracepoint/sched/sched_switch")
int refused(void *ctx) { return *(volatile int *)0; }  /* a NULL dereference the verifier refuses */
SEC("tracepoint/sched/sched_switch")
int fine(void *ctx) { return 0; }
""",
    )
    with BpfObject("halfbad", path=obj) as loaded:
        loaded.attach_all()
        assert list(loaded.programs) == ["fine"]
        why = loaded.skipped["refused"]
        assert why.startswith("left out: verifier: ") and "invalid mem access" in why, why
    assert "BEGIN PROG LOAD LOG" in next((tmp_path / "logs").iterdir()).read_text()


def test_a_required_program_refused_is_one_sentence_naming_it(tmp_path, monkeypatch):
    monkeypatch.setattr("profiler.trace.bpf.LOG_DIR", tmp_path / "logs")
    obj = compile_bpf(
        tmp_path,
        "core",
        """
SEC("tracepoint/sched/sched_switch")
int needed(void *ctx) { return *(volatile int *)0; }
SEC("tracepoint/sched/sched_switch")
int extra(void *ctx) { return 0; }
""",
    )
    with pytest.raises(FsprofError) as err:
        BpfObject("core", path=obj, required={"needed"})
    msg = str(err.value)
    assert "\n" not in msg and "program needed of core.bpf.o" in msg and "invalid mem access" in msg, msg
