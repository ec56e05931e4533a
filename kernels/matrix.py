"""`make test-kernels`: fsprof's checks on each kernel, as a matrix kernel x check.

    python -m kernels.matrix                         # 6.1, 6.12 (Debian's, in VMs) and the host
    python -m kernels.matrix --kernels 6.1 --checks doctor,fsync-loop
    python -m kernels.matrix --kernel /path/to/bzImage --kernels host

Each VM row boots once (kernels/vm.py) and runs `python -m kernels.matrix --inside DIR` in the
guest, which runs the checks one by one, each under its time limit, writing a log per check and a
line of results per check into DIR (shared read-write with the host). The host row runs the same
checks here, without a VM. Logs are kept under /var/tmp/fsprof-kernels/<time>/<row>/ (--logs).
Exit status: 0 all PASS; 1 a FAIL; 2 bad input; 77 nothing failed but a VM row was skipped
because this machine cannot run a VM. The last run's matrix is written into docs/kernels.md.

Over 500 lines: the host side (rows, VMs, the table) and the guest side (--inside: the checks)
share each check's name, limit and result line, so they stay in one file."""

import argparse
import gzip
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from kernels import vm
from profiler.trace import maps

REPO = vm.REPO
PY = str(REPO / ".venv" / "bin" / "python")
FSPROF = [PY, "-m", "profiler"]
DOC = REPO / "docs" / "kernels.md"

# The suite's tests that hold fsprof's counts against the kernel's own counters, chosen short:
# jbd2 commits (/proc/fs/jbd2/<dev>/info), block requests (/sys/block/<dev>/stat, one
# three-filesystem run), XFS log forces and iclog writes (the mount's xfs stats).
ORACLE_TESTS = [
    "tests/test_behind_ext4.py::test_commits_and_run_stats_match_jbd2_info",
    "tests/test_behind_block.py::test_requests_and_their_times_match_sys_block_stat",
    "tests/test_behind_xfs.py::test_fsync_loop_log_forces_and_iclog_writes_match_the_mounts_counters",
    # Calls by absolute path placed by the filesystems' own tracepoints, whose sets differ by kernel.
    "tests/test_placement.py",
    # The tail's stacks taken of the task switched in (bpf_get_task_stack), a planted freeze, and
    # the work an fsync's commit wait names (jbd2's window); the exemplar oracle on ext4 only here:
    # each filesystem's run is minutes under TCG, and the programs are the same.
    "tests/test_tail.py::test_a_freeze_is_one_exact_wait_named_and_ended_by_the_thaw",
    "tests/test_tail.py::test_the_tail_keeps_its_stacks_when_sampling_passes_the_calls_over",
    "tests/test_tail.py::test_the_exemplars_are_the_slowest_calls_and_the_freeze_is_first[ext4]",
    "tests/test_tail.py::test_an_fsyncs_commit_wait_names_the_commit_it_waited_for",
    # A slow fsync's own requests timed (XFS: the iclog write it issues itself).
    "tests/test_tail.py::test_a_slow_calls_own_requests_are_timed_as_bpftrace_times_them[xfs]",
    # What the devices did while a slow fsync ran (the device ring; 5.10 takes its slots without
    # fetching atomics).
    "tests/test_tail.py::test_a_slow_calls_device_requests_are_the_devices_as_bpftrace_sees_them",
    # A log force's wait named by the last request to end before its wakeup (its iclog write).
    "tests/test_tail.py::test_a_log_force_names_the_iclog_write_that_ended_it",
    # io_uring requests before 6.4 (io_uring_submit_sqe; on 5.10 followed by ring and user_data),
    # the btrfs twins' oracle on 5.10 (ordered extents, delalloc reservations).
    "tests/test_io_uring.py::test_io_uring_requests_are_counted_where_submission_is_io_uring_submit_sqe",
    # libaio's iocbs, read from user memory at io_submit and io_getevents (every kernel's verifier).
    "tests/test_io_uring.py::test_libaio_iocbs_are_followed_from_submission_to_reaping[ext4]",
    # Requests lost from the map of those in flight: counted, by each kernel's LRU eviction.
    "tests/test_io_uring.py::test_requests_lost_in_flight_are_counted",
    "tests/test_behind_btrfs.py::test_ordered_extents_tickets_and_log_syncs_match_bpftrace",
]

