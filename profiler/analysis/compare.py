"""What `fsprof compare A B [C ...]` finds, as plain data (views/compare.py renders it).

The workload first: each run's elapsed time set against the first's and decomposed over its calls
(count and latency, analysis/workload.py). Then, for the operation that takes the most time (or
--op), the causes that make up the difference in us per op, ranked, each with the evidence
(counts) that goes with it, then what does not differ. A cause a filesystem thread works off (a
journal commit, a log force, a transaction commit) is followed into that thread's own time, so
"journal commit wait" becomes "journal commit wait > cache flush" when the commit thread spent its
time flushing. The contributions add up to the difference, each with its share of the gross
increase or decrease. With repeats (a spec's rep<N> runs), a difference counts only if the
repeats separate (an exact rank test, repeats.py); without, noise is not measured. A spec's output
with several workloads is compared per workload; run directories named one by one whose workloads
differ are compared all the same, saying what differs in what they ran; two runs over the same
filesystems pair each filesystem with its namesake. A significant difference that the scratch
test bed can distort (flushes and reads on a buffered loop device, ...) carries a test-bed note.

Reads result.json files only.

Its parts with a seam of their own are apart: workload.py (the workload's time), evidence.py (the
counts behind each cause), decompose.py (a difference as contributions of causes), band.py (one
latency band, --band), testbed.py (where the test bed can make the difference) and uring.py (the
io_uring requests by opcode).
"""

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import FsprofError
from ..machine import device_model
from ..rundir import INDEX_FILE, RESULT_FILE, load, load_index
from . import repeats, workload as workload_time
from ..work_unit import parse_unit
from .band import compare_band
from .testbed import test_bed_notes
from .decompose import MIN_SHARE, MIN_US, decompose, expanded_causes
from .evidence import Group, elsewhere_pairs, evidence_pairs, assign_evidence, mechanism, owns_the_device
from .uring import as_calls_group, is_uring_op, uring_pairs

if TYPE_CHECKING:
    from ..work_unit import Unit


def _entries_of(path):
    """[(name, result, fs entry, directory that names it)] of a run directory, of one filesystem
    of a run (RUN/ext4), or of every run in a spec's output."""
    path = Path(path)
    if (path / INDEX_FILE).is_file() and not (path / RESULT_FILE).is_file():
        index = load_index(path)
        out = []
        for run in index.get("runs", []):
            if "error" in run:
                continue
            result = load(path / run["dir"])
            out += [(f"{run['workload']}/{run['config']}", result, fs, path) for fs in result["filesystems"]]
        return out
    if not (path / RESULT_FILE).is_file() and (path.parent / RESULT_FILE).is_file():
        result = load(path.parent)  # RUN/<label>: that filesystem of the run
        mine = [fs for fs in result["filesystems"] if fs["label"] == path.name]
        if mine:
            return [(path.name, result, mine[0], path.parent)]
    result = load(path)
    spec = result.get("spec")
    return [(spec["config"] if spec else fs["label"], result, fs, path) for fs in result["filesystems"]]


def groups_of(paths: Sequence[str | Path], fs_filter: set[str] | None = None) -> list[Group]:
    """The configurations in `paths`, each a Group; fs_filter: only entries of these labels or
    filesystem types."""
    found = []
    for path in paths:
        for name, result, fs, where in _entries_of(path):
            if not fs_filter or fs["label"] in fs_filter or fs["fs"] in fs_filter:
                found.append((name, where, result, fs))
    if not found:
        what = f" of {', '.join(sorted(fs_filter))}" if fs_filter else ""
        raise FsprofError(f"no filesystem results{what} in " + ", ".join(map(str, paths)), exit_code=2)
    # One name from several directories names different settings: qualify it by the directory.
    # A spec's repeats come from one index, under one name: they form one group.
    dirs: dict[str, set[Path]] = {}
    for name, path, _, _ in found:
        dirs.setdefault(name, set()).add(path)
    groups: dict[str, Group] = {}
    for name, path, result, fs in found:
        label = name if len(dirs[name]) == 1 else f"{path.name}/{name}"
        groups.setdefault(label, Group(label)).entries.append((result, fs))
    return list(groups.values())


