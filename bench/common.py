"""Shared by the benchmarks of fsprof's own cost (bench_overhead, bench_startup, bench_capacity,
bench_report) and bench/write_doc.py: the machine, interleaved repeats with median and spread,
gated workloads, fsprof and its peers (bpftrace, libbpf-tools) started and stopped around a
workload, BPF run-time statistics, and the results each bench leaves for docs/benchmarks.md.

Settings come from the environment, so that `make bench` can pass them through:
    BENCH_QUICK=1   few, short repeats (to check the scripts; figures not worth quoting)
    BENCH_LONG=1    the capacity bench's long run lasts 10 minutes instead of 60 s
"""

import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from profiler.machine import scratch, settings, undo  # noqa: E402
from profiler.trace import maps  # noqa: E402

RESULTS = Path(os.environ.get("BENCH_RESULTS", REPO / "build" / "bench"))
SCRATCH_DIR = "/var/tmp/fsprof/bench-scratch"
QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")
LONG = os.environ.get("BENCH_LONG", "") not in ("", "0")
PY = sys.executable
LOAD_AT_START = os.getloadavg()[0]  # this bench's start: with the end's, in every saved result
# A bench started in the background (`make bench &`, nohup) has SIGINT ignored, and so would every
# fsprof it starts: fsprof keeps a signal it was started with ignored ignored, and the benches
# stop `fsprof record` with SIGINT, as a user's Ctrl-C. Its default back, here and in children.
signal.signal(signal.SIGINT, signal.default_int_handler)


# ---- the machine ---------------------------------------------------------------------------------


def machine():
    """Cores, RAM, CPU model, kernel, date and load: the table's header."""
    model = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_kib = int(next(line for line in f if line.startswith("MemTotal:")).split()[1])
    return {
        "cores": os.cpu_count(),
        "ram_gib": round(mem_kib / (1 << 20), 1),
        "cpu": model,
        "kernel": platform.release(),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "loadavg": os.getloadavg()[0],
    }


# ---- repeats, medians, spreads ---------------------------------------------------------------------


def interleaved(variants, rounds, warmup=0, log=print):
    """Runs every variant once per round, the order rotated by one each round (A B C, B C A, ...),
    so that a machine drifting slower or faster falls on every variant alike; a ratio is taken
    within one round. `variants` is [(name, fn)]; returns {name: [fn()'s result per counted round]}.
    Warm-up rounds run the same way and are discarded. A result that is a dict also gets the 1-minute
    load average before and after its run (load_before, load_after: see busy())."""
    out = {name: [] for name, _ in variants}
    for r in range(warmup + rounds):
        k = r % len(variants)
        for name, fn in variants[k:] + variants[:k]:
            before = os.getloadavg()[0]
            value = fn()
            if isinstance(value, dict):
                value.update(load_before=before, load_after=os.getloadavg()[0])
            counted = r >= warmup
            if counted:
                out[name].append(value)
            log(f"  {'round ' + str(r - warmup + 1) if counted else 'warm-up':>8} {name}: {brief(value)}")
    return out


def busy(result):
    """Whether a run began on a busy machine: a 1-minute load average above the number of CPUs
    (more runnable tasks than cores, even counting the tail of the run before it)."""
    return result.get("load_before", 0) > (os.cpu_count() or 1)


def brief(value):
    if isinstance(value, dict):
        return " ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
            for k, v in value.items()
            if not isinstance(v, (dict, list))
        )
    return str(value)


def spread(values):
    """{median, min, max, n} of the values that are not None, or None."""
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def bpf_per_request(stats, floor_ns):
    """A tracer's bpf_stats runs (bench_overhead): (program runs per request, BPF µs per request, its
    floor in µs: runs × floor_ns, what a program that does nothing costs a run)."""
    runs = sum(p["run_cnt"] for p in stats["progs"]) / stats["events"]
    return runs, sum(p["run_time_ns"] for p in stats["progs"]) / stats["events"] / 1e3, runs * floor_ns / 1e3


