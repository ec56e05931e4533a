#!/usr/bin/env python3
"""Benchmark: what tracing costs the workload. Each workload runs untraced, traced by fsprof (the
Collector `fsprof record --pid` and `fsprof run` load: syscalls, off-CPU stacks with wakers, on-CPU
sampling at 999 Hz, ext4/XFS/btrfs/block/writeback probes) with every call's stacks walked
(`--stack-sample 1`), by the same with `--stack-sample 8` (fsprof-sampled: fsprof's default since
2026-11-29), traced by bench/peer.bt in bpftrace
(syscall latency and off-CPU stacks of the same threads), and traced by libbpf-tools' syscount -L,
offcputime and biolatency together; the five interleaved, the order rotated each round, on one
scratch filesystem per workload. Throughput is the workload's own: requests/s of the fsync-heavy
engine's run phase, entries/s of untar's extraction and sync. Overhead = 1 - traced / untraced
throughput of the same round. Lost events: fsprof's drop counters plus BPF recursion misses.

Then, once per workload and tracer, a run with kernel.bpf_stats_enabled=1 (restored after) gives
each BPF program's run count and run time (what `bpftool prog show` prints): where the cost goes;
and one more run with only a program that does nothing on sched_switch gives what a program run
costs before it does anything, which times a tracer's runs per request is that tracer's floor.

    .venv/bin/python bench/bench_overhead.py [--rounds 7] [--time 5] [--workloads fsync-b0,fsync-b1,untar,fio-b0]
    BENCH_QUICK=1 ...   # 2 rounds of 2 s, untar of 20,000 entries: checks the script, not for quoting
"""

import argparse
import json
import os
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from common import (
    QUICK,
    Bpftrace,
    BpfStats,
    EmptyProgram,
    Fsprof,
    Gated,
    LibbpfTools,
    NoTracer,  # noqa: E402
    bpf_per_request,
    busy,
    fmt,
    interleaved,
    prog_rows,
    ratio_to,
    sh,
    spread,
)
from profiler.machine.undo import Changes  # noqa: E402
from profiler.signals import install_handlers  # noqa: E402

# fsprof-sampled: off-CPU and waker stacks walked in 1 of this many calls (fsprof --stack-sample).
SAMPLED = 8
FSYNC_ARGS = ["--file-test-mode", "rndwr", "--file-fsync-all", "on", "--file-num", "16", "--file-total-size", "64M"]
WORKLOADS = {
    "fsync-b0": {
        "title": "fsync-heavy rndwr, fsync after every write, ext4 barrier=0",
        "kind": "fsync",
        "mount": "barrier=0",
        "gib": 1,
    },
    "fsync-b1": {
        "title": "fsync-heavy rndwr, fsync after every write, ext4 barriers on",
        "kind": "fsync",
        "mount": "",
        "gib": 1,
    },
    "untar": {
        "title": "untar: Linux 6.1 source tree, extract then syncfs, ext4",
        "kind": "untar",
        "mount": "",
        "gib": 4,
    },
    "fio-b0": {
        "title": "fio randwrite 4k fsync=1 (psync, buffered), ext4 barrier=0",
        "kind": "fio",
        "mount": "barrier=0",
        "gib": 1,
    },
}
UNITS = {"fsync": "req/s", "untar": "entries/s", "fio": "writes/s"}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2 if QUICK else 7, help="interleaved rounds (default 7)")
    ap.add_argument("--time", type=float, default=2 if QUICK else 5, help="fsync-heavy and fio run seconds (default 5)")
    ap.add_argument(
        "--untar-entries",
        type=int,
        default=20000 if QUICK else 0,
        help="entries to extract; 0: the whole tree (default)",
    )
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument(
        "--tracers",
        default="untraced,fsprof,fsprof-sampled,bpftrace,libbpf-tools",
        help=f"fsprof-sampled: fsprof --stack-sample {SAMPLED}",
    )
    ap.add_argument("--no-stats", action="store_true", help="skip the bpf_stats runs")
    ap.add_argument(
        "--stats-rounds", type=int, default=1 if QUICK else 3, help="interleaved rounds of bpf_stats runs (default 3)"
    )
    return ap.parse_args()


