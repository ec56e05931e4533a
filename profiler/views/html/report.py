"""`fsprof report RUN --html FILE`: one self-contained HTML file of a run (result.json) or of a
spec's output (index.json, runs grouped by workload): the conditions that decide whether a
comparison is fair, the workload's results, latency plots, causes as stacked bars, what stood
behind the waits, why the filesystems differ (profiler.views.compare), and the flame graphs.

Everything is inline (CSS, SVG, one small script; the flame graphs' own script inside their data:
frames): the file loads nothing. Reads result.json files only (and, as `fsprof report` does, redraws each run's
flame graphs into RUN/flamegraphs/); never touches the kernel. Where each figure
comes from: docs/report-html.md.
"""

import os
import tempfile
import textwrap
from datetime import datetime, timezone
from html import escape
from pathlib import Path

from ... import __version__, behind
from .. import compare
from ...analysis.decompose import worker_causes
from . import charts, flame as html_flame
from ...causes import colour as cause_colour
from ...errors import FsprofError
from ..flamegraph import heaviest_op
from ..report import io_wq_lines, libaio_lines, shares_line, stack_sampling, uring_enter_line, uring_requests_lines
from .input import groups_of
from ...trace import maps
from ...trace.maps import BLK_WRITE_CLASSES
from ...machine.workload import render as render_workload

TOP_OPS = 4  # cause bars for the syscalls with the most time, as the terminal report
MIN_CALLS = 10  # a syscall with fewer calls on every column is in the tables only: a plot would be noise
HIST_FIGURES = (
    ("count", "count"),
    ("avg", "avg_ns"),
    ("p50", "p50_ns"),
    ("p95", "p95_ns"),
    ("p99", "p99_ns"),
    ("max", "max_ns"),
    ("total", "total_ns"),
)


# ---------------------------------------------------------------------------------------------
# Sections


def _cell(text, **data):
    return f"<td{charts.attrs(**data)}>{escape(str(text))}</td>"


def _yes_no(flag):
    return "yes" if flag else "no"


def _options(values, default="defaults"):
    return " ".join(values) if isinstance(values, list) and values else (values or default)


def _sysctls(d, default):
    return "\n".join(f"{k}={v}" for k, v in d.items()) if d else default


CONDITIONS = (
    ("kernel", lambda c: c.result.get("kernel", "n/a")),
    ("fsprof", lambda c: c.result.get("fsprof_version", "n/a")),
    ("started", lambda c: c.result.get("started", "n/a")),
    ("filesystem", lambda c: c.fs["fs"]),
    (
        "device",
        lambda c: (
            f"{c.fs['device'].get('name')} ({c.fs['device'].get('dev')})"
            + (f", on {'+'.join(c.fs['device']['all'])}" if len(c.fs["device"].get("all", [])) > 1 else "")
            + (", rotational" if c.fs["device"].get("rotational") else "")
        ),
    ),
    ("write cache", lambda c: c.fs["device"].get("write_cache", "n/a")),
    ("FUA", lambda c: _yes_no(c.fs["device"].get("fua"))),
    ("I/O scheduler", lambda c: c.fs["device"].get("scheduler", "n/a")),
    ("mkfs options", lambda c: _options(c.fs.get("mkfs_options"))),
    ("mount options asked", lambda c: _options(c.fs.get("mount_options"))),
    ("mount options in force", lambda c: c.fs.get("mount_options_in_force") or "n/a"),
    ("sysctls set for the run", lambda c: _sysctls(c.result.get("sysctls"), "none (the machine's own)")),
    (
        "dirty-page sysctls in force",
        lambda c: _sysctls(c.fs.get("behind", {}).get("writeback", {}).get("sysctls"), "not read"),
    ),
    (
        "cache state",
        lambda c: "page cache dropped before the workload" if c.fs.get("caches_dropped") else "not dropped (warm)",
    ),
    ("run time", lambda c: f"{c.fs.get('elapsed_s', 0):.2f} s"),
    (
        "figures unavailable on this kernel",
        lambda c: (
            "; ".join(f"{u['figures']} ({u['probe']}: {u['why']})" for u in c.result.get("unavailable", [])) or "none"
        ),
    ),
    (
        "lost events",
        lambda c: ", ".join(f"{k} {v}" for k, v in maps.lost_events(c.fs.get("drops", {})).items()) or "none",
    ),
    (
        "recorded less exactly",
        lambda c: ", ".join(f"{k} {v}" for k, v in maps.approximated_events(c.fs.get("drops", {})).items()) or "none",
    ),
    ("off-CPU time no rule explained", lambda c: f"{100 * c.fs.get('other_wait_share', 0):.1f}%"),
    ("off-CPU stacks", lambda c: stack_sampling(c.fs, share=False)),
)


