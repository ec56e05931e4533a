"""Inline SVG charts of the HTML report, drawn from result.json figures: latency histograms (small
multiples per syscall, one panel per filesystem on one shared log axis) and stacked cause bars
(µs per op). Plain strings out; no JavaScript: tooltips are SVG <title> elements."""

import math
from html import escape

from ... import units
from ...causes import URING_ELSEWHERE
from ...trace.hist import slot_range
from ..report import last_request_words, request_times_words, requests_words, work_name

PERCENTILES = (("p50", "p50_ns", "6 0"), ("p95", "p95_ns", "4 3"), ("p99", "p99_ns", "2 2"), ("max", "max_ns", "1 3"))
LABEL_W, PLOT_W, SIDE_W = 130, 520, 300  # px: row label, plot area, figures on the right
PANEL_H, AXIS_H = 70, 28


def fmt_ns(ns):
    """'901 µs', '1.28 ms': the terminal report's figures, typeset."""
    return units.fmt_ns(ns, typeset=True)


def fmt_us(us):
    return f"{us:,.1f} µs"


def attrs(**kv):
    """' k="v"' for each item (data_fs → data-fs), escaped."""
    return "".join(f' {k.replace("_", "-")}="{escape(str(v))}"' for k, v in kv.items())


# ---------------------------------------------------------------------------------------------
# Latency histograms


def _bucket_range(hists):
    used = [i for h in hists for i, n in enumerate(h["log2_ns"]) if n]
    return (min(used), max(used) + 1) if used else (0, 1)


def _ticks(lo, hi):
    """Decade ticks (1 µs, 10 µs, ...) between 2^lo and 2^hi ns; octaves when the range is short."""
    decades = [10**k for k in range(0, 13) if lo <= math.log2(10**k) <= hi]
    return decades if len(decades) >= 2 else [2**i for i in range(lo, hi + 1)]


