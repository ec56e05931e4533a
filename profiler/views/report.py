"""Terminal view of a run's result.json. Reads plain data only: it never touches the kernel."""

from typing import Any

from ..trace import maps
from ..trace.maps import BLK_WRITE_CLASSES
from ..units import fmt_bytes, fmt_ns
from .. import behind
from ..causes import URING_ELSEWHERE
from ..machine import device_model
from ..machine.workload import render as render_workload
from ..analysis.testbed import space_note, waits_for_space


def histogram(log2_ns: list[int], width: int = 40) -> list[str]:
    """bcc-style log2 histogram; slot i holds latencies in [2^i, 2^(i+1)) ns."""
    used = [i for i, n in enumerate(log2_ns) if n]
    if not used:
        return ["      (no samples)"]
    peak = max(log2_ns)
    lines = [f"      {'latency':>21} : {'count':<8} distribution"]
    for i in range(used[0], used[-1] + 1):
        n = log2_ns[i]
        bar = "*" * round(width * n / peak)
        lines.append(f"      {fmt_ns(2**i):>9} -> {fmt_ns(2 ** (i + 1)):<9} : {n:<8} |{bar:<{width}}|")
    return lines


def per_op(count: float, per: float) -> str:
    return f"{count / per:.2f}" if per else "n/a"


def syscall_table(ops: dict[str, Any], indent: str = "   ", title: str = "syscall", width: int = 14) -> list[str]:
    lines = [
        f"{indent}{title:<{width}} {'count':>8} {'avg':>8} {'p50':>8} {'p95':>8} {'p99':>8} {'max':>8} {'total':>8}"
    ]
    for name in sorted(ops, key=lambda n: -ops[n]["total_ns"]):
        h = ops[name]
        lines.append(
            f"{indent}{name:<{width}} {h['count']:>8} {fmt_ns(h['avg_ns']):>8} {fmt_ns(h['p50_ns']):>8} "
            f"{fmt_ns(h['p95_ns']):>8} {fmt_ns(h['p99_ns']):>8} {fmt_ns(h['max_ns']):>8} "
            f"{fmt_ns(h['total_ns']):>8}"
        )
    return lines


def attribution_table(
    breakdowns: dict[str, Any], indent: str = "   ", top: int | None = 4, min_share: float = 0.01
) -> list[str]:
    """Per syscall (the `top` by total time): where its time went, in us per op and share."""
    lines = []
    for op in sorted(breakdowns, key=lambda o: -breakdowns[o]["wall_ns"])[:top]:
        b = breakdowns[op]
        if not b["count"] or not b["wall_ns"]:
            continue
        per_op_us = b["wall_ns"] / b["count"] / 1e3
        other = b["causes"].get("other wait", 0)
        off = b["offcpu_ns"] or 1
        lines.append(
            f"{indent}{op}: {b['count']} ops, {per_op_us:.1f} us/op = "
            + ", ".join(
                f"{cause} {ns / b['count'] / 1e3:.1f} us ({100 * ns / b['wall_ns']:.0f}%)"
                for cause, ns in b["causes"].items()
                if ns >= min_share * b["wall_ns"]
            )
        )
        if other:
            names = ", ".join(list(b["other_wait_frames"])[:3])
            lines.append(f"{indent}  other wait: {100 * other / off:.1f}% of off-CPU time ({names})")
        for cause, by in b.get("sites", {}).items():
            if b["causes"].get(cause, 0) >= min_share * b["wall_ns"]:
                lines.append(f"{indent}  {cause} at: {shares_line(by)}")
        first_wait = next((c for c in b["causes"] if c in b.get("wakers", {})), None)
        if first_wait:
            lines.append(f"{indent}  {first_wait} ended by: {shares_line(b['wakers'][first_wait])}")
        made = {cls: v for cls, v in b.get("requests", {}).items() if v.get("count")}
        if made:
            lines.append(f"{indent}  block requests its calls made: {class_counts_words(made)}")
    return lines


