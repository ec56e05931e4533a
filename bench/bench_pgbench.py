#!/usr/bin/env python3
"""Benchmark: what tracing costs a real database. PostgreSQL (Debian's packages) runs on a scratch
ext4 (loop-backed, barriers on): initdb, `pgbench -i`, then interleaved rounds of pgbench's TPC-B-like
script, untraced, under `fsprof record --pid POSTMASTER` (the command a user would run: the
postmaster, its existing children and every backend it forks for pgbench's clients are traced) and
under the same with `--stack-sample 8`, the order rotated each round; the ratio of tps is taken
within each round.

Then the attach window: pgbench runs with a per-transaction log; a few seconds in, `fsprof record
--pid POSTMASTER --duration 3s` starts. The transactions that completed between its start and its
"recording" line (every probe attached) give the tps during attaching, against the tps of the
3 seconds before it started; the seconds while it records give the traced tps against the same.

    .venv/bin/python bench/bench_pgbench.py [--rounds 5] [--time 20] [--clients 4] [--scale 10]
    BENCH_QUICK=1 ...   # 2 rounds of 5 s: checks the script, not for quoting
"""

import argparse
import glob
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from common import PY, QUICK, REPO, fmt, interleaved, spread  # noqa: E402
from profiler.machine.undo import Changes, record_process  # noqa: E402
from profiler.signals import install_handlers  # noqa: E402

FSPROF = [PY, "-m", "profiler"]
PORT = 54329  # not PostgreSQL's default: a server the machine runs is left alone
SAMPLED = "fsprof --stack-sample"  # the third variant: stacks walked in 1 of N calls
BEFORE_S = 3.0  # the attach window's baseline: tps of the seconds before fsprof starts


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2 if QUICK else 5, help="interleaved rounds (default 5)")
    ap.add_argument("--stack-sample", type=int, default=8, help="the sampled variant's --stack-sample N (default 8)")
    ap.add_argument("--time", type=int, default=5 if QUICK else 20, help="pgbench seconds per run (default 20)")
    ap.add_argument("--clients", type=int, default=4, help="pgbench clients (default 4)")
    ap.add_argument("--scale", type=int, default=10, help="pgbench scale factor (default 10: 1M accounts)")
    ap.add_argument(
        "--attach-rounds", type=int, default=2 if QUICK else 5, help="attach-window measurements (default 5)"
    )
    return ap.parse_args()