def latency_chart(op, panels):
    """One syscall's latency on every filesystem: panels [(name, HIST)], one row each, log2
    buckets as bars (the terminal's histogram), the fine slots as a line on their own scale,
    p50/p95/p99/max as vertical marks; figures on the right."""
    lo, hi = _bucket_range([h for _, h in panels])
    x = lambda log2v: LABEL_W + PLOT_W * (min(max(log2v, lo), hi) - lo) / (hi - lo)  # noqa: E731
    width, height = LABEL_W + PLOT_W + SIDE_W, PANEL_H * len(panels) + AXIS_H + 18
    out = [
        f'<svg class="chart latency" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"'
        f' viewBox="0 0 {width} {height}" role="img"{attrs(data_op=op)}>',
        f"<title>{escape(op)} latency per filesystem</title>",
        f'<text x="{LABEL_W}" y="12" class="note">bars: {escape(op)} calls per power of two; line: per '
        f"1/16 octave (own scale); marks: p50, p95, p99, max</text>",
    ]
    for row, (name, h) in enumerate(panels):
        out.append(_latency_panel(name, op, h, 18 + row * PANEL_H, x))
    axis_y = 18 + PANEL_H * len(panels)
    out.append(f'<line x1="{LABEL_W}" x2="{LABEL_W + PLOT_W}" y1="{axis_y}" y2="{axis_y}" class="axis"/>')
    for t in _ticks(lo, hi):
        tx = x(math.log2(t))
        out.append(
            f'<line x1="{tx:.1f}" x2="{tx:.1f}" y1="{axis_y}" y2="{axis_y + 4}" class="axis"/>'
            f'<text x="{tx:.1f}" y="{axis_y + 16}" class="tick">{escape(fmt_ns(t))}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def _latency_panel(name, op, h, top, x):
    base, tall = top + PANEL_H - 6, PANEL_H - 20
    peak = max(h["log2_ns"]) or 1
    out = [
        f'<g class="panel"{attrs(data_fs=name, data_op=op)}>',
        f'<text x="{LABEL_W - 8}" y="{base - tall / 2}" class="rowlabel">{escape(name)}</text>',
        f'<line x1="{LABEL_W}" x2="{LABEL_W + PLOT_W}" y1="{base}" y2="{base}" class="base"/>',
    ]
    for i, n in enumerate(h["log2_ns"]):
        if n:
            x0, x1 = x(i), x(i + 1)
            bh = tall * n / peak
            share = 100 * n / h["count"] if h["count"] else 0
            out.append(
                f'<rect class="bucket" x="{x0 + 0.5:.1f}" y="{base - bh:.1f}" width="{max(x1 - x0 - 1, 1):.1f}"'
                f' height="{bh:.1f}"{attrs(data_bucket=i, data_count=n)}><title>{escape(name)} {escape(op)}: '
                f"{n} in {escape(fmt_ns(2**i))} – {escape(fmt_ns(2 ** (i + 1)))} ({share:.0f}%)</title></rect>"
            )
    out.append(_fine_line(h.get("fine", {}), base, tall, x))
    for k, (label, key, dash) in enumerate(PERCENTILES):
        if h["count"] and h.get(key):
            px = x(math.log2(max(h[key], 1)))
            out.append(
                f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{base - tall - 4}" y2="{base}" class="mark"'
                f' stroke-dasharray="{dash}"/><text x="{px + 2:.1f}" y="{base - tall + 4 + 9 * k}"'
                f' class="marklabel">{label}</text>'
            )
    figures = " ".join(f"{label} {fmt_ns(h[key])}" for label, key, _ in PERCENTILES)
    out.append(
        f'<text x="{LABEL_W + PLOT_W + 10}" y="{base - tall / 2 - 6}" class="figures">n = {h["count"]:,}</text>'
        f'<text x="{LABEL_W + PLOT_W + 10}" y="{base - tall / 2 + 8}" class="figures">{escape(figures)}</text>'
    )
    out.append("</g>")
    return "".join(out)


def _fine_line(fine, base, tall, x):
    """The fine (1/16 octave) slots as a step line, scaled to their own peak."""
    if not fine:
        return ""
    peak = max(fine.values())
    points = []
    for slot in sorted(fine, key=int):
        low, high = slot_range(int(slot))
        y = base - tall * fine[slot] / peak
        x0, x1 = x(math.log2(max(low, 1))), x(math.log2(max(high, 1)))
        points += [f"{x0:.1f},{base}", f"{x0:.1f},{y:.1f}", f"{x1:.1f},{y:.1f}", f"{x1:.1f},{base}"]
    return f'<polyline class="fine" points="{" ".join(points)}"/>'


# ---------------------------------------------------------------------------------------------
# Stacked cause bars


def cause_chart(op, rows, colours, caption=""):
    """Stacked horizontal bars of one syscall: rows [(name, BREAKDOWN)], µs per op by cause,
    one common scale; causes in the same order on every row (heaviest overall first)."""
    rows = [(name, b) for name, b in rows if b and b.get("count")]
    if not rows:
        return ""
    totals = {}
    for _, b in rows:
        for cause, ns in b["causes"].items():
            totals[cause] = totals.get(cause, 0) + ns / b["count"]
    order = sorted(totals, key=lambda c: -totals[c])
    longest_us = max(b["wall_ns"] / b["count"] / 1e3 for _, b in rows) or 1
    bar_h, gap = 22, 10
    legend_rows = math.ceil(len(order) / 3)
    width = LABEL_W + PLOT_W + SIDE_W
    height = 22 + len(rows) * (bar_h + gap) + 18 * legend_rows + 8
    out = [
        f'<svg class="chart causes" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"'
        f' viewBox="0 0 {width} {height}" role="img"{attrs(data_op=op)}>',
        f"<title>{escape(op)}: where the time went, µs per op{escape(caption)}</title>",
        f'<text x="{LABEL_W}" y="12" class="note">{escape(op)}: µs per call by cause{escape(caption)}</text>',
    ]
    for row, (name, b) in enumerate(rows):
        y = 22 + row * (bar_h + gap)
        out.append(_cause_row(name, op, b, order, colours, y, bar_h, PLOT_W / longest_us))
    ly = 22 + len(rows) * (bar_h + gap) + 4
    for k, cause in enumerate(order):
        lx, lyy = LABEL_W + (k % 3) * 230, ly + 18 * (k // 3)
        out.append(
            f'<rect x="{lx}" y="{lyy}" width="12" height="12" fill="{colours(cause)}"/>'
            f'<text x="{lx + 16}" y="{lyy + 10}" class="legend">{escape(cause)}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def _cause_row(name, op, b, order, colours, y, bar_h, px_per_us):
    n = b["count"]
    wall_us = b["wall_ns"] / n / 1e3
    out = [
        f'<g class="bar"{attrs(data_fs=name, data_op=op, data_us=f"{wall_us:.1f}", data_count=n)}>',
        f'<text x="{LABEL_W - 8}" y="{y + bar_h / 2 + 4}" class="rowlabel">{escape(name)}</text>',
    ]
    x = LABEL_W
    for cause in order:
        ns = b["causes"].get(cause, 0)
        if not ns:
            continue
        us = ns / n / 1e3
        w = us * px_per_us
        share = 100 * ns / b["wall_ns"] if b["wall_ns"] else 0
        out.append(
            f'<rect class="cause" x="{x:.2f}" y="{y}" width="{w:.2f}" height="{bar_h}" fill="{colours(cause)}"'
            f"{attrs(data_cause=cause, data_us=f'{us:.1f}')}><title>{escape(name)} {escape(op)}: "
            f"{escape(cause)} {escape(fmt_us(us))} per call ({share:.0f}%)</title></rect>"
        )
        x += w
    out.append(
        f'<text x="{x + 6:.1f}" y="{y + bar_h / 2 + 4}" class="figures">{escape(fmt_us(wall_us))}/call, '
        f"{n:,} calls</text></g>"
    )
    return "".join(out)


def request_lanes(requests, ns):
    """{index: lane} of a call's device requests that show on its axis (those ending after it
    began), each in the first lane where it overlaps no other."""
    lanes, ends = {}, []
    for i, rq in sorted(enumerate(requests), key=lambda ir: ir[1]["start_at_ns"]):
        if rq["end_at_ns"] < 0 or rq["start_at_ns"] > ns:
            continue
        lane = next((k for k, end in enumerate(ends) if end <= rq["start_at_ns"]), len(ends))
        if lane == len(ends):
            ends.append(0)
        ends[lane] = rq["end_at_ns"]
        lanes[i] = lane
    return lanes


def device_rows(call, lanes, px, top, h):
    """A call's device requests on its axis, lane by lane (request_lanes): each from its start to
    its end, the part on the device darker."""
    out = []
    ns = call["ns"] or 1
    for i, rq in enumerate(call.get("device_requests", [])):
        if i not in lanes:
            continue
        y = top + lanes[i] * (h + 1)
        x0, x1 = max(rq["start_at_ns"], 0), min(rq["end_at_ns"], ns)
        on = rq["device_ns"] or 0
        where = f"{fmt_ns(on)} on the device" if on else "served by the queue's flush request"
        own = ", made by the call's thread" if rq.get("made_by") == call["tid"] else ""
        life = fmt_ns(rq["end_at_ns"] - rq["start_at_ns"])
        tip = escape(f"{rq['class'].replace('_', ' ')} on {rq['device']}: {life} from start to end, {where}{own}")
        data = attrs(data_class=rq["class"], data_start=rq["start_at_ns"], data_end=rq["end_at_ns"])
        out.append(
            f'<rect class="request" x="{LABEL_W + x0 * px:.2f}" y="{y}" width="{max((x1 - x0) * px, 0.5):.2f}"'
            f' height="{h}" fill="#bbb"{data}><title>{tip}</title></rect>'
        )
        if on:
            d0 = max(rq["end_at_ns"] - on, x0)
            out.append(
                f'<rect class="on-device" x="{LABEL_W + d0 * px:.2f}" y="{y}" width="{max((x1 - d0) * px, 0.5):.2f}"'
                f' height="{h}" fill="#555"><title>{tip}</title></rect>'
            )
    return out


def call_timeline(name, op, call, colours):
    """One slowest call on its own time axis (docs/tail.md): the call from its start to its end, and
    each of its longest blocked intervals where it fell, coloured by cause, with who ended it. The
    rest of its time (shorter waits, runnable, on CPU) has no recorded place: it is the bar's base."""
    ns = call["ns"] or 1
    px = PLOT_W / ns
    bar_h, top, work_h, rq_h = 18, 18, 8, 5
    lanes = request_lanes(call.get("device_requests", []), ns)
    rq_top = top + bar_h + work_h + 6
    rows_h = (rq_h + 1) * (max(lanes.values(), default=-1) + 1)
    width, height = LABEL_W + PLOT_W + SIDE_W, top + bar_h + work_h + 26 + (rows_h + 6 if lanes else 0)
    label = f"{fmt_ns(call['ns'])}, thread {call['tid']}"
    data = attrs(data_fs=name, data_op=op, data_ns=call["ns"], data_tid=call["tid"])
    out = [
        f'<svg class="chart timeline" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"'
        f' viewBox="0 0 {width} {height}" role="img"{data}>',
        f"<title>{escape(op)} call of {escape(label)}, on its own time axis</title>",
        f'<text x="{LABEL_W - 8}" y="{top + bar_h / 2 + 4}" class="rowlabel">{escape(op)}</text>',
        f'<rect class="base" x="{LABEL_W}" y="{top}" width="{PLOT_W}" height="{bar_h}" fill="#e8e8e8">'
        f"<title>{escape(label)}: "
        + (
            f"{URING_ELSEWHERE} {escape(fmt_ns(call['elsewhere_ns']))}"
            if "elsewhere_ns" in call
            else f"CPU {escape(fmt_ns(call['cpu_ns']))}"
        )
        + ", runnable "
        f"{escape(fmt_ns(call['runnable_ns']))}, shorter waits {escape(fmt_ns(call['other_blocked_ns']))}"
        + (
            f"; its own block requests: {escape(requests_words(own['requests']) + request_times_words(own))}"
            if (own := call.get("own_requests"))
            else ""
        )
        + "</title></rect>",
    ]
    for w in call["waits"]:
        x, wd = LABEL_W + w["at_ns"] * px, max(w["ns"] * px, 0.5)
        out.append(
            f'<rect class="wait" x="{x:.2f}" y="{top}" width="{wd:.2f}" height="{bar_h}" fill="{colours(w["cause"])}"'
            f"{attrs(data_cause=w['cause'], data_at=w['at_ns'], data_ns=w['ns'])}><title>{escape(w['cause'])} "
            f"{escape(fmt_ns(w['ns']))}, {escape(fmt_ns(w['at_ns']))} into the call, ended by "
            f"{escape(w['ended_by'] + last_request_words(w))}</title></rect>"
        )
    for w in call["waits"]:  # the worker's window that ended the wait, on the same axis (clipped)
        work = w.get("work")
        if not work:
            continue
        end = work["end_at_ns"] if work["end_at_ns"] is not None else w["at_ns"] + w["ns"]
        x0, x1 = max(work["start_at_ns"], 0), min(max(end, 0), ns)
        name = work_name(work)
        rqs = (requests_words(work["requests"]) + request_times_words(work)) or "no requests"
        out.append(
            f'<rect class="work" x="{LABEL_W + x0 * px:.2f}" y="{top + bar_h + 3}"'
            f' width="{max((x1 - x0) * px, 0.5):.2f}" height="{work_h}" fill="{colours(w["cause"])}"'
            ' fill-opacity="0.55"'
            f"{attrs(data_worker=work['worker'], data_start=work['start_at_ns'], data_end=end)}><title>"
            f"{escape(name)}: {escape(fmt_ns(end - work['start_at_ns']))}, blocked "
            f"{escape(fmt_ns(work['blocked_ns']))} in it; {escape(rqs)}</title></rect>"
        )
    if lanes:  # what the devices did meanwhile: each request from its start, its device time darker
        out.append(f'<text x="{LABEL_W - 8}" y="{rq_top + 6}" class="rowlabel">devices</text>')
    out += device_rows(call, lanes, px, rq_top, rq_h)
    ticks_y = top + bar_h + work_h + 18 + (rows_h + 6 if lanes else 0)
    for frac in (0, 0.5, 1):
        out.append(
            f'<text x="{LABEL_W + frac * PLOT_W:.1f}" y="{ticks_y}" class="tick">'
            f"{escape(fmt_ns(frac * call['ns']))}</text>"
        )
    out.append(f'<text x="{LABEL_W}" y="12" class="note">{escape(label)}, phase {escape(call["phase"])}</text>')
    out.append("</svg>")
    return "".join(out)


CSS = """
svg.chart { display: block; margin: .4em 0 1.2em; max-width: 100%; height: auto; font: 11px system-ui, sans-serif; }
svg.chart .note { fill: #555; }
svg.chart .rowlabel { text-anchor: end; font-weight: 600; }
svg.chart .tick { text-anchor: middle; fill: #444; }
svg.chart .axis, svg.chart .base { stroke: #888; stroke-width: 1; }
svg.chart .bucket { fill: #9ecae1; }
svg.chart .bucket:hover, svg.chart .cause:hover, svg.chart .wait:hover { opacity: .75; }
svg.chart .fine { fill: none; stroke: #08519c; stroke-width: 1; }
svg.chart .mark { stroke: #c0392b; stroke-width: 1.2; }
svg.chart .marklabel { fill: #c0392b; font-size: 9px; }
svg.chart .figures { fill: #222; font-variant-numeric: tabular-nums; }
"""