def ratio_to(stats, tracer, peer="bpftrace"):
    """bench_overhead's bpf_stats rounds: the spread of a tracer's BPF ns per request over the peer's,
    each ratio taken within one round; None without both."""
    mine, theirs = stats.get(tracer, {}).get("ns_per_request"), stats.get(peer, {}).get("ns_per_request")
    if not mine or not theirs:
        return None
    return spread([a / b for a, b in zip(mine, theirs) if b])


def fmt(s, digits=3, unit="", scale=1.0, pct=False):
    """'median (min–max)' of a spread()."""
    if s is None:
        return "n/a"
    f = (lambda v: f"{v * 100:+.{digits}f}%") if pct else (lambda v: f"{v * scale:,.{digits}f}{unit}")
    if s["n"] == 1:
        return f(s["median"])
    return f"{f(s['median'])} ({f(s['min'])} – {f(s['max'])})"


def save(name, data):
    """A bench's figures and its markdown section, for bench/write_doc.py."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    data = {"bench": name, "machine": machine(), "quick": QUICK, "load": [LOAD_AT_START, os.getloadavg()[0]], **data}
    (RESULTS / f"{name}.json").write_text(json.dumps(data, indent=1))
    return data


def load(name):
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


# ---- workloads ---------------------------------------------------------------------------------------

GATE = 'read -r _ && exec "$@" </dev/null'  # stdin is the gate


class Gated:
    """A workload that waits at a gate (a shell reading a pipe, then exec: the pid stays the
    same) until every tracer is attached; its stdout goes to a file. Journaled, so that an
    interrupted bench kills it before its filesystem is unmounted."""

    def __init__(self, changes, argv, cwd):
        gate_r, self._gate = os.pipe()
        self._out = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            ["/bin/sh", "-c", GATE, "sh", *argv], cwd=cwd, stdout=self._out, stdin=gate_r, start_new_session=True
        )
        os.close(gate_r)
        undo.record_process(changes, self.proc.pid)
        self.pid = self.proc.pid

    def release(self):
        self.started = time.monotonic()
        os.write(self._gate, b"go\n")
        os.close(self._gate)

    def wait(self):
        """(exit status, stdout text, wall seconds since release)."""
        status = self.proc.wait()
        elapsed = time.monotonic() - self.started
        self._out.seek(0)
        return status, self._out.read(), elapsed

    def kill(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def sh(*argv, **kw):
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw)


def provision(changes, fs, label, size_gib=1, mount_options=""):
    """A fresh loop-backed filesystem, journaled (undone on exit, error, Ctrl-C, SIGTERM)."""
    os.makedirs(SCRATCH_DIR, exist_ok=True)
    # Buffered loop devices (docs/test-bed.md): the most events per second for a given workload, the
    # hardest case for a tracer; the figures in docs/benchmarks.md were taken so.
    config = scratch.FsConfig(
        fs,
        mount_options=mount_options,
        size_bytes=size_gib << 30,
        label=label,
        loop_io="buffered",
    )
    return scratch.provision(changes, config, scratch_dir=SCRATCH_DIR)


def target_of(sfs):
    from profiler import behind

    return behind.Target(sfs.config.fs, sfs.dev, {kdev: name for name, kdev in sfs.block_devs}, str(sfs.mountpoint))


# ---- tracers: fsprof and its peers -------------------------------------------------------------------


class NoTracer:
    name = "untraced"

    def start(self, pid):
        pass

    def stop(self):
        return {}


class Fsprof:
    """What `fsprof record --pid` and `fsprof run` load (profiler.session.collect.Collector: syscalls,
    off-CPU stacks with wakers, on-CPU sampling, ext4/XFS/btrfs/block/writeback probes), pointed
    at the workload's pid and the filesystem under test, in this process (it idles while the
    workload runs, as `fsprof record` does)."""

    name = "fsprof"

    def __init__(self, targets, stack_sample=1):
        self.targets, self.stack_sample = targets, stack_sample
        if stack_sample > 1:
            self.name = f"fsprof --stack-sample {stack_sample}"

    def start(self, pid):
        from profiler.session.collect import Collector

        self.collector = Collector(stack_sample=self.stack_sample)
        try:
            self.collector.set_targets(self.targets)
            self.collector.reset()
            self.collector.trace_pid(pid)
        except BaseException:
            self.collector.close()
            raise

    def stop(self):
        try:
            raw = self.collector.snapshot()
            stats = own_prog_stats(os.getpid())
        finally:
            self.collector.close()
        drops = maps.lost_events(raw["drops"])
        return {
            "lost": sum(drops.values()) + sum(p["recursion_misses"] for p in stats),
            "drops": drops,
            "traced_calls": sum(op["count"] for op in raw["ops"]),
            "progs": stats,
        }


class EmptyProgram:
    """One BPF program that does nothing, on sched_switch (bpf/probe.bpf.c's tp_btf_empty), loaded
    alone: under bpf_stats, its ns per run is what any program run costs on this machine before it
    does anything (the floor that bench_overhead multiplies by a tracer's runs)."""

    name = "empty program"
    program = "tp_btf_empty"

    def start(self, pid):
        from profiler.trace.bpf import BpfObject

        self.obj = BpfObject("probe", only={self.program})
        try:
            self.obj.attach(self.program)
        except BaseException:
            self.obj.close()
            raise

    def stop(self):
        try:
            stats = [p for p in own_prog_stats(os.getpid()) if p["name"] == self.program]
        finally:
            self.obj.close()
        return {"lost": None, "progs": stats}


PEER_BT = REPO / "bench" / "peer.bt"


class Bpftrace:
    """bpftrace running bench/peer.bt: syscall latency and off-CPU stacks of the workload's
    threads. It is ready when BEGIN prints (bpftrace runs BEGIN after attaching every probe).
    `follow` replaces the script's `pid == $1` where a workload is many processes: for a server,
    `comm == "postgres"`, as a user would write it."""

    name = "bpftrace"

    def __init__(self, script=PEER_BT, follow=None):
        self.script = str(script)
        self.follow = follow

    def start(self, pid):
        script = self.script
        if self.follow:
            self._tmp = tempfile.NamedTemporaryFile("w", suffix=".bt", prefix="peer-")
            self._tmp.write(Path(self.script).read_text().replace("pid == $1", self.follow))
            self._tmp.flush()
            script = self._tmp.name
        self.proc = subprocess.Popen(
            ["bpftrace", script, str(pid)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for line in self.proc.stdout:
            if line.strip() == "ready":
                return
        _, err = self.proc.communicate()
        raise SystemExit(f"bpftrace did not start: {err.strip()[-300:]}")

    def stop(self):
        stats = own_prog_stats(self.proc.pid)
        out, err = stop_process(self.proc)
        if self.follow:
            self._tmp.close()
        lost = sum(
            int(w.split()[1]) for w in (out + err).splitlines() if w.startswith("Lost ") and w.split()[1].isdigit()
        )
        return {"lost": lost, "progs": stats}


# libbpf-tools (Debian package libbpf-tools) that run on a kernel without kprobes or fentry: the
# syscall, off-CPU and block-latency ones use tracepoints (tp_btf, raw_tp) only.
LIBBPF_TOOLS = (("syscount", ["-L", "-p", "{pid}"]), ("offcputime", ["-p", "{pid}"]), ("biolatency", []))


class LibbpfTools:
    """syscount -L, offcputime and biolatency of libbpf-tools at once, on the workload's pid (biolatency
    has no pid filter: every block device). A tool is ready when it holds as many BPF links as
    programs (it attaches after loading), read from /proc/PID/fd."""

    name = "libbpf-tools"

    def __init__(self, tools=LIBBPF_TOOLS):
        self.tools = tools

    def start(self, pid):
        self.procs = []
        for tool, args in self.tools:
            argv = [tool] + [a.format(pid=pid) for a in args]
            self.procs.append(
                subprocess.Popen(
                    argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
                )
            )
        for proc in self.procs:
            wait_attached(proc)

    def stop(self):
        stats = [s for proc in self.procs for s in own_prog_stats(proc.pid)]
        for proc in self.procs:
            stop_process(proc)
        return {"lost": None, "progs": stats}


def bpf_fds(pid):
    """(programs, links) the process holds."""
    progs = links = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            what = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        progs += what == "anon_inode:bpf-prog"
        links += what == "anon_inode:bpf_link"
    return progs, links


def wait_attached(proc, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{proc.args[0]} exited ({proc.returncode}): {proc.stderr.read().strip()[-300:]}")
        progs, links = bpf_fds(proc.pid)
        if progs and links >= progs:
            return time.monotonic()
        time.sleep(0.002)
    proc.kill()
    raise SystemExit(f"{proc.args[0]} did not attach within {timeout} s")


def stop_process(proc, tries=10, every=3):
    """SIGINT (the tools print their summary and exit), then wait; (stdout, stderr). bpftrace 0.17
    now and then misses a SIGINT (it stays in epoll_wait): it is sent again every few seconds,
    and after `tries` the process is killed."""
    for _ in range(tries):
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            return proc.communicate(timeout=every)
        except subprocess.TimeoutExpired:
            continue
    proc.kill()
    return proc.communicate()


# ---- BPF run-time statistics -----------------------------------------------------------------------


def own_prog_stats(pid):
    """Every BPF program process `pid` holds, from /proc/PID/fdinfo (the counters `bpftool prog
    show` prints): name, id, run_cnt, run_time_ns (counted while kernel.bpf_stats_enabled=1),
    recursion_misses (runs skipped: the program was already running on that CPU)."""
    ids = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:bpf-prog":
                continue
            info = dict(
                line.split(":", 1) for line in Path(f"/proc/{pid}/fdinfo/{fd}").read_text().splitlines() if ":" in line
            )
        except OSError:
            continue
        ids.add(int(info["prog_id"]))
    if not ids:
        return []
    shown = json.loads(sh("bpftool", "prog", "show", "-j").stdout)
    return [
        {
            "id": p["id"],
            "name": p.get("name", "?"),
            "type": p.get("type"),
            "run_cnt": p.get("run_cnt", 0),
            "run_time_ns": p.get("run_time_ns", 0),
            "recursion_misses": p.get("recursion_misses", 0),
        }
        for p in shown
        if p["id"] in ids
    ]


class BpfStats:
    """kernel.bpf_stats_enabled=1 inside (the kernel then times every BPF program run), restored on
    exit through the undo journal, so also after an error, Ctrl-C or a SIGKILL and `fsprof cleanup`."""

    def __enter__(self):
        self.changes = undo.Changes().__enter__()
        try:
            settings.set_sysctl(self.changes, "kernel.bpf_stats_enabled", "1")
        except BaseException:
            self.changes.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(self, *exc):
        self.changes.__exit__(*exc)


TOP_PROGRAMS = 10


def prog_rows(key, tracer, s):
    """The programs with the most run time, the rest summed, and the total."""
    progs = [p for p in s["progs"] if p["run_cnt"]]
    secs = s["elapsed"]
    rows = [
        f"| {key} | {tracer} | {p['name']} | {p['run_cnt'] / secs:,.0f} | {p['run_time_ns'] / p['run_cnt']:,.0f} | "
        f"{p['run_time_ns'] / secs / 1e7:.2f} |"
        for p in progs[:TOP_PROGRAMS]
    ]
    rest = progs[TOP_PROGRAMS:]
    if rest:
        rows.append(
            f"| {key} | {tracer} | {len(rest)} others | | | {sum(p['run_time_ns'] for p in rest) / secs / 1e7:.2f} |"
        )
    total = sum(p["run_time_ns"] for p in progs)
    rows.append(f"| {key} | {tracer} | **all {len(progs)}** | | | **{total / secs / 1e7:.2f}** |")
    return rows


# ---- processes' own CPU and memory -------------------------------------------------------------------

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """user + system CPU seconds of a process so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_kib(pid):
    """(VmRSS, VmHWM) in KiB."""
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(status["VmRSS"].split()[0]), int(status["VmHWM"].split()[0])
