"""fsync-heavy: a model of `sysbench fileio` (1.0.20): a set of files, sequential or random reads
and writes in blocks, periodic fsync rounds over every file, fsync at the end, sync or async I/O.
Options carry sysbench's names, so a sysbench command line translates directly; the text result
is laid out as sysbench prints it, with latency per operation kind added.

The I/O loop is C (workloads/fsync_heavy.c) so that the workload's own CPU cost stays at or below
sysbench's; this module checks the options, runs the engine and formats its figures.

Phases: "prepare" (sysbench's `prepare` command: write the files, fsync each, then open them as
its `run` init does; for seqwr: empty files), "run" (the measured requests, then each thread's
end-of-test fsyncs), "cleanup" (close and remove the files, sysbench's `cleanup`). Like sysbench,
nothing is dropped or synced between prepare and run: the files' pages stay in the page cache.

Over 500 lines: sysbench's option set, its checks and its text layout are one interface, kept
beside the engine call they configure.
"""

import argparse
import json
import os
import subprocess
import textwrap
import time

from .common import Progress, UsageError, WorkloadError, WorkloadParser, engine_path, parse_size, run_main, write_result

NAME = "fsync-heavy"
PHASES = ["prepare", "run", "cleanup"]
MIB = 1 << 20
WIDTH = 100  # wrap width of the explanatory sentences
MODES = {  # sysbench's names and how it describes them
    "seqwr": "sequential write (creation)",
    "seqrewr": "sequential rewrite",
    "seqrd": "sequential read",
    "rndrd": "random read",
    "rndwr": "random write",
    "rndrw": "random r/w",
}
READ_ONLY_MODES = ("seqrd", "rndrd")
EXTRA_FLAGS = ("sync", "dsync", "direct")
ASYNC_ENGINES = ("libaio", "io_uring")
DIRECT_ALIGN = 512
ON, OFF = ("on", "true", "yes", "1"), ("off", "false", "no", "0")

FSYNC_RULE = (
    "Periodic fsync rule (sysbench 1.0.20, followed exactly): one counter shared by all threads counts "
    "the read and write requests handed out; when a write was handed out since the last fsync round and "
    "the counter is a multiple of --file-fsync-freq, each of the next --file-num requests, whichever thread "
    "takes it, is an fsync of the next file (test_file.0, test_file.1, ...); these count as events (against "
    "--events) but not in the counter, and reads and writes resume once every file had its fsync. With "
    "--file-fsync-end=on every thread fsyncs every file once when it stops (threads x files calls, in the "
    "run phase and its time, not counted as events); seqrd and rndrd never fsync; --file-fsync-freq=0 "
    "disables the rounds; --file-fsync-all=on instead fsyncs the written file after each write (inside the "
    "write's event) and turns the rounds and the end fsyncs off. fsync/fdatasync are synchronous calls in "
    "async mode too (as in sysbench), so they do not wait for async writes still in flight."
)


def on_off(text):
    t = str(text).strip().lower()
    if t in ON:
        return True
    if t in OFF:
        return False
    raise ValueError(text)


def size_arg(text):
    """parse_size, but a bad size becomes the UsageError sentence check() would give."""
    try:
        return parse_size(text)
    except argparse.ArgumentTypeError:
        return text  # check() names the option and the bad value


