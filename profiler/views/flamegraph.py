"""Flame graphs of a recorded run: folded stacks (always) and SVG rendered by inferno.

Every graph is rooted at synthetic frames [filesystem];[syscall];[cause], the cause named by the
same rules the attribution tables use, so a cause lines up across filesystems and its subtree
weighs what the attribution says. Kinds (see docs/flamegraphs.md):

  off-cpu   blocked and runnable time of the traced threads under their switch-out stacks, and
            of the io-wq workers running their io_uring requests (under "[io_uring fsync]"), µs
  on-cpu    wall − off-CPU time of each (syscall, phase) split by its perf samples exactly as
            attribution.attribute splits it, µs
  off-wake  blocked time: blocked stack, "--", the waker's stack (innermost first: bcc
            offwaketime's order) and the waker's name, µs
  workers   filesystem workers' (jbd2, ...) off-CPU time inside their work windows, µs

A differential compares two filesystems (of one run or two) per operation: each side's weights
divided by its own count of that syscall, in ns per op, red where the run costs more than the
baseline. Reads result.json only.

Over 500 lines: every kind of graph shares the folding, the cause frames and the inferno
invocation; the command line is commands/flamegraph.py.
"""

import os
import pwd
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..analysis import attribution
from ..errors import FsprofError
from ..rundir import FLAMEGRAPH_DIR, load

KINDS = ("off-cpu", "on-cpu", "off-wake", "workers")
ALL_PHASES = "all"
OUT_DIR = FLAMEGRAPH_DIR
SEPARATOR = "--"  # between the blocked stack and the waker's (bcc offwaketime)
NO_WAKER_STACK = "[waker stack not captured]"
FLAMEGRAPH, DIFF_FOLDED = "inferno-flamegraph", "inferno-diff-folded"
INFERNO_DIR_ENV = "FSPROF_INFERNO_DIR"
NS_PER_US = 1000
TITLES = {
    "off-cpu": "Off-CPU time",
    "on-cpu": "On-CPU time (wall minus off-CPU, split by the on-CPU samples as in the attribution)",
    "off-wake": "Off-wake time (blocked stack -- waker stack, waker on top)",
    "workers": "Filesystem workers' off-CPU time inside their work windows",
}
COLORS = {"off-cpu": "io", "on-cpu": "hot", "off-wake": "wakeup", "workers": "aqua"}
_said_missing = False


# ---------------------------------------------------------------------------------------------
# Stacks: {path (root-first tuple of frames): ns} of one filesystem entry of result.json


# The tracer's own frames on top of a stack (the probe that took it): not the traced thread's work.
TRACING_FRAMES = re.compile(
    r"bpf_prog_.*|__traceiter_.*|__bpf_trace_.*|bpf_trace_run.*|bpf_get_stackid.*"
    r"|__probestub_.*"
)


def _frames(fs, stack_id):
    """Symbolized kernel frames of a stack id, innermost first; None when not captured."""
    return fs["trace"]["stacks"].get(str(stack_id)) if stack_id is not None and stack_id >= 0 else None


def _shown(frames):
    """The frames drawn: without the tracer's own on top (rules see them all, as the attribution
    does; they are generic_frames there, never a cause)."""
    inner = next((i for i, f in enumerate(frames) if not TRACING_FRAMES.fullmatch(f)), len(frames))
    return frames[inner:] or frames


def _frame(text):
    """A frame name safe in the folded format (';' separates frames, a line is one record)."""
    return re.sub(r"[;\n\r]", ":", str(text))


def _roots(fs, first, cause):
    return (f"[{_frame(fs['label'])}]", f"[{_frame(first)}]", f"[{cause}]")


def _root_first(frames):
    return tuple(_frame(f) for f in reversed(_shown(frames))) if frames else (attribution.NO_STACK,)


def _add(out, path, ns):
    out[path] = out.get(path, 0) + ns


def _selected(rec, phase_index):
    return phase_index is None or rec["phase"] == phase_index


