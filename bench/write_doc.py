#!/usr/bin/env python3
"""Writes docs/benchmarks.md from the results the benches left in build/bench/ (bench/run_all.py
calls it after `make bench`; run it alone to re-render). Every figure in the document comes from
those files; the closing note is computed from them too."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, RESULTS, bpf_per_request, fmt, load, machine, ratio_to, spread  # noqa: E402

DOC = REPO / "docs" / "benchmarks.md"
# Issue 18's targets: throughput cost, attach, a 2 s recording start to exit, Collector.close().
OVERHEAD_TARGET = 0.05
STARTUP_TARGET = 0.2
RECORD_2S_TARGET = 2.3
CLOSE_TARGET = 0.05
WORKLOAD_BENCHES = (
    ("fsync_heavy", "fsync-heavy against sysbench fileio", "docs/workload-fsync-heavy.md"),
    ("bonnie", "bonnie against bonnie++", "docs/workload-bonnie.md"),
    ("untar", "untar against GNU tar", "docs/workload-untar.md"),
    ("flamegraph", "flame graph rendering by inferno", "docs/flamegraphs.md"),
)

INTRO = """# fsprof benchmarks: what profiling costs

Written by `make bench` (bench/run_all.py, then bench/write_doc.py from the results in
build/bench/). Every figure is the median, with the spread (min – max), of repeated runs; where
variants are compared (untraced / fsprof / bpftrace / libbpf-tools, or the tools starting up) they
are interleaved, the order rotated each round (A B C D, B C D A, ...), so that a machine drifting
slower or faster falls on every variant alike, and each ratio is taken within one round.

Reproduce: `make bench` (about 35 minutes; needs root, loop devices, bpftrace, libbpf-tools, PostgreSQL, which
the rule installs). `make bench BENCH_LONG=1` makes the capacity bench's long run and the
continuous-mode soak 10 minutes each;
`BENCH_QUICK=1` runs everything with few, short repeats (to check the scripts: not figures to
quote); `BENCH_WORKLOADS=0` skips the bundled workloads' benches against their reference tools.
Each section names its own script, which runs alone too.