def pg_bin(name):
    """A PostgreSQL server program from Debian's packages (the newest installed major version)."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4]))
    if not found:
        raise SystemExit("bench_pgbench: PostgreSQL is not installed (make bench installs Debian's postgresql)")
    return found[-1]


class Server:
    """A PostgreSQL cluster of its own on the scratch filesystem: a Unix socket in its data
    directory, no TCP. The postmaster is a process group of its own, journaled, so that an
    interrupted bench kills it (and its backends) before the filesystem is unmounted."""

    def __init__(self, changes, mountpoint):
        self.user = pwd.getpwnam("postgres")
        self.data = os.path.join(mountpoint, "pgdata")
        # The scratch directory is root's alone (0700); the postgres user must pass through it.
        os.chmod(os.path.dirname(mountpoint), 0o711)
        os.makedirs(self.data, mode=0o700)
        os.chown(self.data, self.user.pw_uid, self.user.pw_gid)
        self._as_postgres([pg_bin("initdb"), "-D", self.data, "-U", "postgres", "--auth=trust", "-E", "UTF8"])
        self.log = open(os.path.join(mountpoint, "postgres.log"), "w")
        self.proc = subprocess.Popen(
            [pg_bin("postgres"), "-D", self.data, "-k", self.data, "-p", str(PORT), "-c", "listen_addresses="],
            user=self.user.pw_uid,
            group=self.user.pw_gid,
            cwd=self.data,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        record_process(changes, self.proc.pid)
        self.pid = self.proc.pid
        deadline = time.monotonic() + 60
        while subprocess.run(self.client("pg_isready"), capture_output=True).returncode != 0:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"bench_pgbench: PostgreSQL did not start; see {self.log.name}")
            time.sleep(0.2)

    def _as_postgres(self, argv):
        # Its own data directory as working directory: the postgres user may not enter ours.
        proc = subprocess.run(
            argv, capture_output=True, text=True, user=self.user.pw_uid, group=self.user.pw_gid, cwd=self.data
        )
        if proc.returncode != 0:
            raise SystemExit(f"bench_pgbench: {os.path.basename(argv[0])} failed: {proc.stderr.strip()[-300:]}")

    def client(self, program, *args):
        return [shutil.which(program) or program, "-h", self.data, "-p", str(PORT), "-U", "postgres", *args]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # fast shutdown
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


def pgbench(server, args, seconds, log_prefix=None):
    """Runs pgbench for `seconds`; returns (tps, stdout). With log_prefix, a per-transaction log."""
    argv = server.client(
        "pgbench", "-c", str(args.clients), "-j", str(min(args.clients, 2)), "-T", str(seconds), "--no-vacuum"
    )
    if log_prefix:
        argv += ["-l", f"--log-prefix={log_prefix}"]
    proc = subprocess.run(
        argv + ["postgres"], capture_output=True, text=True, cwd=os.path.dirname(log_prefix) if log_prefix else None
    )
    if proc.returncode != 0:
        raise SystemExit(f"bench_pgbench: pgbench failed: {proc.stderr.strip()[-300:]}")
    tps = next(float(line.split("=")[1].split()[0]) for line in proc.stdout.splitlines() if line.startswith("tps ="))
    return tps, proc.stdout


class Record:
    """`fsprof record --pid POSTMASTER` as a user runs it, until SIGINT (Ctrl-C)."""

    def __init__(self, pid, duration=None, out=None, stack_sample=1):
        self.out = out or tempfile.mkdtemp(prefix="bench-pgbench-", dir="/var/tmp")
        argv = [
            *FSPROF,
            "record",
            "--pid",
            str(pid),
            "-o",
            os.path.join(self.out, "run"),
            "--stack-sample",
            str(stack_sample),
        ]
        if duration:
            argv += ["--duration", duration]
        self.started = time.time()
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO, start_new_session=True
        )
        self.attached = None
        for line in self.proc.stderr:
            if "recording" in line:
                self.attached = time.time()
                break
        if self.attached is None:
            raise SystemExit(f"bench_pgbench: fsprof record failed: {self.proc.communicate()[1].strip()[-300:]}")

    def wait(self, interrupt=False):
        if interrupt:
            self.proc.send_signal(signal.SIGINT)
        try:
            err = self.proc.communicate(timeout=120)[1]
        except subprocess.TimeoutExpired:
            # How a bench in the background once waited here (fsprof inherited SIGINT ignored: now
            # restored in common.py): where it is stuck, if it ever is again.
            self.proc.send_signal(signal.SIGUSR1)  # fsprof's faulthandler: every thread's stack
            time.sleep(1)
            self.proc.kill()
            err = self.proc.communicate()[1]
            shutil.rmtree(self.out, ignore_errors=True)
            raise SystemExit(
                f"bench_pgbench: fsprof record did not end within 120 s of Ctrl-C; its "
                f"threads then:\n{err.strip()[-3000:]}"
            )
        self.ended = time.time()
        shutil.rmtree(self.out, ignore_errors=True)
        if self.proc.returncode != 0:
            raise SystemExit(f"bench_pgbench: fsprof record failed ({self.proc.returncode}): {err.strip()[-300:]}")


def run_round(server, args, traced, stack_sample=1):
    if not traced:
        tps, _ = pgbench(server, args, args.time)
        return {"tps": tps}
    rec = Record(server.pid, stack_sample=stack_sample)
    try:
        tps, _ = pgbench(server, args, args.time)
    finally:
        rec.wait(interrupt=True)
    return {"tps": tps, "attach_s": rec.attached - rec.started}


def prog_costs(server, args, stack_sample=1):
    """One more traced round with kernel.bpf_stats_enabled=1: each fsprof program's runs and run
    time, read while fsprof still holds them (from attach until pgbench ends)."""
    with common.BpfStats():
        rec = Record(server.pid, stack_sample=stack_sample)
        try:
            tps, out = pgbench(server, args, args.time)
            progs = common.own_prog_stats(rec.proc.pid)
            elapsed = time.time() - rec.attached
        finally:
            rec.wait(interrupt=True)
    return round_costs("fsprof", tps, out, elapsed, progs)


def peer_costs(server, args):
    """The same bpf_stats round under bench/peer.bt instead, following the server's processes by
    their comm (a backend is a process per connection, forked after the script starts)."""
    peer = common.Bpftrace(follow='comm == "postgres"')
    with common.BpfStats():
        peer.start(server.pid)
        started = time.time()
        try:
            tps, out = pgbench(server, args, args.time)
            elapsed = time.time() - started
        finally:
            progs = peer.stop()["progs"]
    return round_costs("peer.bt", tps, out, elapsed, progs)


def round_costs(who, tps, out, elapsed, progs):
    """A bpf_stats round's figures: its tps, the transactions pgbench's summary says it processed,
    the BPF run time of the tracer's programs and each program's."""
    total = sum(p["run_time_ns"] for p in progs)
    print(f"  bpf_stats {who}: {total / 1e6:.1f} ms of BPF in {elapsed:.1f} s, {tps:,.0f} tps", flush=True)
    done = next(
        int(line.split(":")[1].split("/")[0])
        for line in out.splitlines()
        if line.startswith("number of transactions actually processed:")
    )
    return {
        "tps": tps,
        "transactions": done,
        "elapsed": elapsed,
        "bpf_ns": total,
        "progs": sorted(progs, key=lambda p: -p["run_time_ns"]),
    }


def completions(log_prefix):
    """Completion times (epoch seconds) of every transaction in pgbench's per-transaction logs."""
    out = []
    for path in glob.glob(f"{log_prefix}*"):
        with open(path) as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 6:
                    out.append(int(fields[4]) + int(fields[5]) / 1e6)
    return out