# A process that appends and fsyncs in its cwd until killed (the target of `record --pid`).
FSYNCER = """
import os, time
fd = os.open("appended", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
while True:
    os.write(fd, b"r" * 4096)
    os.fsync(fd)
    time.sleep(0.005)
"""


class CheckFailed(Exception):
    pass


class Ctx:
    """What a check needs: its work dir (writable, removed after), its log, its deadline."""

    def __init__(self, work, log, deadline):
        self.work, self.log, self.deadline = work, log, deadline
        self.extra = {}  # kept with the check's result: what the kernel could not give, lost events

    def say(self, text):
        self.log.seek(0, os.SEEK_END)  # after what a command wrote through the same file
        self.log.write(text.rstrip("\n") + "\n")
        self.log.flush()

    def run(self, argv, cwd=None, expect=(0,)):
        """argv with its output straight into the log (so a slow check shows its progress there);
        killed (its whole process group) at the deadline. Returns (exit status, output)."""
        self.say(f"$ {' '.join(argv)}")
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise CheckFailed("time limit reached")
        begin = self.log.tell()
        proc = subprocess.Popen(
            argv,
            cwd=cwd or self.work,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            raise CheckFailed(f"time limit reached in: {' '.join(argv[:6])}")
        finally:
            kill_group(proc)
            proc.wait()
        self.log.seek(begin)
        out = self.log.read()
        self.say(f"[exit status {proc.returncode}]")
        if expect is not None and proc.returncode not in expect:
            raise CheckFailed(
                f"{' '.join(argv[1:5] if argv[0] == PY else argv[:4])} ... exited {proc.returncode}: {last_line(out)}"
            )
        return proc.returncode, out


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.poll()


def last_line(text):
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


class ScratchExt4:
    """A loop-backed ext4 of the check's own in its work dir: mounted with `options`, undone after."""

    def __init__(self, ctx, name, options=None):
        self.ctx, self.image, self.mnt, self.options = ctx, ctx.work / f"{name}.img", ctx.work / f"{name}-mnt", options
        self.dev = None

    def __enter__(self):
        with open(self.image, "wb") as f:
            f.truncate(512 << 20)
        self.dev = self.ctx.run(["losetup", "--find", "--show", str(self.image)])[1].strip().splitlines()[-1]
        self.ctx.run(["mkfs.ext4", "-q", "-F", self.dev])
        self.mnt.mkdir()
        self.ctx.run(["mount", *(["-o", self.options] if self.options else []), self.dev, str(self.mnt)])
        return self

    def __exit__(self, *exc):
        subprocess.run(["umount", str(self.mnt)], capture_output=True)
        if self.dev:
            subprocess.run(["losetup", "-d", self.dev], capture_output=True)


def fsprof_run(workload, *args, stack_sample=None):
    """A short three-filesystem run of a bundled workload (its default stack sampling unless
    stack_sample is given); PASS when it exits 0 with a result of all three filesystems. With
    stack_sample N > 1 (--stack-sample), each filesystem's result must also say that part of its
    off-CPU time was estimated: the sampler passed calls over."""

    def check(ctx):
        out = ctx.work / "run"
        sampling = ["--stack-sample", str(stack_sample)] if stack_sample else []
        ctx.run(
            [
                *FSPROF,
                "run",
                "--fs",
                "ext4,xfs,btrfs",
                "--scratch-dir",
                str(ctx.work / "scratch"),
                "-o",
                str(out),
                "--workload",
                workload,
                *sampling,
                *args,
            ]
        )
        result = json.loads((out / "result.json").read_text())
        have = sorted(fs["fs"] for fs in result["filesystems"])
        if have != ["btrfs", "ext4", "xfs"]:
            raise CheckFailed(f"result.json has filesystems {have}, not ext4, xfs and btrfs")
        if stack_sample and stack_sample > 1:
            sampled = {fs["fs"]: fs.get("stack_sampling", {}) for fs in result["filesystems"]}
            # The sampler worked: it estimated some waits, or every wait was in the tail (under TCG
            # most fsync waits reach the 1 ms threshold) and kept its own stacks.
            if not all(s.get("estimated_share") or s.get("tail_waits") for s in sampled.values()):
                raise CheckFailed(f"--stack-sample {stack_sample}: nothing estimated and no tail: {sampled}")
            return "; ".join(
                filter(
                    None,
                    [
                        "stacks sampled: estimated "
                        + ", ".join(
                            f"{k} {s.get('estimated_share', 0):.0%} ({s.get('tail_waits', 0)} tail waits exact)"
                            for k, s in sorted(sampled.items())
                        ),
                        noted(ctx, result),
                    ],
                )
            )
        return noted(ctx, result)

    return check


def noted(ctx, result):
    """What a result says the kernel could not give, and the events it lost: kept, and summed up."""
    unavailable = [f"{u.get('figures')} ({u.get('probe')}: {u.get('why')})" for u in result.get("unavailable", [])]
    drops = {}  # lost only: events recorded less exactly (maps.KEPT_APPROXIMATELY) are not lost
    for fs in result["filesystems"]:
        for k, v in maps.lost_events(fs.get("drops", {})).items():
            drops[f"{fs.get('fs')}:{k}"] = v
    ctx.extra = {"unavailable": unavailable, "drops": drops}
    parts = []
    if drops:
        parts.append("lost events " + ", ".join(f"{k} {v}" for k, v in drops.items()))
    if unavailable:
        parts.append(f"{len(unavailable)} figures unavailable")
    return "; ".join(parts)


def check_doctor(ctx):
    ctx.run([*FSPROF, "doctor"])


def check_record(ctx):
    """record --pid of a process doing fsyncs on an ext4 of our own: its fsyncs must be seen."""
    with ScratchExt4(ctx, "record") as fs:
        ctx.say(f"$ (fsyncer in {fs.mnt})")
        proc = subprocess.Popen([PY, "-c", FSYNCER], cwd=fs.mnt, start_new_session=True)
        try:
            out = ctx.work / "record"
            ctx.run([*FSPROF, "record", "--pid", str(proc.pid), "--duration", "10s", "-o", str(out)])
            result = json.loads((out / "result.json").read_text())
            fsyncs = sum(f.get("syscalls", {}).get("fsync", {}).get("count", 0) for f in result["filesystems"])
            if fsyncs <= 0:
                raise CheckFailed("record --pid saw no fsync of the fsyncing process")
            return "; ".join(filter(None, [f"{fsyncs} fsyncs", noted(ctx, result)]))
        finally:
            kill_group(proc)
            proc.wait()


def check_continuous(ctx):
    """record --continuous --mount on an ext4 of our own with a process fsyncing there: its /metrics
    counts the fsyncs and jbd2 commits, a profile is written per window, SIGTERM exits 0."""
    with ScratchExt4(ctx, "continuous") as fs:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        profiles = ctx.work / "profiles"
        proc = subprocess.Popen([PY, "-c", FSYNCER], cwd=fs.mnt, start_new_session=True)
        argv = [
            *FSPROF,
            "record",
            "--continuous",
            "--mount",
            str(fs.mnt),
            "--window",
            "3s",
            "--listen",
            f"127.0.0.1:{port}",
            "--pprof-dir",
            str(profiles),
        ]
        ctx.say("$ " + " ".join(argv))
        ctx.log.flush()
        rec = subprocess.Popen(argv, stdout=ctx.log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            text, deadline = "", time.monotonic() + 300
            while time.monotonic() < deadline and rec.poll() is None:
                time.sleep(3)
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
                        text = r.read().decode()
                except OSError:
                    continue
                if "fsprof_windows_total 3.0" in text or re.search(r"fsprof_windows_total [4-9]", text):
                    break

            def total(name, extra=""):
                return sum(
                    float(line.rsplit(" ", 1)[1])
                    for line in text.splitlines()
                    if line.startswith(name + "{") and extra in line
                )

            fsyncs = total("fsprof_syscall_latency_seconds_count", 'op="fsync"')
            commits = total("fsprof_jbd2_commits_total")
        finally:
            rec.send_signal(signal.SIGTERM)
            status = rec.wait(timeout=300)
            kill_group(proc)
            proc.wait()
        files = sorted(profiles.glob("fsprof-*.pb.gz"))
        if status != 0:
            raise CheckFailed(f"record --continuous exited {status} on SIGTERM")
        if fsyncs <= 0 or commits <= 0:
            raise CheckFailed(f"/metrics counted {fsyncs:.0f} fsyncs and {commits:.0f} jbd2 commits")
        if not files or not gzip.decompress(files[-1].read_bytes()):
            raise CheckFailed("no profile was written")
        return f"{fsyncs:.0f} fsyncs, {commits:.0f} jbd2 commits, {len(files)} profiles"


def check_verify(ctx):
    """verify --expect barrier=on on a barrier=0 ext4 must find the mismatch (its exit 1)."""
    with ScratchExt4(ctx, "verify", options="barrier=0") as fs:
        rc, out = ctx.run([*FSPROF, "verify", "--mount", str(fs.mnt), "--expect", "barrier=on"], expect=None)
        if rc != 1 or "NOT IN EFFECT" not in out:
            raise CheckFailed(f"verify exited {rc} (1 and NOT IN EFFECT expected): {last_line(out)}")


def check_oracles(ctx):
    return run_tests(ctx, ORACLE_TESTS)


# The device models (dm-delay over the scratch loop device): a planted barrier difference on the
# hdd model where the kernel has device-mapper (every VM row), one sentence where not (the host).
DEVICE_MODEL_TESTS = ["tests/test_device_model.py"]


def check_device_model(ctx):
    return run_tests(ctx, DEVICE_MODEL_TESTS)


def run_tests(ctx, tests):
    """The suite's tests named, here; PASS when pytest passes, its last line the note."""
    # The suite's per-test timeout (setup.cfg: 300 s) is for the host; under TCG a three-filesystem
    # run alone takes longer. The check's own limit still bounds it.
    timeout = ["--timeout", "1500"] if IN_VM else []
    # The tests' own waits (an oracle's stop, a CLI run) stretch by this; no bound on a figure does.
    if IN_VM:
        os.environ["FSPROF_TEST_TIME_SCALE"] = "10"
    rc, out = ctx.run(
        [
            PY,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--basetemp",
            str(ctx.work / "pytest"),
            "--show-capture=no",
            "-rfE",
            *timeout,
            *tests,
        ],
        cwd=REPO,
        expect=None,
    )
    if rc != 0:
        failed = [line for line in out.splitlines() if line.startswith(("FAILED", "ERROR"))]
        raise CheckFailed((failed[0] if failed else last_line(out))[:300])
    return last_line(out)


def lost_of(check_result):
    """A check's lost events ({fs:reason: n}), less those recorded approximately (logs written
    before noted() left them out still hold them)."""
    return {
        k: v for k, v in check_result.get("drops", {}).items() if k.rsplit(":", 1)[-1] not in maps.KEPT_APPROXIMATELY
    }


def verifier_refusals(log):
    """Programs a check's output says the verifier refused ("left out: verifier: ..."), once each."""
    log.seek(0)
    found = re.findall(r"([\w:]+):? \(?left out: verifier: ([^;)]*)", log.read())
    return [f"{prog.rstrip(':')}: {why.strip()}" for prog, why in dict(found).items()]


IN_VM = False  # set by --inside: the checks run in a guest (under TCG, slow)

# name, time limit under TCG (s), check. A host row gets the same limits (it needs a tenth).
CHECKS = [
    ("doctor", 600, check_doctor),
    ("fsync-loop", 1200, fsprof_run("fsync-loop", "--count", "200")),
    # Stack sampling on: the sampled paths of on_sys_enter, on_switch, on_waking and the worker
    # windows run on each kernel (the verifier checks both paths whatever the run chooses).
    (
        "fsync-heavy",
        1200,
        fsprof_run("fsync-heavy", "--file-num", "4", "--file-total-size", "16M", "--time", "3", stack_sample=4),
    ),
    ("bonnie", 1200, fsprof_run("bonnie", "-s", "16", "-n", "1", "-f")),
    ("untar", 1200, fsprof_run("untar", "--files", "2000", "--synthetic", "--image-size", "1G")),
    ("record-pid", 600, check_record),
    ("continuous", 900, check_continuous),
    ("verify", 600, check_verify),
    ("oracles", 2400, check_oracles),
    ("device-model", 1200, check_device_model),
]
CHECK_NAMES = [name for name, _, _ in CHECKS]


# ---- one row, on this machine (the host, or inside a guest) ----


def run_checks(outdir, names):
    """Runs the named checks here; a log per check and one JSON line per check in outdir."""
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "release").write_text(os.uname().release + "\n")
    for name, limit, check in CHECKS:
        if name not in names:
            continue
        work = Path(tempfile.mkdtemp(prefix=f"fsprof-check-{name}-"))
        start = time.monotonic()
        with open(outdir / f"{name}.log", "w+", errors="replace") as log:
            ctx = Ctx(work, log, start + limit)
            try:
                note, ok = check(ctx) or "", True
                refused = verifier_refusals(log)
                if refused:  # a kernel lacking a tracepoint is fine; a program we wrote wrong is not
                    note, ok = f"the verifier refused {len(refused)} program(s): {refused[0]}", False
            except CheckFailed as e:
                note, ok = str(e), False
            except Exception as e:  # a check's own error is that check's FAIL, not the run's end
                note, ok = f"{type(e).__name__}: {e}", False
            seconds = time.monotonic() - start
            if not ok:  # undo whatever a failed or killed fsprof left (mounts, loops, sysctls)
                subprocess.run([*FSPROF, "cleanup"], stdout=log, stderr=subprocess.STDOUT, timeout=300)
            log.write(f"\n{'PASS' if ok else 'FAIL'} in {seconds:.0f} s: {note}\n")
        shutil.rmtree(work, ignore_errors=True)
        with open(outdir / "results.jsonl", "a") as f:
            f.write(
                json.dumps({"check": name, "ok": ok, "seconds": round(seconds, 1), "note": note, **ctx.extra}) + "\n"
            )
            f.flush()
            os.fsync(f.fileno())


def read_results(outdir):
    try:
        lines = (outdir / "results.jsonl").read_text().splitlines()
    except OSError:
        return {}
    return {r["check"]: r for r in map(json.loads, lines)}


def doctor_left_out(log):
    """What doctor says is left out or missing on this kernel (for the docs table): a list."""
    try:
        text = log.read_text()
    except OSError:
        return []
    items = []
    for line in text.splitlines():
        if line.strip().startswith("left out"):
            items.append(line.strip()[len("left out") :].strip())
        m = re.match(r"^(\S+)\s+(\S.*?)\s{2,}(.*)$", line)  # a check's row: status, name, detail
        if m and m.group(1) not in ("ok", "$", "PASS", "FAIL"):
            items.append(f"{m.group(2).strip()}: {m.group(3).strip()} ({m.group(1)})")
    return items


def one_per_program(items):
    """One entry per left-out program ("FIGURES (object:program: why)"): doctor and the runs word
    the figures differently; the first (doctor's) is kept."""
    seen, out = set(), []
    for item in items:
        m = re.search(r"\((\w+:\w+):", item)
        key = m.group(1) if m else item
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


# ---- the matrix ----


class Row:
    def __init__(self, label, kernel):
        self.label, self.kernel = label, kernel  # kernel: None for the host
        self.release, self.how, self.results, self.seconds, self.boot_s, self.skipped = label, "", {}, 0.0, None, ""
        self.said = set()  # checks whose result was already printed (as the row ran)


def run_host_row(row, names, logdir, say):
    row.release, row.how = os.uname().release, "on the host, no VM"
    say(f"== host ({row.release}): {', '.join(names)}")
    start = time.monotonic()
    run_checks(logdir, names)
    row.results, row.seconds = read_results(logdir), time.monotonic() - start


def run_vm_row(row, names, logdir, accel, say):
    say(f"== {row.label} ({row.kernel}): {', '.join(names)}")
    start = time.monotonic()
    try:
        how, why = vm.choose_accel(row.kernel, accel, "/dev/kvm", say)
    except vm.VMError as e:
        row.skipped, row.seconds = str(e), time.monotonic() - start
        return
    row.how = f"VM under {how.upper()}"
    say(f"   {why}")
    shared = Path(tempfile.mkdtemp(prefix="fsprof-kernels-"))
    limit = sum(lim for n, lim, _ in CHECKS if n in names) + 120
    progress = Progress(shared, names, say)
    try:
        with open(logdir / "console.log", "wb") as console:
            out = vm.boot_and_run(
                row.kernel,
                [PY, "-m", "kernels.matrix", "--inside", str(shared), "--checks", ",".join(names)],
                accel=how,
                cwd=REPO,
                timeout=limit,
                boot_timeout=900,
                rwdirs=[shared],
                output=console,
                verbose=True,
                watch=progress,
            )
        row.results = read_results(shared)
    except vm.VMError as e:
        row.skipped = str(e)
        return
    finally:  # the logs the guest wrote are kept, even when interrupted
        for f in shared.iterdir():
            if f.is_file():
                shutil.copy(f, logdir / f.name)
        shutil.rmtree(shared, ignore_errors=True)
        row.seconds = time.monotonic() - start
        row.said = progress.said
    row.boot_s = out.boot_s
    if out.status != "done":  # what the guest's kernel said last: a panic, a lockup, a hung task
        say(f"   the VM ended early: {out.message}; the end of its kernel log:")
        for line in kernel_log_tail(logdir / "console.log"):
            say(f"   | {line}")
    release = logdir / "release"
    row.release = release.read_text().strip() if release.exists() else row.kernel.name.replace("vmlinuz-", "")
    for name in names:  # a check the guest never finished is a FAIL, with the VM's reason
        if name not in row.results:
            why = out.message or f"the guest ended (exit {out.rc}) before this check"
            row.results[name] = {"check": name, "ok": False, "seconds": 0, "note": f"not run: {why}"}


class Progress:
    """Watches a VM row from the host: says each check's result as the guest writes it, and stops
    the VM when the running check is past its time limit by a minute (the guest's own limit could
    not end it: a stuck kernel)."""

    GRACE_S = 60

    def __init__(self, shared, names, say):
        self.shared, self.say = shared, say
        self.pending = [(n, lim) for n, lim, _ in CHECKS if n in names]
        self.since = None  # when the running check started, as the host saw it
        self.said = set()

    def __call__(self):
        now = time.monotonic()
        if self.since is None:
            self.since = now
        done = read_results(self.shared)
        while self.pending and self.pending[0][0] in done:
            res = done[self.pending.pop(0)[0]]
            self.say(result_line(res))
            self.said.add(res["check"])
            self.since = now
        if self.pending and now - self.since > self.pending[0][1] + self.GRACE_S:
            name, lim = self.pending[0]
            return f"check {name} ran past its {lim} s limit by {self.GRACE_S} s: the VM was stopped"
        return None


def result_line(res):
    return f"   {'PASS' if res['ok'] else 'FAIL'} {res['check']} ({res['seconds']:.0f} s)" + (
        f": {res['note']}" if res["note"] else ""
    )


def kernel_log_tail(console, lines=25):
    """The last kernel messages of a VM's console log ("[  12.345] ..." lines)."""
    try:
        text = console.read_text(errors="replace")
    except OSError:
        return []
    kernel = [line for line in text.splitlines() if re.match(r"^\[\s*\d+\.\d+\]", line)]
    return kernel[-lines:]


def cell(row, name):
    if row.skipped:
        return "SKIP"
    r = row.results.get(name)
    if r is None:
        return "-"
    return f"{'PASS' if r['ok'] else 'FAIL'} {r['seconds']:.0f}s"


def render(rows, names, total_s):
    head = ["kernel", "boot", *names, "row time"]
    table = [head] + [
        [
            r.release,
            f"{r.boot_s:.0f}s" if r.boot_s is not None else "-",
            *[cell(r, n) for n in names],
            f"{r.seconds / 60:.1f} min",
        ]
        for r in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)) for line in table]
    return "\n".join(lines + [f"total wall time {total_s / 60:.1f} min"])


