"""`fsprof compare`'s text: the comparison analysis/compare.py found, as sentences. Renders only:
every figure and every pairing of a count with a cause comes from the analysis, so `compare
--json` holds all the text says."""

from functools import partial
from typing import Any

from .. import units
from ..analysis import repeats
from ..analysis.compare import MIN_SHARE, MIN_US
from ..analysis.evidence import class_words
from ..analysis.uring import is_uring_op
from ..analysis.workload import per_unit
from ..trace.maps import async_kinds


_fmt_us = partial(units.fmt_time, unit="us", ms_from=units.MS, ms_digits=2, fine_below=10 * units.US)
_fmt_signed = partial(_fmt_us, signed=True)
_fmt_s = partial(units.fmt_time, unit="s", s_from=units.S, ms_from=units.MS)
_fmt_signed_s = partial(_fmt_s, signed=True)


def _fmt_n(x):
    """A count per op: small ones keep their significant digits (0.004 flushes per write)."""
    return "0" if not x else f"{x:.0f}" if abs(x) >= 100 else f"{x:.2f}" if abs(x) >= 1 else f"{x:.2g}"


def _statistics_line(cmp):
    """What the repeats say (per-repeat figures, medians, interval, test), or that noise was not measured."""
    st, (ra, rb) = cmp["statistics"], cmp["us_per_repeat"]
    if not st["measured"]:
        return (
            f"  (one run each: run-to-run noise not measured; {repeats.repeats_needed()} repeats of each "
            "configuration (a spec's `repeat`) measure it)"
        )
    ma, mb = st["median"]
    ci = st["ratio_ci"]
    where = {
        1: f"every repeat of {cmp['other']} above every one of {cmp['base']}",
        -1: f"every repeat of {cmp['other']} below every one of {cmp['base']}",
        0: "the repeats overlap",
    }[st["separated"]]
    return (
        f"  Repeats (us per op): {cmp['base']} "
        + ", ".join(_fmt_us(v) for v in ra)
        + f"; {cmp['other']} "
        + ", ".join(_fmt_us(v) for v in rb)
        + f". Medians {_fmt_us(mb)} vs {_fmt_us(ma)}, ratio "
        f"{mb / ma if ma else float('inf'):.2f}"
        + (f" (95% bootstrap interval {ci[0]:.2f}-{ci[1]:.2f})" if ci else "")
        + f"; {where} (Mann-Whitney U, exact two-sided p = {st['p']:.2f})."
    )


def _fmt_count(n):
    return f"{n:,.0f}" if n == int(n) or n >= 100 else f"{n:.1f}"


MINOR_OP_SHARE = 0.05  # an op whose calls took less of the workload's time is said to be minor
WORKLOAD_LISTED = 8  # the workload's largest parts listed one by one, the rest together
WORKLOAD_MIN_SHARE = 0.01  # and only those of at least 1% of the difference


def _part_line(p, unit):
    if p["kind"] == "user CPU":
        x, y = p["total_s"]
        return f"user-space CPU of the workload {_fmt_s(y)} vs {_fmt_s(x)}"
    if p["kind"] == "not traced":
        x, y = p["total_s"]
        what = (
            "time in no traced call ("
            + ("user-space CPU, " if p["includes_user_cpu"] else "")
            + "page faults, syscalls on other filesystems or none, sleeps)"
        )
        if p["overlap"]:
            what += ", less the overlap of concurrent threads' calls"
        return f"{what} {_fmt_s(y)} vs {_fmt_s(x)}"
    (na, nb), (la, lb) = p["count"], p["latency_us"]
    units = unit["count"] if unit else [None, None]
    per = [per_unit(n, u) for n, u in zip((na, nb), units)]
    counts = f"{p['call']} calls {_fmt_count(na)} -> {_fmt_count(nb)}"
    if None not in per:
        counts += f" ({_fmt_n(per[0])} -> {_fmt_n(per[1])} per {unit['name']})"
    if la is None or lb is None:
        return counts + " (made on one side only)"
    latency = f"latency {_fmt_us(la)} -> {_fmt_us(lb)}: {_fmt_signed_s(p['latency_s'])} at the new count"
    if na == nb:
        return f"{p['call']} calls {_fmt_count(na)} on both sides; {latency}"
    return f"{counts}: {_fmt_signed_s(p['count_s'])} at the old latency; {latency}"