def namesakes(paths: Sequence[str | Path], fs_filter: set[str] | None = None) -> list[list[Group]] | None:
    """Runs named one by one that each measured the same several filesystems: [[group per
    path] per filesystem], so that ext4 is set against ext4 and XFS against XFS; None otherwise."""
    if len(paths) < 2 or not all((Path(p) / RESULT_FILE).is_file() for p in paths):
        return None
    labels = [
        [
            fs["label"]
            for fs in load(p)["filesystems"]
            if not fs_filter or fs["label"] in fs_filter or fs["fs"] in fs_filter
        ]
        for p in paths
    ]
    if len(labels[0]) < 2 or any(sorted(ls) != sorted(labels[0]) for ls in labels):
        return None
    return [groups_of([Path(p) / label for p in paths]) for label in labels[0]]


def _workload_of(result):
    """What identifies a run's workload: the bundled workload or command and its words, the
    options that only name where the tool writes its own output left out."""
    return json.dumps([result["workload"]["name"], _command_words(result)])


def _workload_name(result):
    spec, w = result.get("spec"), result["workload"]
    return spec["workload"] if spec else " ".join([w["name"], *w.get("args", w.get("argv", []))])


def by_workload(groups: list[Group]) -> list[tuple[str, list[Group]]]:
    """[(workload name, groups)] in order of appearance: only runs of one workload are compared."""
    found: dict[str, tuple[str, list[Group]]] = {}
    for g in groups:
        kinds = {_workload_of(r) for r, _ in g.entries}
        if len(kinds) > 1:
            raise FsprofError(f"{g.name} names runs of different workloads; give their directories apart", exit_code=2)
        found.setdefault(kinds.pop(), (_workload_name(g.entries[0][0]), []))[1].append(g)
    return list(found.values())


def _plain_runs(paths):
    """Whether every path is one run's directory, or one filesystem of one (not a spec's output)."""
    return all(
        (Path(p) / RESULT_FILE).is_file()
        or ((Path(p).parent / RESULT_FILE).is_file() and not (Path(p) / INDEX_FILE).is_file())
        for p in paths
    )


# Options of known tools that only say where (or in which format) the tool writes its own figures:
# two runs differing only in them ran the same workload. fio's --output=a.json vs --output=b.json
# is the usual case: each run writes its figures beside its own run directory.
OUTPUT_ONLY_OPTIONS = {
    "fio": ("--output", "--output-format", "--write_bw_log", "--write_lat_log", "--write_iops_log", "--write_hist_log"),
    "pgbench": ("--log-prefix",),
}


def _without_output_options(words):
    tool = Path(words[0]).name if words else ""
    options = OUTPUT_ONLY_OPTIONS.get(tool, ())
    kept, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word in options:
            skip = True  # "--output FILE": its value is the next word
        elif word.split("=", 1)[0] not in options:
            kept.append(word)
    return kept


def _command_words(result):
    """What a run ran, as words: the command, or the bundled workload and its options; never the
    name a spec gave it (the same script named once by a spec is not another workload), nor where
    a known tool wrote its own output (OUTPUT_ONLY_OPTIONS)."""
    w = result["workload"]
    return _without_output_options(list(w["argv"]) if "argv" in w else [w["name"], *w.get("args", [])])


def workload_difference(results: list[dict[str, Any]]) -> dict[str, Any]:
    """What differs between the workloads of runs (result.json dicts), as the words that differ:
    {"name": [...], "words": [[base's], [other's], ...]}, the shared words left out."""
    runs = [_command_words(r) for r in results]
    shared = set(runs[0]).intersection(*runs[1:])
    return {
        "name": [" ".join(words) for words in runs],
        "words": [[w for w in words if w not in shared] for words in runs],
    }


def _gib(n):
    return f"{n / (1 << 30):.1f} GiB" if n is not None else None


def _test_bed(bed):
    """'loop (buffered)', 'loop (direct I/O)', 'zram', 'null_blk', 'disk', with an emulated device's
    model ('loop (direct I/O) + dm-delay model hdd (read 8 ms, write 0 ms, flush 15 ms)'); None
    where a run did not record it."""
    kind = bed.get("kind")
    if kind == "loop":
        kind = "loop (direct I/O)" if bed.get("direct_io") else "loop (buffered)"
    model = bed.get("device_model")
    if model and kind == "null_blk":
        return device_model.describe(model)  # it names null_blk
    return f"{kind} + {device_model.describe(model)}" if model else kind