class FsyncHeavy:
    def __init__(self, changes, sfs, seconds):
        from workloads import fsync_heavy

        self.changes, self.sfs = changes, sfs
        wl = fsync_heavy.parser().parse_args(FSYNC_ARGS + ["--time", str(seconds)])
        fsync_heavy.check(wl)
        self.argv = fsync_heavy.engine_argv(fsync_heavy.params(wl))
        self.n = 0

    def run(self, tracer):
        self.n += 1
        status, out, wall, traced = run_in_fresh_dir(self.changes, self.sfs, f"w{self.n}", self.argv, tracer)
        if status != 0:
            raise SystemExit(f"fsync-heavy engine failed ({status}): {out[-300:]}")
        run = json.loads(out)["run"]
        return {
            "rate": run["events"] / (run["elapsed_ns"] / 1e9),
            "elapsed": run["elapsed_ns"] / 1e9,
            "events": run["events"],
            "wall": wall,
            "cpu_us": (run["cpu_user_ns"] + run["cpu_sys_ns"]) / 1e3 / run["events"],
            **traced,
        }


class Untar:
    def __init__(self, changes, sfs, entries):
        from workloads import untar

        self.changes, self.sfs = changes, sfs
        wl = untar.parser().parse_args([])
        untar.check(wl)
        tar_path, meta, total, _ = untar.prepare_tree(wl)
        self.entries = min(entries or total, total)
        self.argv = [
            untar.engine_path("untar"),
            "--tar",
            tar_path,
            "--entries",
            str(self.entries),
            "--record-size",
            str(untar.GNU_TAR_RECORD),
        ]
        with open(tar_path, "rb") as f:  # into the page cache once, for every run alike
            while f.read(1 << 24):
                pass
        self.n = 0

    def run(self, tracer):
        self.n += 1
        status, out, wall, traced = run_in_fresh_dir(self.changes, self.sfs, f"t{self.n}", self.argv, tracer)
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        res = json.loads(lines[-1]) if lines else {"error": out[-300:]}
        if status != 0 or "error" in res:
            raise SystemExit(f"untar engine failed ({status}): {res.get('error')}")
        secs = (res["extract_ns"] + res["sync_ns"]) / 1e9
        return {
            "rate": res["entries"] / secs,
            "elapsed": secs,
            "extract_s": res["extract_ns"] / 1e9,
            "events": res["entries"],
            "wall": wall,
            "cpu_us": res["extract_cpu_ns"] / 1e3 / res["entries"],
            **traced,
        }


class Fio:
    """fio's 4 KiB random writes, each followed by an fsync (`--fsync=1`), one job as a thread of the
    fio process (`--thread`: the pid the tracers follow), for `seconds`; a request is a write and
    its fsync, fio's write count."""

    def __init__(self, changes, sfs, seconds):
        self.changes, self.sfs = changes, sfs
        self.argv = [
            "fio",
            "--name=randwrite",
            "--thread",
            "--ioengine=psync",
            "--rw=randwrite",
            "--bs=4k",
            "--fsync=1",
            "--size=64M",
            "--filename=data",
            "--time_based",
            f"--runtime={seconds:g}",
            "--output-format=json",
        ]
        self.n = 0

    def run(self, tracer):
        self.n += 1
        status, out, wall, traced = run_in_fresh_dir(self.changes, self.sfs, f"f{self.n}", self.argv, tracer)
        try:
            job = json.loads(out[out.index("{") :])["jobs"][0]
        except ValueError:
            raise SystemExit(f"fio failed ({status}): {out[-300:]}") from None
        if status != 0 or job.get("error"):
            raise SystemExit(f"fio failed ({status}): error {job.get('error')}")
        writes, secs = job["write"]["total_ios"], job["job_runtime"] / 1e3
        cpu_s = (job["usr_cpu"] + job["sys_cpu"]) / 100 * secs  # fio's figures: % of the job's runtime
        return {
            "rate": writes / secs,
            "elapsed": secs,
            "events": writes,
            "wall": wall,
            "cpu_us": cpu_s * 1e6 / writes,
            **traced,
        }