def class_counts_words(by_class: dict[str, Any]) -> str:
    """'14178 sync write (55.4 MiB; 97.6us on the device, 99us from start to end, each)' of
    {class: {count, bytes, timed, device_ns, life_ns}} (maps.requests_of); the times are those of
    the requests seen to end with their maker known (`timed`: all but a front-merged one)."""
    words = []
    for cls, v in by_class.items():
        parts = [fmt_bytes(v["bytes"])] if v.get("bytes") else []
        if v.get("timed"):
            t = v["timed"]
            if v["device_ns"]:
                each = f"{fmt_ns(v['device_ns'] / t)} on the device, {fmt_ns(v['life_ns'] / t)} from start to end, each"
            else:  # an empty cache flush: the queue's own flush request did its device work
                each = f"{fmt_ns(v['life_ns'] / t)} from start to end, each, served by the queue's flushes"
            parts.append(each if t == v["count"] else f"{t} ended: {each}")
        words.append(f"{v['count']} {cls.replace('_', ' ')}" + (f" ({'; '.join(parts)})" if parts else ""))
    return ", ".join(words)


def shares_line(by: dict[str, int], top: int = 3) -> str:
    """The largest of {name: ns} with their shares: "a 80%, b 15%, c 5%"."""
    total = sum(by.values()) or 1
    return ", ".join(f"{name} {100 * ns / total:.0f}%" for name, ns in list(by.items())[:top])


def io_wq_lines(requests: dict[str, Any], io_wq: dict[str, Any], indent: str = "   ") -> list[str]:
    """Of each io_uring opcode, the time io-wq workers spent off CPU running its requests, per
    request and as a share of their submission-to-completion time, by cause."""
    lines = []
    for op, b in io_wq.items():
        h = requests.get(op)
        if not h or not h["count"] or not b["offcpu_ns"]:
            continue
        whole = b["offcpu_ns"]
        lines.append(
            f"{indent}{op} in io-wq workers: {fmt_ns(whole / h['count'])} off CPU per request "
            f"({100 * whole / (h['total_ns'] or 1):.0f}% of its time) = "
            + ", ".join(f"{cause} {100 * ns / whole:.0f}%" for cause, ns in b["causes"].items() if ns >= 0.01 * whole)
        )
        other = b["causes"].get("other wait", 0)
        if other:
            names = ", ".join(list(b["other_wait_frames"])[:3])
            lines.append(f"{indent}  other wait: {100 * other / whole:.1f}% of it ({names})")
    return lines


def libaio_lines(requests: dict[str, Any], indent: str = "   ") -> list[str]:
    """What the libaio iocbs' figures are, and which are missing and why (docs/io_uring.md)."""
    if "libaio iocb" not in maps.async_kinds(requests):
        return []
    return [
        f"{indent}libaio iocbs: timed from io_submit to their reaping by io_getevents (fs/aio.c has no "
        "tracepoint); not had: their completion time, each iocb's own block requests and device time "
        "(io_submit's, summed), an IOCB_CMD_FSYNC's work (a system kworker's)"
    ]


def uring_requests_lines(requests: dict[str, Any], made: dict[str, Any], indent: str = "   ") -> list[str]:
    """Of each io_uring opcode, the block requests its requests made (issued inline or in an io-wq
    worker), per request and by class."""
    lines = []
    for op, by_class in made.items():
        n = requests.get(op, {}).get("count", 0)
        shown = {cls: v for cls, v in by_class.items() if v["count"]}
        if not n or not shown:
            continue
        per = sum(v["count"] for v in shown.values()) / n
        lines.append(f"{indent}{op} block requests: {class_counts_words(shown)}; {per:.2f} per request")
    return lines


def uring_enter_line(split: dict[str, Any], indent: str = "   ") -> str:
    """io_uring_enter's time in two: submitting, and waiting for completions."""
    wait = split["waiting"]
    text = (
        f"{indent}io_uring_enter: {split['calls']} calls, {fmt_ns(split['total_ns'])}: "
        f"submitting {fmt_ns(split['submitting_ns'])}, waiting for completions {fmt_ns(wait['total_ns'])}"
    )
    if wait["count"]:
        text += f" ({wait['count']} calls waited, {fmt_ns(wait['avg_ns'])} each, p99 {fmt_ns(wait['p99_ns'])})"
    return text