def _workload_lines(cmp):
    """The workload's own figure, then where its difference went: calls (count, latency), CPU,
    the rest. They add up to the difference."""
    w, base, other = cmp["workload_time"], cmp["base"], cmp["other"]
    (ea, eb), diff = w["elapsed_s"], w["diff_s"]
    what = f"the workload's phase {w['phase']}" if w.get("phase") else "the workload"
    lines = [
        f"{other}: {what} took {_fmt_s(eb)} vs {base}'s {_fmt_s(ea)}"
        + (f" ({w['ratio']:.2f}x, {_fmt_signed_s(diff)})." if w["ratio"] is not None else ".")
    ]
    unit = w.get("unit")
    if unit and None not in unit["count"]:
        lines[0] = (
            lines[0][:-1] + f"; {_fmt_count(unit['count'][1])} vs {_fmt_count(unit['count'][0])} "
            f"{unit['name']}s: {_fmt_s(eb / unit['count'][1])} vs {_fmt_s(ea / unit['count'][0])} per {unit['name']}."
        )
    lines.append(
        f"  Where the {_fmt_signed_s(diff)} went ({other} vs {base}; a call's count part is at "
        f"{base}'s latency, its latency part at {other}'s count; the parts add up to the difference):"
    )
    big = [p for p in w["parts"] if abs(p["diff_s"]) >= WORKLOAD_MIN_SHARE * abs(diff) and p["diff_s"]]
    listed, rest = big[:WORKLOAD_LISTED], [p for p in w["parts"] if p not in big[:WORKLOAD_LISTED]]
    for p in listed:
        lines.append(f"    {_fmt_signed_s(p['diff_s'])}: {_part_line(p, unit)}.")
    if rest:
        lines.append(
            f"    {_fmt_signed_s(sum(p['diff_s'] for p in rest))} together: "
            + ", ".join(f"{p.get('call', p['kind'])} {_fmt_signed_s(p['diff_s'])}" for p in rest if p["diff_s"])
            + "."
        )
    conc = [c for c in w["traced_concurrency"] if c]
    if any(c > 1.01 for c in conc):
        lines.append(
            "  The traced calls add up to more than the wall time (concurrent threads: "
            + " vs ".join(f"{c:.2f}" for c in reversed(w["traced_concurrency"]) if c)
            + " on average): the parts are thread time, and the last one takes the overlap back."
        )
    return lines


def _uring_lines(cmp):
    """The io_uring requests behind io_uring_enter's waits, per opcode and per request."""
    rows = cmp.get("io_uring") or []
    if not rows:
        return []
    show = lambda pair, fmt: " vs ".join("-" if v is None else fmt(v) for v in reversed(pair))  # noqa: E731
    uring = "io_uring request" in async_kinds(r["op"] for r in rows)
    lines = [
        f"  io_uring requests ({cmp['other']} vs {cmp['base']}; io_uring_enter's waits are theirs):"
        if uring
        else f"  libaio iocbs ({cmp['other']} vs {cmp['base']}; io_getevents' waits are theirs):"
    ]
    for r in rows:
        # A libaio iocb's end is its reaping (docs/io_uring.md): no completion tracepoint.
        end = "reaping" if r["op"].startswith("libaio ") else "completion"
        parts = [
            f"{show(r['count'], _fmt_count)}, {show(r['us'], _fmt_us)} each from submission to {end} "
            f"(p99 {show(r['p99_us'], _fmt_us)})"
        ]
        if r["io_wq_us"]:
            parts.append(
                "in io-wq workers, per request: "
                + ", ".join(f"{c} {show(v, _fmt_us)}" for c, v in r["io_wq_us"].items())
            )
        for cls, v in r["requests"].items():
            times = [f"{show(v['device_us'], _fmt_us)} on the device"] if any(v["device_us"]) else []
            times += [f"{show(v['life_us'], _fmt_us)} from start to end"] if any(v["life_us"]) else []
            parts.append(
                f"{class_words(cls)} requests {show(v['per_request'], _fmt_n)} per request"
                + (f", each {' and '.join(times)}" if times else "")
            )
        lines.append(f"    {r['op']}: " + "; ".join(parts) + ".")
    return lines