def during(server, args, event):
    """pgbench with a per-transaction log; `event()` starts a few seconds in and returns the
    epoch-second (start, end) of the window it disturbs and, optionally, a second window after it.
    Returns the tps of the seconds before the window and inside each window."""
    settle = BEFORE_S + 2
    with tempfile.TemporaryDirectory(prefix="bench-pgbench-log-", dir="/var/tmp") as logdir:
        prefix = os.path.join(logdir, "tx")
        windows = []

        def later():
            time.sleep(settle)
            windows.extend(event())

        t = threading.Thread(target=later)
        t.start()
        pgbench(server, args, int(settle + 8), log_prefix=prefix)
        t.join()
        if not windows:
            raise SystemExit("bench_pgbench: the measured event did not finish")
        done = completions(prefix)

    def tps(a, b):
        return sum(a <= t < b for t in done) / (b - a) if b > a else None

    before = tps(windows[0][0] - BEFORE_S, windows[0][0])
    return before, [tps(a, b) for a, b in windows], [b - a for a, b in windows]


def attach_window(server, args):
    """fsprof record starts, records 3 s and stops: tps before, while attaching, while recording."""

    def event():
        rec = Record(server.pid, duration="3s")
        rec.wait()
        return [(rec.started, rec.attached), (rec.attached, rec.attached + 3.0)]

    before, (attaching, recording), (attach_s, _) = during(server, args, event)
    return {
        "before": before,
        "attaching": attaching,
        "recording": recording,
        "attach_s": attach_s,
        "attach_dip": 1 - attaching / before if before and attaching is not None else None,
        "recording_dip": 1 - recording / before if before and recording is not None else None,
    }


# The control: as much CPU as fsprof's start-up uses (bench/bench_startup.py: about 300 ms), spent
# by a pure-Python loop at the lowest CPU priority there is (SCHED_IDLE), which any runnable task
# preempts. Its dip is what being on a CPU at all costs the server on this machine.
CONTROL = [
    shutil.which("chrt") or "chrt",
    "-i",
    "0",
    sys.executable,
    "-c",
    "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass",
]


def control_window(server, args):
    def event():
        start = time.time()
        subprocess.run(CONTROL, check=True)
        return [(start, time.time())]

    before, (inside,), (seconds,) = during(server, args, event)
    return {
        "before": before,
        "inside": inside,
        "seconds": seconds,
        "dip": 1 - inside / before if before and inside is not None else None,
    }