def write_doc(rows, names, total_s, logroot, note=""):
    """Replaces the generated section of docs/kernels.md (between its markers) with this run's."""
    begin, end = "<!-- matrix: generated by make test-kernels -->", "<!-- matrix: end -->"
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    out = [
        begin,
        "",
        note or f"Last run: {when}, total wall time {total_s / 60:.1f} min.",
        "",
        "| kernel | how | " + " | ".join(names) + " | row time |",
        "|---|---|" + "---|" * len(names) + "---|",
    ]
    for r in rows:
        out.append(
            f"| {r.release} | {r.skipped or r.how} | "
            + " | ".join(cell(r, n) for n in names)
            + f" | {r.seconds / 60:.1f} min |"
        )
    out += [
        "",
        "| kernel | left out or missing (`fsprof doctor`; result.json's `unavailable`) | failures (first line "
        "of why); events lost in checks that passed |",
        "|---|---|---|",
    ]
    for r in rows:
        fails = "; ".join(
            [f"FAIL {n}: {r.results[n]['note']}" for n in names if n in r.results and not r.results[n]["ok"]]
            + [
                f"{n}: lost events " + ", ".join(f"{k} {v}" for k, v in lost.items())
                for n in names
                if r.results.get(n, {}).get("ok") and (lost := lost_of(r.results[n]))
            ]
        )
        left = doctor_left_out(logroot / r.label / "doctor.log")
        left += sorted({u for res in r.results.values() for u in res.get("unavailable", [])})
        left = "; ".join(one_per_program(left))
        out.append(f"| {r.release} | {md(left) or '-'} | {md(fails) or '-'} |")
    out += ["", end]
    text = DOC.read_text() if DOC.exists() else "# Supported kernels\n\n" + begin + "\n" + end + "\n"
    if begin in text and end in text:
        text = text[: text.index(begin)] + "\n".join(out) + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip("\n") + "\n\n" + "\n".join(out) + "\n"
    DOC.write_text(text)


