"""OpenMetrics / Prometheus exposition of a continuous recording (`fsprof record --continuous`),
through prometheus-client: the figures of each window's result entries, kept as counters that only
grow while fsprof runs. docs/continuous.md lists every metric and its labels.

Labels, and why their number is bounded: a filesystem is (fstype, device, mountpoint) of a mount
that exists now (a filesystem unmounted loses its series at the next window); op is one of the
syscalls fsprof traces (profiler/trace/syscalls.py) or an io_uring opcode ("io_uring write");
cause one of profiler/causes.py; class one of the block request classes (trace/maps.py
BLK_CLASSES); reason one of the drop reasons; program one of fsprof's BPF programs. Nothing is
labelled by pid, path, stack or time.
"""

import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Exemplar

from ..analysis.exemplars import main_cause
from ..trace import maps

FS_LABELS = ("fstype", "device", "mountpoint")
# Latency buckets: every second power of two of the kernel's log2 histogram (bucket i holds
# [2^i, 2^(i+1)) ns), 1.024 µs to 17.2 s: 13 bounds + Inf per (filesystem, op).
BUCKET_LOG2 = tuple(range(10, 35, 2))
NS = 1e-9

# name -> (type, help). Types: counter, gauge, histogram.
METRICS = {
    "fsprof_syscall_latency_seconds": ("histogram", "Latency of the traced processes' syscalls on this filesystem"),
    "fsprof_syscall_time_seconds": (
        "counter",
        "Time in syscalls on this filesystem by cause (attribution: sums to the syscalls' wall time)",
    ),
    "fsprof_jbd2_commits": ("counter", "jbd2 transaction commits of this ext3/ext4 filesystem's journal"),
    "fsprof_xfs_log_forces": ("counter", "XFS log forces on this filesystem"),
    "fsprof_btrfs_transaction_commits": ("counter", "btrfs transaction commits of this filesystem"),
    "fsprof_cache_flushes": (
        "counter",
        "Cache flush requests (REQ_PREFLUSH, empty or with data) issued to this filesystem's device",
    ),
    "fsprof_fua_writes": ("counter", "Writes with FUA issued to this filesystem's device"),
    "fsprof_block_requests": ("counter", "Block requests completed on this filesystem's device, by class"),
    "fsprof_block_bytes": ("counter", "Bytes of block requests on this filesystem's device, by class"),
    "fsprof_op_block_requests": (
        "counter",
        "Block requests the traced processes' syscalls made from their own bios inside the calls, by op and class",
    ),
    "fsprof_op_block_requests_timed": (
        "counter",
        "Of those block requests (syscalls' and io_uring requests'), the ones seen to end with their maker known",
    ),
    "fsprof_op_block_request_device_seconds": (
        "counter",
        "Device time (issue to completion) of those timed block requests, by op and class",
    ),
    "fsprof_op_block_request_life_seconds": (
        "counter",
        "Start-to-end time of those timed block requests (queue, device, a cache flush before one), by op and class",
    ),
    "fsprof_io_uring_latency_seconds": (
        "histogram",
        "Submission to completion of the traced processes' io_uring requests on this filesystem, by opcode",
    ),
    "fsprof_io_uring_io_wq_time_seconds": (
        "counter",
        "Off-CPU time of the io-wq workers running the io_uring requests, by opcode and cause",
    ),
    "fsprof_worker_windows": (
        "counter",
        "Windows of this filesystem's workers (a jbd2 commit, an XFS CIL push or inodegc run, a flusher pass, ...)",
    ),
    "fsprof_worker_seconds": ("counter", "Wall time inside this filesystem's worker windows"),
    "fsprof_worker_cpu_seconds": ("counter", "On-CPU time inside this filesystem's worker windows"),
    "fsprof_worker_block_requests": (
        "counter",
        "Block requests made inside this filesystem's worker windows, by class",
    ),
    "fsprof_lost_events": ("counter", "Events fsprof's BPF programs could not record, by reason"),
    "fsprof_approximated_events": (
        "counter",
        "Events recorded less exactly (an open's off-CPU interval kept under the filesystem known at its entry)",
    ),
    "fsprof_bpf_program_runs": ("counter", "Runs of fsprof's BPF programs (counted while kernel.bpf_stats_enabled=1)"),
    "fsprof_bpf_program_run_seconds": (
        "counter",
        "Run time of fsprof's BPF programs (counted while kernel.bpf_stats_enabled=1)",
    ),
    "fsprof_bpf_recursion_misses": (
        "counter",
        "Times a BPF program of fsprof was skipped because another ran on that CPU",
    ),
    "fsprof_windows": ("counter", "Windows fsprof has recorded"),
    "fsprof_window_seconds": ("gauge", "Length of the last window"),
    "fsprof_traced_filesystems": ("gauge", "Filesystems traced in the last window"),
}


