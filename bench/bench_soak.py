#!/usr/bin/env python3
"""Benchmark: soak. `fsprof record --continuous` (docs/continuous.md) over a long fsync-heavy run:
does anything grow with uptime? fsprof's RSS at the first and the last one-second sample, its CPU,
the series its /metrics serves at the first and last scrape, the lost events and BPF recursion
misses it reports itself, and the windows it recorded.

  fsync-heavy rndwr --file-fsync-all on --threads 2 on scratch ext4 barrier=0 (the capacity bench's
  switches row: context switches, wakeups, block requests and journal commits at their highest),
  120 s in 15 s windows, or 10 minutes with BENCH_LONG=1; BENCH_QUICK=1: 10 s in 2 s windows.

    .venv/bin/python bench/bench_soak.py [--seconds S] [--window 15s]
"""

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from common import LONG, PY, QUICK, REPO, Gated, cpu_seconds, rss_kib, sh  # noqa: E402
from bench_capacity import ROWS, engine_argv, map_memlock  # noqa: E402
from profiler import units  # noqa: E402
from profiler.machine.undo import Changes, record_process  # noqa: E402
from profiler.signals import install_handlers  # noqa: E402

ROW = ROWS["switches"]


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10 if QUICK else 600 if LONG else 120)
    ap.add_argument("--window", default="2s" if QUICK else "15s")
    return ap.parse_args()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def total(text, name):
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if re.match(rf"{name}(\{{| )", line))


def by_reason(text, name):
    """{reason: n} of a counter labelled by reason, nonzero ones."""
    out = {}
    for line in text.splitlines():
        m = re.match(rf'{name}{{reason="([^"]+)"}} (\S+)', line)
        if m and float(m.group(2)):
            out[m.group(1)] = int(float(m.group(2)))
    return out


def series(text):
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