Which mode is which: "fsprof --stack-sample 8" is fsprof's default since 2026-11-29 (stacks
walked in 1 call in 8, every wait of 1 ms or more exact); "fsprof" is `--stack-sample 1`, every
call's stacks walked (the lab mode). The benches that run `fsprof run` or `record` as a user does
(start-up, capacity, soak, the bundled workloads) run the default from that date.
"""


def machine_line(m, quick):
    line = (
        f"**Machine**: {m['cores']} cores ({m['cpu']}), {m['ram_gib']} GiB RAM; kernel {m['kernel']}; "
        f"{m['date']}; load average {m['loadavg']:.2f} when the first bench began."
    )
    if quick:
        line += "\n\n**BENCH_QUICK run: few, short repeats; these figures check the scripts and are not for quoting.**"
    return line


def section(title, data, script, missing):
    if data is None:
        return [f"## {title}", "", f"Not run, or it failed: see build/bench/{missing}.txt (`{script}`).", ""]
    load = data.get("load")
    busy = (
        f"Load average (1 min) {load[0]:.2f} when this bench began, {load[1]:.2f} when it ended: the "
        f"bench itself keeps one or two tasks runnable; more is other work sharing the machine, which "
        f"widens the spreads."
        if load
        else ""
    )
    return [f"## {title}", "", data["markdown"], "", data["how"], "", busy, ""]


def workload_section(done):
    lines = [
        "## The bundled workloads against their reference tools",
        "",
        "Shortened runs of the workloads' own benches (their pages give longer ones and discuss the "
        "figures); the summary each printed:",
        "",
    ]
    for name, title, page in WORKLOAD_BENCHES:
        log = RESULTS / f"{name}.txt"
        if name not in done or not log.exists():
            continue
        status = done[name]["status"]
        lines += [
            f"### {title} ({page})",
            "",
            f"`.venv/bin/python {' '.join(done[name]['argv'])}`"
            + ("" if status == 0 else f" — **failed (exit {status})**"),
            "",
            "```",
            *tail(log),
            "```",
            "",
        ]
    return lines if len(lines) > 4 else []


def tail(log):
    """The summary a bench prints last: what follows its last blank line (at most 15 lines)."""
    text = log.read_text().rstrip().splitlines()
    blanks = [i for i, line in enumerate(text) if not line.strip()]
    body = text[blanks[-1] + 1 :] if blanks else text
    return body[-15:]


def closing_note(overhead, startup, pgbench, capacity):
    out = ["## Closing note", ""]
    missed = False
    if overhead:
        notes, missed = overhead_note(overhead)
        out += notes
    if startup:
        s = startup["summary"]["fsprof record"]["attached_s"]
        bt = [v["attached_s"] for k, v in startup["summary"].items() if k.startswith("bpftrace, fsprof")]
        verdict = "meets" if s["median"] <= STARTUP_TARGET else "misses"
        out.append(
            f"- **Start-up**: `fsprof record` is attached after {s['median'] * 1000:.0f} ms (median; "
            f"{s['min'] * 1000:.0f} – {s['max'] * 1000:.0f} ms), which {verdict} the "
            f"{STARTUP_TARGET * 1000:.0f} ms target"
            + (
                f"; bpftrace attaching the same {startup['attach_points']} attach points takes "
                f"{bt[0]['median'] * 1000:.0f} ms."
                if bt
                else "."
            )
        )
        whole = startup["summary"]["fsprof record"]["total_s"]
        close = spread([p["close_s"] for p in startup.get("phases", [])])
        out.append(
            f"- **Stop**: `fsprof record --duration 2s` exits {whole['median']:.2f} s after it starts "
            f"({'within' if whole['median'] <= RECORD_2S_TARGET else 'over'} the {RECORD_2S_TARGET} s target)"
            + (
                f"; `Collector.close()` takes {close['median'] * 1000:.0f} ms "
                f"({'within' if close['median'] <= CLOSE_TARGET else 'over'} the "
                f"{CLOSE_TARGET * 1000:.0f} ms target)."
                if close
                else "."
            )
        )
    if pgbench:
        p = pgbench["summary"]
        over, dip = p["overhead"]["median"], p["attach_dip"]["median"] if p["attach_dip"] else None
        missed |= over > OVERHEAD_TARGET
        out.append(
            f"- **PostgreSQL pgbench**: {p['fsprof']['median']:,.0f} tps under `fsprof record` against "
            f"{p['untraced']['median']:,.0f} untraced: {over * 100:+.1f}% "
            f"({'within' if over <= OVERHEAD_TARGET else 'over'} the {OVERHEAD_TARGET:.0%} target)"
            + (
                f"; while fsprof attaches ({p['attach_s']['median'] * 1000:.0f} ms) the server loses "
                f"{dip * 100:.1f}% of its tps ({'within' if dip <= OVERHEAD_TARGET else 'over'} the "
                f"{OVERHEAD_TARGET:.0%} target)"
                if dip is not None
                else ""
            )
            + (
                f"; 300 ms of CPU at the lowest priority (SCHED_IDLE) in the same place costs it "
                f"{p['control_dip']['median'] * 100:.1f}%, so on this machine attaching costs "
                + (
                    "no more than any use of a CPU does."
                    if dip is not None and dip <= p["control_dip"]["median"]
                    else "more than the CPU it uses."
                )
                if p.get("control_dip")
                else "."
            )
            + (
                f" fsprof's programs ran {pgbench['stats']['bpf_ns'] / pgbench['stats']['transactions'] / 1e3:.1f} µs "
                "per transaction (bpf_stats round)."
                if pgbench.get("stats")
                else ""
            )
        )
        if p.get("sampled_overhead"):
            so, st = p["sampled_overhead"]["median"], pgbench.get("sampled_stats")
            missed |= so > OVERHEAD_TARGET
            out.append(
                f"  With `--stack-sample {p['stack_sample']}`: {p['sampled']['median']:,.0f} tps, {so * 100:+.1f}% "
                f"({'within' if so <= OVERHEAD_TARGET else 'over'} the {OVERHEAD_TARGET:.0%} target)"
                + (f"; {st['bpf_ns'] / st['transactions'] / 1e3:.1f} µs of BPF per transaction" if st else "")
                + (
                    f", {st['bpf_ns'] / st['transactions'] / (pr['bpf_ns'] / pr['transactions']):.2f}x "
                    f"bench/peer.bt's {pr['bpf_ns'] / pr['transactions'] / 1e3:.1f} µs."
                    if st and (pr := pgbench.get("peer_stats"))
                    else "."
                )
            )
    if capacity:
        for r in capacity["rows"]:
            out.append(
                f"- **Capacity** ({r['what']}, {r['seconds']:.0f} s): {r['syscalls_per_s']:,.0f} syscalls/s, "
                f"{r['ctxt_per_s']:,.0f} context switches/s, {r['blk_requests_per_s']:,.0f} block requests/s "
                f"with {r['lost']:,} lost events; fsprof's own CPU {r['cpu_pct']:.2f}% of a core, RSS "
                f"{r['rss_last_kib'] / 1024:.0f} MiB, BPF maps {r['maps_mib']:.0f} MiB (preallocated)."
            )
    if missed or startup:
        out += ["", *WHY_NOTE]
    return out + [""]


def overhead_note(overhead):
    """(bullets, whether a workload missed the target)."""
    out, missed = [], False
    for key, res in overhead["results"].items():
        s = res["summary"]
        fs = s.get("fsprof", {}).get("overhead")
        if not fs:
            continue
        peers = "; ".join(
            f"{name} {v['overhead']['median'] * 100:+.1f}%"
            for name, v in s.items()
            if name != "untraced" and not name.startswith("fsprof") and v.get("overhead")
        )
        bt = s.get("bpftrace", {}).get("overhead")
        target = "within" if fs["median"] <= OVERHEAD_TARGET else "over"
        missed |= fs["median"] > OVERHEAD_TARGET
        against = ""
        if bt:
            against = (
                ", below the bpftrace script's" if fs["median"] < bt["median"] else ", above the bpftrace script's"
            )
        lost = s["fsprof"]["lost"]
        cpu = s["fsprof"].get("cpu_overhead")
        cpu_text = f" The workload's own CPU per request changed by {cpu['median'] * 100:+.1f}%." if cpu else ""
        out.append(
            f"- **{key}** ({res['title']}): fsprof's overhead is {fs['median'] * 100:+.1f}% of the "
            f"untraced throughput (median of same-round ratios; {fs['min'] * 100:+.1f}% – "
            f"{fs['max'] * 100:+.1f}%), {target} the "
            f"{OVERHEAD_TARGET:.0%} target{against}; peers: {peers or 'not run'}. Lost events: {lost:,}.{cpu_text}"
        )
        costs = res.get("stats", {}).get("fsprof")
        if costs and fs["median"] > OVERHEAD_TARGET:
            progs = [p for p in costs["progs"] if p["run_cnt"]]
            total = sum(p["run_time_ns"] for p in progs) / costs["elapsed"] / 1e7
            top = ", ".join(
                f"{p['name']} {p['run_time_ns'] / costs['elapsed'] / 1e7:.2f}% "
                f"({p['run_cnt'] / costs['elapsed']:,.0f}/s × {p['run_time_ns'] / p['run_cnt']:,.0f} ns)"
                for p in progs[:4]
            )
            out.append(
                f"  What costs the time: fsprof's programs ran {total:.1f}% of a core during this workload; "
                f"the most: {top}."
            )
        pr, bt_pr = per_request(res), per_request(res, "bpftrace")
        if pr:
            versus = ""
            if bt_pr:
                versus = (
                    f"; the bpftrace script's: {bt_pr[0]:.1f} µs "
                    f"({'at or below' if pr[0] <= bt_pr[0] else f'{pr[0] / bt_pr[0]:.1f}x'} it"
                    + rounds_text(res, "fsprof")
                    + ")"
                )
            out.append(
                f"  BPF run time per request (all of fsprof's programs in the bpf_stats runs, divided by "
                f"its requests): {pr[0]:.1f} µs{versus}; an untraced request takes {pr[1]:.1f} µs."
            )
            fl, bt_fl = floor_of(res), floor_of(res, "bpftrace")
            if fl:
                out.append(
                    f"  The floor (program runs per request × what a program that does nothing costs a run "
                    f"here, {res['floor']:,.0f} ns): fsprof's {fl[0]:.1f} runs, {fl[1]:.1f} µs, leaving "
                    f"{pr[0] - fl[1]:.1f} µs for what its programs do"
                    + (
                        f"; the script's {bt_fl[0]:.1f} runs, {bt_fl[1]:.1f} µs, leaving {bt_pr[0] - bt_fl[1]:.1f} µs"
                        if bt_fl and bt_pr
                        else ""
                    )
                    + "."
                )
        sampled = next((name for name in s if name.startswith("fsprof --stack-sample")), None)
        if sampled and s[sampled].get("overhead"):
            spr = per_request(res, sampled)
            over = s[sampled]["overhead"]["median"]
            out.append(
                f"  With `{sampled}` (stacks walked in 1 of N calls, the rest estimated): overhead "
                f"{over * 100:+.1f}% ({'within' if over <= OVERHEAD_TARGET else 'over'} the target)"
                + (
                    f", {spr[0]:.1f} µs of BPF per request"
                    + (
                        f" ({'at or below' if spr[0] <= bt_pr[0] else f'{spr[0] / bt_pr[0]:.1f}x'} the "
                        f"script's{rounds_text(res, sampled)})"
                        if bt_pr
                        else ""
                    )
                    if spr
                    else ""
                )
                + "."
            )
    return out, missed


# The analysis behind the figures, from the programs themselves (bpf/syscalls.bpf.c, bpf/block.bpf.c,
# bpf/ext4.bpf.c) and from hand experiments whose figures are quoted with their date and command.
WHY_NOTE = [
    "Why a fast fsync workload costs what it does: every request (a 16 KiB write, then an fsync that "
    "waits for its data write and the journal) makes about eight context switches and six wakeups on "
    "this 2-core machine, each of which runs fsprof's `on_switch` / `on_waking` (and the bpftrace "
    "script's `sched_switch`), plus sys_enter/sys_exit twice, four programs per block request "
    "(start, issue, completion, end), and ext4's delayed-allocation and jbd2 probes: about 40 "
    "programs against the bpftrace script's 3. Programs that only filter cost 40-100 ns a run here; "
    "the expensive ones walk the kernel stack (the ORC unwinder, about 0.7 µs a walk): the traced "
    "thread's stack at each switch-out (off-CPU attribution; the bpftrace script walks it too), the "
    "waker's at each wakeup of a traced thread (who ended the wait: a thread, a timer or an "
    "interrupt), and the journal thread's at its switch-outs inside a commit (its own time by cause).",
    "",
    "Hand experiments (2026-11-25, bpf/syscalls.bpf.c variants built in the tree and measured by "
    "`bench/bench_overhead.py --rounds 1 --workloads fsync-b0`, bpf_stats, µs of BPF per request): "
    "14.2 before; 9.3 with no switch-out or waker stack at all (the stack walks are a third of the "
    "cost); 12.9 with the in-flight syscall in task-local storage and the tp_btf arguments read "
    "directly (the code now); the bpftrace script 4.5. Skipping the stack of preempted switch-outs "
    "(their cause is CPU contention whatever the stack) saved nothing: they are rare here. So at "
    "full attribution the floor is about 9 µs per request, twice the script's cost, from the number "
    "of events fsprof must see (block requests, journal commits, wakeups) rather than from any one "
    "program. What would go below it: sampled off-CPU and waker stacks (walk the stack for 1 in N "
    "blocked intervals of the same op and scale), which changes what is reported and would be an "
    "option (e.g. `--stacks sampled`), not a silent change of the default. untar is syscall-bound "
    "(6.5 syscalls per entry): there fsprof's sys_enter (fd to filesystem resolution) and the ext4 "
    "delayed-allocation probes (about ten runs per entry: per page written) are the cost.",
    "",
    "Stop (see Start-up for `Collector.close()`): every program but writeback's global_dirty_state "
    "is tp_btf, whose link detaches at once (its program is freed a grace period later, which "
    "nothing waits for). That one classic tracepoint's detach waits for "
    "tracepoint_synchronize_unregister under the kernel's event_mutex (60-110 ms here; 63 such "
    "links took 2.4 s when the programs were classic): it is destroyed on a thread of its own "
    "while the result is written, and the process waits for it before exiting. Its raw arguments "
    "lack the dirty counts and the smoothed limit the tracepoint reads from globals that no BTF "
    "holds and the host's kallsyms does not list (docs/kernel-notes.md).",
    "",
    "Start (hand experiment, 2026-11-26, `bench/bench_startup.py --rounds 3` on e93d062 and on "
    "6feb386, one after the other): most of `Collector()` is syscalls.bpf.o's load (about 100 ms, "
    "the other objects load beside it in 30-50 ms each), and half of that was making the "
    "preallocated per-CPU `offcpu` hash (65,536 entries, about 50 ms on 2 CPUs; `worker_offcpu` "
    "10 ms more). Both are now one value for all CPUs with atomic adds, as `samples` already was: "
    "record attached 355 -> 287 ms, Collector() 327 -> 274 ms, the 2 s recording 2,470 -> 2,397 ms; "
    "on_switch's run time did not move (1,231-1,279 ns before, 1,207-1,218 ns after, two "
    "one-round runs each).",
    "Start, continued (hand experiments, 2026-11-26 evening: `perf record -g` of fresh processes "
    "each making one Collector, and the verifier's statistics at log level 4): Collector() took "
    "235 ms in a fresh process and 150 ms in one that had made one before. What the first paid: "
    "on_switch's verification, 29 ms (28,792 instructions processed: the off-CPU interval code, "
    "with its loop over four slots, inlined at three call sites multiplied the paths), now a global "
    "BPF function that the verifier checks once on its own (2.3 ms; syscalls.bpf.o's load 57 -> "
    "28 ms); reading /proc/kallsyms (5 MB: about 45 ms of kernel CPU, and as much again to split "
    "it in Python) for three XFS work-function addresses, now kept per boot and per load of the "
    "module; libbpf's 4,700 debug messages, each a call into Python under the GIL (20-30 ms), now "
    "kept only for a failed load's log. `bench/bench_startup.py --rounds 3` on b13b232 and on "
    "3b18a2b, one after the other: record attached 274 -> 190 ms, the 2 s recording 2,382 -> "
    "2,303 ms. Where PYTHONDONTWRITEBYTECODE is set (this machine, CI, many containers), an "
    "editable install compiled every module at each start (importing what record loads: 91 ms "
    "instead of 42); `make setup` now compiles the bytecode once, as `pip install .` does, and "
    "both figures above are with it. Past its 2 s, the whole run is the detach of 99 tp_btf links "
    "(34 ms) and, the critical path, global_dirty_state's classic detach (75-120 ms), which now "
    "begins before the snapshot (Collector.stop) and overlaps it and the result.",
    "Maps that grew with the machine (2026-11-26, late): the counters and histograms of the "
    "writeback, ext4, XFS and btrfs objects were preallocated per-CPU hashes, 6 MB per CPU (5 MB "
    "of it writeback's `throttle`, a 4.7 KiB histogram per key): 390 MB on 64 CPUs, and one "
    "per-CPU allocation per element at every start. They are now shared with atomic adds, as "
    "`op_hist` is (3.5 KB per CPU left, tests/test_loader.py keeps it under 16 KiB). Collector() "
    "in fresh processes, 6 each, alternated: 133 -> 119 ms median, its system CPU 174 -> 152 ms, on "
    "2 CPUs. The atomic adds cost nothing measurable per event (on_da_write_begin 261-292 ns "
    "before, 254-268 after, `bench/bench_overhead.py --rounds 1 --workloads untar,fsync-b0 "
    "--tracers fsprof`, two runs each). The same runs: on_sys_enter, which now fills the in-flight "
    "record field by field instead of copying a zeroed 300-byte one, 582-606 -> 532-562 ns on "
    "fsync-b0 and 439-460 -> 423-435 ns on untar.",
    "Stack sampling and the clock (2026-11-26, night; `bench/bench_overhead.py --rounds 1 --workloads "
    "fsync-b0`, bpf_stats, one invocation per line so that fsprof's variants and the script share "
    "the machine's state): `--stack-sample 8` walks the stacks of 1 in 8 calls once 64 waits of the "
    "op have been walked. Walking only the traced thread's stacks that way took fsync-b0 from 47.2 "
    "to 34.8 µs of BPF per request; the journal thread's stacks inside its commit windows were as "
    "costly again (on_switch 13.6 -> 6.8 µs per request with them off), so worker windows are "
    "sampled the same way (42.4 -> 26.6 µs). An untraced switch cost on_switch 209 ns, 80 of them "
    "reading the clock (bpf_ktime_get_ns is slow in this nested VM): it is now read only for a "
    "switch that concerns fsprof (131 ns; pipe ping-pong of two untraced processes under "
    "bpf_stats), and after the filter in the block completion programs. After both: 18.3 µs per "
    "request sampled, 38.1 full, the bpftrace script 12.7. What the sampled 18.3 µs are: on_switch "
    "3.9 (9.5 switches per request on the machine, about 130 ns each for the untraced ones, 65 more "
    "while a commit window is open, plus the traced thread's intervals), the block request "
    "programs 5.5 (not half of them for the loop device's backing disk, as this note said until "
    "2026-11-27: see the last paragraph), sys_enter 1.6 (700 ns: the fd's filesystem, the filter, the clock), "
    "on_waking 1.4, the "
    "jbd2 probes 1.4, ext4's delayed-allocation probes 1.0, and 1.2 for the two other "
    "sched_switch programs (ext4's commit-block wait and writeback's pause end), which each cost "
    "the 60-ns floor of a program run at every switch even when they have nothing to do: folding "
    "them into on_switch's worker windows is the next saving. untar gains nothing from sampling "
    "(2,000 switches/s): its cost is sys_enter and ext4's per-page probes.",
    "One sched_switch program and plain loads (2026-11-27; `bench/bench_overhead.py --rounds 1 "
    "--workloads fsync-b0,untar --untar-entries 20000 --tracers fsprof,fsprof-sampled,bpftrace` on "
    "2b1059f and 8f18b01 alternated, two invocations each; ns per run are means of the two): ext4's "
    "commit-block wait now reads a blocked-time counter that on_switch keeps in the commit thread's "
    "worker window, and writeback's dirty-throttling pauses are handed to on_switch (bpf/shared_maps.h), "
    "so one sched_switch program runs at every switch instead of three: fsync-b0's programs per "
    "switch 1,421 -> 1,184 ns full, 599 -> 425 ns with `--stack-sample 8`. tp_btf arguments, the "
    "current task and pt_regs are walked with plain BTF loads instead of one bpf_probe_read call per "
    "step: on_sys_enter 656 -> 504 ns on fsync-b0 and 447 -> 366 on untar, ext4's delayed-allocation "
    "probes 306-342 -> 221-249, its block-allocation probes 309-557 -> 208-397, writeback's "
    "per-inode probes 361-767 -> 268-404 (one 1,151 outlier), the bio probes 153-224 -> 101-139. The "
    "BPF time per request against the bpftrace script's in the same invocation: fsync-b0 full "
    "2.54-3.57x -> 2.27-2.84x, sampled 1.50-1.81x -> 1.35-1.45x; untar full 1.46-1.51x -> "
    "1.14-1.32x, sampled 1.44-1.46x -> 1.21-1.29x. What is left above the script on fsync-b0, sampled "
    "(per request): on_switch about 4 µs (9.5 switches: the floor of the one program, the traced "
    "thread's intervals, the journal thread's windows), the block request programs about 4 µs, on_waking 1.5, "
    "sys_enter/exit 2, the jbd2 probes 1.5; the script runs 3 programs, fsprof about 40.",
    "The floor, the walks and the block programs (2026-11-27, later; fsync-b0 with `--stack-sample 8`, "
    "bpf_stats, two invocations of each experiment on 0de4b30 with the script in the same invocation): a "
    "program that does nothing costs 68-81 ns a run here (`tp_btf_empty`: the floor table above); fsprof "
    "runs about 52 programs per fsync-b0 request against the script's 17, a floor of 3.5 µs against "
    "1.1, so fsprof's cost is not its floor but what its programs do. Stack walks: with sampling set "
    "so that no call is walked after each op's first 64 waits, BPF per request fell from 12.9-14.6 µs "
    "to 10.8-11.7 (the script: 9.8-10.4), on_switch from 3.3-3.8 to 1.9-2.2 µs, on_waking from "
    "1.2-1.3 to 0.5-0.6: at 1 in 8 the walks are about a quarter of the cost, the bookkeeping of "
    "about 50 events per request the rest. The block request programs cost 3.5-4.2 µs per request, "
    "and 3.6-3.7 µs with the loop device's backing disk taken out of `traced_devs`: nearly all of it "
    "is the loop device's own requests (about two per fsync: the data write and the journal's commit "
    "write; on_io_start about 820 ns a run, issue 430, completion 340, io_done 410, getrq 230). On a "
    "loop device over a buffered file (docs/test-bed.md) the backing disk sees the file's writeback, "
    "not a request per fsync, so a real disk would not halve the block programs' cost, as the two "
    "notes above said.",
    "What start-up is still spent on (2026-11-27, third session; the verifier table under Start-up, "
    "and `perf record -g` of `bench_startup.verification(3)` with `perf report --children`): "
    "Collector() is CPU-bound, its loads side by side on both CPUs, and the kernel's verification "
    "of the 97 programs is 115-135 ms of that CPU (two make bench runs) for 42,000 instructions, about 3 µs "
    "an instruction. More than half of it is btf_nested_type_is_trusted (19% of the samples, the "
    "verifier's whole checking 32%): on 6.18, each load of a pointer field from a trusted pointer "
    "(a tp_btf argument, `bpf_get_current_task_btf()`) looks the parent type up by name as "
    "`<type>__safe_trusted`, then as `__safe_trusted_or_null`, `__safe_rcu` and "
    "`__safe_rcu_or_null` until one says how the field is trusted, each a linear search of the "
    "126,572 types of the kernel's BTF, on every path the verifier walks. ext4's "
    "`on_jbd2_commit_locking`, 32 instructions with one such load (`journal->j_fs_dev`), takes "
    "1.4 ms to verify; a program that does nothing 0.2 ms. The plain loads that made the hot "
    'programs cheaper per event ("One sched_switch program and plain loads" above) are what '
    "costs here; probe reads (`BPF_CORE_READ`) would cost next to nothing to verify and 25 ns a "
    "step at every event. `bpf_core_cast()`, which makes a pointer untrusted at no cost per event, "
    "is no way out: Debian 12's 6.1 has no such kfunc (it came in 6.2), and the type ID it takes "
    'would resolve against the minimised BTF the objects load with ("Start, continued" above), '
    "not the kernel's. Python's part of record's start is about 95 ms (30 to start the "
    "interpreter, 65 of imports spread over many modules, none above 10 ms).",
    "Map memory (2026-11-29, thirteenth session; each map's memlock counted once by its id, "
    "`bpftool map show id N` for each map fd of the recording): the soak "
    'and capacity rows\' "BPF maps 227 MiB" summed memlock per fd, and several objects hold an '
    "fd on each shared map (the stack map, 33.5 MiB, four times), so it counted them up to four "
    "times; the maps really took 111 MiB with ext4's objects and 124 MiB with all three "
    "filesystems'. Of that, 40 MiB was the two stack maps (65,536 + 8,192 stacks of 64 frames), "
    "and most of the rest histograms and aggregates sized far past what any run fills: the "
    "kernel tree's untar on btrfs (the most varied bundled run) fills 2,032 stacks, 647 off-CPU "
    "keys, 2,018 sample keys, 43 op histograms and 19 block keys. Now 16,384 + 8,192 stacks "
    "(the same untar: 1,739 stacks, 103 spilled, none lost to a collision), 16,384 off-CPU and "
    "sample keys, 512 op histograms, 256 of each other histogram map: 57 MiB with all three "
    "filesystems (tests/test_loader.py holds it under 64 MiB), 47 MiB in the soak "
    "(`bench/bench_soak.py`, ext4), RSS flat after the second window (61.7 -> 62.3 MiB). A full "
    "map is counted in `drops` (ops_full, offcpu_full, samples_full, block_full...), and "
    "continuous mode empties the stack maps once a quarter of the main one is used.",
    "Who made each block request (2026-11-29, thirteenth session; `bench/bench_overhead.py --rounds "
    "1 --workloads fsync-b0 --tracers fsprof,fsprof-sampled,bpftrace --stats-rounds 2`, on 9588289 a"
    "nd then on 5511e7f, one after the other): recording a request's maker at `block_getrq` (`rq_own"
    "ers`, and the call's own count in `call_rqs`), taking it at issue and adding its times at its l"
    "ast completion cost on_getrq 520 ns a run (it was under the table's top ten before), on_rq_issu"
    "e 359 -> 424 ns, on_rq_complete 246 -> 372 ns: about 0.5 µs per block request, which fsync-b0 m"
    "akes about one of per request. The BPF time per request of those runs: full 17.1 -> 17.1 µs (3."
    "39x -> 2.90x the script's, which itself moved 5.1 -> 5.9 µs), sampled 9.0 -> 11.5 µs (1.76x -> "
    "1.94x): one round each, within what rounds spread by here, and over issue 32's 1.0x target as b"
    "efore.",
    "The whole bench again (2026-11-29, eighteenth session, a quiet machine). The default "
    "(`--stack-sample 8`) against bench/peer.bt, BPF time per request: pgbench 0.45x (the script, "
    'following the server by `comm == "postgres"`, walks every backend\'s stack at every switch: 2.3 µs '
    "a run), untar 1.74x, fio-b0 2.01x, fsync-b0 2.34x, fsync-b1 3.29x. How far one figure moves "
    "with the bench around it: four shorter invocations an hour later (`bench/bench_overhead.py "
    "--rounds 1 --workloads fsync-b0 --tracers fsprof-sampled,bpftrace --stats-rounds 2`, a fresh "
    "image each) measured fsync-b0 at 20.9-24.2 µs against the script's 12.8-13.6 (1.6-1.8x), where "
    "the whole bench's bpf_stats rounds, on an image that 30 runs had written, measured 35.2 against "
    "15.2: the same programs ran 20-40% longer a run there (on_getrq 785-830 ns against 1,086). So "
    "the ratio holds within a round, not across benches. Where fsync-b0's nanoseconds go (the "
    "table above, per request): on_switch 8.5 µs (12 runs), on_waking 2.9 µs, the block layer's "
    "five programs 9.8 µs for 2.2 requests (start, getrq, issue, complete, done), sys_enter and "
    "sys_exit 3.0 µs, jbd2's commit probes 4.1 µs, the delayed-allocation, dirtying and writeback "
    "probes 3.0 µs, and three programs on block_bio_queue (ext4's, btrfs's, block's for stacked devices) "
    "1.8 µs. `fsprof record --pid` does not know the filesystem, so it loads every filesystem's "
    "objects: XFS's workqueue probes run at every work item of the machine (1.2 µs a request here, "
    "on ext4).",
    "Who made each request, priced (the same day; the four invocations above, alternating): without "
    "the owner's insert at `block_getrq` (an experiment that loses the request's maker) on_getrq took "
    "575 ns a run against 785-830, on_rq_issue 484-505 against 655-710 and on_rq_complete 337-361 "
    "against 492-562: about 1 µs a request of fsync-b0's 21-24. `rq_owners` as a plain hash instead of "
    "an LRU hash saved nothing. Handing the owner to `block_io_start` through a per-CPU slot (both "
    "run in the submitter, one after the other) would save most of that on kernels that have "
    "block_io_start (6.5 on); 5.10 and 6.1 would keep the map.",
    "Start-up (the same day): `fsprof record` was attached 2,037 ms after it started (240 ms on "
    "2026-11-27): the kernel took 1.8 s to verify syscalls.bpf.o, 884 ms of it on_sys_exit (707,798 "
    "instructions) and 721 ms on_sys_enter, both for libaio's loops over up to 128 iocbs. The loops "
    "now call global functions for each iocb (verified once) and no longer branch on what those "
    "return: on_sys_exit 41,204 instructions (50 ms), on_sys_enter 4,224 (10 ms), `Collector()` "
    "0.45-0.6 s; `fsprof record` attached after 482 ms. The Start-up section above is that re-run "
    "(`bench/bench_startup.py` alone, at 500b411); the other sections were measured at 3ee0f62, whose "
    "programs run the same code at every event (the change is in io_submit's and io_getevents' "
    "paths only). What is left is mostly "
    "on_getrq, 96 ms for 5,382 instructions: its loads of pointer fields from the task and the bio "
    "(trusted pointers), each a search of the kernel's BTF on each path, as the note \"What "
    'start-up is still spent on" above finds; the libaio loop had paid the same at each turn.',
]


def rounds_text(res, tracer):
    """'; round by round, R the script's', R the spread of the per-round ratios of the tracer's BPF
    per request to the script's; '' with fewer than two rounds."""
    r = ratio_to(res.get("stats", {}), tracer)
    return f"; round by round, {fmt(r, 2, 'x')} the script's" if r and r["n"] > 1 else ""