def parser():
    ap = WorkloadParser(prog=NAME, description="sysbench fileio's test modes, options and report.")
    ap.add_argument("--file-num", type=int, default=128, help="number of files (default 128)")
    ap.add_argument(
        "--file-total-size",
        type=size_arg,
        default=256 * MIB,
        help="total size of the files, e.g. 256M, 1G (default 256M; sysbench's is 2G)",
    )
    ap.add_argument(
        "--file-test-mode", default="rndwr", help=f"{{{', '.join(MODES)}}} (default rndwr; sysbench requires it)"
    )
    ap.add_argument("--file-block-size", type=size_arg, default=16384, help="bytes per request (default 16K)")
    ap.add_argument("--file-rw-ratio", type=float, default=1.5, help="reads/writes ratio for rndrw (default 1.5)")
    ap.add_argument(
        "--file-fsync-freq",
        type=int,
        default=100,
        help="fsync round over every file after this many requests; 0: never (default 100)",
    )
    ap.add_argument(
        "--file-fsync-end",
        default="on",
        nargs="?",
        const="on",
        help="every thread fsyncs every file at the end: on|off (default on)",
    )
    ap.add_argument(
        "--file-fsync-all",
        default="off",
        nargs="?",
        const="on",
        help="fsync the written file after each write, no rounds, no end fsyncs: on|off (default off)",
    )
    ap.add_argument("--file-fsync-mode", default="fsync", help="{fsync, fdatasync} (default fsync)")
    ap.add_argument("--file-io-mode", default="sync", help="{sync, async} (default sync)")
    ap.add_argument(
        "--file-async-engine",
        default="libaio",
        help="async I/O interface: {libaio, io_uring} (default libaio, as sysbench)",
    )
    ap.add_argument(
        "--file-async-backlog", type=int, default=128, help="async requests in flight per thread (default 128)"
    )
    ap.add_argument("--file-extra-flags", default="", help="open flags, comma-separated: {sync, dsync, direct}")
    ap.add_argument("--threads", "--num-threads", type=int, default=1, help="worker threads (default 1)")
    ap.add_argument(
        "--time",
        "--max-time",
        type=float,
        default=10,
        help="run time limit in seconds; 0: none, then --events must be given (default 10)",
    )
    ap.add_argument(
        "--events",
        "--requests",
        "--max-requests",
        type=int,
        default=0,
        help="limit on events (reads, writes and periodic fsyncs); 0: none (default 0)",
    )
    ap.add_argument("--percentile", type=float, default=95, help="latency percentile reported (default 95)")
    ap.add_argument("--rand-seed", type=int, default=0, help="random seed; 0: from the clock (default 0)")
    return ap


def check(args):
    _check_choices(args)
    _check_sizes(args)
    _check_limits(args)


def _check_choices(args):
    if args.file_test_mode not in MODES:
        raise UsageError(f"{NAME}: --file-test-mode '{args.file_test_mode}' is not one of {', '.join(MODES)}.")
    if args.file_fsync_mode not in ("fsync", "fdatasync"):
        raise UsageError(f"{NAME}: --file-fsync-mode '{args.file_fsync_mode}' is neither fsync nor fdatasync.")
    if args.file_io_mode == "mmap":
        raise UsageError(f"{NAME}: --file-io-mode=mmap is not modelled; use sync or async.")
    if args.file_io_mode not in ("sync", "async"):
        raise UsageError(f"{NAME}: --file-io-mode '{args.file_io_mode}' is neither sync nor async.")
    if args.file_async_engine not in ASYNC_ENGINES:
        raise UsageError(f"{NAME}: --file-async-engine '{args.file_async_engine}' is neither libaio nor io_uring.")
    for flag in extra_flags(args):
        if flag not in EXTRA_FLAGS:
            raise UsageError(f"{NAME}: --file-extra-flags '{flag}' is not one of {', '.join(EXTRA_FLAGS)}.")
    for name in ("file_fsync_end", "file_fsync_all"):
        try:
            on_off(getattr(args, name))
        except ValueError:
            raise UsageError(f"{NAME}: --{name.replace('_', '-')} '{getattr(args, name)}' is neither on nor off.")


def _check_sizes(args):
    for name in ("file_total_size", "file_block_size"):
        if not isinstance(getattr(args, name), int):
            raise UsageError(
                f"{NAME}: --{name.replace('_', '-')} '{getattr(args, name)}' is not a size (e.g. 16K, 256M)."
            )
    if args.file_num <= 0:
        raise UsageError(f"{NAME}: --file-num must be at least 1 file, not {args.file_num}.")
    if args.file_block_size <= 0:
        raise UsageError(f"{NAME}: --file-block-size must be a positive number of bytes, not {args.file_block_size}.")
    if args.file_total_size <= 0:
        raise UsageError(f"{NAME}: --file-total-size must be positive, not {args.file_total_size}.")
    per_file = args.file_total_size // args.file_num
    if per_file < args.file_block_size:
        raise UsageError(
            f"{NAME}: --file-total-size {args.file_total_size} over {args.file_num} files leaves "
            f"{per_file} bytes per file, less than one {args.file_block_size}-byte block."
        )
    if "direct" in extra_flags(args):
        if args.file_block_size % DIRECT_ALIGN:
            raise UsageError(
                f"{NAME}: with --file-extra-flags=direct, --file-block-size must be a multiple of "
                f"{DIRECT_ALIGN}, not {args.file_block_size}."
            )
        if per_file % DIRECT_ALIGN:
            raise UsageError(
                f"{NAME}: with --file-extra-flags=direct, each file's size (total / files = "
                f"{per_file}) must be a multiple of {DIRECT_ALIGN}."
            )