def offcpu_stacks(fs: dict[str, Any], phase_index: int | None = None) -> dict[tuple[str, ...], int]:
    """Every off-CPU interval of the traced threads (blocked and runnable), classified as the
    attribution classifies it; and the io-wq workers' inside io_uring requests, under the
    request's opcode ("io_uring fsync"), classified as a syscall's (older runs have none)."""
    out: dict[tuple[str, ...], int]
    rules, out = attribution.rules_for(fs["fs"]), {}
    for rec in fs["trace"]["offcpu"] + fs["trace"].get("io_wq", []):
        if _selected(rec, phase_index):
            frames = _frames(fs, rec["stack"]) or []
            cause, _ = attribution.classify_off(rules, rec, frames, waker=_frames(fs, rec.get("waker_stack", -1)))
            _add(out, _roots(fs, rec["op"], cause) + _root_first(frames), rec["total_ns"])
    return out


def offwake_stacks(fs: dict[str, Any], phase_index: int | None = None) -> dict[tuple[str, ...], int]:
    """Blocked intervals (a waker ended them; runnable time has none) with the waker on top:
    blocked stack root-first, "--", the waker's stack innermost first, the waker's name last."""
    out: dict[tuple[str, ...], int]
    rules, out = attribution.rules_for(fs["fs"]), {}
    for rec in fs["trace"]["offcpu"]:
        if rec["runnable"] or not _selected(rec, phase_index):
            continue
        frames = _frames(fs, rec["stack"]) or []
        waker = _frames(fs, rec.get("waker_stack", -1))
        cause, _ = attribution.classify_off(rules, rec, frames, waker=waker)
        who = attribution.waker_name(rec.get("waker_comm", ""), waker)
        waker_part = tuple(_frame(f) for f in _shown(waker)) if waker else (NO_WAKER_STACK,)
        path = _roots(fs, rec["op"], cause) + _root_first(frames) + (SEPARATOR,) + waker_part + (_frame(who),)
        _add(out, path, rec["total_ns"])
    return out


def worker_stacks(fs: dict[str, Any], phase_index: int | None = None) -> dict[tuple[str, ...], int]:
    """The filesystem workers' off-CPU time in their windows, by the [[worker]] rules."""
    out: dict[tuple[str, ...], int]
    rules, out = attribution.rules_for(fs["fs"]), {}
    for rec in fs["trace"].get("workers", []):
        if _selected(rec, phase_index):
            frames = _frames(fs, rec["stack"]) or []
            cause, _ = attribution.classify_off(
                rules, rec, frames, worker=True, waker=_frames(fs, rec.get("waker_stack", -1))
            )
            _add(out, _roots(fs, rec["kind"], cause) + _root_first(frames), rec["total_ns"])
    return out


def oncpu_stacks(fs: dict[str, Any], phase_index: int | None = None) -> dict[tuple[str, ...], int]:
    """On-CPU time per (phase, syscall) = wall − off-CPU, split first by cause and then by stack
    in proportion to the samples: each cause's subtree equals the attribution's figure."""
    off_ns: dict[tuple[int, str], int]
    samples: dict[tuple[int, str], list[dict[str, Any]]]
    off_ns, samples = {}, {}
    for rec in fs["trace"]["offcpu"]:
        _add(off_ns, (rec["phase"], rec["op"]), rec["total_ns"])
    for rec in fs["trace"]["samples"]:
        samples.setdefault((rec["phase"], rec["op"]), []).append(rec)
    out: dict[tuple[str, ...], int] = {}
    for phase in fs["phases"].values():
        if phase_index is None or phase["index"] == phase_index:
            for op, wall in phase["syscalls"].items():
                key = (phase["index"], op)
                _add_oncpu(out, fs, op, wall["total_ns"] - off_ns.get(key, 0), samples.get(key, []))
    return out


def _add_oncpu(out, fs, op, on_ns, samples):
    """One (phase, syscall): on_ns split as attribution.attribute splits it."""
    if on_ns <= 0:
        return
    rules, by_cause = attribution.rules_for(fs["fs"]), {}  # cause -> {path: samples}, in samples' order
    for rec in samples:
        frames = _frames(fs, rec["stack"])
        cause = rules.classify_on(frames) if frames else attribution.NO_STACK_CPU
        _add(by_cause.setdefault(cause, {}), _root_first(frames) if frames else (), rec["count"])
    if not by_cause:
        _add(out, _roots(fs, op, attribution.UNSAMPLED_CPU), on_ns)
        return
    cause_ns = attribution.apportion(on_ns, {c: sum(p.values()) for c, p in by_cause.items()})
    for cause, ns in cause_ns.items():
        for path, part in attribution.apportion(ns, by_cause[cause]).items():
            _add(out, _roots(fs, op, cause) + path, part)


