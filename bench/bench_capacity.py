#!/usr/bin/env python3
"""Benchmark: capacity. The event rates fsprof sustains (syscalls/s, context switches/s, block
requests/s) and whether it lost any event at them, with its memory and CPU: `fsprof record --pid`
as a user runs it, on the fastest workloads we have, on scratch ext4 barrier=0:

  syscalls:  fsync-heavy rndwr --file-fsync-freq 1 (a write, then an fsync round over 128 mostly
             clean files: the highest syscall rate), 20 s
  switches:  fsync-heavy rndwr --file-fsync-all on --threads 2 (every fsync waits: context switches,
             wakeups, block requests and journal commits at their highest), 60 s, or 10 minutes
             with BENCH_LONG=1

Rates come from outside fsprof: syscalls from the workload's own counts, context switches from
/proc/stat (ctxt: every CPU, which is what fsprof's sched_switch programs run on), block requests
from /sys/block/<dev>/stat of the device under test. fsprof's CPU (user+system) and RSS are read
from /proc/PID each second while it records; its BPF maps' memory from their fdinfo (memlock).
Lost events: result.json's drops plus the BPF recursion misses of its programs.

    .venv/bin/python bench/bench_capacity.py [--rows syscalls,switches]
    BENCH_QUICK=1 ...   # 5 s each
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from common import LONG, PY, QUICK, REPO, Gated, cpu_seconds, own_prog_stats, rss_kib, sh  # noqa: E402
from profiler import rundir  # noqa: E402
from profiler.machine import blockdev  # noqa: E402
from profiler.machine.undo import Changes, record_process  # noqa: E402
from profiler.signals import install_handlers  # noqa: E402
from profiler.trace import maps  # noqa: E402

IO_CALLS = ("pread64", "pwrite64", "fsync")  # what the engine's reads, writes and fsyncs are (sync mode)
BASE = ["--file-test-mode", "rndwr", "--file-total-size", "64M"]
ROWS = {
    "syscalls": {
        "args": BASE + ["--file-num", "128", "--file-fsync-freq", "1"],
        "seconds": 20,
        "what": "fsync-heavy rndwr, fsync round over 128 files after every write",
    },
    "switches": {
        "args": BASE + ["--file-num", "16", "--file-fsync-all", "on", "--threads", "2"],
        "seconds": 600 if LONG else 60,
        "long": True,
        "what": "fsync-heavy rndwr, fsync after every write, 2 threads",
    },
}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--seconds", type=float, help="override every row's duration")
    return ap.parse_args()


def read_ctxt():
    with open("/proc/stat") as f:
        return int(next(line for line in f if line.startswith("ctxt ")).split()[1])


def map_memlock(pid):
    """Bytes of BPF map memory the process holds: the kernel's memlock figure of each map, counted
    once however many of the process's objects hold an fd on it (the shared maps)."""
    per_map = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:bpf-map":
                continue
            fields = dict(
                line.split(":", 1) for line in Path(f"/proc/{pid}/fdinfo/{fd}").read_text().splitlines() if ":" in line
            )
            per_map[fields["map_id"].strip()] = int(fields["memlock"])
        except (OSError, KeyError, ValueError):
            continue
    return sum(per_map.values())


def engine_argv(args, seconds):
    from workloads import fsync_heavy

    wl = fsync_heavy.parser().parse_args(args + ["--time", str(seconds)])
    fsync_heavy.check(wl)
    return fsync_heavy.engine_argv(fsync_heavy.params(wl))