def main():
    args = parse_args()
    install_handlers()
    with Changes() as changes:
        sfs = common.provision(changes, "ext4", "bench-pgbench", 2)
        server = Server(changes, sfs.mountpoint)
        try:
            subprocess.run(
                server.client("pgbench", "-i", "-q", "-s", str(args.scale), "postgres"), check=True, capture_output=True
            )
            print(
                f"pgbench: scale {args.scale}, {args.clients} clients, {args.time} s runs, "
                f"PostgreSQL {Path(pg_bin('postgres')).parts[4]} on scratch ext4",
                flush=True,
            )
            pgbench(server, args, min(args.time, 10))  # warm-up: caches, WAL segments
            runs = interleaved(
                [
                    ("untraced", lambda: run_round(server, args, False)),
                    ("fsprof", lambda: run_round(server, args, True)),
                    (SAMPLED, lambda: run_round(server, args, True, args.stack_sample)),
                ],
                args.rounds,
            )
            windows, controls = [], []
            for i in range(args.attach_rounds):
                w = attach_window(server, args)
                print(f"  attach window {i + 1}: " + common.brief(w), flush=True)
                windows.append(w)
                w = control_window(server, args)
                print(f"  control window {i + 1}: " + common.brief(w), flush=True)
                controls.append(w)
            stats = prog_costs(server, args)
            sampled_stats = prog_costs(server, args, args.stack_sample)
            peer_stats = peer_costs(server, args)
        finally:
            server.stop()
    ratios = [t["tps"] / u["tps"] for u, t in zip(runs["untraced"], runs["fsprof"])]
    sampled_ratios = [t["tps"] / u["tps"] for u, t in zip(runs["untraced"], runs[SAMPLED])]
    summary = {
        "untraced": spread([r["tps"] for r in runs["untraced"]]),
        "fsprof": spread([r["tps"] for r in runs["fsprof"]]),
        "overhead": spread([1 - r for r in ratios]),
        "sampled": spread([r["tps"] for r in runs[SAMPLED]]),
        "sampled_overhead": spread([1 - r for r in sampled_ratios]),
        "stack_sample": args.stack_sample,
        "attach_s": spread([w["attach_s"] for w in windows]),
        "attach_dip": spread([w["attach_dip"] for w in windows]),
        "recording_dip": spread([w["recording_dip"] for w in windows]),
        "control_dip": spread([w["dip"] for w in controls]),
    }
    md = render(runs, ratios, sampled_ratios, windows, controls, summary, stats, sampled_stats, peer_stats, args)
    print("\n" + md)
    common.save(
        "pgbench",
        {
            "runs": runs,
            "windows": windows,
            "controls": controls,
            "summary": summary,
            "stats": stats,
            "sampled_stats": sampled_stats,
            "peer_stats": peer_stats,
            "markdown": md,
            "how": HOW,
            "args": vars(args),
        },
    )


def per_tx(stats):
    """BPF run time per transaction, in µs."""
    return stats["bpf_ns"] / stats["transactions"] / 1e3


