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
"""

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import FsprofError
from ..trace.maps import BLK_CLASSES, BLK_WRITE_CLASSES
from ..rundir import INDEX_FILE, RESULT_FILE, load, load_index
from .. import behind
from ..behind.scope import in_scope, wide
from ..causes import TABLE as CAUSES
from . import repeats, workload as workload_time

# A wait that a filesystem thread ends, and the worker whose own time explains it (XFS's log force
# wait has none: the fsync waits for iclog I/O the CIL push submits but does not wait on); which
# counts bear on which cause (substrings of evidence labels). Both are columns of causes.py.
WORKER_OF_CAUSE = {c.name: c.worker for c in CAUSES.values() if c.worker}
EVIDENCE_WORDS = {c.name: list(c.evidence) for c in CAUSES.values() if c.evidence}
MIN_SHARE = 0.05       # below 5% of the op's time (and 1 us) a cause "does not differ"
MIN_US = 1.0


@dataclass
class Group:
    """One configuration: one filesystem entry, or its repeats."""
    name: str
    entries: list = field(default_factory=list)   # (result, fs entry)

    @property
    def fs(self):
        return self.entries[0][1]

    def per_run(self, fn):
        return [fn(fs) for _, fs in self.entries]

    def mean(self, fn):
        values = [v for v in self.per_run(fn) if v is not None]
        return statistics.fmean(values) if values else None

    def spread(self, fn):
        values = [v for v in self.per_run(fn) if v is not None]
        return (max(values) - min(values)) if len(values) > 1 else None


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


def groups_of(paths, fs_filter=None):
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
    dirs = {}
    for name, path, _, _ in found:
        dirs.setdefault(name, set()).add(path)
    groups = {}
    for name, path, result, fs in found:
        label = name if len(dirs[name]) == 1 else f"{path.name}/{name}"
        groups.setdefault(label, Group(label)).entries.append((result, fs))
    return list(groups.values())


def namesakes(paths, fs_filter=None):
    """Runs named one by one that each measured the same several filesystems: [[group per
    path] per filesystem], so that ext4 is set against ext4 and XFS against XFS; None otherwise."""
    if len(paths) < 2 or not all((Path(p) / RESULT_FILE).is_file() for p in paths):
        return None
    labels = [[fs["label"] for fs in load(p)["filesystems"]
               if not fs_filter or fs["label"] in fs_filter or fs["fs"] in fs_filter] for p in paths]
    if len(labels[0]) < 2 or any(sorted(ls) != sorted(labels[0]) for ls in labels):
        return None
    return [groups_of([Path(p) / label for p in paths]) for label in labels[0]]


def _workload_of(result):
    w = result["workload"]
    return json.dumps({k: w.get(k) for k in ("name", "args", "argv")}, sort_keys=True)


def _workload_name(result):
    spec, w = result.get("spec"), result["workload"]
    return spec["workload"] if spec else " ".join([w["name"], *w.get("args", w.get("argv", []))])


def by_workload(groups):
    """[(workload name, groups)] in order of appearance: only runs of one workload are compared."""
    found = {}
    for g in groups:
        kinds = {_workload_of(r) for r, _ in g.entries}
        if len(kinds) > 1:
            raise FsprofError(f"{g.name} names runs of different workloads; give their directories apart",
                              exit_code=2)
        found.setdefault(kinds.pop(), (_workload_name(g.entries[0][0]), []))[1].append(g)
    return list(found.values())


def _plain_runs(paths):
    """Whether every path is one run's directory, or one filesystem of one (not a spec's output)."""
    return all((Path(p) / RESULT_FILE).is_file() or
               ((Path(p).parent / RESULT_FILE).is_file() and not (Path(p) / INDEX_FILE).is_file()) for p in paths)


def workload_difference(results):
    """What differs between the workloads of runs (result.json dicts), as the words that differ:
    {"name": [...], "words": [[base's], [other's], ...]}, the shared words left out."""
    runs = [_workload_name(r).split() for r in results]
    shared = set(runs[0]).intersection(*runs[1:])
    return {"name": [_workload_name(r) for r in results],
            "words": [[w for w in words if w not in shared] for words in runs]}


def main_op(groups, op=None):
    ops = {}
    for g in groups:
        for _, fs in g.entries:
            for name, b in fs["attribution"].items():
                ops[name] = ops.get(name, 0) + b["wall_ns"]
    if op:
        if op not in ops:
            raise FsprofError(f"no run has {op} calls; they have {', '.join(sorted(ops))}", exit_code=2)
        return op
    if not ops:
        raise FsprofError("these runs traced no filesystem syscall", exit_code=2)
    # The op with the most time among those every configuration made (a run of another command
    # may make ops the base never did).
    common = [name for name in ops if all(any(fs["attribution"].get(name, {}).get("count") for _, fs in g.entries)
                                          for g in groups)]
    return max(common or ops, key=ops.get)


def _us_per_op(b, ns):
    return ns / b["count"] / 1e3 if b and b["count"] else 0.0


def expanded_causes(fs, op):
    """{cause: us per op} of `op`, a worker-ended wait split by its worker's own off-CPU causes
    (pro rata: the waiter waited while the worker spent its window that way)."""
    b = fs["attribution"].get(op)
    if not b:
        return {}
    threads = worker_causes(fs)
    out = {}
    for cause, ns in b["causes"].items():
        us = _us_per_op(b, ns)
        kind = WORKER_OF_CAUSE.get(cause, "")
        total = sum(threads.get(kind, {}).values())
        if total:
            for sub, sub_ns in threads[kind].items():
                key = f"{cause} > {kind}: {sub}"
                out[key] = out.get(key, 0) + us * sub_ns / total
        else:
            out[cause] = out.get(cause, 0) + us
    return out


def worker_causes(fs):
    """{worker kind: {cause: ns}} of a run's filesystem threads over their whole windows (on-CPU
    time included), from the behind modules that account for it (thread_causes). A wait is
    split pro rata: the waiter waited while its worker spent its window that way."""
    out = {}
    for module in behind.MODULES:
        fn, section = getattr(module, "thread_causes", None), fs.get("behind", {}).get(module.NAME)
        if fn and section:
            out.update(fn(section))
    return out


def _cls_words(cls):
    return cls.replace("_", " ")


OWNER_SHARE = 0.95      # a call owns the device's requests when 95% of those linked to calls are its,
LINKED_COVERAGE = 0.5   # and at least half of the device's requests are linked to a call at all


def linked_requests(fs):
    """{op: block requests linked to its calls}: the ones its calls made from their own bios, and
    each filesystem worker's (a jbd2 commit's, a CIL push's) shared among the calls whose waits
    it ended, pro rata to those waits (as work_elsewhere shares the worker's time)."""
    attribution = fs["attribution"]
    linked = {o: sum(v.get("count", 0) for v in b.get("requests", {}).values()) for o, b in attribution.items()}
    for kind, w in fs.get("behind", {}).get("workers", {}).items():
        made = sum(v.get("count", 0) for v in in_scope(w, fs).get("requests", {}).values())
        waited = [c for c, cause in CAUSES.items() if cause.worker == kind]
        total = sum(b.get("waits", {}).get(c, 0) for b in attribution.values() for c in waited)
        for o, b in attribution.items() if made and total else ():
            linked[o] += made * sum(b.get("waits", {}).get(c, 0) for c in waited) / total
    return linked


def owns_the_device(fs, op):
    """Whether the device's requests in this run (or phase) are `op`'s: its calls are linked to
    OWNER_SHARE of the requests linked to any call, and LINKED_COVERAGE of the device's requests
    are linked to a call at all (background writeback is linked to none). Then a device count goes
    per call of `op` ("flush requests per fdatasync 2.00 vs 2.00"), not per second, which misleads
    when one side ran faster."""
    linked = linked_requests(fs)
    device = sum(v.get("count", 0) for v in _device_counts(fs).values())
    mine, every = linked.get(op, 0), sum(linked.values())
    return bool(device and every and mine >= OWNER_SHARE * every and every >= LINKED_COVERAGE * device)


def _device_counts(fs):
    """The device under test's requests by class; {} for a bio-based device (zram), where zero
    would be a figure never observed."""
    dev = fs["device"]["name"]
    return fs.get("block", {}).get(dev, {}) if Path(f"/sys/block/{dev}/mq").exists() or \
        fs["device"].get("request_based") else {}


def evidence(fs, op, per_call=False):
    """Counts that explain times, each in its scope (docs/compare.md, "Evidence"). Per op, only
    what the op's own calls did: the block requests it made from its own bios, how often it
    blocked for each cause, and for a wait a filesystem worker ends (a jbd2 commit) what one
    window of that worker did. The device's requests: per call of the op where it owns them
    (per_call: owns_the_device on every side), else per second of the run (or of the phase),
    saying that no call owns them; the write amplification and the behind modules' counts are
    run-wide. A run-wide count is never divided by an op's count."""
    b = fs["attribution"].get(op, {})
    n = b.get("count", 0)
    out = {}
    if n and "requests" in b:
        for cls in BLK_CLASSES:
            if cls in b["requests"] or cls in _SCOPED_CLASSES:
                out[f"{_cls_words(cls)} requests made in its calls, per {op}"] = \
                    b["requests"].get(cls, {}).get("count", 0) / n
    workers = fs.get("behind", {}).get("workers", {})
    for cause, waits in b.get("waits", {}).items() if n else ():
        out[f"times blocked in {cause}, per {op}"] = waits / n
        kind = CAUSES[cause].worker if cause in CAUSES else None
        w = in_scope(workers.get(kind), fs)
        if w.get("windows") and "requests" in w:
            for cls in BLK_CLASSES:
                if cls in w["requests"] or cls in _WORKER_CLASSES:
                    out[f"{_cls_words(cls)} requests per {kind} (the work that ends its {cause})"] = \
                        w["requests"].get(cls, {}).get("count", 0) / w["windows"]
    secs = fs.get("elapsed_s") or 0
    counts = _device_counts(fs)
    # Where no call's requests were counted (a kernel without block_getrq, an older run), whether
    # a call owns them is not known, and the rate does not say so.
    linked = any("requests" in b for b in fs["attribution"].values())
    scope = f"{wide(fs)}; no one call owns them" if linked else wide(fs)
    for cls in ("flush", "fua_write", "preflush_write", "sync_write", "async_write", "read"):
        if cls in counts and per_call and n:
            out[f"{_cls_words(cls)} requests to the device per {op} (all of the device's: its calls own them)"] = \
                counts[cls]["count"] / n
        elif cls in counts and secs:
            out[f"{_cls_words(cls)} requests to the device per second ({scope})"] = counts[cls]["count"] / secs
    written = sum(h.get("bytes", 0) for name, h in fs["syscalls"].items() if "write" in name)
    device_bytes = sum(counts.get(c, {}).get("bytes", 0) for c in BLK_WRITE_CLASSES)
    if written:
        out[f"write amplification, {wide(fs)} (device bytes / bytes written by the syscalls)"] = device_bytes / written
    for module in behind.MODULES:
        fn = getattr(module, "evidence", None)
        section = fs.get("behind", {}).get(module.NAME)
        if fn and section:
            out.update(fn(section, fs, op))
    return out


# Classes shown per op even at zero on both sides: a sync write or flush an op did not make is news.
_SCOPED_CLASSES = ("flush", "sync_write")
_WORKER_CLASSES = ("flush", "preflush_write", "fua_write")  # a worker's barrier, or its absence
_SCOPED_ZERO_SHOWN = tuple(f"{_cls_words(c)} requests made in its calls" for c in _SCOPED_CLASSES)


def work_elsewhere(fs, op):
    """{worker kind: {"us_per_op", "cpu_us_per_op", "link"}}: the time filesystem threads spent in
    their windows (wall, and on CPU) for this op's calls, per op. A worker's time is shared among
    the ops that caused it, pro rata to what links them: the waits of a cause it ends (a jbd2
    commit ends journal commit waits) or what a behind module counts per op (work_links(): the
    inodes an unlink queued for XFS inodegc). A worker no event links to any op has "link" None
    and its run-wide time per second (us_per_s). Not part of the op's wall time: a thread's
    work may overlap the op's wait for it, or come after the op returned."""
    workers = fs.get("behind", {}).get("workers", {})
    attribution = fs["attribution"]
    n = attribution.get(op, {}).get("count", 0)
    links = {}
    for module in behind.MODULES:
        fn = getattr(module, "work_links", None)
        section = fs.get("behind", {}).get(module.NAME)
        if fn and section:
            links.update(fn(section, fs))
    out = {}
    for kind, w in workers.items():
        w = in_scope(w, fs)
        if not w.get("wall_ns"):
            continue
        share, how = None, None
        waited = [c for c, cause in CAUSES.items() if cause.worker == kind]
        total = sum(b.get("waits", {}).get(c, 0) for b in attribution.values() for c in waited)
        if total:
            share = sum(attribution.get(op, {}).get("waits", {}).get(c, 0) for c in waited) / total
            how = f"by the {' and '.join(waited)}s it ends"
        elif kind in links:
            share, how = links[kind]["shares"].get(op, 0.0), links[kind]["by"]
        if share is None:
            secs = fs.get("elapsed_s") or 0
            out[kind] = {"link": None, "us_per_s": w["wall_ns"] / 1e3 / secs if secs else None}
        elif n:
            out[kind] = {"link": how, "us_per_op": w["wall_ns"] * share / n / 1e3,
                         "cpu_us_per_op": w.get("oncpu_ns", 0) * share / n / 1e3}
    return out


def _elsewhere_pairs(base, other, op):
    """[{kind, us_per_op: [base, other], cpu_us_per_op, link}] linked to the op on either side,
    largest change first; [{kind, us_per_s}] of those linked on neither side; [{thread,
    cpu_us_per_s}] of the filesystems' own kernel threads, all their work (kthreads.py)."""
    linked, unlinked, threads = {}, {}, {}
    for g, side in ((base, 0), (other, 1)):
        for _, fs in g.entries:
            for kind, e in work_elsewhere(fs, op).items():
                if e["link"]:
                    row = linked.setdefault(kind, {"kind": kind, "us_per_op": [0.0, 0.0],
                                                   "cpu_us_per_op": [0.0, 0.0], "link": e["link"]})
                    row["us_per_op"][side] += e["us_per_op"] / len(g.entries)
                    row["cpu_us_per_op"][side] += e["cpu_us_per_op"] / len(g.entries)
                elif e["us_per_s"] is not None:
                    row = unlinked.setdefault(kind, {"kind": kind, "us_per_s": [0.0, 0.0]})
                    row["us_per_s"][side] += e["us_per_s"] / len(g.entries)
            secs = fs.get("elapsed_s") or 0
            for name, t in fs.get("kernel_threads", {}).items() if secs else ():
                row = threads.setdefault(name, {"thread": name, "cpu_us_per_s": [0.0, 0.0]})
                row["cpu_us_per_s"][side] += t["cpu_ns"] / 1e3 / secs / len(g.entries)
    ranked = sorted((r for r in linked.values() if any(r["us_per_op"])),
                    key=lambda r: -abs(r["us_per_op"][1] - r["us_per_op"][0]))
    return (ranked, [r for k, r in sorted(unlinked.items()) if k not in linked],
            sorted(threads.values(), key=lambda r: -abs(r["cpu_us_per_s"][1] - r["cpu_us_per_s"][0])))


def _ratio(a, b):
    return b / a if a else float("inf")


def phase_times(base, other):
    """The workload's phases both sides ran, largest change of wall time first."""
    names = [p for p in base.fs.get("phases", {}) if p in other.fs.get("phases", {})]
    rows = []
    for name in names:
        secs = [g.mean(lambda fs: fs["phases"][name].get("elapsed_s")) for g in (base, other)]
        if None not in secs and any(secs):
            rows.append({"phase": name, "elapsed_s": secs})
    return sorted(rows, key=lambda r: -abs(r["elapsed_s"][1] - r["elapsed_s"][0]))


def phase_view(fs, phase):
    """One phase of a filesystem entry, shaped as a whole run. The behind-the-wait sections are
    whole-run figures: they still split a worker-ended wait (pro rata, as for a whole run) but
    give no per-op evidence; the phase's evidence is its own block requests."""
    p = fs.get("phases", {}).get(phase)
    if p is None:
        raise FsprofError(f"{fs['label']} has no phase {phase!r}; it has {', '.join(fs.get('phases', {}))}",
                          exit_code=2)
    zero = {"count": 0, "bytes": 0}  # a phase lists only the classes it issued
    block = {dev: {cls: p["block"].get(dev, {}).get(cls, zero) for cls in classes}
             for dev, classes in fs["block"].items()}
    return {**fs, "attribution": p["attribution"], "syscalls": p["syscalls"], "block": block,
            "unresolved_syscalls": p.get("unresolved_syscalls", {}), "workload_cpu": None,
            "elapsed_s": p.get("elapsed_s", 0.0), "phases": {}, "phase_view": phase}


def compare_pair(base, other, op, unit=None):
    """The explanation of `other` against `base` as plain data: the workload's time first."""
    lat = lambda fs: fs["attribution"][op]["wall_ns"] / fs["attribution"][op]["count"] / 1e3 \
        if fs["attribution"].get(op, {}).get("count") else None  # noqa: E731
    p50 = lambda fs: fs["syscalls"].get(op, {}).get("p50_ns", 0) / 1e3  # noqa: E731
    p99 = lambda fs: fs["syscalls"].get(op, {}).get("p99_ns", 0) / 1e3  # noqa: E731
    a, b = base.mean(lat), other.mean(lat)
    if a is None or b is None:
        missing = base.name if a is None else other.name
        raise FsprofError(f"{missing} has no {op} calls to compare", exit_code=2)
    per_repeat = [[v for v in g.per_run(lat) if v is not None] for g in (base, other)]
    threshold = max(MIN_US, MIN_SHARE * max(a, b))
    verdict = repeats.judge(*per_repeat, min_effect=threshold)
    causes = {}
    for g, side in ((base, 0), (other, 1)):
        for _, fs in g.entries:
            for cause, us in expanded_causes(fs, op).items():
                causes.setdefault(cause, [0.0, 0.0])[side] += us / len(g.entries)
    cmp = {
        "base": base.name, "other": other.name, "op": op, "repeats": min(len(base.entries), len(other.entries)),
        "workload_time": workload_time.decompose([fs for _, fs in base.entries], [fs for _, fs in other.entries],
                                                 unit),
        "us_per_op": [a, b], "ratio": _ratio(a, b), "us_per_repeat": per_repeat,
        "statistics": {k: verdict[k] for k in ("median", "p", "ratio_ci", "separated", "measured")},
        "significant": verdict["significant"],
        "p50_us": [base.mean(p50), other.mean(p50)], "p99_us": [base.mean(p99), other.mean(p99)],
        "elapsed_s": [base.mean(lambda fs: fs["elapsed_s"]), other.mean(lambda fs: fs["elapsed_s"])],
        **decompose(causes, b - a, threshold),
        "phases": phase_times(base, other),
        "evidence": _evidence_pairs(base, other, op),
        # How each side did its I/O per call, where its calls own the device's requests.
        "mechanism": [mechanism(g.entries[0][1], op) if all(owns_the_device(fs, op) for h in (base, other)
                                                            for _, fs in h.entries) else None
                      for g in (base, other)],
        **dict(zip(("elsewhere", "elsewhere_not_linkable", "kernel_threads"), _elsewhere_pairs(base, other, op))),
    }
    cmp["evidence_by_cause"] = assign_evidence(cmp)
    return cmp


def assign_evidence(cmp):
    """Which counts go with which listed cause (by the cause's evidence words), and the rest:
    {"causes": {cause: [label]}, "other_moved": [...], "only": [[base's], [other's]],
    "steady": [...], "zero": [...]}. A count "moved" by more than 5% of the larger side."""
    op, ev = cmp["op"], cmp["evidence"]
    both = {k: (x, y) for k, (x, y) in ev.items() if x is not None and y is not None}
    moved = [k for k, (x, y) in both.items() if abs(y - x) > 0.05 * max(abs(x), abs(y), 1e-9)]
    used, by_cause = set(), {}
    for c in cmp["causes"]:
        words = EVIDENCE_WORDS.get(c["cause"].split(" > ")[0], []) + \
            ([c["cause"].rsplit(": ", 1)[-1]] if " > " in c["cause"] else [])
        mine = [k for k in moved if k not in used and any(w in k.replace(f" per {op}", "") for w in words)]
        used.update(mine)
        by_cause[c["cause"]] = mine
    return {"causes": by_cause, "other_moved": [k for k in moved if k not in used],
            "only": [[k for k, v in ev.items() if v[side] and v[1 - side] is None] for side in (0, 1)],
            "steady": [k for k, (x, y) in both.items() if (x or y) and k not in moved],
            "zero": [k for k, (x, y) in both.items() if not x and not y and k.startswith(_SCOPED_ZERO_SHOWN)]}


def decompose(causes, diff, threshold):
    """The difference of mean us per op as signed contributions of causes ({cause: [base, other]}).
    They add up to it: the causes above the threshold, largest magnitude first, then the rest
    together ("not different"), then what the causes' sum misses of the wall time (the residual of
    the sum invariant). A contribution's share is of the gross change on its own side (of all
    increases, or of all decreases), so no share exceeds 100% and the two sides do not cancel."""
    ranked = sorted(causes.items(), key=lambda kv: -abs(kv[1][1] - kv[1][0]))
    up = sum(y - x for _, (x, y) in ranked if y > x)
    down = sum(x - y for _, (x, y) in ranked if y < x)
    listed, rest = [], []
    for c, (x, y) in ranked:
        d = y - x
        if abs(d) >= threshold:
            listed.append({"cause": c, "us_per_op": [x, y], "diff_us": d,
                           "share_of_gross": d / up if d > 0 else -d / down})
        elif max(x, y) >= MIN_US or d:
            rest.append({"cause": c, "us_per_op": [x, y], "diff_us": d})
    explained = sum(y - x for _, (x, y) in ranked)
    return {"causes": listed, "not_different": rest, "gross_us": [up, down],
            "not_different_us": sum(r["diff_us"] for r in rest), "residual_us": diff - explained}


def mechanism(fs, op):
    """How `op`'s calls did their I/O, per call, where the op owns the device's requests
    (owns_the_device): each class's requests per call by who submitted them (the caller, jbd2,
    a worker: the block module's submitters), with the device's average time per request; and
    the caller's waits per call by cause (the waits one thread makes inside one call follow one
    another: each is an I/O round it could not overlap)."""
    n = fs["attribution"].get(op, {}).get("count", 0)
    dev = fs["device"]["name"]
    block = fs.get("behind", {}).get("block", {}).get("devices", {}).get(dev, {})
    if not n or not block:
        return None
    requests = {}
    for cls, rows in block.get("submitters", {}).items():
        device = block.get("classes", {}).get(cls, {}).get("device", {})
        requests[cls] = {"per_call": sum(r["count"] for r in rows) / n,
                         "by": {r["who"]: r["count"] / n for r in rows},
                         "device_us": device.get("avg_ns", 0) / 1e3 if device.get("count") else None}
    waits = {c: w / n for c, w in fs["attribution"][op].get("waits", {}).items()}
    return {"requests": requests, "waits": waits}


def _evidence_pairs(base, other, op):
    """{count: [base, other]}, each side the mean over its repeats. A count one side's filesystem
    does not have (jbd2 commits on XFS) is None there, not 0. The device's counts go per call
    only where the op owns them on both sides, so that the two sides read alike."""
    per_call = all(owns_the_device(fs, op) for g in (base, other) for _, fs in g.entries)
    ev = {}
    for g, side in ((base, 0), (other, 1)):
        for _, fs in g.entries:
            for k, v in evidence(fs, op, per_call).items():
                pair = ev.setdefault(k, [None, None])
                pair[side] = (pair[side] or 0.0) + v / len(g.entries)
    return ev


# Causes whose time a loop device over a buffered file does not measure as a disk would.
FLUSH_CAUSE_WORDS = ("flush", "FUA")
READ_CAUSE_WORDS = ("read I/O",)
SEEK_CAUSE_WORDS = ("read I/O", "writeback", "flush", "FUA", "log block writes")


def test_bed_notes(base, other, cmp):
    """Sentences on where the test bed (docs/test-bed.md) can make the difference: a loop device
    over a buffered file (its flushes are host writeback, its reads may be host page cache), a RAM
    device, a backing disk that does not seek. Only for the causes this comparison lists."""
    causes = [c["cause"] for c in cmp["causes"]]
    has = lambda words: any(w in c for c in causes for w in words)  # noqa: E731
    buffered, ram, no_seek = {}, set(), {}
    for g in (base, other):
        for _, fs in g.entries:
            dev = fs["device"]
            bed = dev.get("test_bed") or {}
            if bed.get("kind") == "loop" and not bed.get("direct_io"):
                buffered[dev["name"]] = bed.get("backing_disk") or "the backing filesystem"
            if bed.get("kind") == "zram":
                ram.add(dev["name"])
            disk = bed.get("backing_disk") if bed.get("kind") == "loop" else dev["name"]
            rotational = bed.get("backing_rotational") if bed.get("kind") == "loop" else dev.get("rotational")
            if bed.get("kind") != "zram" and disk and rotational is False:
                no_seek[disk] = True
    notes = []
    loops = ", ".join(sorted(buffered))
    disks = ", ".join(sorted(set(buffered.values())))
    if buffered and has(FLUSH_CAUSE_WORDS):
        notes.append(f"{loops}: a loop device over a buffered image file: its cache flush is an fsync of the image "
                     f"file, whose pages the host writes back to {disks}; with barriers off nothing reaches "
                     f"{disks} at all. Flush times here are the host's, not a disk write cache's "
                     "(`--loop-io direct` passes I/O through).")
    if buffered and has(READ_CAUSE_WORDS):
        notes.append(f"{loops}: reads of a buffered image may be served from the host's page cache (drop_caches "
                     "keeps the image's dirty pages): read waits can be shorter than a disk's, and cold reads "
                     "warm (`--loop-io direct` makes them reach the disk).")
    if ram and (has(FLUSH_CAUSE_WORDS) or has(READ_CAUSE_WORDS)):
        notes.append(f"{', '.join(sorted(ram))}: a RAM device (zram): no write cache to flush, no seeks.")
    if no_seek and has(SEEK_CAUSE_WORDS):
        notes.append(f"{', '.join(sorted(no_seek))} does not rotate: differences that a rotating disk's seeks "
                     "would make do not show here.")
    return notes


def _warnings(group):
    """Settings of the group's runs that did not take effect (kept by `fsprof run --go-on`)."""
    return list(dict.fromkeys(w for result, _ in group.entries for w in result.get("warnings", [])))


def _sampling_warnings(*groups):
    """A sentence when a side's stacks were sampled (--stack-sample): its waits' causes are estimates."""
    every = {g.name: max(fs.get("stack_sampling", {}).get("every", 1) for _, fs in g.entries) for g in groups}
    sampled = {name: n for name, n in every.items() if n > 1}
    if not sampled:
        return []
    return ["stacks were sampled in " + ", ".join(f"{name} (1 in {n} calls)" for name, n in sampled.items())
            + ": how its waits divide among causes is an estimate from the walked calls (counts and times "
              "are not); differences of a few points in a wait's share can come from that"]


def _comparable(groups):
    return len(groups) > 1 or len(groups[0].entries) > 1


def compare(paths, op=None, phase=None, unit=None, fs_filter=None):
    """Per workload found in `paths` (a spec's output may hold several), each configuration set
    against the first one of that workload; with `phase`, that phase of the workload only. Runs
    named one by one over the same filesystems: each filesystem against its namesake. unit: a
    workload.Unit, counts per unit of work; fs_filter: only these filesystems (labels or types)."""
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
            raise FsprofError("these runs ran different workloads (or options); compare runs of the same one",
                              exit_code=2)
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
        wl_unit = unit or workload_time.declared_unit([fs for g in groups for _, fs in g.entries])
        for g in groups[1:]:
            cmp = {"workload": name, **compare_pair(groups[0], g, wl_op, wl_unit),
                   "warnings": _warnings(groups[0]) + _warnings(g) + _sampling_warnings(groups[0], g),
                   "workloads_differ": differ}
            cmp["test_bed_notes"] = test_bed_notes(groups[0], g, cmp) if cmp["significant"] else []
            comparisons.append(cmp)
    if not comparisons:
        raise FsprofError(f"no workload of these runs has {op} calls", exit_code=2)
    return comparisons