def fs_labels(entry: dict[str, Any]) -> tuple[str, str, str]:
    return (entry["fs"], entry["device"]["name"], entry["label"])


def cumulative_figures(entry: dict[str, Any]) -> dict[tuple[str, tuple[str, ...]], float]:
    """{(metric, labels): value} of a result entry assembled from cumulative counters (they only
    grow while one set of BPF programs stays loaded)."""
    fl = fs_labels(entry)
    out: dict[tuple[str, tuple[str, ...]], float] = {}
    for family, histograms in (
        ("fsprof_syscall_latency_seconds", entry["syscalls"]),
        ("fsprof_io_uring_latency_seconds", entry.get("io_uring", {})),
    ):
        for op, h in histograms.items():
            labels = fl + (op,)
            log2 = h["log2_ns"]
            for k in BUCKET_LOG2:
                out[(f"{family}_bucket", labels + (_le(k),))] = sum(log2[:k])
            out[(f"{family}_count", labels)] = h["count"]
            out[(f"{family}_sum", labels)] = h["total_ns"] * NS
    behind = entry["behind"]
    journal = behind.get("ext4", {}).get("journal", {}).get("all")
    if journal:
        out[("fsprof_jbd2_commits", fl)] = journal["commits"]
    forces = behind.get("xfs", {}).get("all", {}).get("log_forces")
    if forces:
        out[("fsprof_xfs_log_forces", fl)] = forces["count"]
    commits = behind.get("btrfs", {}).get("all", {}).get("commits")
    if commits:
        out[("fsprof_btrfs_transaction_commits", fl)] = commits["count"]
    for dev, classes in entry["block"].items():
        dl = (entry["fs"], dev, entry["label"])
        out[("fsprof_cache_flushes", dl)] = classes.get("flush", {}).get("count", 0)
        out[("fsprof_fua_writes", dl)] = classes.get("fua_write", {}).get("count", 0)
        for cls in maps.BLK_CLASSES:
            v = classes.get(cls, {"count": 0, "bytes": 0})
            out[("fsprof_block_requests", dl + (cls,))] = v["count"]
            out[("fsprof_block_bytes", dl + (cls,))] = v["bytes"]
    made = {op: b.get("requests", {}) for op, b in entry["attribution"].items()}
    made.update(entry.get("io_uring_block_requests", {}))  # "io_uring write": its requests, as an op's
    for op, by_class in made.items():
        for cls, v in by_class.items():
            by = fl + (op, cls)
            out[("fsprof_op_block_requests", by)] = v["count"]
            if "timed" in v:
                out[("fsprof_op_block_requests_timed", by)] = v["timed"]
                out[("fsprof_op_block_request_device_seconds", by)] = v["device_ns"] * NS
                out[("fsprof_op_block_request_life_seconds", by)] = v["life_ns"] * NS
    return out


def _le(log2):
    return f"{(1 << log2) * NS:.9g}"


def window_exemplars(entry: dict[str, Any], wall_minus_monotonic: float) -> dict[tuple[str, ...], Exemplar]:
    """{(fstype, device, mountpoint, op, le): Exemplar} of one window's entry: in each latency
    bucket, the slowest of the window's slowest calls that fell in it (OpenMetrics allows one per
    bucket), labelled with its thread and the cause that took most of its time; its timestamp is
    the call's end. A Grafana panel of the histogram shows them as points on the slow buckets."""
    fl = fs_labels(entry)
    out: dict[tuple[str, ...], Exemplar] = {}
    for op, calls in entry.get("exemplars", {}).items():
        for call in sorted(calls, key=lambda c: c["ns"]):  # the slowest of a bucket wins
            le = next((_le(k) for k in BUCKET_LOG2 if call["ns"] < 1 << k), "+Inf")  # bucket le=2^k: below 2^k ns
            end = (call["start_ns"] + call["ns"]) * NS + wall_minus_monotonic
            labels = {"tid": str(call["tid"]), "cause": main_cause(call)}
            out[fl + (op, le)] = Exemplar(labels, call["ns"] * NS, round(end, 6))
    return out