BUILDERS = {"off-cpu": offcpu_stacks, "on-cpu": oncpu_stacks, "off-wake": offwake_stacks, "workers": worker_stacks}


def stacks_of(fs: dict[str, Any], kind: str, phase: str | None = ALL_PHASES) -> dict[tuple[str, ...], int]:
    return BUILDERS[kind](fs, phase_index(fs, phase))


# ---------------------------------------------------------------------------------------------
# Weights: ns → integer units, rounded so that each [fs];[op];[cause] subtree keeps its total


def round_by_cause(weights: dict[tuple[str, ...], float]) -> dict[tuple[str, ...], int]:
    """{path: float units} → {path: int units}: within each [fs];[first];[cause] group the lines
    are rounded down and the group's rounded total is made up on the largest remainders, so a
    cause's subtree is its exact total rounded once. Lines rounding to 0 are left out."""
    groups: dict[tuple[str, ...], list[tuple[tuple[str, ...], float]]] = {}
    for path, w in weights.items():
        groups.setdefault(path[:3], []).append((path, w))
    out: dict[tuple[str, ...], int] = {}
    for members in groups.values():
        floors = {p: int(w) for p, w in members}
        short = int(sum(w for _, w in members) + 0.5) - sum(floors.values())
        for p, _ in sorted(members, key=lambda m: (-(m[1] - int(m[1])), m[0]))[: max(short, 0)]:
            floors[p] += 1
        out.update((p, v) for p, v in floors.items() if v > 0)
    return out


def in_us(stacks: dict[tuple[str, ...], int]) -> dict[tuple[str, ...], int]:
    return round_by_cause({p: ns / NS_PER_US for p, ns in stacks.items()})


def per_op_ns(stacks: dict[tuple[str, ...], int], counts: dict[str, int]) -> dict[tuple[str, ...], int]:
    """ns per operation: each path's weight divided by the count of its [op] frame's name."""
    return round_by_cause({p: ns / counts[p[1][1:-1]] for p, ns in stacks.items() if counts.get(p[1][1:-1])})


def folded_lines(weights: dict[tuple[str, ...], int]) -> list[str]:
    return [f"{';'.join(path)} {w}" for path, w in sorted(weights.items())]


def write_folded(path: str | Path, weights: dict[tuple[str, ...], int]) -> None:
    Path(path).write_text("".join(line + "\n" for line in folded_lines(weights)))


def read_folded(path: str | Path, diff: bool = False) -> dict[str, int | tuple[int, int]]:
    """{stack: weight} of a folded file; {stack: (base, run)} of a differential one."""
    out: dict[str, int | tuple[int, int]] = {}
    for line in Path(path).read_text().splitlines():
        if diff:
            stack, a, b = line.rsplit(" ", 2)
            out[stack] = (int(a), int(b))
        elif line:
            stack, w = line.rsplit(" ", 1)
            out[stack] = int(w)
    return out


# ---------------------------------------------------------------------------------------------
# Selection and titles


def phase_index(fs: dict[str, Any], phase: str | None) -> int | None:
    if phase in (None, ALL_PHASES):
        return None
    if phase not in fs["phases"]:
        raise FsprofError(
            f"{fs['label']} has no phase '{phase}' (phases: {', '.join(fs['phases']) or 'none'}, or {ALL_PHASES})"
        )
    return fs["phases"][phase]["index"]


def op_counts(fs: dict[str, Any], phase: str | None = ALL_PHASES) -> dict[str, int]:
    """{op: its count}: the syscalls', and over the whole run the io_uring requests' by opcode
    (their histograms are not kept per phase)."""
    ops = fs["syscalls"] if phase in (None, ALL_PHASES) else fs["phases"][phase]["syscalls"]
    counts = {op: h["count"] for op, h in ops.items()}
    if phase in (None, ALL_PHASES):
        counts.update({op: h["count"] for op, h in fs.get("io_uring", {}).items()})
    return counts


def workload_text(result: dict[str, Any]) -> str:
    w = result["workload"]
    if w["name"] == "record":
        return f"recorded {w['target']}"
    if w["name"] == "command":
        return " ".join(w["argv"])
    return " ".join([w["name"], *w.get("args", [])])


def fs_text(fs: dict[str, Any]) -> str:
    opts = fs.get("mount_options") or ""
    return f"{fs['label']} ({fs['fs']}{', ' + opts if opts and opts != 'defaults' else ''})"