def test_bed_line(bed: dict[str, Any] | None) -> str | None:
    """What stands behind the device, in one phrase (docs/test-bed.md), or None for a disk."""
    if not bed:
        return None
    model = bed.get("device_model")
    if model and bed["kind"] == "null_blk":
        return (
            f"an emulated device, {device_model.describe(model)}: a RAM device whose flush copies what its "
            "cache holds into RAM and whose power-off loses what was not flushed; no seeks"
        )
    if model:
        below = test_bed_line({**bed, "device_model": None})
        return f"an emulated device, {device_model.describe(model)}, over a {below}"
    if bed["kind"] == "disk":
        return None
    if bed["kind"] == "zram":
        return "a RAM device (zram): no write cache to flush, no seeks"
    if bed["kind"] == "null_blk":
        return "a RAM device (null_blk): no seeks; a write cache, if it has one, is RAM too"
    disk = bed.get("backing_disk")
    under = (
        (
            f" on {disk} (write cache {bed.get('backing_write_cache')}, "
            f"{'rotational' if bed.get('backing_rotational') else 'not rotational'})"
        )
        if disk
        else ""
    )
    if bed.get("direct_io"):
        return f"loop device, direct I/O to {bed.get('backing_file')}{under}: its I/O and flushes reach the disk"
    return (
        f"loop device over the buffered file {bed.get('backing_file')}{under}: flushes are host writeback, "
        "reads may come from the host's page cache"
    )


def render_fs(fs: dict[str, Any]) -> list[str]:
    dev = fs["device"]
    lines = [
        f"== {fs['label']} ({fs['fs']}) on {dev['name']} ({dev['dev']}), "
        f"mkfs: {' '.join(fs['mkfs_options']) or 'defaults'}, mount: {fs['mount_options'] or 'defaults'}",
        f"   device: write cache {dev['write_cache']}, FUA {'yes' if dev['fua'] else 'no'}, "
        f"scheduler {dev['scheduler']}",
    ]
    bed = test_bed_line(dev.get("test_bed"))
    if bed:
        lines.append(f"   test bed: {bed}")
    space = fs.get("space")
    if space and space["size_bytes"]:
        lines.append(
            f"   filesystem: {space['size_bytes'] / (1 << 30):.1f} GiB, "
            f"{space['used_bytes_start'] / space['size_bytes']:.0%} used at the workload's start, "
            f"{space['used_bytes_end'] / space['size_bytes']:.0%} at its end"
        )
        note = space_note(fs) if waits_for_space(fs) else None
        if note:
            lines.append(f"   test bed: {note}")
    if fs.get("mount_options_in_force"):
        lines.append(
            f"   in force: {fs['mount_options_in_force']}"
            + (", page cache dropped before the workload" if fs.get("caches_dropped") else "")
        )
    text = render_workload(fs["workload"].get("workload", ""), fs["workload"])
    if text:
        lines.extend("   " + line for line in text.splitlines())
    ops = fs["syscalls"]
    lines.extend(syscall_table(ops))
    if fs.get("io_uring"):  # submission to completion posted; libaio's iocbs: to reaping (docs/io_uring.md)
        title = " / ".join(maps.async_kinds(fs["io_uring"]))
        lines.extend(syscall_table(fs["io_uring"], title=title, width=22))
        lines.extend(uring_requests_lines(fs["io_uring"], fs.get("io_uring_block_requests", {})))
        lines.extend(io_wq_lines(fs["io_uring"], fs.get("io_uring_io_wq", {})))
        lines.extend(libaio_lines(fs["io_uring"]))
    unresolved = fs.get("unresolved_syscalls", {})
    if unresolved:
        lines.append(
            "   not placed on a filesystem (absolute path, sync, async I/O): "
            + ", ".join(f"{n} {h['count']}" for n, h in sorted(unresolved.items()))
        )
    if fs.get("io_uring_enter"):
        lines.append(uring_enter_line(fs["io_uring_enter"]))
    fsyncs = ops.get("fsync", {}).get("count", 0) + ops.get("fdatasync", {}).get("count", 0)
    for name, counts in fs["block"].items():
        traced = fs.get("behind", {}).get("block", {}).get("devices", {}).get(name, {})
        if traced.get("bio_based"):
            lines.append(f"   requests to {name}: none of its own (bio-based: its bios and their times are below)")
            continue
        kernel = fs["kernel_counters"].get(name, {})
        ours = traced.get("as_sys_block_stat", {})
        flush = counts["flush"]["count"]
        writes = sum(counts.get(c, {}).get("count", 0) for c in BLK_WRITE_CLASSES)
        lines.append(
            f"   requests to {name}: {flush} cache flushes ({per_op(flush, fsyncs)} per fsync), {writes} writes, "
            f"{counts.get('read', {}).get('count', 0)} reads issued; completed (ours / /sys/block/{name}/stat): "
            + ", ".join(
                f"{k} {'n/a' if ours.get(k + '_ios') is None else ours[k + '_ios']}/{kernel.get(k + '_ios', 'n/a')}"
                for k in ("flush", "write", "read")
            )
        )
    if fs.get("kernel_counters_settled") is False:
        lines.append(
            "   the devices did not go quiet within 5 s before or after the workload: ours and "
            "/sys/block's counts may differ by the requests that ended between the two reads"
        )
    for pname, phase in fs.get("phases", {}).items():
        if not phase["syscalls"]:
            continue
        lines.append(f"   phase {pname} ({phase.get('elapsed_s', 0):.2f} s): where the time went")
        lines.extend(attribution_table(phase["attribution"], indent="     "))
    for module in behind.MODULES:
        section = fs.get("behind", {}).get(module.NAME)
        if section:
            lines.extend(module.report_lines(section, fs))
    threads = fs.get("kernel_threads")
    if threads:
        lines.append(
            "   the filesystem's kernel threads (all their work): "
            + ", ".join(
                f"{name} {t['cpu_ns'] / 1e6:.1f} ms on CPU"
                + (f" (+{t['runqueue_ns'] / 1e6:.1f} ms waiting for a CPU)" if t["runqueue_ns"] >= 100_000 else "")
                for name, t in threads.items()
            )
        )
    lines.append(f'   off-CPU time no rule explained ("other wait"): {100 * fs.get("other_wait_share", 0):.1f}%')
    if fs.get("stack_sampling"):
        lines.append(f"   off-CPU stacks sampled: {stack_sampling(fs)}")
    lost = maps.lost_events(fs.get("drops", {}))
    lines.append("   lost events: " + (", ".join(f"{k} {v}" for k, v in lost.items()) if lost else "none"))
    for what, n in maps.approximated_events(fs.get("drops", {})).items():
        lines.append(f"   {what}: {n}")
    for name in ("write", "fsync"):
        if name in ops:
            lines.append(f"   {name} latency:")
            lines.extend(histogram(ops[name]["log2_ns"]))
    lines.extend(slowest_calls(fs.get("exemplars", {})))
    return lines