def conditions(group):
    head = "".join(f"<th>{escape(c.name)}</th>" for c in group.columns)
    rows = []
    for label, fn in CONDITIONS:
        values = [str(fn(c)) for c in group.columns]
        differs = len(set(values)) > 1
        rows.append(
            f'<tr class="{"differs" if differs else "same"}"><th>{escape(label)}'
            f"{' ≠' if differs else ''}</th>"
            + "".join(_cell(v, data_fs=c.name, data_figure=f"condition:{label}") for c, v in zip(group.columns, values))
            + "</tr>"
        )
    return (
        '<p class="note">Rows marked ≠ differ between the columns: make sure each difference is one '
        "you meant to compare.</p>"
        f'<table class="conditions"><tr><th></th>{head}</tr>{"".join(rows)}</table>'
    )


def _hist_row(name, op, h):
    cells = "".join(
        _cell(
            f"{h[key]:,}" if key == "count" else charts.fmt_ns(h[key]),
            data_fs=name,
            data_op=op,
            data_figure=key,
            data_value=h[key],
        )
        for _, key in HIST_FIGURES
    )
    return f"<tr><th>{escape(op)}</th>{cells}</tr>"


def syscall_table(name, ops, what="syscall"):
    head = "".join(f"<th>{label}</th>" for label, _ in HIST_FIGURES)
    rows = "".join(_hist_row(name, op, ops[op]) for op in sorted(ops, key=lambda o: -ops[o]["total_ns"]))
    return f'<table class="figures"><tr><th>{what}</th>{head}</tr>{rows}</table>'


def block_table(name, fs):
    fsyncs = sum(fs["syscalls"].get(op, {}).get("count", 0) for op in ("fsync", "fdatasync"))
    rows = []
    for dev, counts in fs.get("block", {}).items():
        if fs.get("behind", {}).get("block", {}).get("devices", {}).get(dev, {}).get("bio_based"):
            continue  # no requests of its own: its bios are in "Behind the wait"
        kernel = fs.get("kernel_counters", {}).get(dev, {})
        ours = fs.get("behind", {}).get("block", {}).get("devices", {}).get(dev, {}).get("as_sys_block_stat", {})
        flush = counts.get("flush", {}).get("count", 0)
        writes = sum(counts.get(c, {}).get("count", 0) for c in BLK_WRITE_CLASSES)
        done = ", ".join(
            f"{k} {'n/a' if ours.get(k + '_ios') is None else ours[k + '_ios']}/{kernel.get(k + '_ios', 'n/a')}"
            for k in ("flush", "write", "read")
        )
        rows.append(
            f"<tr><th>{escape(dev)}</th>"
            + _cell(flush, data_fs=name, data_figure=f"flushes:{dev}", data_value=flush)
            + _cell(f"{flush / fsyncs:.2f}" if fsyncs else "n/a")
            + _cell(writes)
            + _cell(counts.get("read", {}).get("count", 0))
            + _cell(done)
            + "</tr>"
        )
    if not rows:
        return ""
    return (
        '<table class="figures"><tr><th>requests issued to</th><th>cache flushes</th><th>per fsync</th>'
        "<th>writes</th><th>reads</th><th>completed: ours / /sys/block stat</th></tr>" + "".join(rows) + "</table>"
    )


def io_uring_figures(name, fs):
    """io_uring requests (submission to completion posted), what they made and where their io-wq
    workers waited, and io_uring_enter's split: the text report's lines (docs/io_uring.md)."""
    if not fs.get("io_uring"):
        return ""
    lines = uring_requests_lines(fs["io_uring"], fs.get("io_uring_block_requests", {}), indent="")
    lines += io_wq_lines(fs["io_uring"], fs.get("io_uring_io_wq", {}), indent="")
    lines += libaio_lines(fs["io_uring"], indent="")
    if fs.get("io_uring_enter"):
        lines.append(uring_enter_line(fs["io_uring_enter"], indent=""))
    notes = f'<pre class="behind">{escape(chr(10).join(lines))}</pre>' if lines else ""
    return syscall_table(name, fs["io_uring"], what="io_uring request") + notes