def _op_summary(weights, counts, unit):
    """'fsync 200 ops 1,328.6 µs/op, ...' for the heaviest syscalls of a graph."""
    by_op = {}
    for path, w in weights.items():
        by_op[path[1][1:-1]] = by_op.get(path[1][1:-1], 0) + w
    parts = [
        f"{op} {counts[op]:,} ops {w / counts[op]:,.1f} {unit}/op"
        for op, w in sorted(by_op.items(), key=lambda kv: -kv[1])
        if counts.get(op)
    ]
    return ", ".join(parts[:4])


def titles(
    result: dict[str, Any],
    filesystems: list[dict[str, Any]],
    kind: str,
    phase: str,
    weights: dict[tuple[str, ...], int],
) -> tuple[str, str]:
    total = sum(weights.values())
    title = (
        f"{TITLES[kind]}: {', '.join(fs_text(fs) for fs in filesystems)}; {workload_text(result)}; phase {phase}; µs"
    )
    subtitle = f"total {total:,} µs"
    sampled = [fs["stack_sampling"] for fs in filesystems if fs.get("stack_sampling")]
    if sampled and kind != "on-cpu":
        subtitle += (
            f"; stacks walked in 1 of {sampled[0]['every']} calls, the rest divided in their proportions "
            "(--stack-sample)"
        )
    if len(filesystems) == 1 and kind != "workers":
        summary = _op_summary(weights, op_counts(filesystems[0], phase), "µs")
        subtitle += f"; {summary}" if summary else ""
    return title, subtitle


# ---------------------------------------------------------------------------------------------
# inferno


def _cargo_bins():
    """Where `cargo install` puts binaries, whether or not it is on PATH."""
    dirs = [Path(os.environ["CARGO_HOME"]) / "bin"] if os.environ.get("CARGO_HOME") else []
    dirs.append(Path.home() / ".cargo" / "bin")
    dirs.append(Path(pwd.getpwuid(os.geteuid()).pw_dir) / ".cargo" / "bin")
    return dirs


def find_tool(name: str) -> str | None:
    """An inferno binary: in $FSPROF_INFERNO_DIR when set (and only there), else on PATH, else
    where cargo installs (a root shell often lacks ~/.cargo/bin on PATH)."""
    pinned = os.environ.get(INFERNO_DIR_ENV)
    dirs = [Path(pinned)] if pinned else []
    found = None if pinned else shutil.which(name)
    return found or next((str(d / name) for d in dirs or _cargo_bins() if os.access(d / name, os.X_OK)), None)


def _say_missing():
    """Once per process: the folded files are still written."""
    global _said_missing
    if not _said_missing:
        print(
            f"fsprof: {FLAMEGRAPH} not found (PATH, ~/.cargo/bin; `make setup` installs inferno): "
            f"writing folded stacks only",
            file=sys.stderr,
        )
        _said_missing = True


def _run_tool(argv, what):
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        reason = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        raise FsprofError(f"{Path(argv[0]).name} failed on {what}: {reason}")
    return proc.stdout


def _has_counts(folded):
    """Whether a folded file has a stack whose last count (the width: in a differential file, the
    run's side) is above zero: inferno-flamegraph fails on one without ("No stack counts found").
    A differential whose run side rounds to 0 ns per op is one (on 6.1, btrfs's off-CPU time
    against ext4's in test_placement), whatever its base side holds."""
    for line in Path(folded).read_text().splitlines():
        count = line.rsplit(None, 1)[-1]
        if count.replace(".", "", 1).isdigit() and float(count) > 0:
            return True
    return False


def render_svg(
    folded: str | Path, svg: str | Path, title: str, subtitle: str, countname: str, colors: str | None = None
) -> bool:
    """SVG of a folded file by inferno-flamegraph; False (said once) when inferno is absent, and
    False (silently: the folded file says it all) when no stack has a count."""
    if not _has_counts(folded):
        return False
    tool = find_tool(FLAMEGRAPH)
    if not tool:
        _say_missing()
        return False
    argv = [
        tool,
        "--title",
        title,
        "--subtitle",
        subtitle,
        "--countname",
        countname,
        "--hash",
        *(["--colors", colors] if colors else []),
        str(folded),
    ]
    Path(svg).write_text(_run_tool(argv, folded))
    return True