def slowest_calls(exemplars: dict[str, list[dict[str, Any]]], ops: int = 3, calls: int = 3) -> list[str]:
    """The slowest calls of the `ops` syscalls whose slowest call is longest, `calls` each, each as
    its time = its longest waits (cause, who ended it) + the rest."""
    lines = []
    for op, slowest in sorted(exemplars.items(), key=lambda kv: -kv[1][0]["ns"] if kv[1] else 0)[:ops]:
        lines.append(f"   slowest {op} {'requests' if op.startswith('io_uring ') else 'calls'} and why:")
        for call in slowest[:calls]:
            shown = [w for w in call["waits"] if w["ns"] >= 0.01 * call["ns"]]
            parts = [
                f"{wait_name(w)} {fmt_ns(w['ns'])} (ended by {w['ended_by']}{work_words(w)}{last_request_words(w)})"
                for w in shown
            ]
            elsewhere = call.get("elsewhere_ns")  # an io_uring request's: not CPU (exemplars.py)
            rest = call["ns"] - sum(w["ns"] for w in shown) - call["cpu_ns"] - call["runnable_ns"] - (elsewhere or 0)
            if rest > 0:
                parts.append(f"{call['blocked_intervals'] - len(shown)} shorter waits {fmt_ns(rest)}")
            if elsewhere is None:
                parts.append(f"CPU {fmt_ns(call['cpu_ns'])}")
            if call["runnable_ns"]:
                parts.append(f"runnable {fmt_ns(call['runnable_ns'])}")
            if elsewhere is not None:
                parts.append(f"{URING_ELSEWHERE} {fmt_ns(elsewhere)}")
            own = call.get("own_requests")
            mine = (
                f"; its own block requests: {requests_words(own['requests'])}{request_times_words(own)}" if own else ""
            )
            who = f"submitted by thread {call['tid']}" if elsewhere is not None else f"thread {call['tid']}"
            lines.append(
                f"     {fmt_ns(call['ns'])} ({who}, phase {call['phase']}) = "
                + " + ".join(parts)
                + mine
                + device_words(call)
            )
    return lines