# What a run was set to and ran on, one row a setting: its name, and how to read it off a
# (result, filesystem entry) pair. compare lists those that differ between two runs.
SETTINGS = (
    ("filesystem", lambda r, fs: fs["fs"]),
    ("mkfs options", lambda r, fs: " ".join(fs.get("mkfs_options", [])) or "(defaults)"),
    ("mount options in force", lambda r, fs: fs.get("mount_options_in_force")),
    ("filesystem size", lambda r, fs: _gib((fs.get("space") or {}).get("size_bytes"))),
    ("I/O scheduler", lambda r, fs: fs["device"].get("scheduler")),
    ("write cache", lambda r, fs: fs["device"].get("write_cache")),
    ("test bed", lambda r, fs: _test_bed(fs["device"].get("test_bed") or {})),
    ("kernel", lambda r, fs: r.get("kernel")),
    ("stacks walked", lambda r, fs: f"1 in {fs['stack_sampling']['every']}" if fs.get("stack_sampling") else "all"),
)


def settings_difference(base: Group, other: Group) -> list[dict[str, Any]]:
    """[{"setting", "values": [base's, other's]}] of the settings (SETTINGS, and each writeback
    sysctl in force) that differ between the two sides' first runs; a setting a run did not
    record (an older run) is not compared."""
    (ra, fa), (rb, fb) = base.entries[0], other.entries[0]
    rows = [(name, read(ra, fa), read(rb, fb)) for name, read in SETTINGS]
    sysctls_a, sysctls_b = ra.get("sysctls_in_force") or {}, rb.get("sysctls_in_force") or {}
    rows += [(key, sysctls_a.get(key), sysctls_b.get(key)) for key in sorted(set(sysctls_a) & set(sysctls_b))]
    return [{"setting": name, "values": [a, b]} for name, a, b in rows if a is not None and b is not None and a != b]


def main_op(groups: list[Group], op: str | None = None) -> str:
    ops: dict[str, int] = {}
    for g in groups:
        for _, fs in g.entries:
            for name, b in fs["attribution"].items():
                ops[name] = ops.get(name, 0) + b["wall_ns"]
    if op:
        requests = {r for g in groups for _, fs in g.entries for r in fs.get("io_uring", {})}
        if op not in ops and op in requests and not is_uring_op(op):
            raise FsprofError(
                f"{op}: a libaio iocb's time has no causes to compare (fs/aio.c has no tracepoint for "
                "its completion; docs/io_uring.md); compare sets the iocbs side by side without --op, "
                "and --op takes one of " + ", ".join(sorted(ops) + sorted(r for r in requests if is_uring_op(r))),
                exit_code=2,
            )
        if op not in ops and op not in requests:
            raise FsprofError(
                f"no run has {op} calls; they have {', '.join(sorted(ops) + sorted(requests))}", exit_code=2
            )
        return op
    if not ops:
        raise FsprofError("these runs traced no filesystem syscall", exit_code=2)
    # The op with the most time among those every configuration made (a run of another command
    # may make ops the base never did).
    common = [
        name
        for name in ops
        if all(any(fs["attribution"].get(name, {}).get("count") for _, fs in g.entries) for g in groups)
    ]
    return max(common or ops, key=ops.__getitem__)


def _op_share(fs: dict[str, Any], op: str) -> float | None:
    """The op's calls' wall time over the workload's elapsed time (thread time: over 1 with
    concurrent threads)."""
    wall = fs["attribution"].get(op, {}).get("wall_ns", 0)
    return wall / 1e9 / fs["elapsed_s"] if fs.get("elapsed_s") else None


def _ratio(a, b):
    return b / a if a else float("inf")


def phase_times(base: Group, other: Group) -> list[dict[str, Any]]:
    """The workload's phases both sides ran, largest change of wall time first."""
    names = [p for p in base.fs.get("phases", {}) if p in other.fs.get("phases", {})]
    rows = []
    for name in names:
        secs = [g.mean(lambda fs: fs["phases"][name].get("elapsed_s")) for g in (base, other)]
        if None not in secs and any(secs):
            rows.append({"phase": name, "elapsed_s": secs})
    return sorted(rows, key=lambda r: -abs(r["elapsed_s"][1] - r["elapsed_s"][0]))