def diff_lines(base: dict[tuple[str, ...], int], run: dict[tuple[str, ...], int]) -> list[str]:
    """Two-column folded lines 'stack base run' of two {path: weight} (inferno-diff-folded's
    format), used when inferno is absent."""
    return [f"{';'.join(p)} {base.get(p, 0)} {run.get(p, 0)}" for p in sorted(set(base) | set(run))]


def write_diff(
    base_folded: str | Path,
    run_folded: str | Path,
    out: str | Path,
    base: dict[tuple[str, ...], int],
    run: dict[tuple[str, ...], int],
) -> None:
    tool = find_tool(DIFF_FOLDED)
    if tool:
        Path(out).write_text(_run_tool([tool, str(base_folded), str(run_folded)], run_folded))
    else:
        Path(out).write_text("".join(line + "\n" for line in diff_lines(base, run)))


# ---------------------------------------------------------------------------------------------
# Graphs: folded file + SVG


def _stem_part(text):
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", str(text)).strip("_") or "fs"


def graph(
    result: dict[str, Any], filesystems: list[dict[str, Any]], kind: str, phase: str, out_svg: str | Path
) -> list[Path]:
    """One graph of `filesystems` (side by side under their [fs] roots). Writes out_svg's
    .folded sibling always and out_svg when inferno is present; returns the paths written,
    [] when the graph would be empty."""
    weights = {}
    for fs in filesystems:
        weights.update(in_us(stacks_of(fs, kind, phase)))
    if not weights:
        return []
    out_svg = Path(out_svg)
    folded = out_svg.with_suffix(".folded")
    write_folded(folded, weights)
    if out_svg.suffix == ".folded":
        return [folded]
    title, subtitle = titles(result, filesystems, kind, phase, weights)
    return [folded] + ([out_svg] if render_svg(folded, out_svg, title, subtitle, "us", COLORS[kind]) else [])


def _diff_root(run_fs, base_fs):
    a, b = run_fs["label"], base_fs["label"]
    return f"[{_frame(a)}]" if a == b else f"[{_frame(a)} vs {_frame(b)}]"


def heaviest_op(fs: dict[str, Any], phase: str | None = ALL_PHASES) -> tuple[str | None, int]:
    """(syscall, count) of the syscall with the most wall time: what a worker's time is per."""
    ops = fs["syscalls"] if phase in (None, ALL_PHASES) else fs["phases"][phase]["syscalls"]
    op = max(ops, key=lambda o: ops[o]["total_ns"], default=None)
    return (op, ops[op]["count"]) if op else (None, 0)


def per_op_counts(fs: dict[str, Any], kind: str, phase: str | None) -> dict[str, int]:
    """{first frame's name: the count its weight is divided by}: each syscall's own count; a
    worker's time is per operation of the heaviest syscall (per fsync in an fsync loop)."""
    if kind != "workers":
        return op_counts(fs, phase)
    _, count = heaviest_op(fs, phase)
    return {rec["kind"]: count for rec in fs["trace"].get("workers", [])}


def _device_neutral(frame, fs):
    """A worker's name with the device under test replaced ("jbd2/loop0-8" → "jbd2/[dev]-8"), so
    that the same thread lines up across runs made on different loop devices."""
    for dev in sorted(set(fs["device"].get("all", []) + [fs["device"]["name"]]), key=len, reverse=True):
        frame = re.sub(rf"(?<![A-Za-z0-9]){re.escape(dev)}(?![0-9])", "[dev]", frame)
    return frame


def _normalised(fs, kind, phase, root):
    """Per-op weights, the [fs] root renamed and device names neutral, so both sides line up."""
    weights = per_op_ns(stacks_of(fs, kind, phase), per_op_counts(fs, kind, phase))
    return {(root,) + tuple(_device_neutral(f, fs) for f in p[1:]): w for p, w in weights.items()}


class Side:
    """One side of a differential: a run (its result and where it came from) and one filesystem."""

    def __init__(self, result: dict[str, Any], where: str | Path, fs: dict[str, Any]) -> None:
        self.result, self.where, self.fs = result, where, fs

    def text(self) -> str:
        return f"{fs_text(self.fs)} of {self.where}"