def device_words(call: dict[str, Any]) -> str:
    """'; the devices meanwhile: loop0 2 flushes (694us, 1.07ms on the device), 1 preflush write'
    of a slow call's device_requests (the last requests to end while it ran); '' for none."""
    rqs = call.get("device_requests")
    if not rqs:
        return ""
    by_dev: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for rq in rqs:
        by_dev.setdefault(rq["device"], {}).setdefault(rq["class"], []).append(rq)
    said = []
    for dev, by_cls in by_dev.items():
        words = []
        for cls, these in by_cls.items():
            n = len(these)
            name = cls.replace("_", " ") + ("es" if cls == "flush" and n > 1 else "s" if n > 1 else "")
            on = [fmt_ns(rq["device_ns"]) for rq in these if rq["device_ns"]]
            behind = sum(rq.get("queued_while_flushing_ns", 0) for rq in these)
            words.append(
                f"{n} {name}"
                + (f" ({', '.join(on)} on the device)" if cls == "flush" and on else "")
                + (f" (queued {fmt_ns(behind)} while {dev} flushed)" if behind else "")
            )
        said.append(f"{dev} {', '.join(words)}")
    last = f"the last {len(rqs)} to end" if call.get("device_requests_more") else "what ended"
    return f"; on the devices meanwhile ({last}): " + "; ".join(said)


def wait_name(wait: dict[str, Any]) -> str:
    """An exemplar wait's cause, with its detail: where a lock was taken, what an other wait was in."""
    detail = wait.get("detail")
    if not detail:
        return wait["cause"]
    return f"{wait['cause']} ({detail})" if wait["cause"] == "other wait" else f"{wait['cause']} at {detail}"


def work_name(work: dict[str, Any]) -> str:
    """'jbd2 commit of transaction 812': an exemplar wait's work, by its kind and id."""
    return work["worker"] + (f" of transaction {work['id']}" if "id" in work else "")


def requests_words(requests: dict[str, int]) -> str:
    """'1 preflush write, 3 meta writes' of {class: count}; '' for none."""
    return ", ".join(f"{n} {cls.replace('_', ' ')}" for cls, n in requests.items())


def request_times_words(work: dict[str, Any]) -> str:
    """' (those 2, summed: 5.9 ms from start to end, 190 us on the device)' of an exemplar
    wait's work (or a call's own requests) whose requests had ended by the wakeup (the rest of a
    request's life is its queue and, for a preflush write, the cache flush the kernel ran before
    it); else ''."""
    t = work.get("request_times", work)  # a work's, or a call's own requests (the same fields)
    if not t or not t.get("timed"):
        return ""
    n = t["timed"]
    if n == 1:
        device = f"{fmt_ns(t['device_ns'])} of it on the device" if t["device_ns"] else "served by the queue's flushes"
        return f" (it took {fmt_ns(t['life_ns'])} from start to end, {device})"
    return f" (those {n}, summed: {fmt_ns(t['life_ns'])} from start to end, {fmt_ns(t['device_ns'])} on the device)"


def work_words(wait: dict[str, Any]) -> str:
    """': its jbd2 commit of transaction 812, 18.2 ms from 1.1 ms before the call, blocked 17.9 ms
    in it; 1 preflush write, 3 meta writes' for a wait a worker ended (result.json exemplar wait's
    "work"), else ''."""
    work = wait.get("work")
    if not work:
        return ""
    what = work_name(work)
    start = work["start_at_ns"]
    when = f"{fmt_ns(-start)} before the call" if start < 0 else f"{fmt_ns(start)} into it"
    span = f"{fmt_ns(work['end_at_ns'] - start)} from {when}" if work["end_at_ns"] is not None else f"from {when}, open"
    rqs = requests_words(work["requests"])
    return f": its {what}, {span}, blocked {fmt_ns(work['blocked_ns'])} in it" + (
        f"; {rqs}{request_times_words(work)}" if rqs else ""
    )