def _check_limits(args):
    if args.file_rw_ratio < 0:
        raise UsageError(f"{NAME}: --file-rw-ratio must be 0 or more, not {args.file_rw_ratio}.")
    if args.file_fsync_freq < 0:
        raise UsageError(f"{NAME}: --file-fsync-freq must be 0 (never) or more, not {args.file_fsync_freq}.")
    if args.file_async_backlog <= 0:
        raise UsageError(f"{NAME}: --file-async-backlog must be at least 1, not {args.file_async_backlog}.")
    if args.threads <= 0:
        raise UsageError(f"{NAME}: --threads must be at least 1, not {args.threads}.")
    if args.time < 0 or args.events < 0:
        raise UsageError(f"{NAME}: --time and --events cannot be negative.")
    if args.time == 0 and args.events == 0:
        raise UsageError(f"{NAME}: --time 0 with no --events would run forever; give --time N (seconds) or --events N.")
    if not 0 < args.percentile <= 100:
        raise UsageError(f"{NAME}: --percentile must be in (0, 100], not {args.percentile}.")


def extra_flags(args):
    return [f.strip() for f in args.file_extra_flags.split(",") if f.strip()]


def io_engine(args):
    return "sync" if args.file_io_mode == "sync" else args.file_async_engine


def params(args):
    """The run's parameters as recorded in the result (sizes in bytes)."""
    return {
        "file_num": args.file_num,
        "file_total_size": args.file_total_size,
        "file_size": args.file_total_size // args.file_num,
        "file_test_mode": args.file_test_mode,
        "file_block_size": args.file_block_size,
        "file_rw_ratio": args.file_rw_ratio,
        "file_fsync_freq": args.file_fsync_freq,
        "file_fsync_end": on_off(args.file_fsync_end),
        "file_fsync_all": on_off(args.file_fsync_all),
        "file_fsync_mode": args.file_fsync_mode,
        "file_io_mode": args.file_io_mode,
        "file_async_engine": args.file_async_engine,
        "file_async_backlog": args.file_async_backlog,
        "file_extra_flags": extra_flags(args),
        "threads": args.threads,
        "time": args.time,
        "events": args.events,
        "percentile": args.percentile,
        "rand_seed": args.rand_seed,
    }


def engine_argv(p):
    return [
        engine_path("fsync_heavy"),
        "--mode",
        p["file_test_mode"],
        "--files",
        str(p["file_num"]),
        "--total-size",
        str(p["file_total_size"]),
        "--block",
        str(p["file_block_size"]),
        "--rw-ratio",
        repr(p["file_rw_ratio"]),
        "--fsync-freq",
        str(p["file_fsync_freq"]),
        "--fsync-end",
        str(int(p["file_fsync_end"])),
        "--fsync-all",
        str(int(p["file_fsync_all"])),
        "--fsync-mode",
        p["file_fsync_mode"],
        "--io",
        "sync" if p["file_io_mode"] == "sync" else p["file_async_engine"],
        "--backlog",
        str(p["file_async_backlog"]),
        "--flags",
        ",".join(p["file_extra_flags"]),
        "--threads",
        str(p["threads"]),
        "--time-ns",
        str(int(p["time"] * 1e9)),
        "--events",
        str(p["events"]),
        "--seed",
        str(p["rand_seed"]),
        "--percentile",
        repr(p["percentile"]),
    ]