def run_in_fresh_dir(changes, sfs, name, argv, tracer):
    """run_traced in a new directory of the scratch filesystem, removed afterwards; the filesystem
    is synced before the run and after the removal, so that no run pays for another's writes."""
    workdir = os.path.join(sfs.mountpoint, name)
    os.mkdir(workdir)
    sh("sync", "-f", sfs.mountpoint)
    try:
        return run_traced(changes, argv, workdir, tracer)
    finally:
        shutil.rmtree(workdir)
        sh("sync", "-f", sfs.mountpoint)


def run_traced(changes, argv, workdir, tracer):
    """The workload gated until the tracer is attached; (status, stdout, wall s, tracer's figures)."""
    proc = Gated(changes, argv, workdir)
    try:
        tracer.start(proc.pid)
        try:
            proc.release()
            status, out, wall = proc.wait()
        finally:
            traced = tracer.stop()
    except BaseException:
        proc.kill()
        raise
    return status, out, wall, traced


def make_tracers(names, sfs):
    every = {
        "untraced": NoTracer(),
        "fsprof": Fsprof([common.target_of(sfs)]),
        "fsprof-sampled": Fsprof([common.target_of(sfs)], stack_sample=SAMPLED),
        "bpftrace": Bpftrace(),
        "libbpf-tools": LibbpfTools(),
    }
    return [every[n] for n in names]


def bench_workload(key, args):
    spec = WORKLOADS[key]
    print(f"{key}: {spec['title']}", flush=True)
    with Changes() as changes:
        sfs = common.provision(changes, "ext4", f"bench-overhead-{key}", spec["gib"], spec["mount"])
        if spec["kind"] == "fsync":
            wl = FsyncHeavy(changes, sfs, args.time)
        elif spec["kind"] == "fio":
            wl = Fio(changes, sfs, args.time)
        else:
            wl = Untar(changes, sfs, args.untar_entries)
        tracers = make_tracers(args.tracers.split(","), sfs)
        wl.run(NoTracer())  # warm-up: the image's first writes allocate host blocks
        runs = interleaved([(t.name, lambda t=t: wl.run(t)) for t in tracers], args.rounds)
        stats, floor = (
            ({}, None)
            if args.no_stats
            else prog_costs(wl, [t for t in tracers if t.name != "untraced"], args.stats_rounds)
        )
    return {
        "title": spec["title"],
        "runs": runs,
        "stats": stats,
        "floor": floor,
        "summary": summarize(runs),
        "entries": getattr(wl, "entries", None),
    }


def prog_costs(wl, tracers, rounds):
    """Interleaved rounds of one run per tracer with kernel.bpf_stats_enabled=1: each program's runs
    and run time, summed over the rounds, and each round's BPF ns per request (so that a ratio
    between tracers is taken within a round, at the machine's state of that round); then one run
    with only an empty program on sched_switch: (per tracer, the floor's ns per run)."""

    def one(tracer):
        r = wl.run(tracer)
        return {"elapsed": r["wall"], "rate": r["rate"], "events": r["events"], "progs": r.get("progs", [])}

    with BpfStats():
        per_round = interleaved([(t.name, lambda t=t: one(t)) for t in tracers], rounds)
        empty = [p for p in wl.run(EmptyProgram())["progs"] if p["run_cnt"]]
    out = {}
    for name, rs in per_round.items():
        progs = {}
        for r in rs:
            for p in r["progs"]:
                q = progs.setdefault(
                    p["name"], {"name": p["name"], "run_cnt": 0, "run_time_ns": 0, "recursion_misses": 0}
                )
                for f in ("run_cnt", "run_time_ns", "recursion_misses"):
                    q[f] += p.get(f, 0)
        # Per second of the workload process's whole life (the counters run from attach to detach).
        out[name] = {
            "elapsed": sum(r["elapsed"] for r in rs),
            "rate": statistics.median(r["rate"] for r in rs),
            "events": sum(r["events"] for r in rs),
            "progs": sorted(progs.values(), key=lambda p: -p["run_time_ns"]),
            "ns_per_request": [sum(p["run_time_ns"] for p in r["progs"]) / r["events"] for r in rs],
            "load": [r.get("load_before") for r in rs],
        }
        total = sum(p["run_time_ns"] for p in progs.values())
        print(
            f"  bpf_stats {name}: {total / 1e6:.1f} ms of BPF in {out[name]['elapsed']:.2f} s ({len(rs)} runs)",
            flush=True,
        )
    floor = empty[0]["run_time_ns"] / empty[0]["run_cnt"] if empty else None
    if floor:
        print(f"  bpf_stats empty program: {floor:.0f} ns a run", flush=True)
    return out, floor