def render(runs, ratios, sampled_ratios, windows, controls, s, stats, sampled_stats, peer_stats, args):
    lines = [
        f"| round | untraced tps | under `fsprof record` tps | ratio | under `fsprof record --stack-sample "
        f"{args.stack_sample}` tps | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for i, (u, t, r, ts, rs) in enumerate(
        zip(runs["untraced"], runs["fsprof"], ratios, runs[SAMPLED], sampled_ratios), 1
    ):
        lines.append(f"| {i} | {u['tps']:,.0f} | {t['tps']:,.0f} | {r:.3f} | {ts['tps']:,.0f} | {rs:.3f} |")
    lines += [
        "",
        f"Throughput cost (1 - ratio, median of rounds): {fmt(s['overhead'], 1, pct=True)}; with "
        f"`--stack-sample {args.stack_sample}`: {fmt(s['sampled_overhead'], 1, pct=True)}.",
        "",
        "| attach window | tps before | tps while attaching | tps while recording | attaching took |",
        "|---|---|---|---|---|",
    ]
    for i, w in enumerate(windows, 1):
        lines.append(
            f"| {i} | {w['before']:,.0f} | {w['attaching']:,.0f} ({-w['attach_dip'] * 100:+.1f}%) | "
            f"{w['recording']:,.0f} ({-w['recording_dip'] * 100:+.1f}%) | {w['attach_s'] * 1000:.0f} ms |"
        )
    lines += [
        "",
        f"Dip while attaching (median): {fmt(s['attach_dip'], 1, pct=True)}; while recording: "
        f"{fmt(s['recording_dip'], 1, pct=True)} (a positive figure is tps lost). The control, 300 ms of "
        f"CPU at SCHED_IDLE in the same place of the same pgbench run (windows "
        + ", ".join(f"{c['seconds'] * 1000:.0f}" for c in controls)
        + " ms): "
        f"{fmt(s['control_dip'], 1, pct=True)}.",
        "",
        f"pgbench -c {args.clients} -j {min(args.clients, 2)} -T {args.time}, scale {args.scale}, "
        f"{args.rounds} rounds, {len(windows)} attach and control windows.",
        "",
        f"BPF run time per transaction (kernel bpf_stats, one more traced round of {stats['tps']:,.0f} tps): "
        f"**{per_tx(stats):.1f} µs** of fsprof's programs; with "
        f"`--stack-sample {args.stack_sample}` (a round of {sampled_stats['tps']:,.0f} tps) "
        f"**{per_tx(sampled_stats):.1f} µs**; counted from "
        "attach until pgbench ended (the seconds around its run add a little). bench/peer.bt, following "
        'the server\'s processes by `comm == "postgres"` (a round of '
        f"{peer_stats['tps']:,.0f} tps): **{per_tx(peer_stats):.1f} µs**, so fsprof's default costs "
        f"**{per_tx(sampled_stats) / per_tx(peer_stats):.2f}x** the script's (one round each, not "
        "interleaved; the script's filter reads and compares the comm at each event, which a pid filter "
        "does not: part of its cost, as it would be a user's). runs/s and CPU are per second of each "
        "round's span. libbpf-tools are not run here: they follow one pid, and a server is a process "
        "per connection.",
        "",
        "| workload | tracer | program | runs/s | ns/run | CPU (% of a core) |",
        "|---|---|---|---|---|---|",
        *common.prog_rows("pgbench", "fsprof", stats),
        *common.prog_rows("pgbench", f"fsprof --stack-sample {args.stack_sample}", sampled_stats),
        *common.prog_rows("pgbench", "bpftrace", peer_stats),
    ]
    return "\n".join(lines)


HOW = (
    "How: `make bench` (or `.venv/bin/python bench/bench_pgbench.py`). PostgreSQL from Debian's "
    "`postgresql` package, a cluster of its own (initdb, trust auth, a Unix socket only, port "
    f"{PORT}, default settings: fsync and synchronous_commit on, so every commit fsyncs the WAL) on a "
    "fresh 2 GiB loop-backed ext4 with barriers on; `pgbench -i -s SCALE`, one untraced warm-up run, then "
    "rounds of the default TPC-B-like script, untraced and under `fsprof record --pid POSTMASTER` "
    "(started before pgbench, stopped with Ctrl-C after it: result and flame graphs written after "
    "the measured run), the order alternated each round. The attach window: pgbench's "
    "per-transaction log (`-l`) timestamps every commit; fsprof starts 5 s into the run; tps between "
    'its start and its "recording" line is compared with the 3 s before it started. Those windows '
    "are a few hundred ms, so each holds a few hundred transactions: one window's figure is noisy, "
    "the median of several less so. The control window is the same measurement around a process "
    "that spends 300 ms of CPU at SCHED_IDLE (the lowest priority: a waking backend preempts it): "
    "it says what any CPU use costs the server on this machine, whoever uses it and at whatever "
    "priority. On this host (2 vCPUs under nested virtualization) that is most of the attach dip; "
    "a woken backend appears to wait for a vCPU that is running anything at all."
)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        raise SystemExit("bench_pgbench: interrupted; the server and scratch filesystem are undone")