def soak(changes, sfs, seconds, window):
    workdir = os.path.join(sfs.mountpoint, "soak")
    os.mkdir(workdir)
    sh("sync", "-f", sfs.mountpoint)
    wl = Gated(changes, engine_argv(ROW["args"], seconds), workdir)
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as profiles:
        rec = subprocess.Popen(
            [
                PY,
                "-m",
                "profiler",
                "record",
                "--continuous",
                "--mount",
                sfs.mountpoint,
                "--window",
                window,
                "--listen",
                f"127.0.0.1:{port}",
                "--pprof-dir",
                profiles,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            start_new_session=True,
        )
        record_process(changes, rec.pid)
        try:
            line = rec.stderr.readline()
            if "recording" not in line:
                raise SystemExit(f"fsprof record --continuous did not start: {line}{rec.stderr.read()[-300:]}")
            cpu0, t0 = cpu_seconds(rec.pid), time.monotonic()
            wl.release()
            samples, first_text = [], None
            while wl.proc.poll() is None:
                time.sleep(1)
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
                if first_text is None and samples[-1]["t"] > 2 * units.parse_duration(window):
                    first_text = scrape(port)
            status, text, _ = wl.wait()
            time.sleep(units.parse_duration(window) + 1)  # the last window of the workload drained
            last_text = scrape(port)
            profiles_kept = len(list(Path(profiles).glob("fsprof-*.pb.gz")))
        finally:
            rec.terminate()
            rec.wait(timeout=60)
            wl.kill()
    if status != 0:
        raise SystemExit(f"fsync-heavy engine failed ({status}): {text[-300:]}")
    first_text = first_text or last_text
    fsyncs = sum(
        float(line.rsplit(" ", 1)[1])
        for line in last_text.splitlines()
        if line.startswith("fsprof_syscall_latency_seconds_count{") and 'op="fsync"' in line
    )
    warm = next((s for s in samples if s["t"] > 2 * units.parse_duration(window)), samples[-1])
    return {
        "what": ROW["what"],
        "seconds": seconds,
        "window": window,
        "samples": samples,
        "rss_first_kib": samples[0]["rss_kib"],
        "rss_warm_kib": warm["rss_kib"],
        "rss_last_kib": samples[-1]["rss_kib"],
        "hwm_kib": max(s["hwm_kib"] for s in samples),
        "cpu_s": samples[-1]["cpu_s"],
        "cpu_pct": 100 * samples[-1]["cpu_s"] / samples[-1]["t"],
        "maps_mib": samples[-1]["maps_bytes"] / (1 << 20),
        "series_first": series(first_text),
        "series_last": series(last_text),
        "windows": total(last_text, "fsprof_windows_total"),
        "fsyncs": fsyncs,
        "lost": total(last_text, "fsprof_lost_events_total"),
        "lost_by_reason": by_reason(last_text, "fsprof_lost_events_total"),
        "approximated": by_reason(last_text, "fsprof_approximated_events_total"),
        "recursion_misses": total(last_text, "fsprof_bpf_recursion_misses_total"),
        "profiles_kept": profiles_kept,
    }


def _reasons(d):
    return " (" + ", ".join(f"{k} {v:,}" for k, v in d.items()) + ")" if d else ""


def render(r):
    return "\n".join(
        [
            "| workload (ext4 barrier=0) | run | windows | fsyncs traced | fsprof RSS at start → two windows "
            "in → last (peak) | "
            "fsprof CPU | /metrics series two windows in → last | lost events | BPF recursion misses | BPF maps |",
            "|---|---|---|---|---|---|---|---|---|---|",
            f"| {r['what']} | {r['seconds']:.0f} s | {r['windows']:.0f} of {r['window']} | {r['fsyncs']:,.0f} | "
            f"{r['rss_first_kib'] / 1024:.1f} → {r['rss_warm_kib'] / 1024:.1f} → {r['rss_last_kib'] / 1024:.1f} MiB "
            f"({r['hwm_kib'] / 1024:.1f}) | "
            f"{r['cpu_s']:.1f} s ({r['cpu_pct']:.2f}% of a core) | {r['series_first']:,} → {r['series_last']:,} | "
            f"{r['lost']:,.0f}{_reasons(r['lost_by_reason'])} | {r['recursion_misses']:,.0f} | "
            f"{r['maps_mib']:.0f} MiB |",
            "",
            "Recorded less exactly (not lost): "
            + (", ".join(f"{k} {v:,}" for k, v in r["approximated"].items()) or "none")
            + ".",
            "",
            f"One run: {r['seconds']:.0f} s "
            f"({'BENCH_LONG=1' if LONG else '10 minutes with `make bench BENCH_LONG=1`'}).",
        ]
    )


HOW = """How: `make bench` (or `.venv/bin/python bench/bench_soak.py`). A fresh 1 GiB loop-backed ext4
with barrier=0; the fsync-heavy C engine waits at a gate while `fsprof record --continuous --mount
MNT --pprof-dir DIR` starts, and is let go once it prints "recording". RSS is VmRSS of the fsprof
process at the first one-second sample, the first after two windows (the first windows load
symbols and grow the allocator's pools) and the last (VmHWM in brackets); CPU its user+system time over
the workload's run (Python's window processing and the scrape; the BPF programs' own time is in the
overhead section); series are the sample lines of /metrics two windows in and after the workload;
lost events and recursion misses are fsprof's own counters (fsprof_lost_events_total,
fsprof_bpf_recursion_misses_total) at the end."""


def main():
    args = parse_args()
    install_handlers()
    with Changes() as changes:
        sfs = common.provision(changes, "ext4", "bench-soak", 1, "barrier=0")
        print(f"soak: {ROW['what']}, {args.seconds:g} s in {args.window} windows", flush=True)
        r = soak(changes, sfs, args.seconds, args.window)
    print("  " + common.brief({k: v for k, v in r.items() if k != "samples"}), flush=True)
    md = render(r)
    print("\n" + md)
    common.save("soak", {"row": r, "markdown": md, "how": HOW, "long": LONG})


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        raise SystemExit("bench_soak: interrupted; the scratch filesystem is undone")