def _async_above(cmp: dict[str, Any]) -> str:
    """' (the io_uring requests above; --op "io_uring write" explains those of the opcode with
    the most time)', or libaio's iocbs, or both, or '' for none."""
    rows = cmp.get("io_uring") or []
    kinds = async_kinds(r["op"] for r in rows)
    top = next((r["op"] for r in rows if is_uring_op(r["op"])), None)  # rows: most time first
    hint = f'; --op "{top}" explains those' if top else ""
    return f" (the {' and '.join(k + 's' for k in kinds)} above{hint})" if kinds else ""


def sentences(cmp: dict[str, Any]) -> list[str]:
    """The comparison as sentences built from its figures: the workload first, then the op."""
    a, b = cmp["us_per_op"]
    op, base, other = cmp["op"], cmp["base"], cmp["other"]
    p50a, p50b = cmp["p50_us"]
    lines = _workload_lines(cmp) + _uring_lines(cmp)
    noun = "request" if is_uring_op(op) else "call"  # an io_uring opcode's requests (--op "io_uring fsync")
    lines.append(
        f"  Per {op} {noun}: {cmp['ratio']:.2f}x {base}'s ({_fmt_us(b)} vs "
        f"{_fmt_us(a)}; p50 {_fmt_us(p50b)} vs {_fmt_us(p50a)}, p99 {_fmt_us(cmp['p99_us'][1])} vs "
        f"{_fmt_us(cmp['p99_us'][0])})."
    )
    share = cmp.get("op_share") or [None, None]
    if None not in share and max(share) < MINOR_OP_SHARE:
        lines.append(
            f"  These {op} {noun}s took {share[1]:.1%} vs {share[0]:.1%} of the workload's time: the difference "
            "is elsewhere" + _async_above(cmp) + "; --op names another."
        )
    differ = cmp.get("workloads_differ")
    if differ:
        lines.append(
            f"  The runs ran different workloads: `{differ['name'][1]}` vs `{differ['name'][0]}` "
            f"(differing: {' '.join(differ['words'][1]) or '-'} vs {' '.join(differ['words'][0]) or '-'}); "
            "what they ran can make the difference as much as the settings can."
        )
    if cmp.get("settings_differ"):
        lines.append(
            "  Settings that differ ("
            + f"{other} vs {base}): "
            + "; ".join(f"{d['setting']} {d['values'][1]} vs {d['values'][0]}" for d in cmp["settings_differ"])
            + "."
        )
    lines.append(_statistics_line(cmp))
    if not cmp["significant"]:
        st = cmp["statistics"]
        if st["measured"] and st["p"] > repeats.ALPHA:
            why = f"the repeats do not separate (p = {st['p']:.2f} > {repeats.ALPHA:.2f})"
        else:
            why = f"under {MIN_SHARE:.0%} of the op's time"
        lines.append(f"  No significant difference: {_fmt_us(abs(b - a))} per op; {why}.")
        return lines + _mechanism_lines(cmp)  # how each side did its I/O holds whatever the verdict
    lines += [f"  Test bed: {note}" for note in cmp.get("test_bed_notes", [])]
    if len(cmp["phases"]) > 1:
        lines.append(
            "  By phase (workload time, "
            + f"{other} vs {base}): "
            + "; ".join(f"{p['phase']} {p['elapsed_s'][1]:.2f} vs {p['elapsed_s'][0]:.2f} s" for p in cmp["phases"])
            + " (`--phase NAME` explains one)."
        )
    ev, groups = cmp["evidence"], cmp["evidence_by_cause"]
    pair = lambda k: f"{k} {_fmt_n(ev[k][1])} vs {_fmt_n(ev[k][0])}"  # noqa: E731
    up, down = cmp["gross_us"]
    gross = " or ".join(
        f"of all {side}, {_fmt_signed(us)}/op" for side, us in (("increases", up), ("decreases", -down)) if us
    )
    lines.append(
        f"  The difference ({_fmt_signed(b - a)}/op) adds up from these contributions (figures: {other} vs "
        f"{base}; a share is {gross or 'of nothing: no cause moved'}):"
    )
    if not cmp["causes"]:
        lines.append(
            f"    no single cause moved by the threshold ({MIN_SHARE:.0%} of the op's time, at least {MIN_US:.0f} us)."
        )
    for c in cmp["causes"]:
        x, y = c["us_per_op"]
        side: str | int = "increases" if c["diff_us"] > 0 else "decreases"
        mine = groups["causes"].get(c["cause"], [])
        lines.append(
            f"    {_fmt_signed(c['diff_us'])}/op {c['cause']} ({_fmt_us(y)} vs {_fmt_us(x)}; "
            f"{c['share_of_gross']:.0%} of the {side})"
            + ("; " + "; ".join(pair(k) for k in mine) if mine else "")
            + "."
        )
    rest = cmp["not_different"]
    if rest:
        lines.append(
            f"    {_fmt_signed(cmp['not_different_us'])}/op together, each under the threshold "
            "(not different): " + ", ".join(f"{r['cause']} {_fmt_signed(r['diff_us'])}" for r in rest) + "."
        )
    if abs(cmp["residual_us"]) >= 0.05:
        lines.append(
            f"    {_fmt_signed(cmp['residual_us'])}/op not attributed (the causes' sum against the wall time)."
        )
    lines += _mechanism_lines(cmp)
    lines += _elsewhere_lines(cmp)
    if groups["other_moved"]:
        lines.append("  Other counts that differ: " + "; ".join(pair(k) for k in groups["other_moved"]) + ".")
    for side, name in ((1, other), (0, base)):
        if groups["only"][side]:
            lines.append(
                f"  Only {name} has: " + "; ".join(f"{k} {_fmt_n(ev[k][side])}" for k in groups["only"][side]) + "."
            )
    if groups["steady"]:  # with their figures: a reader sees that the difference is not in them
        lines.append("  Counts that do not differ (within 5%): " + "; ".join(pair(k) for k in groups["steady"]) + ".")
    if groups["zero"]:
        lines.append("  Zero on both sides: " + ", ".join(groups["zero"]) + ".")
    return lines