def results(group):
    out = [at_a_glance(group)]
    for c in group.columns:
        fs = c.fs
        out.append(f"<h4>{escape(c.name)}: {escape(fs['fs'])} on {escape(fs['device'].get('name', '?'))}</h4>")
        text = render_workload(fs["workload"].get("workload", ""), fs["workload"])
        if text:
            out.append(f'<pre class="workload">{escape(text)}</pre>')
        out.append(syscall_table(c.name, fs["syscalls"]))
        out.append(io_uring_figures(c.name, fs))
        unresolved = fs.get("unresolved_syscalls", {})
        if unresolved:
            out.append(
                '<p class="note">Not placed on a filesystem (absolute path, sync, async I/O): '
                + escape(", ".join(f"{n} {h['count']}" for n, h in sorted(unresolved.items())))
                + "</p>"
            )
        out.append(block_table(c.name, fs))
    return "".join(out)


def at_a_glance(group):
    """The heaviest syscall of the group on every column, one row each."""
    op = _heaviest(group)
    if not op:
        return ""
    rows = []
    for c in group.columns:
        h, elapsed = c.fs["syscalls"].get(op), c.fs.get("elapsed_s", 0)
        if h:
            count = h["count"]
            rate = f"{count / elapsed:,.0f}" if elapsed else "n/a"
            cells = [f"{elapsed:.2f} s", f"{count:,}", rate] + [
                charts.fmt_ns(h[k]) for k in ("avg_ns", "p50_ns", "p99_ns", "max_ns")
            ]
            rows.append(f"<tr><th>{escape(c.name)}</th>" + "".join(map(_cell, cells)) + "</tr>")
    return (
        f'<table class="figures glance"><tr><th>at a glance: {escape(op)}</th><th>run time</th><th>calls</th>'
        f"<th>calls/s</th><th>avg</th><th>p50</th><th>p99</th><th>max</th></tr>{''.join(rows)}</table>"
    )


def _heaviest(group):
    totals = {}
    for c in group.columns:
        for op, h in c.fs["syscalls"].items():
            totals[op] = totals.get(op, 0) + h["total_ns"]
    return max(totals, key=totals.get, default=None)


def why(group):
    out = [f'<p class="note">{escape(group.no_comparison)}.</p>'] if group.no_comparison else []
    for cmp in group.comparisons:
        out.append(
            f'<pre class="why"{charts.attrs(data_base=cmp["base"], data_other=cmp["other"])}>'
            f"{escape(chr(10).join(compare.sentences(cmp)))}</pre>"
        )
    return "".join(out)


def latency(group):
    totals = {}
    for c in group.columns:
        for op, h in c.fs["syscalls"].items():
            totals[op] = totals.get(op, 0) + h["total_ns"]
    out = []
    for op in sorted(totals, key=lambda o: -totals[o]):
        panels = [(c.name, c.fs["syscalls"][op]) for c in group.columns if c.fs["syscalls"].get(op, {}).get("count")]
        if max((h["count"] for _, h in panels), default=0) >= MIN_CALLS:
            out.append(f"<h4>{escape(op)}</h4>" + charts.latency_chart(op, panels))
    return "".join(out) + _fewer_note(len(totals) - len(out))


def _fewer_note(left_out):
    return (
        f'<p class="note">{left_out} syscall(s) with fewer than {MIN_CALLS} calls on every column: '
        "in the tables only.</p>"
        if left_out
        else ""
    )


def _top_ops(breakdowns):
    """The TOP_OPS syscalls with the most time over breakdowns ({op: BREAKDOWN} each), among
    those with MIN_CALLS calls somewhere."""
    totals, calls = {}, {}
    for b in breakdowns:
        for op, x in b.items():
            totals[op] = totals.get(op, 0) + x["wall_ns"]
            calls[op] = max(calls.get(op, 0), x["count"])
    return sorted((op for op in totals if totals[op] and calls[op] >= MIN_CALLS), key=lambda o: -totals[o])[:TOP_OPS]


def causes(group, colours):
    out = []
    for op in _top_ops(c.fs["attribution"] for c in group.columns):
        out.append(
            charts.cause_chart(
                op, [(c.name, c.fs["attribution"].get(op)) for c in group.columns], colours, "; all phases"
            )
        )
    out.append(phase_charts(group, colours))
    out.append(worker_charts(group, colours))
    return "".join(out)