def check_space(p):
    """Fail with one sentence before writing anything if the files cannot fit (space or inodes)."""
    blocks_per_file = -(-p["file_size"] // p["file_block_size"])
    needed = p["file_num"] * blocks_per_file * p["file_block_size"]
    st = os.statvfs(".")
    free = st.f_bavail * st.f_frsize
    if needed > free:
        raise WorkloadError(
            f"{NAME}: the files need {needed / MIB:.0f} MiB but the filesystem has "
            f"{free / MIB:.0f} MiB free; lower --file-total-size."
        )
    if st.f_files and p["file_num"] > st.f_favail:  # f_files 0: the filesystem has no inode limit
        raise WorkloadError(
            f"{NAME}: {p['file_num']:,} files need as many inodes but the filesystem has "
            f"{st.f_favail:,} free (df -i: {st.f_files - st.f_ffree:,} of {st.f_files:,} "
            f"used); lower --file-num."
        )


def run_engine(argv, time_limit):
    """Runs the engine, with a progress line on a terminal; returns its JSON figures."""
    progress = Progress(NAME)
    start = time.monotonic()
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        while True:
            try:
                out, err = proc.communicate(timeout=0.25)
                break
            except subprocess.TimeoutExpired:
                elapsed = time.monotonic() - start
                progress.update(f"{elapsed:.0f} s" + (f" (run limit {time_limit:g} s)" if time_limit else ""))
    progress.done()
    if proc.returncode != 0:
        lines = [line for line in err.splitlines() if line.strip()]
        raise WorkloadError(lines[-1] if lines else f"{NAME}: the engine exited with status {proc.returncode}")
    return json.loads(out)


def main(args):
    p = params(args)
    check_space(p)
    figures = run_engine(engine_argv(p), args.time)
    result = {
        "workload": NAME,
        "params": p,
        "phases": PHASES,
        "io_engine": io_engine(args),
        "fsync_call": args.file_fsync_mode,
        **figures,
        "elapsed_s": {phase: figures[phase]["elapsed_ns"] / 1e9 for phase in PHASES},
        "fsync_rule": FSYNC_RULE,
    }
    write_result(args.result, result)
    if not args.result:
        print(render(result))


# ---- rendering, laid out as sysbench 1.0.20 prints its report ----


def size_text(value):
    """sysbench's sb_print_value_size: 16KiB, 2MiB, 1.50GiB."""
    units = ["", "Ki", "Mi", "Gi", "Ti"]
    i = 0
    while value >= 1024 and i < len(units) - 1 and value % 1024 == 0:
        value //= 1024
        i += 1
    return f"{value}{units[i]}"


def mode_lines(p, run):
    given = p["file_extra_flags"]  # printed in sysbench's order, direct as "directio"
    flags = " ".join("directio" if f == "direct" else f for f in EXTRA_FLAGS if f in given) or "(none)"
    lines = [
        f"Number of threads: {p['threads']}",
        "",
        f"Extra file open flags: {flags}",
        f"{p['file_num']} files, {size_text(p['file_size'])}B each",
        f"{size_text(p['file_size'] * p['file_num'])}B total file size",
        f"Block size {size_text(p['file_block_size'])}B",
    ]
    if p["file_test_mode"].startswith("rnd"):
        lines += [
            f"Number of IO requests: {p['events']}",
            f"Read/Write ratio for combined random IO test: {p['file_rw_ratio']:.2f}",
        ]
    fsync_all = p["file_fsync_all"]
    if p["file_fsync_freq"] > 0 and not fsync_all:
        lines.append(f"Periodic FSYNC enabled, calling {p['file_fsync_mode']}() each {p['file_fsync_freq']} requests.")
    if p["file_fsync_end"] and not fsync_all:
        lines.append(f"Calling {p['file_fsync_mode']}() at the end of test, Enabled.")
    if fsync_all:
        lines.append(f"Calling {p['file_fsync_mode']}() after each write operation.")
    io = (
        "synchronous"
        if p["file_io_mode"] == "sync"
        else f"asynchronous ({p['file_async_engine']}, backlog {p['file_async_backlog']} per thread)"
    )
    lines += [f"Using {io} I/O mode", f"Doing {MODES[p['file_test_mode']]} test"]
    return lines


def ms(ns):
    return ns / 1e6


def report_lines(p, run):
    secs = run["elapsed_ns"] / 1e9 or 1e-9
    ev = run["latency"]["event"]
    threads = run["threads"]
    n = len(threads)
    ev_avg = sum(t["events"] for t in threads) / n
    busy_avg = sum(t["busy_ns"] for t in threads) / n / 1e9
    ev_sd = (sum((t["events"] - ev_avg) ** 2 for t in threads) / n) ** 0.5
    busy_sd = (sum((t["busy_ns"] / 1e9 - busy_avg) ** 2 for t in threads) / n) ** 0.5
    pct = p["percentile"]
    return [
        "File operations:",
        f"    reads/s:                      {run['reads'] / secs:.2f}",
        f"    writes/s:                     {run['writes'] / secs:.2f}",
        f"    fsyncs/s:                     {run['fsyncs'] / secs:.2f}",
        "",
        "Throughput:",
        f"    read, MiB/s:                  {run['bytes_read'] / MIB / secs:.2f}",
        f"    written, MiB/s:               {run['bytes_written'] / MIB / secs:.2f}",
        "",
        "General statistics:",
        f"    total time:                          {secs:.4f}s",
        f"    total number of events:              {run['events']}",
        "",
        "Latency (ms):",
        f"         min: {ms(ev['min_ns']):39.2f}",
        f"         avg: {ms(ev['avg_ns']):39.2f}",
        f"         max: {ms(ev['max_ns']):39.2f}",
        f"        {pct:3g}th percentile: {ms(ev['pct_ns']):27.2f}",
        f"         sum: {ms(ev['sum_ns']):39.2f}",
        "",
        "Threads fairness:",
        f"    events (avg/stddev):           {ev_avg:.4f}/{ev_sd:3.2f}",
        f"    execution time (avg/stddev):   {busy_avg:.4f}/{busy_sd:3.2f}",
    ]


def per_op_lines(p, run):
    kinds = [("read", "read"), ("write", "write"), ("fsync", p["file_fsync_mode"])]
    lat = run["latency"]
    rows = [
        ("count", lambda h: f"{h['count']}"),
        ("min", lambda h: f"{ms(h['min_ns']):.3f}"),
        ("avg", lambda h: f"{ms(h['avg_ns']):.3f}"),
        (f"{p['percentile']:g}th percentile", lambda h: f"{ms(h['pct_ns']):.3f}"),
        ("max", lambda h: f"{ms(h['max_ns']):.3f}"),
    ]
    where = "submission to completion" if p["file_io_mode"] == "async" else "each call"
    lines = [f"Latency per operation (ms, {where}):", " " * 31 + "".join(f"{label:>12}" for _, label in kinds)]
    for name, cell in rows:
        lines.append(
            f"         {name + ':':<22}" + "".join(f"{cell(lat[k]) if lat[k]['count'] else '-':>12}" for k, _ in kinds)
        )
    return lines


def this_run_rule(p):
    """When this run's parameters make the fsyncs happen, in one sentence."""
    call, files, threads = p["file_fsync_mode"] + "()", p["file_num"], p["threads"]
    if p["file_test_mode"] in READ_ONLY_MODES:
        return f"This run: no {call} ({p['file_test_mode']} never syncs)."
    if p["file_fsync_all"]:
        return f"This run: one {call} of the written file right after each write, nothing else."
    rounds = (
        f"a round of {files} {call} (one per file, one per event) each time {p['file_fsync_freq']} "
        "reads/writes have been handed out with a write among them since the last round"
        if p["file_fsync_freq"]
        else "no periodic rounds (--file-fsync-freq=0)"
    )
    end = (
        f"{threads} x {files} {call} at the end (every thread, every file)"
        if p["file_fsync_end"]
        else "none at the end (--file-fsync-end=off)"
    )
    return f"This run: {rounds}; {end}."


def fsync_lines(p, run, prep):
    call = p["file_fsync_mode"]
    counts = (
        f"{call} calls in the run phase: {run['fsyncs']} = {run['fsyncs_periodic']} periodic "
        f"(events) + {run['fsyncs_end']} at the end + {run['fsyncs_after_write']} after writes."
    )
    if p["file_test_mode"] == "seqwr":
        made = f"Prepare (not measured): {prep['files_created']} empty files created (seqwr writes them in the run)"
    else:
        made = (
            f"Prepare (not measured): {prep['files_created']} files written ({prep['files_reused']} reused) with "
            f"{prep['writes']} write() of {size_text(p['file_block_size'])}B ({prep['bytes_written'] / MIB:.1f} MiB) "
            f"and {prep['fsyncs']} fsync()"
        )
    made += (
        f" in {prep['elapsed_ns'] / 1e9:.2f} s; nothing dropped or synced between prepare and run "
        "(as sysbench), so the files' pages start in the page cache."
    )
    return [counts, *wrap(this_run_rule(p)), *wrap(FSYNC_RULE), *wrap(made)]


def wrap(text):
    return textwrap.wrap(text, WIDTH, break_on_hyphens=False)


def render(result):
    p, run = result["params"], result["run"]
    lines = [
        "fsync-heavy: sysbench fileio model (1.0.20)",
        *mode_lines(p, run),
        "",
        *report_lines(p, run),
        "",
        *per_op_lines(p, run),
        "",
        *fsync_lines(p, run, result["prepare"]),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(run_main(__import__(__name__)))