def run_row(changes, sfs, name, row, seconds):
    disk = sfs.block_devs[0][0]
    workdir = os.path.join(sfs.mountpoint, name)
    os.mkdir(workdir)
    sh("sync", "-f", sfs.mountpoint)
    wl = Gated(changes, engine_argv(row["args"], seconds), workdir)
    with tempfile.TemporaryDirectory(prefix="bench-capacity-") as out:
        rec = subprocess.Popen(
            [PY, "-m", "profiler", "record", "--pid", str(wl.pid), "-o", f"{out}/run"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            start_new_session=True,
        )
        record_process(changes, rec.pid)
        try:
            wait_recording(rec)
            samples, figures = watch(rec, wl, disk)
            status, text, _ = wl.wait()
            err = rec.stderr.read()
            if rec.wait() != 0:
                raise SystemExit(f"fsprof record failed: {err.strip()[-300:]}")
            result = rundir.load(Path(out, "run"))
        except BaseException:
            wl.kill()
            rec.kill()
            raise
    os.rmdir(workdir)
    if status != 0:
        raise SystemExit(f"fsync-heavy engine failed ({status}): {text[-300:]}")
    return summarize(name, row, json.loads(text)["run"], fs_entry(result, sfs), samples, figures)


def fs_entry(result, sfs):
    """The scratch filesystem's entry: `record --pid` reports every filesystem the process used."""
    majmin = blockdev.kdev_str(sfs.dev)
    found = [f for f in result["filesystems"] if f.get("superblock_dev") == majmin]
    if not found:
        raise SystemExit(f"fsprof's result has no entry for the scratch filesystem ({majmin})")
    return found[0]


def wait_recording(rec):
    for line in rec.stderr:
        if "recording" in line:
            return
    raise SystemExit(f"fsprof record did not start: {rec.stderr.read()[-300:]}")


def watch(rec, wl, disk):
    """Releases the workload and samples fsprof each second until the workload ends."""
    cpu0, ctxt0, blk0 = cpu_seconds(rec.pid), read_ctxt(), blockdev.read_stat(disk)
    t0 = time.monotonic()
    wl.release()
    samples, progs = [], []
    while True:
        time.sleep(1)
        if wl.proc.poll() is not None:
            break  # from here fsprof snapshots and reports: not part of the recording
        try:
            rss, hwm = rss_kib(rec.pid)
            samples.append(
                {
                    "t": time.monotonic() - t0,
                    "cpu_s": cpu_seconds(rec.pid) - cpu0,
                    "rss_kib": rss,
                    "hwm_kib": hwm,
                    "maps_bytes": map_memlock(rec.pid),
                }
            )
            progs = own_prog_stats(rec.pid) or progs
        except (OSError, KeyError):
            break  # fsprof is finishing: the workload just ended
    elapsed = time.monotonic() - t0
    return samples, {
        "elapsed": elapsed,
        "ctxt": read_ctxt() - ctxt0,
        "blk": blockdev.stat_delta(blk0, blockdev.read_stat(disk)),
        "recursion_misses": sum(p["recursion_misses"] for p in progs),
    }


def summarize(name, row, run, fs, samples, fig):
    secs = run["elapsed_ns"] / 1e9
    drops = maps.lost_events(fs.get("drops", {}))
    blk = fig["blk"]
    requests = sum(blk.get(k, 0) for k in ("read_ios", "write_ios", "flush_ios", "discard_ios"))
    # The engine marks its run phase (index 2); `record` names phases it was not told of "phase-N".
    phase = fs.get("phases", {}).get("run") or fs.get("phases", {}).get("phase-2") or {}
    traced = sum(phase.get("syscalls", {}).get(op, {}).get("count", 0) for op in IO_CALLS)
    last = samples[-1] if samples else {}
    return {
        "row": name,
        "what": row["what"],
        "seconds": secs,
        "syscalls_per_s": (run["reads"] + run["writes"] + run["fsyncs"]) / secs,
        "workload_calls": run["reads"] + run["writes"] + run["fsyncs"],
        "fsprof_calls": traced,
        "ctxt_per_s": fig["ctxt"] / fig["elapsed"],
        "blk_requests_per_s": requests / fig["elapsed"],
        "lost": sum(drops.values()) + fig["recursion_misses"],
        "drops": drops,
        "recursion_misses": fig["recursion_misses"],
        "cpu_s": last.get("cpu_s"),
        "cpu_pct": 100 * last.get("cpu_s", 0) / fig["elapsed"],
        "rss_first_kib": samples[0]["rss_kib"] if samples else None,
        "rss_last_kib": last.get("rss_kib"),
        "hwm_kib": max((s["hwm_kib"] for s in samples), default=None),
        "maps_mib": last.get("maps_bytes", 0) / (1 << 20),
        "samples": samples,
    }


def render(rows):
    lines = [
        "| workload (ext4 barrier=0) | run | syscalls/s | context switches/s (all CPUs) | block requests/s | "
        "lost events | fsprof CPU | fsprof RSS first → last (peak) | BPF maps |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lost = f"{r['lost']:,}" + (
            " (" + ", ".join(f"{k} {v:,}" for k, v in r["drops"].items()) + ")" if r["drops"] else ""
        )
        lines.append(
            f"| {r['what']} | {r['seconds']:.0f} s | {r['syscalls_per_s']:,.0f} (counted by the workload "
            f"{r['workload_calls']:,}, by fsprof {r['fsprof_calls']:,}) | {r['ctxt_per_s']:,.0f} | "
            f"{r['blk_requests_per_s']:,.0f} | {lost} | "
            f"{r['cpu_s']:.2f} s ({r['cpu_pct']:.2f}% of a core) | {r['rss_first_kib'] / 1024:.1f} → "
            f"{r['rss_last_kib'] / 1024:.1f} MiB ({r['hwm_kib'] / 1024:.1f}) | {r['maps_mib']:.0f} MiB |"
        )
    note = (
        "the switches row is the long run: 10 minutes here (BENCH_LONG=1)"
        if LONG
        else "the switches row is the long run: 60 s by default, 10 minutes with `make bench BENCH_LONG=1`"
    )
    if QUICK:
        note += "; this BENCH_QUICK run gave every row 5 s"
    lines += [
        "",
        f"One run per row; {note}. The rates are the highest these workloads reach on this machine "
        "while traced; the lost events column says whether fsprof kept up with them.",
    ]
    return "\n".join(lines)


HOW = """How: `make bench` (or `.venv/bin/python bench/bench_capacity.py`; `BENCH_LONG=1` for the
10-minute run). A fresh 1 GiB loop-backed ext4 with barrier=0; the fsync-heavy C engine waits at a
gate while `fsprof record --pid PID` starts (a separate process, as a user runs it), and is let go
once fsprof prints "recording". syscalls/s is the workload's reads+writes+fsyncs per second of its
run phase; beside it, those calls as the workload counted them and as fsprof counted them
(pread64 + pwrite64 + fsync in the run phase of result.json): equal when nothing was lost; context
switches/s is /proc/stat ctxt (all CPUs); block
requests/s is /sys/block/<loop>/stat (reads + writes + flushes completed). fsprof's CPU is the
user+system time of the `fsprof record` process from "recording" to the workload's end; RSS is
VmRSS at the first and last one-second sample and VmHWM; BPF maps is the sum of memlock of the
map fds it holds (preallocated: the same at any event rate). Lost events = result.json's drops +
the BPF programs' recursion misses (fdinfo)."""


def main():
    args = parse_args()
    install_handlers()
    rows = []
    with Changes() as changes:
        sfs = common.provision(changes, "ext4", "bench-capacity", 1, "barrier=0")
        for name in args.rows.split(","):
            row = ROWS[name]
            seconds = args.seconds or (5 if QUICK else row["seconds"])
            print(f"{name}: {row['what']}, {seconds:g} s", flush=True)
            rows.append(run_row(changes, sfs, name, row, seconds))
            print("  " + common.brief({k: v for k, v in rows[-1].items() if k != "samples"}), flush=True)
    md = render(rows)
    print("\n" + md)
    common.save("capacity", {"rows": rows, "markdown": md, "how": HOW, "long": LONG})


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        raise SystemExit("bench_capacity: interrupted; the scratch filesystem is undone")