def window_figures(entry: dict[str, Any]) -> dict[tuple[str, tuple[str, ...]], float]:
    """{(metric, labels): value} of one window's entry: the time by cause its syscalls spent, and
    what the filesystem's workers did in it (their runs are drained each window, as their
    off-CPU time is)."""
    fl = fs_labels(entry)
    out: dict[tuple[str, tuple[str, ...]], float] = {
        ("fsprof_syscall_time_seconds", fl + (op, cause)): ns * NS
        for op, b in entry["attribution"].items()
        for cause, ns in b["causes"].items()
        if ns > 0
    }
    for op, b in entry.get("io_uring_io_wq", {}).items():
        for cause, ns in b["causes"].items():
            if ns > 0:
                out[("fsprof_io_uring_io_wq_time_seconds", fl + (op, cause))] = ns * NS
    for kind, w in entry["behind"].get("workers", {}).items():
        w = w.get("all", {})
        if "windows" not in w:
            continue
        out[("fsprof_worker_windows", fl + (kind,))] = w["windows"]
        out[("fsprof_worker_seconds", fl + (kind,))] = w["wall_ns"] * NS
        out[("fsprof_worker_cpu_seconds", fl + (kind,))] = w["oncpu_ns"] * NS
        for cls, v in w["requests"].items():
            out[("fsprof_worker_block_requests", fl + (kind, cls))] = v["count"]
    return out


class Totals:
    """Counters that only grow: each window adds what happened in it. Figures read as running
    totals of one set of loaded programs (cumulative_figures, program statistics) add their
    change since the window before; begin_generation() starts a new set at zero."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, tuple[str, ...]], float] = {}
        self.previous: dict[tuple[str, tuple[str, ...]], float] = {}
        self.gauges: dict[tuple[str, tuple[str, ...]], float] = {}
        # The latest exemplar of each latency bucket: (fstype, device, mountpoint, op, le) -> it.
        self.exemplars: dict[tuple[str, ...], Exemplar] = {}
        # Held while a window is added and while a scrape copies (the HTTP server's thread).
        self.lock = threading.Lock()

    def begin_generation(self) -> None:
        self.previous = {}

    def add_running(self, figures: dict[tuple[str, tuple[str, ...]], float]) -> None:
        for key, v in figures.items():
            self.values[key] = self.values.get(key, 0) + max(v - self.previous.get(key, 0), 0)
        self.previous.update(figures)

    def add(self, figures: dict[tuple[str, tuple[str, ...]], float]) -> None:
        for key, v in figures.items():
            self.values[key] = self.values.get(key, 0) + v

    def keep_filesystems(self, kept: set[tuple[str, str, str]]) -> None:
        """Forgets the series of filesystems not in `kept` ({(fstype, device, mountpoint)}):
        a machine that mounts and unmounts all day keeps only its current filesystems' series."""

        def wanted(key):
            name, labels = key
            meta = METRICS.get(_family(name))
            return not meta or labels[:3] in kept or _family(name) in _UNLABELLED_BY_FS

        # `previous` is kept: a filesystem mounted again on the same device continues the kernel's
        # running totals, of which only the change since its last window is new.
        self.values = {k: v for k, v in self.values.items() if wanted(k)}
        self.exemplars = {k: v for k, v in self.exemplars.items() if k[:3] in kept}


_UNLABELLED_BY_FS = {
    "fsprof_lost_events",
    "fsprof_approximated_events",
    "fsprof_bpf_program_runs",
    "fsprof_bpf_program_run_seconds",
    "fsprof_bpf_recursion_misses",
    "fsprof_windows",
    "fsprof_window_seconds",
    "fsprof_traced_filesystems",
}


def _family(name):
    for suffix in ("_bucket", "_count", "_sum"):
        if name.endswith(suffix) and name[: -len(suffix)] in METRICS:
            return name[: -len(suffix)]
    return name