def diff_graph(run: Side, base: Side, kind: str, phase: str, out_svg: str | Path) -> list[Path]:
    """Differential of run.fs against base.fs (Sides), in ns per op of each side's own syscall
    counts: widths are the run's, red where it costs more than the baseline. Writes the two
    normalised folded files (.base.folded, .run.folded), the two-column differential (.folded)
    and the SVG; returns the paths written."""
    out_svg = Path(out_svg)
    root = _diff_root(run.fs, base.fs)
    sides = {"base": _normalised(base.fs, kind, phase, root), "run": _normalised(run.fs, kind, phase, root)}
    if not any(sides.values()):
        return []
    stem = out_svg.with_suffix("")
    paths = {name: Path(f"{stem}.{name}.folded") for name in sides}
    for name, weights in sides.items():
        write_folded(paths[name], weights)
    diff = Path(f"{stem}.folded")
    write_diff(paths["base"], paths["run"], diff, sides["base"], sides["run"])
    written = [paths["base"], paths["run"], diff]
    if out_svg.suffix == ".folded":
        return written
    title = (
        f"Differential {kind} time, ns per op: {run.text()} against baseline {base.text()}; "
        f"{workload_text(run.result)}; phase {phase}"
    )
    subtitle = f"red: costs more than the baseline, blue: less; widths: {run.where}; " + _per_op_change(
        base.fs, run.fs, kind, phase
    )
    if render_svg(diff, out_svg, title, subtitle, "ns/op"):
        written.append(out_svg)
    return written


def _per_op_change(base_fs, run_fs, kind, phase):
    """'fsync 1,185.0 → 70.2 µs/op' for the heaviest syscalls (or workers) on either side."""
    sums = []
    for fs in (base_fs, run_fs):
        counts, by_op = per_op_counts(fs, kind, phase), {}
        for path, ns in stacks_of(fs, kind, phase).items():
            by_op[path[1][1:-1]] = by_op.get(path[1][1:-1], 0) + ns
        sums.append({op: ns / counts[op] / NS_PER_US for op, ns in by_op.items() if counts.get(op)})
    ops = sorted(set(sums[0]) | set(sums[1]), key=lambda o: -max(sums[0].get(o, 0), sums[1].get(o, 0)))
    per = f" per {heaviest_op(run_fs, phase)[0]}" if kind == "workers" else "/op"
    return ", ".join(f"{op} {sums[0].get(op, 0):,.1f} → {sums[1].get(op, 0):,.1f} µs{per}" for op in ops[:4])


def top_frames(diff: dict[str, tuple[int, int]], fs_name: str, n: int = 5) -> list[tuple[tuple[str, ...], int]]:
    """The n reddest frames of a differential {stack: (base, run)}: [(path, run − base)], a path
    being a frame of the graph with everything under it (root first). A frame's change is the
    sum over the stacks through it. Scheduler, syscall-entry and other generic frames, the
    [fs]/[op] roots and the separator are not listed, nor a frame whose one listed descendant
    changes as much (the deepest frame of a chain names it)."""
    generic = attribution.rules_for(fs_name).generic
    delta: dict[tuple[str, ...], int] = {}
    for stack, (a, b) in diff.items():
        frames = tuple(stack.split(";"))
        for depth in range(3, len(frames) + 1):
            delta[frames[:depth]] = delta.get(frames[:depth], 0) + b - a
    chosen: list[tuple[tuple[str, ...], int]] = []
    for path, d in sorted(delta.items(), key=lambda kv: (-kv[1], -len(kv[0]), kv[0])):
        if len(chosen) == n or d <= 0:
            break
        if path[-1] == SEPARATOR or (generic and generic.match(path[-1])):
            continue
        if not any(c[: len(path)] == path and cd == d for c, cd in chosen):
            chosen.append((path, d))
    return chosen


# ---------------------------------------------------------------------------------------------
# The default set (fsprof run, fsprof report) and the graphs `fsprof flamegraph` asks for


def svg_name(*parts: str) -> str:
    """The file name of a graph in the default set (used by the HTML report to find it)."""
    return ".".join(_stem_part(p) for p in parts) + ".svg"