def md(text):
    return text.replace("|", "\\|").replace("\n", " ")


def doc_from(rowdirs, names, say):
    """The docs table from kept row logs (a run that was cut short, or rows of separate runs): a
    row's time is then the sum of its checks' (boot not included)."""
    rows = []
    for d in rowdirs:
        results = read_results(d)
        if not results:
            say(f"{d} holds no results.jsonl of a row")
            return vm.USAGE
        r = Row(d.name, None if d.name == "host" else d)
        r.release = (d / "release").read_text().strip() if (d / "release").exists() else d.name
        r.how = "VM under TCG" if (d / "console.log").exists() else "on the host, no VM"
        r.results, r.seconds = results, sum(x["seconds"] for x in results.values())
        rows.append(r)
    # write_doc reads each row's doctor.log under logroot/label: give it the row dirs' parent per row
    for r, d in zip(rows, rowdirs):
        r.label = str(d.resolve())
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    write_doc(
        rows,
        names,
        sum(r.seconds for r in rows),
        Path("/"),
        note=f"Rebuilt {when} from the logs of {', '.join(str(d) for d in rowdirs)}; "
        "a row's time is the sum of its checks' (its boot not included).",
    )
    say(render(rows, names, sum(r.seconds for r in rows)))
    say(f"written: {DOC} (from {', '.join(map(str, rowdirs))}; row times are the sums of their checks)")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m kernels.matrix", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--kernels",
        default="5.10,6.1,6.12,rt,host",
        help="rows: versions installed in /boot, 'rt' (Debian's PREEMPT_RT image) and/or 'host' "
        "(default 5.10,6.1,6.12,rt,host)",
    )
    parser.add_argument("--kernel", action="append", default=[], metavar="PATH", help="also a row for this image")
    parser.add_argument("--checks", default=",".join(CHECK_NAMES), help=f"default all: {','.join(CHECK_NAMES)}")
    parser.add_argument("--accel", choices=("auto", "kvm", "tcg"), default="auto")
    parser.add_argument("--logs", help="where to keep the logs (default /var/tmp/fsprof-kernels/<time>)")
    parser.add_argument("--no-doc", action="store_true", help="do not write the table into docs/kernels.md")
    parser.add_argument(
        "--doc-from",
        metavar="LOGS",
        nargs="+",
        help="write docs/kernels.md's table from the logs of earlier runs' rows (LOGS/<row> dirs)",
    )
    parser.add_argument("--inside", metavar="DIR", help=argparse.SUPPRESS)  # the guest's side of a VM row
    args = parser.parse_args(argv)

    def say(text):
        print(text, flush=True)

    names = [n.strip() for n in args.checks.split(",") if n.strip()]
    unknown = [n for n in names if n not in CHECK_NAMES]
    if unknown or not names:
        say(f"unknown check {', '.join(unknown) or '(none given)'}: choose from {', '.join(CHECK_NAMES)}")
        return vm.USAGE
    if args.inside:
        global IN_VM
        IN_VM = True
        run_checks(Path(args.inside), names)
        return 0
    if args.doc_from:
        return doc_from([Path(d) for d in args.doc_from], names, say)
    vm.raise_on_signals()
    rows = []
    try:
        for spec in [k.strip() for k in args.kernels.split(",") if k.strip()] + args.kernel:
            rows.append(Row("host", None) if spec == "host" else Row(spec, vm.resolve_kernel(spec)))
        # Only once the arguments hold: where the tree lies matters only when a VM is to boot.
        if any(r.kernel is not None for r in rows):
            vm.check_visible(REPO)
    except vm.VMError as e:
        say(str(e))
        return vm.USAGE
    if not rows:
        say("no kernel to test: give --kernels and/or --kernel")
        return vm.USAGE
    seen = set()
    for i, r in enumerate(rows):  # each row's logs in a directory of its own name
        if r.kernel is not None and "/" in r.label:
            r.label = r.kernel.name.replace("vmlinuz-", "")
        if r.label in seen:
            r.label += f"-{i}"
        seen.add(r.label)
    logroot = Path(args.logs or vm.LOG_ROOT / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    say(f"logs: {logroot}")
    start = time.monotonic()
    try:
        for r in rows:
            (logroot / r.label).mkdir(parents=True, exist_ok=True)
            if r.kernel is None:
                run_host_row(r, names, logroot / r.label, say)
            else:
                run_vm_row(r, names, logroot / r.label, args.accel, say)
            if r.skipped:
                say(f"   skipped: {r.skipped}")
            for n in names:
                if n in r.results and n not in r.said:
                    say(result_line(r.results[n]))
    except KeyboardInterrupt:
        say("interrupted: the VM (if any) was stopped and its images removed")
        return 130
    total = time.monotonic() - start
    say("")
    say(render(rows, names, total))
    failed = [(r, n) for r in rows for n in names if n in r.results and not r.results[n]["ok"]]
    for r, n in failed:
        say(f"FAIL {r.release} {n}: {r.results[n]['note']}\n     log: {logroot / r.label / (n + '.log')}")
    if not args.no_doc:
        write_doc(rows, names, total, logroot)
        say(f"written: {DOC}")
    if failed:
        return 1
    if any(r.skipped for r in rows):
        for r in rows:
            if r.skipped:
                say(f"SKIPPED {r.label}: {r.skipped}")
        return vm.CANNOT_RUN
    return 0


if __name__ == "__main__":
    sys.exit(main())