def floor_of(res, tracer="fsprof"):
    """(program runs per request, their floor in µs: runs × the empty program's ns a run) or None."""
    costs = res.get("stats", {}).get(tracer)
    if not costs or not res.get("floor") or not costs.get("events"):
        return None
    runs, _, floor = bpf_per_request(costs, res["floor"])
    return runs, floor


def per_request(res, tracer="fsprof"):
    """(BPF µs per request of the tracer's bpf_stats run, µs per untraced request) or None."""
    costs = res.get("stats", {}).get(tracer)
    base = res["summary"].get("untraced", {}).get("rate")
    if not costs or not base:
        return None
    runs = res["runs"].get(tracer) or []
    events = costs.get("events") or (costs["rate"] * costs["elapsed"])
    bpf_ns = sum(p["run_time_ns"] for p in costs["progs"])
    return bpf_ns / events / 1e3, 1e6 / base["median"], len(runs)


def write(done=None):
    done = done or {}
    overhead, startup, pgbench, capacity, report = (
        load(n) for n in ("overhead", "startup", "pgbench", "capacity", "report")
    )
    first = next((d for d in (overhead, startup, pgbench, capacity, report) if d), None)
    m = first["machine"] if first else machine()
    quick = any(d and d.get("quick") for d in (overhead, startup, pgbench, capacity, report))
    lines = [INTRO, machine_line(m, quick), ""]
    if any(d["seconds"] for d in done.values()):
        lines += [
            "Benches run: "
            + ", ".join(
                f"{n} {d['seconds'] / 60:.1f} min" + ("" if d["status"] == 0 else " (FAILED)") for n, d in done.items()
            )
            + ".",
            "",
        ]
    lines += section("Tracing overhead", overhead, "bench/bench_overhead.py", "overhead")
    lines += section("Start-up", startup, "bench/bench_startup.py", "startup")
    lines += section("A real database: PostgreSQL pgbench", pgbench, "bench/bench_pgbench.py", "pgbench")
    lines += section("Stack sampling: the same answers?", load("sampling"), "bench/bench_sampling.py", "sampling")
    lines += section("Capacity", capacity, "bench/bench_capacity.py", "capacity")
    lines += section("Report cost", report, "bench/bench_report.py", "report")
    lines += section("Continuous mode: soak", load("soak"), "bench/bench_soak.py", "soak")
    lines += workload_section(done)
    lines += closing_note(overhead, startup, pgbench, capacity)
    DOC.write_text("\n".join(lines).rstrip() + "\n")
    return DOC


if __name__ == "__main__":
    runs = RESULTS / "run_all.json"  # what bench/run_all.py ran, and how
    print(write(json.loads(runs.read_text()) if runs.exists() else {}))