def phase_view(fs: dict[str, Any], phase: str) -> dict[str, Any]:
    """One phase of a filesystem entry, shaped as a whole run. The behind-the-wait sections are
    whole-run figures: they still split a worker-ended wait (pro rata, as for a whole run) but
    give no per-op evidence; the phase's evidence is its own block requests."""
    p = fs.get("phases", {}).get(phase)
    if p is None:
        raise FsprofError(
            f"{fs['label']} has no phase {phase!r}; it has {', '.join(fs.get('phases', {}))}", exit_code=2
        )
    zero = {"count": 0, "bytes": 0}  # a phase lists only the classes it issued
    block = {
        dev: {cls: p["block"].get(dev, {}).get(cls, zero) for cls in classes} for dev, classes in fs["block"].items()
    }
    return {
        **fs,
        "attribution": p["attribution"],
        "syscalls": p["syscalls"],
        "block": block,
        "unresolved_syscalls": p.get("unresolved_syscalls", {}),
        # A phase's own io_uring requests (runs before they were kept per phase: none).
        "io_uring": p.get("io_uring", {}),
        "io_uring_io_wq": p.get("io_uring_io_wq", {}),
        "io_uring_block_requests": p.get("io_uring_block_requests", {}),
        "workload_cpu": None,
        "elapsed_s": p.get("elapsed_s", 0.0),
        "phases": {},
        "exemplars": {op: [c for c in calls if c["phase"] == phase] for op, calls in fs.get("exemplars", {}).items()},
        "phase_view": phase,
    }


def compare_pair(base: Group, other: Group, op: str, unit: "Unit | None" = None) -> dict[str, Any]:
    """The explanation of `other` against `base` as plain data: the workload's time first. An
    io_uring opcode's requests ("io_uring fsync") are explained as a syscall's calls (uring.as_calls)."""
    workload = workload_time.decompose([fs for _, fs in base.entries], [fs for _, fs in other.entries], unit)
    if is_uring_op(op):
        base, other = as_calls_group(base, op), as_calls_group(other, op)

    def lat(fs):
        att = fs["attribution"].get(op, {})
        return att["wall_ns"] / att["count"] / 1e3 if att.get("count") else None

    def p50(fs):
        return fs["syscalls"].get(op, {}).get("p50_ns", 0) / 1e3

    p99 = lambda fs: fs["syscalls"].get(op, {}).get("p99_ns", 0) / 1e3  # noqa: E731
    a, b = base.mean(lat), other.mean(lat)
    if a is None or b is None:
        missing = base.name if a is None else other.name
        raise FsprofError(f"{missing} has no {op} calls to compare", exit_code=2)
    per_repeat = [[v for v in g.per_run(lat) if v is not None] for g in (base, other)]
    threshold = max(MIN_US, MIN_SHARE * max(a, b))
    verdict = repeats.judge(per_repeat[0], per_repeat[1], min_effect=threshold)
    causes: dict[str, list[float]] = {}
    for g, side in ((base, 0), (other, 1)):
        for _, fs in g.entries:
            for cause, us in expanded_causes(fs, op).items():
                causes.setdefault(cause, [0.0, 0.0])[side] += us / len(g.entries)
    cmp: dict[str, Any] = {
        "base": base.name,
        "other": other.name,
        "op": op,
        "repeats": min(len(base.entries), len(other.entries)),
        "workload_time": workload,
        "us_per_op": [a, b],
        "ratio": _ratio(a, b),
        "us_per_repeat": per_repeat,
        "statistics": {k: verdict[k] for k in ("median", "p", "ratio_ci", "separated", "measured")},
        "significant": verdict["significant"],
        "p50_us": [base.mean(p50), other.mean(p50)],
        "p99_us": [base.mean(p99), other.mean(p99)],
        "elapsed_s": [base.mean(lambda fs: fs["elapsed_s"]), other.mean(lambda fs: fs["elapsed_s"])],
        # The op's calls' share of the workload's time: a small one is said, not taken for the answer.
        "op_share": [g.mean(lambda fs: _op_share(fs, op)) for g in (base, other)],
        **decompose(causes, b - a, threshold),
        "phases": phase_times(base, other),
        "settings_differ": settings_difference(base, other),
        "evidence": evidence_pairs(base, other, op),
        # How each side did its I/O per call, where its calls own the device's requests.
        "mechanism": [
            mechanism(g.entries[0][1], op)
            if all(owns_the_device(fs, op) for h in (base, other) for _, fs in h.entries)
            else None
            for g in (base, other)
        ],
        **dict(zip(("elsewhere", "elsewhere_not_linkable", "kernel_threads"), elsewhere_pairs(base, other, op))),
        # What the io_uring requests were made of, per opcode: io_uring_enter's waits are theirs.
        "io_uring": uring_pairs(base, other),
    }
    cmp["evidence_by_cause"] = assign_evidence(cmp)
    return cmp


def _warnings(group):
    """Settings of the group's runs that did not take effect (kept by `fsprof run --go-on`)."""
    return list(dict.fromkeys(w for result, _ in group.entries for w in result.get("warnings", [])))