def last_request_words(wait: dict[str, Any]) -> str:
    """'; loop0's last request before the wakeup: its own preflush write, ended 22us before (3.4ms
    from start to end: queued 354us while loop0 flushed, 2.9ms on the device)' for an exemplar wait
    with a last request (exemplars._last_requests); else ''."""
    rq = wait.get("last_request")
    if not rq:
        return ""
    made, cls = rq["made_by"], rq["class"].replace("_", " ")
    a = "an" if cls[0] in "aeiou" else "a"
    what = f"its own {cls}" if made == "this call" else f"{a} {cls} of thread {made}" if made else f"{a} {cls}"
    how = (
        [f"queued {fmt_ns(rq['queued_while_flushing_ns'])} while {rq['device']} flushed"]
        if "queued_while_flushing_ns" in rq
        else []
    )
    how.append(f"{fmt_ns(rq['device_ns'])} on the device" if rq["device_ns"] else "served by the queue's flushes")
    return (
        f"; {rq['device']}'s last request before the wakeup: {what}, ended {fmt_ns(rq['before_wake_ns'])} before"
        f" ({fmt_ns(rq['life_ns'])} from start to end: {', '.join(how)})"
    )


def stack_sampling(fs: dict[str, Any], share: bool = True) -> str:
    """How the off-CPU stacks were taken, in words (result.json "stack_sampling"); with share,
    how much of the off-CPU time that leaves estimated."""
    s = fs.get("stack_sampling")
    if not s:
        return "walked in every call"
    how = f"walked in 1 of {s['every']} calls of each syscall once {s['first']} of its waits have been"
    if "tail_threshold_ns" in s:
        how += f", and in every wait of {fmt_ns(s['tail_threshold_ns'])} or more"
    if not share:
        return how
    how += f": the causes of {100 * s['estimated_share']:.1f}% of off-CPU time are estimated from the walked calls"
    if "tail_threshold_ns" in s:
        how += (
            f"; none of the {s['tail_waits']:,} waits of {fmt_ns(s['tail_threshold_ns'])} or more"
            f" ({fmt_ns(s['tail_ns'])} in all) is"
        )
    return how


def unavailable_lines(result: dict[str, Any]) -> list[str]:
    """One line per reason this kernel could not give figures (result.json "unavailable"; older
    results name only the probes): a reason shared by several probes (a module without BTF on
    5.10) lists their figures on one line."""
    if "unavailable" in result:
        by_why: dict[str, list[dict[str, str]]] = {}
        for u in result["unavailable"]:
            by_why.setdefault(u["why"], []).append(u)
        lines = []
        for why, entries in by_why.items():
            if len(entries) == 1:
                u = entries[0]
                lines.append(f"   unavailable on this kernel: {u['figures']} ({u['probe']}: {why})")
                continue
            figures = "; ".join(dict.fromkeys(f"{u['figures']} ({u['probe']})" for u in entries))
            lines.append(f"   unavailable on this kernel ({why}): {figures}")
        return lines
    return [f"   probe {prog} skipped: {why}" for prog, why in result.get("probes_skipped", {}).items()]


def render(result: dict[str, Any]) -> str:
    w = result["workload"]
    if w["name"] == "record":
        what = f"recorded: {w['target']}, {w['duration_s']:.1f} s ({w['ended_by']})"
    elif w["name"] == "command":
        what = " ".join(w["argv"])
    else:
        what = " ".join([w["name"], *w.get("args", [])])
    lines = [f"WARNING: {w}" for w in result.get("warnings", [])]
    lines.append(f"fsprof {result['fsprof_version']} on Linux {result['kernel']}: workload {what}")
    lines.extend(unavailable_lines(result))
    for fs in result["filesystems"]:
        lines.append("")
        lines.extend(render_fs(fs))
    return "\n".join(lines)