def write_default_set(run_dir: str | Path, result: dict[str, Any]) -> list[Path]:
    """Every filesystem's off-CPU, on-CPU, off-wake (and workers', when recorded) graphs, for all
    phases and for each phase, into run_dir/flamegraphs/ (empty graphs are not written), plus
    an off-CPU differential of each further filesystem against the first. Folded files always;
    SVG when inferno is present (its absence is said once). Returns the paths written."""
    out_dir = Path(run_dir) / OUT_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for fs in result["filesystems"]:
        for kind in KINDS:
            for phase in [ALL_PHASES, *fs["phases"]]:
                written += graph(result, [fs], kind, phase, out_dir / svg_name(fs["label"], kind, phase))
    if len(result["filesystems"]) > 1:
        base = Side(result, run_dir, result["filesystems"][0])
        for fs in result["filesystems"][1:]:
            svg = out_dir / svg_name(f"{fs['label']}-vs-{base.fs['label']}", "off-cpu-diff", ALL_PHASES)
            written += diff_graph(Side(result, run_dir, fs), base, "off-cpu", ALL_PHASES, svg)
    return written


def _pick(result, where, labels):
    """The filesystem entries named by labels (all when None), in the run's order."""
    by_label = {fs["label"]: fs for fs in result["filesystems"]}
    if not by_label:
        raise FsprofError(f"{where} has no measured filesystem")
    missing = [label for label in labels or [] if label not in by_label]
    if missing:
        raise FsprofError(f"{where} has no filesystem labelled '{missing[0]}' (it has: {', '.join(by_label)})")
    return [by_label[label] for label in labels] if labels else list(by_label.values())


def _side(result, where, label, option):
    """The one filesystem of a run a differential compares."""
    chosen = _pick(result, where, [label] if label else None)
    if len(chosen) > 1:
        raise FsprofError(
            f"{where} has several filesystems ({', '.join(f['label'] for f in chosen)}): "
            f"choose one with {option} for a differential"
        )
    return Side(result, where, chosen[0])


def draw_diff(
    run_dir: str | Path,
    base_dir: str | Path,
    kind: str,
    phase: str = ALL_PHASES,
    label: str | None = None,
    base_label: str | None = None,
    output: str | None = None,
) -> list[Path]:
    """A differential of filesystem `label` of run_dir (its only one when None) against
    `base_label` of base_dir (default: the run's label, else the baseline's only one), per
    operation; its reddest frames said on stderr. The paths written."""
    run = _side(load(run_dir), run_dir, label, "--fs")
    base_result = load(base_dir)
    same = run.fs["label"] in [fs["label"] for fs in base_result["filesystems"]]
    base = _side(base_result, base_dir, base_label or (run.fs["label"] if same else None), "--diff-fs")
    for side in (run, base):
        phase_index(side.fs, phase)
    svg = _output(
        output,
        run_dir,
        svg_name(run.fs["label"], f"{kind}-diff", phase, f"vs-{Path(base_dir).resolve().name}-{base.fs['label']}"),
    )
    written = diff_graph(run, base, kind, phase, svg)
    if written:
        _say_top_frames(written[2], run.fs["fs"])
    return written


def _say_top_frames(diff_path, fs_name):
    """The reddest frames of a differential, on stderr (stdout lists the files written), so
    that the answer is readable without opening the SVG."""
    tops = top_frames(read_folded(diff_path, diff=True), fs_name)
    print(
        "top frames where the run costs more (ns per op):"
        if tops
        else "no frame costs more in the run than in the baseline",
        file=sys.stderr,
    )
    for path, delta in tops:
        under = " ".join(f for f in path[1:-1] if f.startswith("["))  # the [op] and [cause] frames
        print(f"  +{delta:>12,}  {path[-1]}  under {under}", file=sys.stderr)


def draw(
    run_dir: str | Path, kind: str, phase: str = ALL_PHASES, labels: list[str] | None = None, output: str | None = None
) -> list[Path]:
    """One graph of the filesystems `labels` of run_dir (all when None), into `output` (default
    RUN/flamegraphs/): the paths written, none when there is nothing to draw."""
    result = load(run_dir)
    chosen = _pick(result, run_dir, labels)
    for fs in chosen:
        phase_index(fs, phase)
    return graph(
        result,
        chosen,
        kind,
        phase,
        _output(output, run_dir, svg_name("+".join(fs["label"] for fs in chosen), kind, phase)),
    )


def _output(output, run_dir, default_name):
    """output as given (its directory must exist), else RUN/flamegraphs/default_name."""
    if output:
        return Path(output)
    out_dir = Path(run_dir) / OUT_DIR
    out_dir.mkdir(exist_ok=True)
    return out_dir / default_name