def _sampling_warnings(*groups):
    """A sentence when a side's stacks were sampled (--stack-sample): its waits' causes are estimates."""
    every = {g.name: max(fs.get("stack_sampling", {}).get("every", 1) for _, fs in g.entries) for g in groups}
    sampled = {name: n for name, n in every.items() if n > 1}
    if not sampled:
        return []
    return [
        "stacks were sampled in "
        + ", ".join(f"{name} (1 in {n} calls)" for name, n in sampled.items())
        + ": how its waits divide among causes is an estimate from the walked calls (counts and times "
        "are not); differences of a few points in a wait's share can come from that"
    ]


def spec_unit(groups: list[Group]) -> "Unit | None":
    """The unit of work a spec's workload names (its `unit`), where every run compared names one."""
    units = {(result.get("spec") or {}).get("unit") for g in groups for result, _ in g.entries}
    return parse_unit(units.pop(), where="unit") if len(units) == 1 and None not in units else None


def _comparable(groups):
    return len(groups) > 1 or len(groups[0].entries) > 1


def compare(
    paths: Sequence[str | Path],
    op: str | None = None,
    phase: str | None = None,
    unit: "Unit | None" = None,
    fs_filter: set[str] | None = None,
    band: str | None = None,
) -> list[dict[str, Any]]:
    """Per workload found in `paths` (a spec's output may hold several), each configuration set
    against the first one of that workload; with `phase`, that phase of the workload only. Runs
    named one by one over the same filesystems: each filesystem against its namesake. unit: a
    workload.Unit, counts per unit of work; fs_filter: only these filesystems (labels or types);
    band: also the causes of that latency band of the op (band.py)."""
    pairs = namesakes(paths, fs_filter)
    groups = groups_of(paths, fs_filter)
    workloads = by_workload(groups)
    differ = None
    if pairs is not None:
        runs = [load(p) for p in paths]
        differ = workload_difference(runs) if len({_workload_of(r) for r in runs}) > 1 else None
        workloads = [(f"{_workload_name(runs[0])} on {gs[0].fs['label']}", gs) for gs in pairs]
    elif len(workloads) > 1 and not any(_comparable(gs) for _, gs in workloads) and _plain_runs(paths):
        # Run directories named one by one, each a different workload (a command with another
        # argument, a bundled workload with another option): set against each other all the
        # same, saying what differs in what they ran.
        differ = workload_difference([gs[0].entries[0][0] for _, gs in workloads])
        workloads = [(" vs ".join(name for name, _ in workloads), [g for _, gs in workloads for g in gs])]
    if phase:
        for _, groups in workloads:
            for g in groups:
                g.entries = [(r, phase_view(fs, phase)) for r, fs in g.entries]
    if not any(_comparable(gs) for _, gs in workloads):
        if len(workloads) > 1:
            raise FsprofError(
                "these runs ran different workloads (or options); compare runs of the same one", exit_code=2
            )
        raise FsprofError("compare needs two runs (or two filesystems in one run)", exit_code=2)
    comparisons = []
    for name, groups in workloads:
        if not _comparable(groups):
            continue  # one configuration of this workload: nothing to set it against
        if len(groups) == 1:  # a run against itself, or one configuration's repeats
            groups = [Group(f"{groups[0].name} (#{i + 1})", [e]) for i, e in enumerate(groups[0].entries)]
        try:
            wl_op = main_op(groups, op)
        except FsprofError:
            if op and len(workloads) > 1:
                continue  # --op names an operation this workload does not make
            raise
        wl_unit = unit or spec_unit(groups) or workload_time.declared_unit([fs for g in groups for _, fs in g.entries])
        for g in groups[1:]:
            cmp = {
                "workload": name,
                **compare_pair(groups[0], g, wl_op, wl_unit),
                "warnings": _warnings(groups[0]) + _warnings(g) + _sampling_warnings(groups[0], g),
                "workloads_differ": differ,
            }
            cmp["test_bed_notes"] = test_bed_notes(groups[0], g, cmp) if cmp["significant"] else []
            if band:
                base, other = (as_calls_group(h, wl_op) if is_uring_op(wl_op) else h for h in (groups[0], g))
                cmp["band"] = compare_band(base, other, wl_op, band)
            comparisons.append(cmp)
    if not comparisons:
        raise FsprofError(f"no workload of these runs has {op} calls", exit_code=2)
    return comparisons