def phase_charts(group, colours):
    """The same bars per workload phase, when two phases or more have syscalls to plot."""
    per_phase = {}
    for c in group.columns:
        for phase, x in c.fs.get("phases", {}).items():
            per_phase.setdefault(phase, []).append((c.name, x.get("attribution", {})))
    plotted = {phase: _top_ops(b for _, b in per) for phase, per in per_phase.items()}
    plotted = {phase: ops for phase, ops in plotted.items() if ops}
    if len(plotted) < 2:
        only = f" (only phase {next(iter(plotted))} has them)" if plotted else ""
        return (
            f'<p class="note">No per-phase bars: fewer than two workload phases have syscalls with '
            f"{MIN_CALLS} calls or more{escape(only)}.</p>"
        )
    out = []
    for phase, ops in plotted.items():
        bars = [
            charts.cause_chart(op, [(n, b.get(op)) for n, b in per_phase[phase]], colours, f"; phase {phase}")
            for op in ops
        ]
        out.append(f"<details open><summary>phase {escape(phase)}</summary>{''.join(bars)}</details>")
    return "".join(out)


def worker_charts(group, colours):
    """The filesystem threads' own time (jbd2 commits, ...) by cause, per call of the heaviest
    syscall: what stood behind the wait, as the comparison follows it."""
    kinds = {}
    for c in group.columns:
        op, count = heaviest_op(c.fs)
        for kind, by_cause in worker_causes(c.fs).items():
            kinds.setdefault(kind, []).append(
                (c.name, op, {"count": count, "wall_ns": sum(by_cause.values()), "causes": by_cause})
            )
    out = []
    for kind, rows in kinds.items():
        ops = {op for _, op, _ in rows}
        per = ops.pop() if len(ops) == 1 else "call of each one's heaviest syscall"
        out.append(charts.cause_chart(f"{kind} thread", [(n, b) for n, _, b in rows], colours, f", per {per}"))
    return "".join(out)


SLOWEST_OPS, SLOWEST_CALLS = 2, 3  # per column: the ops whose slowest call is longest, their slowest calls


def slowest(group, colours):
    """Each column's slowest calls, each on its own time axis (charts.call_timeline)."""
    out = []
    for c in group.columns:
        exemplars = c.fs.get("exemplars") or {}
        ops = sorted((op for op, calls in exemplars.items() if calls), key=lambda op: -exemplars[op][0]["ns"])
        for op in ops[:SLOWEST_OPS]:
            calls = exemplars[op][:SLOWEST_CALLS]
            timelines = "".join(charts.call_timeline(c.name, op, call, colours) for call in calls)
            out.append(f"<h4>{escape(c.name)}: the slowest {escape(op)} calls</h4>{timelines}")
    if not out:
        return '<p class="note">No slowest calls were kept (a run of fsprof before 2026-11-27).</p>'
    return "".join(out)


def behind_chains(group):
    out = []
    for c in group.columns:
        lines = []
        for module in behind.MODULES:
            section = c.fs.get("behind", {}).get(module.NAME)
            if section:
                lines += module.report_lines(section, c.fs)
        out.append(f"<h4>{escape(c.name)}</h4>")
        out.append(f'<pre class="behind">{escape(textwrap.dedent(chr(10).join(lines)) or "nothing recorded")}</pre>')
        out.append(wakers_table(c))
    return "".join(out)


def wakers_table(c):
    rows = []
    for op in _top_ops([c.fs["attribution"]]):
        b = c.fs["attribution"][op]
        for cause, by in b.get("wakers", {}).items():
            total = sum(by.values()) or 1
            rows.append(
                f"<tr><th>{escape(op)}</th>{_cell(cause)}{_cell(charts.fmt_us(total / b['count'] / 1e3))}"
                f"{_cell(shares_line(dict(sorted(by.items(), key=lambda kv: -kv[1])), top=4))}</tr>"
            )
        if b.get("other_wait_frames"):
            rows.append(
                f"<tr><th>{escape(op)}</th>{_cell('other wait: innermost frames')}{_cell('')}"
                f"{_cell(', '.join(list(b['other_wait_frames'])[:4]))}</tr>"
            )
        for cause, by in b.get("sites", {}).items():
            rows.append(
                f"<tr><th>{escape(op)}</th>{_cell(cause + ': where the lock was taken')}{_cell('')}"
                f"{_cell(shares_line(by, top=4))}</tr>"
            )
    if not rows:
        return ""
    return (
        '<table class="figures wakers"><tr><th>syscall</th><th>wait</th><th>per call</th>'
        f"<th>ended by (the waker)</th></tr>{''.join(rows)}</table>"
    )