def _mechanism_lines(cmp):
    """Each side's I/O per call, where its calls own the device's requests: who issued what,
    the device's time per request, the caller's waits in sequence."""
    if None in cmp.get("mechanism", [None]):
        return []
    op = cmp["op"]
    lines = [
        f"  How each side did its I/O, per {op} (its calls own the device's requests; the waits of one "
        "call follow one another):"
    ]
    for name, m in ((cmp["other"], cmp["mechanism"][1]), (cmp["base"], cmp["mechanism"][0])):
        by_who = {}
        for cls, r in m["requests"].items():
            for who, per in r["by"].items():
                by_who.setdefault(who, []).append(f"{_fmt_n(per)} {class_words(cls)}")
        issued = "; ".join(f"{who} issued {', '.join(what)}" for who, what in by_who.items()) or "no requests"
        waits = sum(m["waits"].values())
        waited = (
            (
                f"; the caller waited {_fmt_n(waits)} times ("
                + ", ".join(f"{c} {_fmt_n(w)}" for c, w in sorted(m["waits"].items(), key=lambda kv: -kv[1]))
                + ")"
            )
            if waits
            else ""
        )
        waited += "".join(
            f"; {kind}: {_fmt_n(r['windows_per_call'])} per call, "
            + (
                f"each blocked {_fmt_n(r['blocked_per_window'])} times in sequence"
                if r["blocked_per_window"]
                else "never blocked"
            )
            for kind, r in m.get("workers", {}).items()
        )
        device = ", ".join(
            f"{class_words(cls)} {_fmt_us(r['device_us'])}"
            for cls, r in m["requests"].items()
            if r["device_us"] is not None
        )
        lines.append(f"    {name}: {issued}{waited}" + (f"; device time per request: {device}" if device else "") + ".")
    return lines