def floor_rows(key, stats, floor_ns):
    """Per tracer: its program runs and BPF time per request, and the floor (runs × an empty run)."""
    rows = []
    for tracer, s in stats.items():
        if not s.get("events") or not any(p["run_cnt"] for p in s["progs"]):
            continue
        runs, per_req, floor = bpf_per_request(s, floor_ns)
        active = sum(1 for p in s["progs"] if p["run_cnt"])
        ratio = ratio_to(stats, tracer)
        against = "—" if tracer == "bpftrace" or not ratio else fmt(ratio, 2, "x")
        rows.append(
            f"| {key} | {tracer} | {active} | {runs:,.1f} | {per_req:.1f} µs | {against} | "
            f"{floor:.1f} µs | {per_req - floor:.1f} µs |"
        )
    return rows


def summarize(runs):
    """Per tracer: throughput spread, overhead spread (same-round ratio to untraced), lost events."""
    base = runs.get("untraced")
    out = {}
    for name, rs in runs.items():
        s = {"rate": spread([r["rate"] for r in rs]), "cpu_us": spread([r["cpu_us"] for r in rs])}
        if base and name != "untraced":
            s["overhead"] = spread([1 - r["rate"] / b["rate"] for r, b in zip(rs, base)])
            s["cpu_overhead"] = spread([r["cpu_us"] / b["cpu_us"] - 1 for r, b in zip(rs, base)])
        s["load"] = spread([r.get("load_before") for r in rs])
        s["busy"] = sum(1 for r in rs if busy(r))
        lost = [r.get("lost") for r in rs]
        s["lost"] = None if name == "untraced" or any(v is None for v in lost) else sum(lost)
        s["drops"] = {}
        for r in rs:
            for k, v in r.get("drops", {}).items():
                s["drops"][k] = s["drops"].get(k, 0) + v
        out[name] = s
    return out


# ---- markdown ---------------------------------------------------------------------------------------