def program_figures(run_stats: dict[str, tuple[int, int, int]]) -> dict[tuple[str, tuple[str, ...]], float]:
    out: dict[tuple[str, tuple[str, ...]], float] = {}
    for prog, (runs, ns, misses) in run_stats.items():
        out[("fsprof_bpf_program_runs", (prog,))] = runs
        out[("fsprof_bpf_program_run_seconds", (prog,))] = ns * NS
        out[("fsprof_bpf_recursion_misses", (prog,))] = misses
    return out


def drop_figures(drops: dict[str, int]) -> dict[tuple[str, tuple[str, ...]], float]:
    """Every reason, zeros included (a counter that exists from the start rates from 0). A program's
    recursion misses are fsprof_bpf_recursion_misses (program_figures), not repeated here."""
    return {
        ("fsprof_approximated_events" if reason in maps.KEPT_APPROXIMATELY else "fsprof_lost_events", (reason,)): n
        for reason, n in drops.items()
        if not reason.endswith(maps.SKIPPED)
    }


LABELS = {
    "fsprof_syscall_latency_seconds": FS_LABELS + ("op",),
    "fsprof_syscall_time_seconds": FS_LABELS + ("op", "cause"),
    "fsprof_block_requests": FS_LABELS + ("class",),
    "fsprof_block_bytes": FS_LABELS + ("class",),
    "fsprof_op_block_requests": FS_LABELS + ("op", "class"),
    "fsprof_op_block_requests_timed": FS_LABELS + ("op", "class"),
    "fsprof_op_block_request_device_seconds": FS_LABELS + ("op", "class"),
    "fsprof_op_block_request_life_seconds": FS_LABELS + ("op", "class"),
    "fsprof_io_uring_latency_seconds": FS_LABELS + ("op",),
    "fsprof_io_uring_io_wq_time_seconds": FS_LABELS + ("op", "cause"),
    "fsprof_worker_windows": FS_LABELS + ("worker",),
    "fsprof_worker_seconds": FS_LABELS + ("worker",),
    "fsprof_worker_cpu_seconds": FS_LABELS + ("worker",),
    "fsprof_worker_block_requests": FS_LABELS + ("worker", "class"),
    "fsprof_lost_events": ("reason",),
    "fsprof_approximated_events": ("reason",),
    "fsprof_bpf_program_runs": ("program",),
    "fsprof_bpf_program_run_seconds": ("program",),
    "fsprof_bpf_recursion_misses": ("program",),
    "fsprof_windows": (),
    "fsprof_window_seconds": (),
    "fsprof_traced_filesystems": (),
}


class Exposition:
    """A prometheus-client collector over a Totals: what a scrape returns."""

    def __init__(self, totals: Totals) -> None:
        self.totals = totals

    def describe(self) -> list[Metric]:
        return []  # the families vary with what is mounted; collect() is the truth

    def collect(self) -> Iterator[Metric]:
        with self.totals.lock:
            values = dict(self.totals.values)
            values.update(self.totals.gauges)
            exemplars = dict(self.totals.exemplars)
        by_family: dict[str, list[tuple[str, tuple[str, ...], float]]] = {}
        for (name, labels), v in values.items():
            by_family.setdefault(_family(name), []).append((name, labels, v))
        for family, rows in sorted(by_family.items()):
            kind, doc = METRICS[family]
            names = list(LABELS.get(family, FS_LABELS))
            if kind == "histogram":
                yield from _histograms(family, doc, names, rows, exemplars)
                continue
            metric = (CounterMetricFamily if kind == "counter" else GaugeMetricFamily)(family, doc, labels=names)
            for _, labels, v in sorted(rows):
                metric.add_metric(list(labels), v)
            yield metric


def _histograms(family, doc, names, rows, exemplars):
    series = {}
    for name, labels, v in rows:
        if name.endswith("_bucket"):
            series.setdefault(labels[:-1], {"buckets": {}})["buckets"][labels[-1]] = v
        else:
            series.setdefault(labels, {"buckets": {}})[name.rsplit("_", 1)[1]] = v
    metric = HistogramMetricFamily(family, doc, labels=names)
    for labels, s in sorted(series.items()):
        count = s.get("count", 0)
        buckets = [(_le(k), s["buckets"].get(_le(k), 0)) for k in BUCKET_LOG2] + [("+Inf", count)]
        buckets = [(le, v, exemplars[labels + (le,)]) if labels + (le,) in exemplars else (le, v) for le, v in buckets]
        metric.add_metric(list(labels), buckets, sum_value=s.get("sum", 0))
    yield metric