def flame_graphs(group):
    out, seen = [], set()
    for c in group.columns:
        if c.run_dir in seen:
            continue
        seen.add(c.run_dir)
        names = {x.fs["label"]: x.name for x in group.columns if x.run_dir == c.run_dir}
        out.append(html_flame.section(c.run_dir, c.result, names))
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# The page


SECTIONS = (
    ("conditions", "Conditions of the comparison"),
    ("results", "Workload results"),
    ("why", "Why they differ"),
    ("latency", "Latency distributions"),
    ("causes", "Where the time went (µs per call, by cause)"),
    ("slowest", "The slowest calls, each on its own time axis"),
    ("behind", "Behind the wait"),
    ("flamegraphs", "Flame graphs"),
)


def group_html(k, group, colours):
    parts = {
        "conditions": conditions(group),
        "results": results(group),
        "why": why(group),
        "latency": latency(group),
        "causes": causes(group, colours),
        "slowest": slowest(group, colours),
        "behind": behind_chains(group),
        "flamegraphs": flame_graphs(group),
    }
    failed = "".join(
        f'<p class="missing">Run {escape(r["config"])} (repeat {r.get("repeat", 1)}) failed: {escape(r["error"])}</p>'
        for r in group.failed
    )
    body = "".join(
        f'<section id="g{k}-{key}"><h3>{escape(title)}</h3>{parts[key]}</section>' for key, title in SECTIONS
    )
    return f'<section class="workload" id="g{k}"><h2>{escape(group.title)}</h2>{failed}{body}</section>'


def warnings(groups):
    """Settings that did not take effect (runs made with --go-on): first thing on the page."""
    found = dict.fromkeys(w for g in groups for c in g.columns for w in c.result.get("warnings", []))
    return "".join(f'<p class="warning">Warning: {escape(w)}</p>' for w in found)


def page(path, groups):
    colours = cause_colour  # a cause keeps its colour (causes.py) on every page
    toc = "".join(
        f'<li><a href="#g{k}">{escape(g.title)}</a>: '
        + " · ".join(f'<a href="#g{k}-{key}">{escape(title.split(" (")[0])}</a>' for key, title in SECTIONS)
        + "</li>"
        for k, g in enumerate(groups)
    )
    body = "".join(group_html(k, g, colours) for k, g in enumerate(groups))
    made = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>fsprof report: {escape(str(path))}</title><style>{CSS}{charts.CSS}{html_flame.CSS}</style></head>"
        f"<body><header><h1>fsprof report</h1><p>{escape(str(path))}: "
        f"{sum(len(g.columns) for g in groups)} measurement(s); written by fsprof {escape(__version__)} at {made}. "
        f'How to read it and where each figure comes from: docs/report-html.md.</p><ul class="toc">{toc}</ul>'
        f"</header>{warnings(groups)}{body}<script>{html_flame.SCRIPT}</script></body></html>"
    )


CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em auto; max-width: 1250px;
       padding: 0 1em; color: #1d1d1d; }
h1 { margin-bottom: .2em; } h2 { border-bottom: 2px solid #4e79a7; padding-bottom: .2em; margin-top: 2em; }
h3 { margin-top: 1.6em; } h4 { margin: 1.2em 0 .3em; }
table { border-collapse: collapse; margin: .4em 0 1em; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #ddd; padding: .2em .6em; text-align: left; vertical-align: top; }
table.figures td { text-align: right; }
table.wakers td { text-align: left; }
table.conditions { table-layout: fixed; width: 100%; }
table.conditions th:first-child { width: 12em; }
table.conditions td { overflow-wrap: anywhere; white-space: pre-line; }
table.conditions tr.differs th { color: #9a3412; }
table.conditions tr.differs td { background: #fff7ed; }
pre { background: #f6f8fa; padding: .6em .8em; overflow-x: auto; font-size: 12.5px; }
pre.why { white-space: pre-wrap; border-left: 4px solid #4e79a7; }
.note { color: #555; }
p.warning { background: #fef2f2; border-left: 4px solid #b91c1c; padding: .5em .8em; font-weight: 600; }
ul.toc { padding-left: 1.2em; }
summary { cursor: pointer; font-weight: 600; margin: .4em 0; }
"""


def write_html(path, out_file):
    """Writes the report of a run directory or a spec's output to out_file; returns its path."""
    groups = groups_of(path)
    html = page(path, groups)
    out = Path(out_file)
    tmp = None
    try:
        # Written beside its destination and renamed: no half-written report on a failure.
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(html)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except OSError as e:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
        raise FsprofError(f"cannot write the HTML report to {out_file}: {e.strerror or e}")
    return out