def render(results, args):
    lines = [
        "| workload | tracer | throughput: median (min – max) | overhead vs untraced, same round | "
        "workload's CPU per request | its increase, same round | lost events (all rounds) | "
        "load average before each run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, res in results.items():
        unit = UNITS[WORKLOADS[key]["kind"]]
        for name, s in res["summary"].items():
            lost = "—" if name == "untraced" else ("not reported" if s["lost"] is None else f"{s['lost']:,}")
            if s["drops"]:
                lost += " (" + ", ".join(f"{k} {v:,}" for k, v in s["drops"].items()) + ")"
            over = fmt(s.get("overhead"), 1, pct=True) if name != "untraced" else "—"
            cpu_over = fmt(s.get("cpu_overhead"), 1, pct=True) if name != "untraced" else "—"
            load = fmt(s.get("load"), 2)
            if s.get("busy"):
                load += f" **busy: {s['busy']} of {s['rate']['n']} runs**"
            lines.append(
                f"| {key} | {name} | {fmt(s['rate'], 0)} {unit} | {over} | {fmt(s['cpu_us'], 1, ' µs')} | "
                f"{cpu_over} | {lost} | {load} |"
            )
    lines += [
        "",
        f"Load average: the 1-minute load average as each run began (median (min – max)); a run "
        f"that began above {os.cpu_count()} (this machine's CPUs: more runnable tasks than cores, even "
        "counting the tail of the run before it) is counted as taken on a busy machine.",
        "",
        "Workloads (" + f"{args.rounds} rounds" + "):",
        "",
    ]
    for key, res in results.items():
        extra = f" ({res['entries']:,} entries)" if res.get("entries") else ""
        lines.append(f"- **{key}**: {res['title']}{extra}.")
    stats = [(key, res["stats"]) for key, res in results.items() if res["stats"]]
    if stats:
        lines += [
            "",
            "### Where the time goes: BPF run time per program",
            "",
            f"{args.stats_rounds} interleaved runs per workload and tracer with "
            "`kernel.bpf_stats_enabled=1` (restored after; its own timing adds some cost to those runs "
            "only), their counters summed. runs/s and CPU are per second of the "
            "workload process's life (gate to exit); CPU is the program's run time as a share of one "
            "core. Programs run for every event of the machine and filter inside, so runs/s counts "
            "other processes' events too; programs that did not run are left out.",
            "",
            "| workload | tracer | program | runs/s | ns/run | CPU (% of a core) |",
            "|---|---|---|---|---|---|",
        ]
        for key, st in stats:
            for tracer, s in st.items():
                lines += prog_rows(key, tracer, s)
    floors = [(key, res["stats"], res["floor"]) for key, res in results.items() if res["stats"] and res.get("floor")]
    if floors:
        lines += [
            "",
            "### The floor: what the number of program runs costs",
            "",
            "A program that does nothing (bpf/probe.bpf.c's `tp_btf_empty`, on sched_switch), loaded "
            "alone for one more run of each workload under bpf_stats, costs "
            + ", ".join(f"{f:,.0f} ns a run during {key}" for key, _, f in floors)
            + ": the kernel's call into the program and bpf_stats' own clock reads. Each tracer's BPF time "
            "per request is also taken against the script's in each round of the bpf_stats runs "
            "(median (min – max) of the rounds' ratios). A tracer's floor is "
            "that times its program runs per request (every event of the machine that reaches one of its "
            "programs, its own filters included): what its choice of events costs even if every program "
            "returned at once. Above the floor is what its programs do.",
            "",
            "| workload | tracer | programs that ran | program runs per request | BPF per request | "
            "against the bpftrace script, same round | floor | above the floor |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for key, st, f in floors:
            lines += floor_rows(key, st, f)
    return "\n".join(lines)


HOW = """How: `make bench` (or `.venv/bin/python bench/bench_overhead.py`). One fresh loop-backed ext4
per workload (1 GiB; 4 GiB for untar), one untraced warm-up run, then rounds of the five variants
in rotated order. fsync-heavy is the C engine (`build/workloads/fsync_heavy`, options
`--file-test-mode rndwr --file-fsync-all on --file-num 16 --file-total-size 64M --time T`: a random
16 KiB write then an fsync of that file, as one request); its throughput is requests/s of its run
phase. untar is the C engine on Debian's linux-source-6.1 tarball (in the page cache); its
throughput is entries / (extraction + syncfs). fio-b0 is fio itself (`--name=randwrite --thread
--ioengine=psync --rw=randwrite --bs=4k --fsync=1 --size=64M --time_based --runtime=T`, the job a
thread of the gated process): 4 KiB buffered random writes, each followed by an fsync, as one
request; its throughput is fio's writes per second of its runtime. The workload's CPU per request is
its own user + system time (getrusage in the engine: fsync-heavy's run phase, untar's extraction;
fio's usr_cpu and sys_cpu of its runtime) per request or entry: fsprof's programs that run in the
workload's thread (syscalls, its switch-outs) land in its system time, and this figure is far less
disturbed by a busy machine's I/O than throughput. Each workload waits at a gate until the tracer
is attached (fsprof's Collector constructed; bpftrace's BEGIN printed; each libbpf tool holding as
many BPF links as programs), so every request is traced. bpftrace runs `bench/peer.bt`;
libbpf-tools are `syscount -L -p PID`, `offcputime -p PID` and `biolatency` at once (the
libbpf-tools that run on this kernel: no kprobes, no fentry). fsprof's lost events are its drop
counters (`result.json` `drops`) plus the kernel's BPF recursion misses of its programs; the peers
do not count theirs. The floor: after the bpf_stats runs, one more run of each workload with only
bpf/probe.bpf.c's `tp_btf_empty` (it returns at once) attached to sched_switch; its ns per run
times a tracer's program runs per request (from that tracer's bpf_stats runs)."""


def main():
    args = parse_args()
    install_handlers()
    results = {key: bench_workload(key, args) for key in args.workloads.split(",")}
    md = render(results, args)
    print("\n" + md)
    common.save("overhead", {"results": results, "markdown": md, "how": HOW, "args": vars(args)})


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        raise SystemExit("bench_overhead: interrupted; the scratch filesystems are undone")