def _elsewhere_lines(cmp):
    """Work done elsewhere for this op: filesystem threads' time, ranked beside the op's own."""
    lines = []
    if cmp.get("elsewhere"):
        lines.append(
            f"  Work done elsewhere for this op (filesystem threads' windows, per {cmp['op']}; not in its "
            f"wall time; {cmp['other']} vs {cmp['base']}):"
        )
        for r in cmp["elsewhere"]:
            (x, y), (cx, cy) = r["us_per_op"], r["cpu_us_per_op"]
            lines.append(
                f"    {_fmt_signed(y - x)}/op {r['kind']} ({_fmt_us(y)} vs {_fmt_us(x)}, of it on CPU "
                f"{_fmt_us(cy)} vs {_fmt_us(cx)}; shared among the ops {r['link']})."
            )
    if cmp.get("elsewhere_not_linkable"):
        lines.append(
            "  Not linkable to any op (their whole time, per second of the run or phase): "
            + "; ".join(
                f"{r['kind']} {_fmt_us(r['us_per_s'][1])} vs {_fmt_us(r['us_per_s'][0])}"
                for r in cmp["elsewhere_not_linkable"]
            )
            + "."
        )
    threads = [r for r in cmp.get("kernel_threads", []) if max(r["cpu_us_per_s"]) >= 1]
    if threads:
        lines.append(
            "  The filesystems' kernel threads, all their work over the run (on CPU per second): "
            + "; ".join(
                f"{r['thread']} {_fmt_us(r['cpu_us_per_s'][1])} vs {_fmt_us(r['cpu_us_per_s'][0])}" for r in threads
            )
            + "."
        )
    return lines


def render(comparisons: list[dict[str, Any]]) -> str:
    warned = dict.fromkeys(w for c in comparisons for w in c["warnings"])
    lines = [f"WARNING: {w}" for w in warned] + ([""] if warned else [])
    several = len({c["workload"] for c in comparisons}) > 1
    for i, cmp in enumerate(comparisons):
        if several and (i == 0 or comparisons[i - 1]["workload"] != cmp["workload"]):
            lines += [f"== workload {cmp['workload']}", ""]
        lines += sentences(cmp) + band_lines(cmp) + [""]
    return "\n".join(lines).rstrip()


BAND_WORDS = {
    "max": "the slowest {op} call of each side",
    "p99": "the {op} calls at or above each side's p99 that were kept whole",
    "p50": "the body of the {op} calls: each call's time but its waits at or above the tail threshold (a mean)",
}


def band_lines(cmp: dict[str, Any]) -> list[str]:
    """The causes of one latency band (compare --band), in the words of the whole-run listing."""
    band = cmp.get("band")
    if not band:
        return []
    a, b = band["us_per_call"]
    base, other = cmp["base"], cmp["other"]
    kept = ""
    if band["band"] == "p99":
        kept = "; ".join(
            f"{name}: {n:,} of about {of:,} calls"
            for name, n, of in zip((other, base), band["calls"][::-1], band["of_calls"][::-1])
        )
        kept = f" ({kept})"
    lines = [
        f"  The {band['band']} band, {BAND_WORDS[band['band']].format(op=cmp['op'])}{kept}: "
        f"{_fmt_us(b)} vs {_fmt_us(a)} per call ({_fmt_signed(b - a)}); its causes ({other} vs {base}):"
    ]
    for c in band["causes"]:
        x, y = c["us_per_op"]
        lines.append(f"    {_fmt_signed(c['diff_us'])}/call {c['cause']} ({_fmt_us(y)} vs {_fmt_us(x)}).")
    if not band["causes"]:
        lines.append("    no single cause moved by the threshold.")
    if band["not_different"]:
        lines.append(
            f"    {_fmt_signed(band['not_different_us'])}/call together, each under the threshold: "
            + ", ".join(f"{r['cause']} {_fmt_signed(r['diff_us'])}" for r in band["not_different"])
            + "."
        )
    return lines
